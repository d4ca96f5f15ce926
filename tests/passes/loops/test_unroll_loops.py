"""Constant-trip Loops unrolled for targets without Loop: carried tensors and sequences,
scan outputs, outer values, zero trips; Loops that may stop early or run a run-time
number of times stay (and the target check names them)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from seqlower.targets import load_target, target_gaps
from tests.helpers import BOOL, FLOAT, INT64, body, const, lower_checked, model, ops_of, seq, t


def _append_loop(trips_value=None, early_stop=False, opset=17):
    """for i in range(trips): out.append(x[i] * i); h = h + x[i]  (+ a scan of i)"""
    cond_nodes = ([helper.make_node("Less", ["i", "limit"], ["c_out"])] if early_stop
                  else [helper.make_node("Identity", ["c"], ["c_out"])])
    b = body(
        cond_nodes + [
            helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
            helper.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
            helper.make_node("Mul", ["row", "i_f"], ["scaled"]),
            helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]),
            helper.make_node("Add", ["h", "row"], ["h_out"]),
            helper.make_node("Identity", ["i"], ["i_scan"]),
        ],
        [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, ["M"]), seq("acc", FLOAT, ["M"])],
        [t("c_out", BOOL, []), t("h_out", FLOAT, ["M"]), seq("acc_out", FLOAT, ["M"]), t("i_scan", INT64, [])],
    )
    trips = ["trips"]
    inits = [const("limit", 2, np.int64)]
    if trips_value is not None:
        inits.append(const("trips", trips_value, np.int64))
    return model(
        [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
         helper.make_node("Loop", [*trips, "", "h0", "empty"], ["h_last", "acc_last", "steps"], body=b, name="steps_loop"),
         helper.make_node("SequenceInsert", ["acc_last", "h_last"], ["all"]),
         helper.make_node("ConcatFromSequence", ["all"], ["y"], axis=0, new_axis=1)],
        [t("x", FLOAT, [4, "M"]), t("h0", FLOAT, ["M"])] + ([] if trips_value is not None else [t("trips", INT64, [])]),
        [t("y", FLOAT, [None, "M"]), t("h_last", FLOAT, ["M"]), t("steps", INT64, [None])],
        initializer=inits, opset=opset,
    )


def test_a_constant_trip_loop_is_unrolled_for_tract_and_its_list_goes_static():
    m = _append_loop(trips_value=4)
    feeds = [{"x": np.arange(12, dtype=np.float32).reshape(4, 3), "h0": np.ones(3, np.float32)},
             {"x": np.zeros((4, 0), np.float32), "h0": np.zeros(0, np.float32)}]
    low, report = lower_checked(m, inputs=feeds, target="tract")
    assert "Loop" not in ops_of(low) and not target_gaps(low, load_target("tract"))
    intos = {r["into"] for r in report.rewrites}
    assert "unrolled" in intos and not intos & {"flat", "stacked", "ragged"}
    assert any(r["how"] == "Loop unrolled (4 iterations)" for r in report.rewrites)
    # Without a target that lacks Loop, the Loop stays (a packed lowering takes the list).
    low, _ = lower_checked(m, inputs=feeds)
    assert "Loop" in ops_of(low)


def test_zero_trips_give_the_initial_values_and_empty_scans():
    m = _append_loop(trips_value=0)
    feeds = [{"x": np.arange(12, dtype=np.float32).reshape(4, 3), "h0": np.ones(3, np.float32)}]
    low, _ = lower_checked(m, inputs=feeds, target="tinygrad")
    assert "Loop" not in ops_of(low)


def test_loops_that_may_stop_early_or_run_a_runtime_count_stay_and_are_named():
    # tract has Scan, which takes a run-time count (tests/passes/loops/test_loops_to_scans.py);
    # onnx2torch has neither.
    for m, target in ((_append_loop(trips_value=4, early_stop=True), "tract"), (_append_loop(), "onnx2torch")):
        low = to_proto(lower_with_report(load_model(m), LowerOptions(target=target))[0])
        assert "Loop" in ops_of(low)
        assert any(g.why.startswith(f"{target} has no Loop") for g in target_gaps(low, load_target(target)))


def test_more_trips_than_max_unroll_stay():
    # (tract has Scan, which takes them: tests/passes/loops/test_loops_to_scans.py.)
    m = _append_loop(trips_value=4)
    lowered, report = lower_with_report(load_model(m), LowerOptions(target="onnx2torch", max_unroll=3))
    low = to_proto(lowered)
    assert "Loop" in ops_of(low)
    (why,) = report.kept_loops.values()
    assert why == "it cannot be unrolled: its 4 trips are more than --max-unroll (3)"
    assert [g.why for g in target_gaps(low, load_target("onnx2torch"), report.kept_loops)] == [f"onnx2torch has no Loop, and {why}"]
