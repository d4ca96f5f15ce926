"""onnxruntime 1.31 stacks string scan outputs wrong (every iteration after the first
comes out empty) and gathers string rows wrong (one string per row): lowered string
lists avoid both, and equal the original on onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from seqlower.executor import Executor
from tests.helpers import BOOL, INT64, body, lower_checked, model, ops_of, seq, t

STRING = TensorProto.STRING


def _strings(n: int, w: int) -> np.ndarray:
    return np.array([f"s{i}" for i in range(n * w)], dtype=object).reshape(n, w)


def test_onnxruntime_stacks_string_scans_wrong_as_measured():
    # The quirk itself: when onnxruntime fixes it, this fails and the pass can go.
    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["x"], ["e"])],
                     [t("i", INT64, []), t("c", BOOL, [])], [t("c_out", BOOL, []), t("e", STRING, [2])])
    m = model([helper.make_node("Loop", ["n", ""], ["y"], body=loop_body)], [t("x", STRING, [2]), t("n", INT64, [])],
              [t("y", STRING, [None, 2])])
    got = Executor(m, backend="onnxruntime").run({"x": np.array(["a", "b"], dtype=object), "n": np.array(2)}).outputs["y"]
    assert got.tolist() == [["a", "b"], ["", ""]]


def test_a_string_list_appended_in_a_loop_is_carried_and_equal_on_onnxruntime():
    # rows = x.unbind(0); for i in range(n): out.append(rows[i]); stack; pick one at a
    # run-time position: a string append-once loop (a scan output) and string row reads.
    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]),
                      helper.make_node("SequenceAt", ["rows", "i"], ["row"]),
                      helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"])],
                     [t("i", INT64, []), t("c", BOOL, []), seq("acc", STRING, ["w"])],
                     [t("c_out", BOOL, []), seq("acc_out", STRING, ["w"])])
    m = model([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
               helper.make_node("SequenceLength", ["rows"], ["n"]),
               helper.make_node("SequenceEmpty", [], ["empty"], dtype=STRING),
               helper.make_node("Loop", ["n", "", "empty"], ["copied"], body=loop_body),
               helper.make_node("ConcatFromSequence", ["copied"], ["y"], axis=0, new_axis=1),
               helper.make_node("SequenceAt", ["copied", "p"], ["picked"])],
              [t("x", STRING, ["n", "w"]), t("p", INT64, [])], [t("y", STRING, [None, "w"]), t("picked", STRING, ["w"])])
    feeds = [{"x": _strings(3, 2), "p": np.array(-1)}, {"x": _strings(1, 3), "p": np.array(0)}, {"x": _strings(4, 0), "p": np.array(2)}]
    low, report = lower_checked(m, inputs=feeds)
    assert "string scan outputs carried (onnxruntime stacks strings wrong)" in {r["how"] for r in report.rewrites}
    assert "If" in ops_of(low)  # the carried rows start from the first step


def test_a_string_row_at_a_run_time_position_is_a_slice():
    m = model([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
               helper.make_node("SequenceAt", ["rows", "p"], ["picked"])],
              [t("x", STRING, ["n", 3]), t("p", INT64, [])], [t("picked", STRING, [3])])
    feeds = [{"x": _strings(4, 3), "p": np.array(p)} for p in (0, 2, -1, -4)]
    low, report = lower_checked(m, inputs=feeds)
    assert any(r["how"] == "Slice" for r in report.rewrites)
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(low).graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in low.graph.output})
    assert not [n for n in low.graph.node if n.op_type == "Gather" and types.get(n.output[0]) == STRING]
