"""Loops over a run-time trip count become Scans for targets with Scan and no Loop
(tract): carried tensors of one shape, scan outputs, outer values, the condition input,
zero and negative trip counts, a ``[1]`` trip count, nested Loops; Loops that may stop
early or carry a growing tensor stay, and the report says why."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor.verify import verify
from seqlower.io.models import to_proto
from seqlower.targets import load_target, target_gaps
from tests.helpers import BOOL, FLOAT, INT64, body, const, lower_checked, model, ops_of, seq, t


def _steps_loop(trips_from_input: bool = False, trips_shape=(), early_stop: bool = False, grow: bool = False):
    """TorchScript's ``for i in range(x.size(0)): h = tanh(x[i] + h / 2); out.append(h * i)``
    (or ``range(trips)``); ``grow`` also carries ``acc = cat(acc, x[i])``."""
    nodes = [
        helper.make_node("Less", ["i", "limit"], ["c_out"]) if early_stop else helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
        helper.make_node("Mul", ["h", "half"], ["h_half"]),
        helper.make_node("Add", ["row", "h_half"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
        helper.make_node("Mul", ["h_out", "i_f"], ["scaled"]),
        helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]),
        # The condition input read as a value (it is a constant true in the Scan).
        helper.make_node("Where", ["c", "i_f", "half"], ["c_scan"]),
    ]
    ins = [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, ["w"]), seq("acc", FLOAT, ["w"])]
    outs = [t("c_out", BOOL, []), t("h_out", FLOAT, ["w"]), seq("acc_out", FLOAT, ["w"])]
    if grow:
        nodes.append(helper.make_node("Concat", ["g", "row"], ["g_out"], axis=0))
        ins.append(t("g", FLOAT, [None]))
        outs.append(t("g_out", FLOAT, [None]))
    outs.append(t("c_scan", FLOAT, []))
    head = ([] if trips_from_input else [helper.make_node("Shape", ["x"], ["x_dims"]),
                                         helper.make_node("Gather", ["x_dims", "zero"], ["trips"], axis=0)])
    inputs = [t("x", FLOAT, ["n", "w"]), t("h0", FLOAT, ["w"])] + ([t("trips", INT64, list(trips_shape))] if trips_from_input else [])
    carried = ["h0", "empty"] + (["g0"] if grow else [])
    results = ["h_last", "acc_last"] + (["g_last"] if grow else []) + ["conds"]
    return model(
        head + [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            helper.make_node("Loop", ["trips", "", *carried], results, body=body(nodes, ins, outs), name="steps"),
            helper.make_node("ConcatFromSequence", ["acc_last"], ["y"], axis=0, new_axis=1),
        ],
        inputs,
        [t("y", FLOAT, [None, "w"]), t("h_last", FLOAT, ["w"]), t("conds", FLOAT, [None])] + ([t("g_last", FLOAT, [None])] if grow else []),
        initializer=[const("zero", 0, np.int64), const("limit", 2, np.int64), const("half", 0.5, np.float32),
                     const("g0", np.zeros(0, np.float32))],
    )


def _feeds(sizes, trips=None):
    out = []
    for n, w in sizes:
        f = {"x": np.arange(n * w, dtype=np.float32).reshape(n, w) / 7, "h0": np.linspace(-1, 1, w, dtype=np.float32)}
        if trips is not None:
            f["trips"] = trips(n)
        out.append(f)
    return out


def _on_tract(m, low, feeds):
    rep = verify(m, low, inputs=feeds, backend="reference", lowered_backend="tract")
    assert rep.equivalent, rep.to_json()


def test_a_loop_over_a_dim_becomes_a_scan_that_tract_runs_zero_trips_included():
    m = _steps_loop()
    feeds = _feeds([(4, 3), (1, 3), (0, 3), (3, 0), (2, 1)])
    low, report = lower_checked(m, inputs=feeds, target="tract")
    ops = ops_of(low)
    assert "Loop" not in ops and ops.count("Scan") == 1 and "If" in ops
    assert not target_gaps(low, load_target("tract"))
    assert any(r["into"] == "Scan" for r in report.rewrites) and not report.kept_loops
    _on_tract(m, low, feeds)


@pytest.mark.parametrize("trips_shape", [(), (1,)])
def test_a_runtime_trip_count_of_any_sign_and_shape(trips_shape):
    m = _steps_loop(trips_from_input=True, trips_shape=trips_shape)
    counts = {4: 4, 3: 2, 2: 0, 1: -3}  # fewer trips than rows, none, a negative count
    feeds = _feeds([(4, 3), (3, 2), (2, 2), (1, 0)], trips=lambda n: np.array(counts[n], np.int64).reshape(trips_shape))
    low, _ = lower_checked(m, inputs=feeds, target="tract")
    assert "Loop" not in ops_of(low)
    # tract analyses shapes before it runs: the Range over a count read from data has
    # none (its profile's quirk "data-dependent-shape").
    assert "data-dependent-shape" in dict(load_target("tract").quirks)
    rep = verify(m, low, inputs=feeds[:1], backend="reference", lowered_backend="tract")
    assert not rep.equivalent and "steps_iterations" in rep.samples[0].error


def test_a_constant_trip_count_over_max_unroll_needs_no_if():
    m = _steps_loop(trips_from_input=True)
    m.graph.input.pop()  # trips becomes a constant 5 > max_unroll 3
    m.graph.initializer.append(const("trips", 5, np.int64))
    feeds = _feeds([(5, 3), (6, 0)])
    low, _ = lower_checked(m, inputs=feeds, target="tract", max_unroll=3)
    assert "Scan" in ops_of(low) and "If" not in ops_of(low) and "Loop" not in ops_of(low)
    # Outside an If, tract's declutter drops an empty state and then fails the Scan
    # (its profile's quirk "empty-scan"): the empty case is checked on the others only.
    _on_tract(m, low, feeds[:1])


def test_a_loop_that_may_stop_early_stays_and_the_report_says_why():
    m = _steps_loop(early_stop=True)
    low, report = lower_with_report(load_model(m), LowerOptions(target="tract"))
    proto = to_proto(low)
    assert "Loop" in ops_of(proto) and "Scan" not in ops_of(proto)
    (label, why), = report.kept_loops.items()
    assert label == "Loop node 'steps'" and "condition can stop it" in why
    gaps = target_gaps(proto, load_target("tract"), report.kept_loops)
    assert [g.why for g in gaps] == [f"tract has no Loop, and {why}"]


def test_a_loop_carrying_a_growing_tensor_stays_and_the_report_says_why():
    m = _steps_loop(grow=True)
    low, report = lower_with_report(load_model(m), LowerOptions(target="tract"))
    assert "Loop" in ops_of(to_proto(low))
    assert "is not proven to keep one shape across iterations" in report.kept_loops["Loop node 'steps'"]


def test_targets_without_scan_keep_the_loop():
    m = _steps_loop()
    low, report = lower_with_report(load_model(m), LowerOptions(target="onnx2torch"))
    assert "Loop" in ops_of(to_proto(low)) and "Scan" not in ops_of(to_proto(low))
    assert report.kept_loops == {"Loop node 'steps'": "it cannot be unrolled: its trip count is known only at run time (--max-trips N unrolls it into N predicated steps)"}
    # And a target with Loop keeps it: the Scan is only a fallback.
    low, _ = lower_with_report(load_model(m), LowerOptions(target="openvino"))
    assert "Loop" in ops_of(to_proto(low))


def test_nested_loops_both_become_scans_but_not_for_tract():
    inner = body(
        [helper.make_node("Identity", ["ic"], ["ic_out"]),
         helper.make_node("Gather", ["row", "j"], ["v"], axis=0),
         helper.make_node("Add", ["s", "v"], ["s_out"])],
        [t("j", INT64, []), t("ic", BOOL, []), t("s", FLOAT, [])],
        [t("ic_out", BOOL, []), t("s_out", FLOAT, [])],
    )
    outer = body(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
         helper.make_node("Loop", ["w", "", "zero_f"], ["row_sum"], body=inner),
         helper.make_node("Add", ["total", "row_sum"], ["total_out"]),
         helper.make_node("Identity", ["row_sum"], ["sums"])],
        [t("i", INT64, []), t("c", BOOL, []), t("total", FLOAT, [])],
        [t("c_out", BOOL, []), t("total_out", FLOAT, []), t("sums", FLOAT, [])],
    )
    m = model(
        [helper.make_node("Shape", ["x"], ["dims"]),
         helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
         helper.make_node("Gather", ["dims", "one"], ["w"], axis=0),
         helper.make_node("Loop", ["n", "", "zero_f"], ["total", "sums"], body=outer, name="rows")],
        [t("x", FLOAT, ["n", "w"])], [t("total", FLOAT, []), t("sums", FLOAT, ["n"])],
        initializer=[const("zero", 0, np.int64), const("one", 1, np.int64), const("zero_f", 0.0, np.float32)],
    )
    feeds = _feeds([(3, 4), (0, 2), (2, 0)])
    for f in feeds:
        del f["h0"]
    low, _ = lower_checked(m, inputs=feeds, target="tract")
    # tract runs a Scan inside a Scan wrong (quirk "nested-scan-state": the inner sums
    # came out 6, 28, 66 instead of 6, 22, 38), so the outer Loop stays for it.
    assert ops_of(low).count("Scan") == 1 and ops_of(low).count("Loop") == 1
    _, report = lower_with_report(load_model(m), LowerOptions(target="tract"))
    assert report.kept_loops == {"Loop node 'rows'": "it cannot be a Scan: its body holds a Scan, and the target runs a Scan inside a Scan wrong"}
    # Where the target has no such quirk, both become Scans.
    from seqlower.passes.loops.loops_to_scans import LoopsToScansPass

    nested = to_proto(LoopsToScansPass(nested=True)(load_model(m)).model)
    assert ops_of(nested).count("Scan") == 2 and "Loop" not in ops_of(nested)
    rep = verify(m, nested, inputs=feeds, backend="reference", lowered_backend="onnxruntime")
    assert rep.equivalent, rep.to_json()


def test_a_sequence_map_whose_body_does_not_batch_becomes_a_scan_that_tract_runs():
    # Stacked elements (x's rows) mapped by a body with a Gather (which the batched map
    # does not take): a Loop with scan outputs, then a Scan for tract.
    map_body = body([helper.make_node("Gather", ["e", "picks"], ["picked"], axis=0),
                     helper.make_node("Mul", ["picked", "scale"], ["out"])],
                    [t("e", FLOAT, ["w"]), t("scale", FLOAT, [])], [t("out", FLOAT, [2])],
                    initializer=[const("picks", np.array([2, 0], np.int64))])
    m = model([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
               helper.make_node("SequenceMap", ["rows", "k"], ["mapped"], body=map_body),
               helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0, new_axis=1)],
              [t("x", FLOAT, ["n", 3]), t("k", FLOAT, [])], [t("y", FLOAT, [None, 2])])
    feeds = [{"x": np.arange(3 * n, dtype=np.float32).reshape(n, 3), "k": np.array(2, np.float32)} for n in (4, 1, 0)]
    low, report = lower_checked(m, inputs=feeds, target="tract")
    assert "Scan" in ops_of(low) and "Loop" not in ops_of(low)
    assert any(r["into"] == "Scan" for r in report.rewrites)
    _on_tract(m, low, feeds)


def test_tract_keeps_a_loop_whose_scan_steps_have_run_time_dims_and_names_why():
    """A step of run-time length (the nonzero positions of row i): the If for no iteration
    could not give tract the Scan's shape (quirk if-branch-facts), so the Loop stays,
    named; targets whose If takes two shapes get the Scan."""
    h = helper
    b = body([h.make_node("Gather", ["x", "i"], ["row"], axis=0),
              h.make_node("Greater", ["row", "zero_f"], ["pos"]),
              h.make_node("NonZero", ["pos"], ["where"]),
              h.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, [])], [t("c_out", BOOL, []), t("where", INT64, [1, None])])
    m = model([h.make_node("Shape", ["x"], ["dims"]), h.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
               h.make_node("Loop", ["n", ""], ["steps"], body=b, name="rows")],
              [t("x", FLOAT, ["n", "w"])], [t("steps", INT64, [None, 1, None])],
              initializer=[const("zero", np.int64(0)), const("zero_f", np.float32(0))])
    _, report = lower_with_report(load_model(m), LowerOptions(target="tract"))
    assert "quirk if-branch-facts" in report.kept_loops["Loop node 'rows'"], report.kept_loops
