"""The Unrolled lowering: every pattern, in every context, at every opset, lowers to a
tensor-only model the executor finds equal (both backends), deterministically."""

from __future__ import annotations

import pytest

from tests.conftest import HAS_ORT
from tests.helpers import lower_checked, ops_of
from tests.passes.patterns import CONTEXTS, OPSETS, PATTERNS, build

BACKENDS = ("reference", "onnxruntime") if HAS_ORT else ("reference",)

CASES = [
    pytest.param(name, context, opset, id=f"{name}-{context}-{opset}")
    for name, make in PATTERNS.items()
    for context in CONTEXTS
    for opset in OPSETS
    if opset >= make().min_opset
]


@pytest.mark.parametrize("name, context, opset", CASES)
def test_pattern_lowers_tensor_only_and_equal(name, context, opset):
    m = build(PATTERNS[name](), context, opset)
    low, report = lower_checked(m, backends=BACKENDS)
    assert report.rewrites, "nothing was rewritten"
    ops = ops_of(low)
    if name in ("constant_chain", "reverse_sequence_constant"):
        assert "Concat" not in ops and "ReverseSequence" not in ops, ops
