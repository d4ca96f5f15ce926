"""onnx2torch returns a multi-output node's whole tuple where a later output of it is a
model output: for it, each such output gets an Identity that takes its name."""

from __future__ import annotations

import numpy as np
from onnx import helper

from seqlower.targets import load_target
from tests.helpers import FLOAT, INT64, const, lower_checked, model, t


def test_split_outputs_that_are_model_outputs_get_an_identity_for_onnx2torch():
    assert "split-tuple-output" in dict(load_target("onnx2torch").quirks)
    m = model([helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=0),
               helper.make_node("TopK", ["x", "k"], ["top", "where"]),
               helper.make_node("Mul", ["a", "a"], ["a2"])],
              [t("x", FLOAT, [6])], [t("c", FLOAT, [3]), t("b", FLOAT, [2]), t("a2", FLOAT, [1]), t("where", INT64, [2])],
              initializer=[const("sizes", np.array([1, 2, 3], np.int64)), const("k", np.array([2], np.int64))])
    feeds = [{"x": np.array([3, 1, 4, 1, 5, 9], np.float32)}]
    low, report = lower_checked(m, inputs=feeds, target="onnx2torch")
    producers = {o: n for n in low.graph.node for o in n.output}
    assert [o.name for o in low.graph.output] == ["c", "b", "a2", "where"]
    assert [producers[o].op_type for o in ("c", "b", "a2", "where")] == ["Identity", "Identity", "Mul", "Identity"]
    # Other targets keep the outputs as they are.
    low, _ = lower_checked(m, inputs=feeds, target="openvino")
    assert {n.op_type for n in low.graph.node} == {"Split", "TopK", "Mul"}


def test_lowered_sequence_outputs_of_a_split_are_separated_too():
    # unbind -> two list items as model outputs: the lowering's Split feeds them.
    m = model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
               helper.make_node("SequenceAt", ["s", "one"], ["second"]),
               helper.make_node("SequenceAt", ["s", "zero"], ["first"])],
              [t("x", FLOAT, [2, 3])], [t("second", FLOAT, [3]), t("first", FLOAT, [3])],
              initializer=[const("zero", 0, np.int64), const("one", 1, np.int64)])
    low, _ = lower_checked(m, inputs=[{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}], target="onnx2torch")
    producers = {o: n for n in low.graph.node for o in n.output}
    for name in ("second", "first"):
        p = producers[name]
        assert p.op_type == "Identity" or len(p.output) == 1, (name, p.op_type)
