"""OpenVINO quirk "empty-constant": its frontend reads a zero-size constant as a tensor of
shape []. Lowered for OpenVINO, every empty constant is a ConstantOfShape of its dims
(passes/quirks/empty_constants_as_constant_of_shape.py), which it reads right: Shape, Slice,
Gather, Concat and a Loop state give ONNX's numbers there."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import onnx

from seqlower import load_model
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.quirks.empty_constants_as_constant_of_shape import EmptyConstantsAsConstantOfShapePass
from seqlower.targets import load_target
from tests.helpers import BOOL, FLOAT, INT64, body, const, lowered_for, model, ops_of, t


def _reads_of_empty() -> object:
    nodes = [helper.make_node("Shape", ["empty"], ["dims"]), helper.make_node("Shape", ["x"], ["xd"]),
             helper.make_node("Concat", ["dims", "xd"], ["y"], axis=0),
             helper.make_node("Slice", ["empty", "zero1", "n1", "zero1"], ["head"]),
             helper.make_node("Concat", ["head", "x2"], ["rows"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["n"]), t("x2", FLOAT, ["k", 5]), t("n1", INT64, [1])],
                 [t("y", INT64, [None]), t("rows", FLOAT, [None, 5])],
                 initializer=[const("empty", np.zeros((0, 5), np.float32)), const("zero1", np.array([0], np.int64))])


def _feeds(n: int) -> dict:
    return {"x": np.zeros(n, np.float32), "x2": np.ones((2, 5), np.float32), "n1": np.array([n], np.int64)}


def test_openvino_reads_an_empty_constant_as_shape_nothing():
    # The quirk itself: when OpenVINO is fixed, this fails and the rewrite can go.
    assert "empty-constant" in dict(load_target("openvino").quirks)
    with pytest.raises(Exception, match="Shape inference input shapes \\{\\[\\]"):
        Executor(_reads_of_empty(), backend="openvino").run(_feeds(3))


def test_lowered_for_openvino_every_empty_constant_is_a_constant_of_shape():
    m = _reads_of_empty()
    low = lowered_for(m, "openvino")
    assert "ConstantOfShape" in ops_of(low) and not any(0 in i.dims for i in low.graph.initializer)
    for n in (0, 3):
        want = Executor(m, backend="reference").run(_feeds(n)).outputs
        got = Executor(low, backend="openvino").run(_feeds(n)).outputs
        assert want["y"].tolist() == [0, 5, n]
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_a_loop_state_starting_empty_runs_on_openvino():
    lb = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Unsqueeze", ["i", "ax"], ["i1"]),
               helper.make_node("Cast", ["i1"], ["f1"], to=1), helper.make_node("Concat", ["h", "f1"], ["h_out"], axis=0)],
              [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, [None])], [t("c_out", BOOL, []), t("h_out", FLOAT, [None])])
    m = model([helper.make_node("Loop", ["n", "", "h0"], ["h"], body=lb)], [t("n", INT64, [])], [t("h", FLOAT, [None])],
              initializer=[numpy_helper.from_array(np.zeros(0, np.float32), "h0"), const("ax", np.array([0], np.int64))])
    low = lowered_for(m, "openvino")
    for n in (0, 3):
        got = Executor(low, backend="openvino").run({"n": np.array(n)}).outputs["h"]
        np.testing.assert_array_equal(got, np.arange(n, dtype=np.float32))


def test_an_if_whose_branches_return_empty_constants_loads_on_openvino():
    # Graph program 20371: a list that is empty in both branches, its shape rows read on.
    def branch(tag: str) -> onnx.GraphProto:
        return body([helper.make_node("Constant", [], [f"rows_{tag}"], value=helper.make_tensor(f"rows_{tag}", INT64, [0, 2], []))],
                    [], [t(f"rows_{tag}", INT64, [0, 2])])

    m = model([helper.make_node("If", ["c"], ["rows"], then_branch=branch("a"), else_branch=branch("b")),
               helper.make_node("Concat", ["rows", "row"], ["all"], axis=0),
               helper.make_node("ReduceProd", ["all", "one"], ["sizes"], keepdims=0)],
              [t("c", BOOL, []), t("row", INT64, [1, 2])], [t("sizes", INT64, [None])], opset=18,
              initializer=[const("one", np.array([1], np.int64))])
    feeds = {"c": np.array(True), "row": np.array([[2, 3]], np.int64)}
    with pytest.raises(Exception, match="out-of-range dimension"):
        Executor(m, backend="openvino").run(feeds)
    low = to_proto(EmptyConstantsAsConstantOfShapePass()(load_model(m)).model)
    onnx.checker.check_model(low, full_check=True)
    assert Executor(low, backend="openvino").run(feeds).outputs["sizes"].tolist() == [6]
