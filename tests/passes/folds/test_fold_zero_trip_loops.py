"""FoldZeroTripLoopsPass: a Loop that carries a list and provably runs no iteration (a
trip count of 0, a first condition that is false) is its initial values; other loops
stay. Structure on the pass alone, numbers through the whole lowering on both backends."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import load_model
from seqlower.passes.folds.fold_sequence_constants import FoldSequenceConstantsPass
from seqlower.passes.folds.fold_zero_trip_loops import FoldZeroTripLoopsPass
from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass
from tests.helpers import BOOL, FLOAT, INT64, body, const, lower_checked, model, seq, t


def _pop_while_longer(start: str, limit: int, scan: bool = False) -> onnx.ModelProto:
    """TorchScript's ``while len(xs) > limit: xs.pop()`` on ``xs`` made by ``start``
    (an empty list, or x's rows), then ``cat(xs + [x[:0]])``; ``scan`` adds a scan output."""
    loop_body = body(
        [helper.make_node("SequenceErase", ["s_in"], ["s_out"]),
         helper.make_node("SequenceLength", ["s_out"], ["n"]),
         helper.make_node("Greater", ["n", "limit"], ["c_out"]),
         *([helper.make_node("Identity", ["n"], ["n_scan"])] if scan else [])],
        [t("i", INT64, []), t("c", BOOL, []), seq("s_in", FLOAT, [1, 3])],
        [t("c_out", BOOL, []), seq("s_out", FLOAT, [1, 3]), *([t("n_scan", INT64, [])] if scan else [])])
    make = (helper.make_node("SequenceEmpty", [], ["xs"], dtype=FLOAT) if start == "empty"
            else helper.make_node("SplitToSequence", ["x"], ["xs"], axis=0))
    nodes = [make, helper.make_node("SequenceLength", ["xs"], ["n0"]), helper.make_node("Greater", ["n0", "limit"], ["c0"]),
             helper.make_node("Loop", ["big", "c0", "xs"], ["ys", *(["lens"] if scan else [])], body=loop_body),
             helper.make_node("Slice", ["x", "zero1", "zero1"], ["none"]),
             helper.make_node("SequenceInsert", ["ys", "none"], ["zs"]),
             helper.make_node("ConcatFromSequence", ["zs"], ["y"], axis=0)]
    outputs = [t("y", FLOAT, [None, 3]), *([t("lens", INT64, [None])] if scan else [])]
    return model(nodes, [t("x", FLOAT, ["N", 3])], outputs,
                 initializer=[const("limit", limit, np.int64), const("big", 1 << 40, np.int64),
                              const("zero1", [0], np.int64)])


def _folded(m: onnx.ModelProto) -> tuple[bool, list[str]]:
    irm = load_model(m)
    InferSequenceShapesPass()(irm)
    FoldSequenceConstantsPass()(irm)
    result = FoldZeroTripLoopsPass()(irm)
    return result.modified, [n.op_type for n in result.model.graph]


@pytest.mark.parametrize("scan", [False, True])
def test_a_loop_whose_first_condition_is_false_is_its_initial_values(scan):
    m = _pop_while_longer("empty", 2, scan)
    modified, ops = _folded(m)
    assert modified and "Loop" not in ops
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (0, 1, 4)]
    low, report = lower_checked(m, inputs=feeds)
    assert "Loop" not in {n.op_type for n in low.graph.node}
    assert any(r["op"] == "Loop" and "first condition is false" in r["how"] for r in report.rewrites)


def test_a_loop_that_may_run_stays():
    # Over x's rows the first condition is known only at run time.
    m = _pop_while_longer("rows", 2)
    modified, ops = _folded(m)
    assert not modified and "Loop" in ops
    rng = np.random.default_rng(1)
    lower_checked(m, inputs=[{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (0, 2, 5)])


def test_a_trip_count_of_zero_inside_a_branch():
    # for t in xs (xs empty) inside an If branch: the inner Loop goes, the If stays.
    inner = body([helper.make_node("SequenceAt", ["xs", "i"], ["e"]), helper.make_node("SequenceInsert", ["acc", "e"], ["acc_out"]),
                  helper.make_node("Identity", ["c"], ["c_out"])],
                 [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT, [3])], [t("c_out", BOOL, []), seq("acc_out", FLOAT, [3])])
    branch = body([helper.make_node("SequenceLength", ["xs"], ["n"]),
                   helper.make_node("Loop", ["n", "", "start"], ["got"], body=inner),
                   helper.make_node("SequenceInsert", ["got", "r"], ["got2"]),
                   helper.make_node("ConcatFromSequence", ["got2"], ["yt"], axis=0, new_axis=1)], [], [t("yt", FLOAT, [None, 3])])
    other = body([helper.make_node("Unsqueeze", ["r", "zero1"], ["ye"])], [], [t("ye", FLOAT, [1, 3])])
    nodes = [helper.make_node("SequenceEmpty", [], ["xs"], dtype=FLOAT), helper.make_node("SequenceEmpty", [], ["start"], dtype=FLOAT),
             helper.make_node("ReduceSum", ["x", "zero1"], ["r"], keepdims=0),
             helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other)]
    m = model(nodes, [t("x", FLOAT, ["N", 3]), t("flag", BOOL, [])], [t("y", FLOAT, [None, 3])],
              initializer=[const("zero1", [0], np.int64)])
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((n, 3)).astype(np.float32), "flag": np.array(f)} for n, f in ((2, True), (0, False))]
    low, _ = lower_checked(m, inputs=feeds)
    assert "Loop" not in str(low.graph)
