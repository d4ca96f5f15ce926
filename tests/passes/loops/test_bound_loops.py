"""--max-trips / --dim-max: a Loop with a run-time trip count that no other rewrite removes
becomes N predicated steps for targets without Loop. Each model is lowered both ways a
user gets it (the API on the whole model, the CLI's region), checked, and run against
the original on the reference backend and onnxruntime, at trip counts below, at and past
the bound (where the model's seqlower_trips_exceeded output must be true), and at zero."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.executor.verify import verify
from seqlower.io.models import to_proto
from seqlower.options import TRIPS_EXCEEDED_KEY
from seqlower.passes.loops.bound_loops import TRIPS_EXCEEDED, trip_count_dim
from seqlower.fastpath.pipeline import lower_proto_with_report
from seqlower.targets import load_target
from tests.test_exported_models import load_cases
from tests.helpers import BOOL, FLOAT, INT64, body, cases_match, const, growing_loop_model, model, ops_of, t

STRING = onnx.TensorProto.STRING


def _lowered(m: onnx.ModelProto, *, target: str = "tinygrad", region: bool = False, **bounds) -> tuple[onnx.ModelProto, object]:
    options = LowerOptions(target=target, **bounds)
    if region:
        copy = onnx.ModelProto()
        copy.CopyFrom(m)
        out, report = lower_proto_with_report(copy, options)
        low = out if isinstance(out, onnx.ModelProto) else to_proto(out)
    else:
        out, report = lower_with_report(load_model(m), options)
        low = to_proto(out)
    onnx.checker.check_model(low, full_check=True)
    return low, report


def _flag(low: onnx.ModelProto) -> str | None:
    return next((p.value for p in low.metadata_props if p.key == TRIPS_EXCEEDED_KEY), None)


def _agree(m: onnx.ModelProto, low: onnx.ModelProto, feeds: list[dict], *, exceeded: bool = False) -> None:
    """Every feed: the flag says ``exceeded``; below the bound the outputs are the original's."""
    flag = _flag(low)
    assert flag is not None and flag in [o.name for o in low.graph.output]
    for backend in ("reference", "onnxruntime"):
        ex = Executor(low, backend=backend)
        for f in feeds:
            assert bool(ex.run(f).outputs[flag]) is exceeded, (backend, {k: v.shape for k, v in f.items()})
        rep = verify(m, low, inputs=feeds, backend=backend)
        assert rep.equivalent is not exceeded, (backend, rep.to_json())


def _carry_and_scan(trips: str = "n", cond: str = "") -> onnx.ModelProto:
    """``h = tanh(x[i] + h / 2)`` carried, ``h`` scanned, over ``Shape(x)[0]`` trips
    (TorchScript's ``for i in range(x.size(0))`` with a carried state)."""
    b = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
              helper.make_node("Mul", ["h", "half"], ["h2"]),
              helper.make_node("Add", ["row", "h2"], ["s"]),
              helper.make_node("Tanh", ["s"], ["h_out"]),
              helper.make_node("Identity", ["c"], ["c_out"]),
              helper.make_node("Identity", ["h_out"], ["scan"])],
             [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, ["w"])],
             [t("c_out", BOOL, []), t("h_out", FLOAT, ["w"]), t("scan", FLOAT, ["w"])],
             initializer=[const("half", np.float32(0.5))])
    return model(
        [helper.make_node("Shape", ["x"], ["dims"]),
         helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
         helper.make_node("ReduceSum", ["x", "axis0"], ["h0"], keepdims=0),
         helper.make_node("Loop", [trips, cond, "h0"], ["h_last", "hs"], body=b, name="steps")],
        [t("x", FLOAT, ["n", "w"]), *([t("cond0", BOOL, [])] if cond else [])],
        [t("h_last", FLOAT, ["w"]), t("hs", FLOAT, [None, "w"])],
        initializer=[const("zero", np.int64(0)), const("axis0", np.array([0], np.int64))],
    )


def _x(n: int, w: int = 3) -> dict:
    return {"x": (np.arange(n * w, dtype=np.float32).reshape(n, w) - 4) / 5}


@pytest.mark.parametrize("region", [False, True])
def test_a_loop_over_a_dim_becomes_max_trips_predicated_steps(region):
    m = _carry_and_scan()
    low, report = _lowered(m, max_trips=4, region=region)
    assert "Loop" not in ops_of(low) and "Scan" not in ops_of(low)
    assert any("4 predicated steps (--max-trips 4)" in r["how"] for r in report.rewrites)
    _agree(m, low, [_x(0), _x(1), _x(3), _x(4), _x(2, 0)])
    _agree(m, low, [_x(5), _x(9)], exceeded=True)


def test_dim_max_bounds_the_loop_whose_trip_count_is_that_dim():
    m = _carry_and_scan()
    low, report = _lowered(m, dim_max={"n": 3}, max_trips=50)
    assert any("3 predicated steps (--dim-max n 3)" in r["how"] for r in report.rewrites)
    _agree(m, low, [_x(0), _x(2), _x(3)])
    _agree(m, low, [_x(4)], exceeded=True)
    # A bound on another dim leaves it to --max-trips, or to nobody.
    _, report = _lowered(m, dim_max={"w": 3})
    assert report.kept_loops and "--max-trips" in next(iter(report.kept_loops.values()))


def test_a_loop_the_initial_condition_can_skip_and_its_body_can_stop():
    """A while loop: no trip count, it starts when ``n > 0`` and ``i + 1 < n`` ends it;
    what it carries grows by a row each step (a Concat of the first dim)."""
    m = growing_loop_model(while_loop=True, dependent=True)
    for region in (False, True):
        low, _ = _lowered(m, max_trips=3, region=region)
        assert "Loop" not in ops_of(low)
        _agree(m, low, [_x(0), _x(1), _x(3), _x(2, 0)])
        _agree(m, low, [_x(4)], exceeded=True)


def test_a_data_dependent_exit_past_the_bound_only_when_the_data_says_so():
    """``while cond: h = h * 2; cond = sum(h) < limit``: the trips depend on values."""
    b = body([helper.make_node("Mul", ["h", "two"], ["h_out"]),
              helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0),
              helper.make_node("Less", ["total", "limit"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, [2])],
             [t("c_out", BOOL, []), t("h_out", FLOAT, [2])],
             initializer=[const("two", np.float32(2))])
    m = model([helper.make_node("ReduceSum", ["h0"], ["t0"], keepdims=0),
               helper.make_node("Less", ["t0", "limit"], ["go"]),
               helper.make_node("Loop", ["", "go", "h0"], ["h"], body=b)],
              [t("h0", FLOAT, [2]), t("limit", FLOAT, [])], [t("h", FLOAT, [2])])
    low, _ = _lowered(m, max_trips=5)

    def feed(h, limit):
        return {"h0": np.array(h, np.float32), "limit": np.array(limit, np.float32)}

    _agree(m, low, [feed([1, 1], 1), feed([1, 1], 3), feed([1, 1], 40), feed([0.5, 0.5], 20)])
    _agree(m, low, [feed([1, 1], 100)], exceeded=True)


def test_a_constant_trip_count_within_the_bound_needs_no_flag():
    """Ten trips (more than --max-unroll 4) that a condition may cut short: exactly
    unrolled into ten predicated steps, and nothing can be exceeded."""
    b = body([helper.make_node("Add", ["h", "one_f"], ["h_out"]),
              helper.make_node("Less", ["h_out", "limit"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, [])],
             [t("c_out", BOOL, []), t("h_out", FLOAT, [])],
             initializer=[const("one_f", np.float32(1))])
    m = model([helper.make_node("Loop", ["ten", "yes", "h0"], ["h"], body=b)],
              [t("h0", FLOAT, []), t("limit", FLOAT, [])], [t("h", FLOAT, [])],
              initializer=[const("ten", np.int64(10)), const("yes", np.bool_(True))])
    low, report = lower_with_report(load_model(m), LowerOptions(target="tinygrad", max_unroll=4, max_trips=12))
    low = to_proto(low)
    assert "Loop" not in ops_of(low) and _flag(low) is None
    assert any("10 predicated steps" in r["how"] for r in report.rewrites)
    feeds = [{"h0": np.float32(h), "limit": np.float32(lim)} for h, lim in [(0, 3), (0, 50), (5, 1), (-3, 4)]]
    for backend in ("reference", "onnxruntime"):
        assert verify(m, low, inputs=feeds, backend=backend).equivalent


@pytest.mark.parametrize("elem,values", [(STRING, np.array(["a", "bb", "", "c"], object)),
                                        (onnx.TensorProto.FLOAT16, np.arange(4, dtype=np.float16)),
                                        (onnx.TensorProto.INT64, np.arange(4, dtype=np.int64))])
def test_carried_values_of_every_dtype_keep_their_last_value(elem, values):
    """``last = x[i]`` carried over ``Shape(x)[0]`` trips from a given start."""
    b = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
              helper.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("last", elem, [])],
             [t("c_out", BOOL, []), t("row", elem, [])])
    m = model([helper.make_node("Shape", ["x"], ["dims"]),
               helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
               helper.make_node("Loop", ["n", "", "start"], ["last"], body=b)],
              [t("x", elem, ["n"]), t("start", elem, [])], [t("last", elem, [])],
              initializer=[const("zero", np.int64(0))])
    low, _ = _lowered(m, max_trips=3)
    feeds = [{"x": values[:k], "start": values[3]} for k in (0, 1, 3)]
    _agree(m, low, feeds)
    _agree(m, low, [{"x": values, "start": values[0]}], exceeded=True)


def test_two_bounded_loops_raise_one_flag():
    """Two loops, one bounded by each dim: the flag is true when either needs more."""
    first = _carry_and_scan()
    g = first.graph
    second = body([helper.make_node("Gather", ["y", "i"], ["row"], axis=0),
                   helper.make_node("Add", ["acc", "row"], ["acc_out"]),
                   helper.make_node("Identity", ["c"], ["c_out"])],
                  [t("i", INT64, []), t("c", BOOL, []), t("acc", FLOAT, [])],
                  [t("c_out", BOOL, []), t("acc_out", FLOAT, [])])
    g.node.extend([helper.make_node("Shape", ["y"], ["ydims"]),
                   helper.make_node("Gather", ["ydims", "zero"], ["k"], axis=0),
                   helper.make_node("Loop", ["k", "", "zero_f"], ["total"], body=second, name="sums")])
    g.input.append(t("y", FLOAT, ["k"]))
    g.output.append(t("total", FLOAT, []))
    g.initializer.append(const("zero_f", np.float32(0)))
    low, _ = _lowered(first, dim_max={"n": 2, "k": 3})
    y = {"y": np.arange(3, dtype=np.float32)}
    _agree(first, low, [{**_x(2), **y}, {**_x(0), "y": y["y"][:1]}])
    _agree(first, low, [{**_x(3), **y}, {**_x(1), "y": np.ones(4, np.float32)}], exceeded=True)
    assert [o.name for o in low.graph.output] == ["h_last", "hs", "total", TRIPS_EXCEEDED]


def test_a_loop_that_changes_a_carried_dim_other_than_the_first_stays():
    """``h = concat(h, h, axis=1)``: the second dim doubles, which no predicated step keeps."""
    b = body([helper.make_node("Concat", ["h", "h"], ["h_out"], axis=1),
              helper.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, [1, None])],
             [t("c_out", BOOL, []), t("h_out", FLOAT, [1, None])])
    m = model([helper.make_node("Loop", ["n", "", "h0"], ["h"], body=b)],
              [t("n", INT64, []), t("h0", FLOAT, [1, 2])], [t("h", FLOAT, [1, None])])
    low, report = _lowered(m, max_trips=3)
    assert "Loop" in ops_of(low) and _flag(low) is None
    why = next(iter(report.kept_loops.values()))
    assert "in a dim other than the first" in why, why


def test_a_loop_in_an_if_branch_is_named_not_bounded():
    inner = body([helper.make_node("Add", ["h", "h"], ["h_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
                 [t("i", INT64, []), t("c", BOOL, []), t("h", FLOAT, [])], [t("c_out", BOOL, []), t("h_out", FLOAT, [])])
    then = body([helper.make_node("Loop", ["n", "", "h0"], ["r"], body=inner)], [], [t("r", FLOAT, [])])
    other = body([helper.make_node("Identity", ["h0"], ["r2"])], [], [t("r2", FLOAT, [])])
    m = model([helper.make_node("If", ["go"], ["h"], then_branch=then, else_branch=other)],
              [t("go", BOOL, []), t("n", INT64, []), t("h0", FLOAT, [])], [t("h", FLOAT, [])])
    _, report = _lowered(m, max_trips=3)
    assert "inside a subgraph" in " ".join(report.kept_loops.values()), report.kept_loops


def _shape_model(nodes, x_shape=("batch", "seq", 4)) -> onnx.ModelProto:
    return model(nodes, [t("x", FLOAT, list(x_shape))], [t("m", INT64, None)],
                 initializer=[const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64)),
                              const("k", np.int64(1)), const("neg", np.int64(-2)), const("three", np.int64(3))])


@pytest.mark.parametrize("nodes,expected", [
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "k"], ["m"], axis=0)], ("seq", 0)),
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "neg"], ["m"], axis=0)], ("seq", 0)),
    ([helper.make_node("Shape", ["x"], ["s"], start=1, end=2), helper.make_node("Squeeze", ["s"], ["m"])], ("seq", 0)),
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "one", "two"], ["m1"]),
      helper.make_node("Cast", ["m1"], ["m2"], to=INT64), helper.make_node("Sub", ["m2", "three"], ["m"])], ("seq", -3)),
    ([helper.make_node("Shape", ["x"], ["s"], start=-3), helper.make_node("Gather", ["s", "k"], ["g"], axis=0),
      helper.make_node("Add", ["three", "g"], ["m"])], ("seq", 3)),
    # A dim that is a number, and a sum of two dims, are no named dim.
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "two"], ["m"], axis=0)], None),
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceSum", ["s"], ["m"], keepdims=0)], None),
])
def test_the_dim_a_trip_count_is_read_from(nodes, expected):
    g = load_model(_shape_model(nodes)).graph
    out = next(v for n in g for v in n.outputs if v.name == "m")
    assert trip_count_dim(out) == expected


def test_verify_says_when_the_bound_was_exceeded(tmp_path):
    m = _carry_and_scan()
    src, dst = tmp_path / "m.onnx", tmp_path / "low.onnx"
    onnx.save(m, src)
    cli = [sys.executable, "-m", "seqlower"]
    r = subprocess.run([*cli, "lower", str(src), "-o", str(dst), "--target", "tinygrad", "--dim-max", "n=2", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*cli, "verify", str(src), str(dst), "--dim", "n=5", "--backend", "reference"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "needed more steps than its bound" in r.stdout, r.stdout
    r = subprocess.run([*cli, "verify", str(src), str(dst), "--dim", "n=2", "--backend", "reference"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    for bad in (["--dim-max", "n"], ["--dim-max", "n=-1"], ["--max-trips", "0"]):
        r = subprocess.run([*cli, "lower", str(src), "-o", str(tmp_path / "x.onnx"), *bad], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "x.onnx").exists(), (bad, r.stderr)


def test_tract_fails_a_run_time_slice_end_of_int64_max():
    """Quirk slice-end-max, bisected from a bounded tf map_fn that gave rows one column
    short on tract: when this passes on tract, take the quirk off its profile."""
    m = model([helper.make_node("Where", ["c", "end_max", "zero1"], ["end"]),
               helper.make_node("Slice", ["x", "zero1", "end", "axis1"], ["y"])],
              [t("x", FLOAT, ["n", "w"]), t("c", BOOL, [])], [t("y", FLOAT, [None, None])],
              initializer=[const("end_max", np.array([np.iinfo(np.int64).max], np.int64)),
                           const("zero1", np.array([0], np.int64)), const("axis1", np.array([1], np.int64))])
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "c": np.array(True)}
    np.testing.assert_array_equal(Executor(m, backend="reference").run(feeds).outputs["y"], feeds["x"])
    with pytest.raises(Exception, match="Invalid slicing range"):
        Executor(m, backend="tract").run(feeds)
    assert "slice-end-max" in dict(load_target("tract").quirks)


def test_a_bounded_torchscript_loop_runs_on_tract():
    """TorchScript's loop that splits, inserts and concatenates carries a list that grows
    (no Scan takes it): bounded, tract runs every stored case to PyTorch's numbers. (The
    per-row nonzero loop this test used runs with no Loop now: test_vectorize_ragged_loops.)"""
    src = Path(__file__).resolve().parents[2] / "data" / "exported" / "ts_split_insert_loop_cat_opset17.onnx"
    low, report = _lowered(onnx.load(src), target="tract", max_trips=8)
    assert "Loop" not in ops_of(low) and any("predicated steps" in r["how"] for r in report.rewrites)
    ex = Executor(low, backend="tract")
    cases = load_cases(src)
    for feeds, expected in cases:
        out = ex.run(feeds).outputs
        assert not out[_flag(low)]
        for k, v in expected.items():
            np.testing.assert_array_equal(out[k], v)
    assert len(cases) >= 5


_TF = Path(__file__).resolve().parents[2] / "data" / "tensorflow"
_EXPORTED = Path(__file__).resolve().parents[2] / "data" / "exported"
# Every fixture whose Loops stay for a target without Loop or Scan unless bounded (one
# opset of each: the other differs in the export, not in the loop); tf_map_fn_fixed no
# longer needs it (counted, then batched: tests/passes/loops/test_counted_loops.py), nor does
# ts_nonzero_rows_loop and tf's ragged maps (vectorized: tests/passes/loops/test_vectorize_ragged_loops.py).
BOUNDED_FIXTURES = [*(_EXPORTED / f"{n}_opset17.onnx" for n in (
    "ts_conditional_append_cat", "ts_list_mutations_loop", "ts_loop_collect_steps", "ts_nested_list_loops",
    "ts_split_insert_loop_cat")),
    *(_TF / f"{n}_opset17.onnx" for n in ("tf_tensor_array_prefix_sums", "tf_tensor_array_while"))]


@pytest.mark.parametrize("path", BOUNDED_FIXTURES, ids=lambda p: p.stem)
def test_bounded_exports_give_the_frameworks_numbers(path):
    """Lowered for tinygrad (no Loop, no Scan) with --max-trips 12, each export runs every
    stored case it runs itself (batches of 0 and rows of width 0 included) to the
    framework's outputs, on the reference backend and onnxruntime, with the flag down."""
    m = onnx.load(path)
    low, report = _lowered(m, max_trips=12)
    assert "Loop" not in ops_of(low) and "Scan" not in ops_of(low), report.kept_loops
    flag = _flag(low)
    assert flag is not None
    for backend in ("reference", "onnxruntime"):
        cases_match(m, low, path, backend, flag)
