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


def test_a_map_body_whose_if_chooses_a_list_is_inlined_without_the_emptied_if():
    # The walk lowers the body's If first (its branches move to a new If, the old node left
    # for removal at the end); the map's rule then inlines the body per element, and
    # carried the old If, emptied of its branches, into the graph (found by the v4 shapes:
    # 12 of 600 programs). What a rule's walk lowered is removed before the rule runs.
    import numpy as np
    import onnx
    from onnx import helper

    from tests.helpers import FLOAT, body, model, t

    seq = lambda name: helper.make_tensor_sequence_value_info(name, FLOAT, None)
    then_b = body([helper.make_node("SequenceConstruct", ["e", "e"], ["pair"])], [], [seq("pair")])
    else_b = body([helper.make_node("SplitToSequence", ["e", "sizes"], ["cut"], axis=1)], [], [seq("cut")])
    mbody = body([helper.make_node("If", ["c"], ["chosen"], then_branch=then_b, else_branch=else_b),
                  helper.make_node("ConcatFromSequence", ["chosen"], ["j"], axis=1)],
                 [t("e", FLOAT, [None, None])], [t("j", FLOAT, [None, None])])
    m = model([helper.make_node("SequenceConstruct", ["x", "x"], ["some"]),
               helper.make_node("SequenceMap", ["some"], ["mapped"], body=mbody),
               helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)],
              [t("x", FLOAT, ["N", 3]), t("c", onnx.TensorProto.BOOL, [])], [t("y", FLOAT, [None, None])],
              initializer=[onnx.numpy_helper.from_array(np.array([0, 3], np.int64), "sizes")], opset=23)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    lower_checked(m, inputs=[{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)}], check_each_pass=True)
