"""OpenVINO infers a growing Loop output as if the body ran once, and a Concat after a
Loop that ran none fails: for it, each growing state is sliced to its run-time size,
chosen by whether the Loop ran (a no-op at run time that resets OpenVINO's bounds); no If,
whose outputs OpenVINO reads garbage from behind a chain of Concats. Loops whose states
keep one shape are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.executor.verify import verify
from seqlower.targets import load_target
from seqlower.targets import target_gaps
from tests.helpers import FLOAT, INT64, BOOL, body, const, growing_loop_model, lower_checked, lowered_for, model, ops_of, t


def test_a_growing_loop_is_guarded_and_runs_no_iteration_on_openvino():
    assert "loop-assumes-an-iteration" in dict(load_target("openvino").quirks)
    m = growing_loop_model()
    feeds = [{"x": np.zeros((0, 3), np.float32)}, {"x": np.ones((2, 3), np.float32)}, {"x": np.ones((1, 0), np.float32)}]
    low, report = lower_checked(m, inputs=feeds, target="openvino")
    assert "If" not in ops_of(low) and ops_of(low).count("Loop") == 1
    assert "growing states sized to what the Loop ran (OpenVINO)" in {r["how"] for r in report.rewrites}
    for f in feeds:
        rep = verify(m, low, inputs=[f], backend="reference", lowered_backend="openvino")
        assert rep.equivalent, (f["x"].shape, rep.to_json())


def test_without_the_guard_openvino_fails_after_no_iteration():
    # The quirk itself (fixed upstream, this test fails and the guard can go).
    low, _ = lower_checked(growing_loop_model(), inputs=[{"x": np.ones((2, 3), np.float32)}], target="onnxruntime")
    from seqlower.passes.quirks.unfold_empty_loop_states import UnfoldEmptyLoopStatesPass
    from seqlower import load_model
    from seqlower.io.models import to_proto

    unguarded = to_proto(UnfoldEmptyLoopStatesPass()(load_model(low)).model)
    assert "Where" not in ops_of(unguarded)
    with pytest.raises(Exception, match="incompatible with provided dimensions"):
        Executor(unguarded, backend="openvino").run({"x": np.zeros((0, 3), np.float32)})


def test_a_loop_whose_states_keep_their_shape_is_left_alone():
    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
                      helper.make_node("Add", ["h", "row"], ["h_out"])],
                     [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, ["w"])], [t("c_out", BOOL, []), t("h_out", FLOAT, ["w"])])
    m = model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
               helper.make_node("Loop", ["n", "", "h0"], ["h"], body=loop_body)],
              [t("x", FLOAT, ["n", "w"]), t("h0", FLOAT, ["w"])], [t("h", FLOAT, ["w"])], initializer=[const("zero", 0, np.int64)])
    feeds = [{"x": np.ones((0, 3), np.float32), "h0": np.ones(3, np.float32)}, {"x": np.ones((2, 3), np.float32), "h0": np.ones(3, np.float32)}]
    low, _ = lower_checked(m, inputs=feeds, target="openvino")
    assert "Where" not in ops_of(low) and "If" not in ops_of(low)
    rep = verify(m, low, inputs=feeds, backend="reference", lowered_backend="openvino")
    assert rep.equivalent, rep.to_json()


def _from_a_row_then_grown(scan: bool):
    """Cut from graph program 20010: rows ``[N, 2]`` plus one (so OpenVINO bounds them below
    by 1) carried through a Loop that appends a row per iteration, and its length per
    iteration as a scan output, ``M`` trips (0 here)."""
    nodes = [helper.make_node("Constant", [], ["row"], value=helper.make_tensor("row", INT64, [1, 2], [1, 1])),
             helper.make_node("Concat", ["rows", "row"], ["rows_out"], axis=0), helper.make_node("Identity", ["c"], ["c_out"])]
    outs = [t("c_out", BOOL, []), t("rows_out", INT64, [None, 2])]
    if scan:
        nodes += [helper.make_node("Shape", ["rows_out"], ["sh"], start=0, end=1), helper.make_node("Squeeze", ["sh"], ["n"])]
        outs.append(t("n", INT64, []))
    loop_body = body(nodes, [t("i", INT64, []), t("c", BOOL, []), t("rows", INT64, [None, 2])], outs)
    louts = ["grown"] + (["lens"] if scan else [])
    return model([helper.make_node("Shape", ["x"], ["n0"], start=0, end=1), helper.make_node("Concat", ["n0", "two"], ["dims"], axis=0),
                  helper.make_node("Expand", ["zero", "dims"], ["empty"]), helper.make_node("Concat", ["empty", "one_row"], ["init"], axis=0),
                  helper.make_node("Loop", ["M", "", "init"], louts, body=loop_body)],
                 [t("x", BOOL, ["N", "K"]), t("M", INT64, [])],
                 [t("grown", INT64, [None, 2])] + ([t("lens", INT64, [None])] if scan else []),
                 initializer=[const("two", [2], np.int64), const("zero", 0, np.int64), const("one_row", np.ones((1, 2)), np.int64)],
                 opset=17)


def test_a_loop_growing_rows_it_starts_with_runs_on_openvino_its_start_hidden():
    """Graph program 20010: a Flat list of one row, a row inserted per trip, the trips a
    model input. The guard slices what reads the Loop, but the Loop node itself failed when
    it ran none; the initial value of a state that grows from a row is now read through a
    Slice that hides its shape (hiding every state's broke Loops whose states shrink:
    graph program 20262)."""
    import random

    from tests.program_generator import generate

    rng = random.Random(20010)
    m, feeds = generate(lambda kind, *a: rng.randint(a[0], a[1]) if kind == "int" else rng.choice(a[0]), shapes="v3")
    assert int(feeds["p13"]) == 0 and "Loop" in ops_of(m)
    low, _ = lower_checked(m, inputs=[feeds, {**feeds, "p13": np.array(2)}], target="openvino")
    rep = verify(m, low, inputs=[feeds, {**feeds, "p13": np.array(2)}], backend="reference", lowered_backend="openvino")
    assert rep.equivalent, rep.to_json()
    assert not target_gaps(low, load_target("openvino"))


@pytest.mark.parametrize("shrinks", [False, True])
def test_a_loop_that_only_keeps_or_drops_rows_is_not_named(shrinks):
    m = _from_a_row_then_grown(scan=False)
    for n in m.graph.node:
        if n.op_type == "Loop":
            b = n.attribute[0].g
            if shrinks:
                b.node[1].CopyFrom(helper.make_node("Slice", ["rows", "one", "big"], ["rows_out"]))
                b.initializer.extend([const("one", [1], np.int64), const("big", [2**62], np.int64)])
    named = target_gaps(lowered_for(m, "openvino"), load_target("openvino"))
    assert [g.why.endswith("(quirk loop-assumes-an-iteration)") for g in named] == ([] if shrinks else [True])
