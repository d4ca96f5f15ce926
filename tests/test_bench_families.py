"""The benchmark's chain family (tools/families.py) end to end: members drawn from seeds
(split axis positive or negative, scalar, equal, unequal or no split, chunks kept or
squeezed, MatMul / Softmax / elementwise bodies, the matrix captured or passed in,
float32 / float64 / float16, residual or not) lower to tensor-only models that the
executor holds to the original's numbers, with no more nodes than the hand-written model
(Stage 11: "no Unsqueeze/Concat stacks or Gather/Concat unstacks where a Reshape or
Transpose is exact")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import lower_checked, ops_of

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from families import chain  # noqa: E402

STACKING = {"Unsqueeze", "Gather", "Split", "Concat", "Squeeze", "Slice"}


@pytest.mark.parametrize("seed", range(16))
def test_a_chain_member_lowers_to_at_most_its_hand_written_nodes(seed):
    member = chain(seed, 8)
    low, _ = lower_checked(member.model, inputs=[member.feeds])
    hand = ops_of(member.hand)  # (both end in the model's own Identity)
    assert len(ops_of(low)) <= len(hand), (member.what, ops_of(low), hand)
    if member.params["split"] != "unequal" or member.params["body"] == "elementwise":
        # Nothing stacked or unstacked element by element.
        assert not STACKING & set(ops_of(low)), (member.what, ops_of(low))
