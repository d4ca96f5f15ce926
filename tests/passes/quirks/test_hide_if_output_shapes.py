"""OpenVINO reads garbage from an If output of run-time shape that no select can stand in
for: read through a no-op Slice (quirk if-run-time-shape)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor, compare_values
from seqlower.io.models import to_proto
from seqlower.targets import load_target, target_gaps
from tests.helpers import BOOL, model, t

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))


def _branches_of_two_widths():
    """Random program 240290's If: [N, 2M] and [N, M] bools, read by Or, Shape, Reshape."""
    then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["a"], axis=1)], "then", [], [t("a", BOOL, ["N", None])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "else", [], [t("b", BOOL, ["N", "M"])])
    return model([
        helper.make_node("If", ["cond"], ["s"], then_branch=then, else_branch=other),
        helper.make_node("Or", ["s", "keep"], ["o"]),
        helper.make_node("Shape", ["o"], ["dims"]),
        helper.make_node("Reshape", ["o", "flat"], ["y"]),
    ], [t("x", BOOL, ["N", "M"]), t("cond", BOOL, [])], [t("y", BOOL, [None]), t("dims", 7, [2])],
        initializer=[helper.make_tensor("keep", BOOL, [1, 1], [False]), helper.make_tensor("flat", 7, [1], [-1])])


def test_check_names_the_if_and_the_lowering_reads_it_through_a_slice():
    m = _branches_of_two_widths()
    gaps = target_gaps(m, load_target("openvino"))
    assert [g.where for g in gaps] == ["If node (output 's')"] and "if-run-time-shape" in gaps[0].why
    lowered, report = lower_with_report(load_model(m), LowerOptions(target="openvino"))
    low = to_proto(lowered)
    or_node = next(n for n in low.graph.node if n.op_type == "Or")
    assert or_node.input[0].endswith("_shape_hidden_in") and [n.op_type for n in low.graph.node][0] == "If"
    assert not target_gaps(low, load_target("openvino"), report.kept_loops)
    again, _ = lower_with_report(load_model(low), LowerOptions(target="openvino"))
    assert [n.op_type for n in to_proto(again).graph.node] == [n.op_type for n in low.graph.node]


def test_the_random_program_gives_the_references_numbers_on_every_first_run():
    """Each Executor runs OpenVINO in a fresh process: before, about half the first runs
    read garbage Trues."""
    from runtimes import program

    m, feeds = program(240290)
    lowered, _ = lower_with_report(load_model(m), LowerOptions(target="openvino"))
    low = to_proto(lowered)
    want = Executor(m, backend="reference").run(feeds).outputs
    for _ in range(4):
        got = Executor(low, backend="openvino").run(feeds).outputs
        assert all(compare_values(k, want[k], got[k]).ok for k in want)
    assert np.asarray(feeds["x"]).dtype == np.bool_


def test_an_if_output_declared_at_a_rank_it_does_not_have_is_hidden_at_its_own():
    # A list chosen by an If: x unbound into rows (rank 1) or [x, x] (rank 2, declared of
    # rank 1, as TorchScript declares unbind's), its length read. The lowered If output was
    # read through the no-op Slice with starts of the declared rank and ends of
    # the run-time shape, and onnxruntime refused starts and ends of two lengths (guided
    # programs 604 and 1073 of seed 14, for OpenVINO).
    from tests.helpers import FLOAT, INT64, body

    declared = helper.make_tensor_sequence_value_info
    then = body([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0)], [],
                [declared("rows", FLOAT, None)])
    other = body([helper.make_node("SequenceConstruct", ["x", "x"], ["pair"])], [], [declared("pair", FLOAT, [None])])
    m = model([helper.make_node("If", ["c"], ["chosen"], then_branch=then, else_branch=other),
               helper.make_node("SequenceLength", ["chosen"], ["n"])],
              [t("x", FLOAT, [0, 1]), t("c", BOOL, [])], [t("n", INT64, [])], opset=18)
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="openvino"))[0])
    x = np.zeros((0, 1), np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        want = Executor(m, backend="reference").run(feeds).outputs
        got = Executor(low, backend="onnxruntime").run(feeds).outputs
        assert all(compare_values(k, want[k], got[k]).ok for k in want)
