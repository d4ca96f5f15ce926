"""A Concat operand empty along the axis by construction is dropped
(passes/folds/drop_empty_concat_operands.py): the lowerings' ``Expand(0, [0])`` list starts,
which OpenVINO also read wrong in fuzz seed 10323."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import helper
from onnx_ir.passes.common import RemoveUnusedNodesPass

from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.folds.drop_empty_concat_operands import DropEmptyConcatOperandsPass
from tests.helpers import FLOAT, const, model, ops_of, t


def _model(*operands: str, out: str = "y"):
    nodes = [helper.make_node("Expand", ["zero", "none"], ["start"]),
             helper.make_node("Expand", ["zero", "rows0"], ["start2"]),
             helper.make_node("Concat", list(operands), [out], axis=0)]
    return model(nodes, [t("x", FLOAT, ["n", 2])], [t(out, FLOAT, [None, 2])], initializer=[
        const("zero", np.array(0.0, np.float32)), const("none", np.array([0, 2], np.int64)),
        const("rows0", np.array([0, 1], np.int64)), const("empty", np.zeros((0, 2), np.float32))])


def _dropped(m):
    low = ir.serde.deserialize_model(m)
    modified = DropEmptyConcatOperandsPass()(low).modified
    RemoveUnusedNodesPass()(low)
    return to_proto(low), modified


def test_empty_starts_and_constants_are_dropped():
    m = _model("start", "x", "empty", "x")
    low, modified = _dropped(m)
    assert modified and ops_of(low).count("Expand") == 0
    (concat,) = [n for n in low.graph.node if n.op_type == "Concat"]
    assert list(concat.input) == ["x", "x"]
    for n in (0, 1, 3):
        x = {"x": np.arange(2 * n, dtype=np.float32).reshape(n, 2)}
        np.testing.assert_array_equal(Executor(low).run(x).outputs["y"], Executor(m).run(x).outputs["y"])


def test_one_operand_left_is_the_output_and_all_empty_keeps_one():
    low, _ = _dropped(_model("start", "x"))
    assert "Concat" not in ops_of(low) and [o.name for o in low.graph.output] == ["y"]
    x = {"x": np.ones((2, 2), np.float32)}
    np.testing.assert_array_equal(Executor(low).run(x).outputs["y"], x["x"])
    low, _ = _dropped(_model("start", "empty"))
    assert Executor(low).run(x).outputs["y"].shape == (0, 2)


def test_a_concat_of_nothing_empty_stays():
    m = _model("x", "x")
    low, modified = _dropped(m)
    assert not modified and ops_of(low).count("Concat") == 1
