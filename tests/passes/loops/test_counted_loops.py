"""tf2onnx's ``for i in range(n)``: a Loop with a trip count, a condition that compares a
counter of its own with the trip count, and the counter and the count carried. The
condition is proven never to end the loop early and dropped; the counter comes from the
iteration number; the body then batches (no Loop for targets without one). Loops whose
condition may end them early keep it. Every model runs against the original on the
reference backend and onnxruntime, trip counts 0 and 1 included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.executor.verify import verify
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, ops_of, t

INT32 = onnx.TensorProto.INT32
COUNTED = "while condition proven to end the loop only at its trip count: a counted Loop"


def _map_fn(limit_offset: int = 1, start: int = 0, initial: str = "less", counter_type: int = INT32) -> onnx.ModelProto:
    """``y[i] = x[i] * 2 + sum(x[i])`` as tf2onnx writes tf.map_fn: the trip count n, the
    condition ``iteration < n and (i - start) + limit_offset < n``, the counter i (from
    ``start``) and n carried."""
    b = body([helper.make_node("Add", ["i", "one"], ["i_next"]),
              helper.make_node("Sub", ["i", "start_c"], ["row_i"]),
              helper.make_node("Gather", ["x", "row_i"], ["row"], axis=0),
              helper.make_node("Mul", ["row", "two"], ["twice"]),
              helper.make_node("ReduceSum", ["row", "axes0"], ["total"], keepdims=0),
              helper.make_node("Add", ["twice", "total"], ["y_row"]),
              helper.make_node("Cast", ["iter"], ["iter_f"], to=FLOAT),
              helper.make_node("Cast", ["n_in"], ["n_f"], to=FLOAT),
              helper.make_node("Less", ["iter_f", "n_f"], ["c1"]),
              helper.make_node("Add", ["row_i", "offset"], ["probe"]),
              helper.make_node("Cast", ["probe"], ["probe_f"], to=FLOAT),
              helper.make_node("Less", ["probe_f", "n_f"], ["c2"]),
              helper.make_node("And", ["c1", "c2"], ["c_out"]),
              helper.make_node("Identity", ["n_in"], ["n_out"])],
             [t("iter", INT64, []), t("c", BOOL, []), t("i", counter_type, []), t("n_in", counter_type, [])],
             [t("c_out", BOOL, []), t("i_next", counter_type, []), t("n_out", counter_type, []), t("y_row", FLOAT, ["w"])],
             initializer=[const("one", np.array(1, onnx.helper.tensor_dtype_to_np_dtype(counter_type))),
                          const("offset", np.array(limit_offset, onnx.helper.tensor_dtype_to_np_dtype(counter_type))),
                          const("start_c", np.array(start, onnx.helper.tensor_dtype_to_np_dtype(counter_type))),
                          const("two", np.float32(2)), const("axes0", np.array([0], np.int64))])
    cond0 = {"less": [helper.make_node("Cast", ["n_c"], ["n_f0"], to=FLOAT),
                      helper.make_node("Less", ["zero_f", "n_f0"], ["cond0"])],
             "true": [helper.make_node("Identity", ["yes"], ["cond0"])],
             "data": [helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0), helper.make_node("Less", ["zero_f", "sx"], ["cond0"])]}
    return model(
        [helper.make_node("Shape", ["x"], ["dims"]),
         helper.make_node("Gather", ["dims", "zero"], ["n64"], axis=0),
         helper.make_node("Cast", ["n64"], ["n_c"], to=counter_type),
         *cond0[initial],
         helper.make_node("Cast", ["n_c"], ["trips"], to=INT64),
         helper.make_node("Loop", ["trips", "cond0", "i0", "n_c"], ["i_last", "n_last", "y"], body=b, name="map")],
        [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "w"]), t("i_last", counter_type, [])],
        initializer=[const("zero", np.int64(0)), const("zero_f", np.float32(0)), const("yes", np.bool_(True)),
                     const("i0", np.array(start, onnx.helper.tensor_dtype_to_np_dtype(counter_type)))],
    )


def _x(n: int, w: int) -> dict:
    return {"x": np.arange(n * w, dtype=np.float32).reshape(n, w) - 3}


# No trips (n = 0) apart: see test_no_trips_give_rows_of_the_known_width.
FEEDS = [_x(n, w) for n, w in [(4, 3), (1, 3), (2, 0), (5, 1)]]


def _lower(m, target="tinygrad"):
    out, report = lower_with_report(load_model(m), LowerOptions(target=target))
    low = to_proto(out)
    onnx.checker.check_model(low, full_check=True)
    return low, report


def _agree(m, low):
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, inputs=FEEDS, backend=backend)
        assert rep.equivalent, (backend, rep.to_json())


@pytest.mark.parametrize("counter_type", [INT32, INT64])
@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("initial", ["less", "true"])
def test_a_tf_map_fn_loop_becomes_counted_and_batched(counter_type, start, initial):
    m = _map_fn(start=start, initial=initial, counter_type=counter_type)
    low, report = _lower(m)
    hows = [r["how"] for r in report.rewrites]
    assert COUNTED in hows and "Loop" not in ops_of(low), hows
    _agree(m, low)


def test_no_trips_give_rows_of_the_known_width():
    """After no iteration, onnxruntime and onnx's reference give the original's scan output
    as [0, 0] (a dim they cannot know); batched, it is [0, w], as tf.map_fn gives: the
    one place the lowered model's shape differs, with no number in either."""
    from seqlower.executor import Executor

    m = _map_fn()
    low, _ = _lower(m)
    for backend in ("reference", "onnxruntime"):
        assert Executor(m, backend=backend).run(_x(0, 3)).outputs["y"].shape == (0, 0)
        out = Executor(low, backend=backend).run(_x(0, 3)).outputs
        assert out["y"].shape == (0, 3) and int(out["i_last"]) == 0


@pytest.mark.parametrize("offset", [2, -1])
def test_a_condition_that_may_end_the_loop_early_stays(offset):
    """``i + 2 < n`` ends the loop one step before its trip count: not counted, a Loop the
    report names. (``i - 1 < n`` holds on every step: counted and batched.)"""
    m = _map_fn(limit_offset=offset)
    low, report = _lower(m)
    assert (COUNTED in [r["how"] for r in report.rewrites]) is (offset <= 1)
    assert ("Loop" in ops_of(low)) is (offset > 1)
    _agree(m, low)


def test_an_initial_condition_read_from_data_keeps_the_condition():
    m = _map_fn(initial="data")
    low, report = _lower(m)
    assert COUNTED not in [r["how"] for r in report.rewrites] and "Loop" in ops_of(low)
    _agree(m, low)


@pytest.mark.parametrize("name", ["tf_map_fn_fixed_opset13", "tf_map_fn_fixed_opset17"])
def test_tf_map_fn_runs_without_loop(name):
    path = Path(__file__).resolve().parents[2] / "data" / "tensorflow" / f"{name}.onnx"
    m = onnx.load(path)
    low, report = _lower(m)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and COUNTED in [r["how"] for r in report.rewrites]
    from tests.test_exported_models import load_cases

    feeds = [f for f, _ in load_cases(path)]
    for backend in ("reference", "onnxruntime"):
        assert verify(m, low, inputs=feeds, backend=backend).equivalent


@pytest.mark.parametrize("first,offset", [(0, 1), (0, 0), (-2, 1), (1, 1)])
def test_a_while_loop_without_trip_count_gets_one(first, offset):
    """tf.while_loop ``i = 0; while i < n: y.append(x[i] * (i + 2)); i += 1`` as tf2onnx
    writes it: no trip count, the initial condition ``first < n``, the body's ``i +
    offset < n``, x passed through. Its trip count, ``R - c + 1`` steps (at least one)
    when it starts, is computed and the loop batched."""
    b = body([helper.make_node("Add", ["i", "one"], ["i_next"]),
              helper.make_node("Add", ["i", "off"], ["probe"]),
              helper.make_node("Less", ["probe", "n_in"], ["c_out"]),
              helper.make_node("Identity", ["x_in"], ["x_out"]),
              helper.make_node("Identity", ["n_in"], ["n_out"]),
              helper.make_node("Gather", ["x_in", "i"], ["row"], axis=0),
              helper.make_node("Add", ["i", "two"], ["i2"]),
              helper.make_node("Cast", ["i2"], ["i2f"], to=FLOAT),
              helper.make_node("Mul", ["row", "i2f"], ["y_row"])],
             [t("iter", INT64, []), t("c", BOOL, []), t("i", INT32, []), t("n_in", INT32, []), t("x_in", FLOAT, ["n", "w"])],
             [t("c_out", BOOL, []), t("i_next", INT32, []), t("n_out", INT32, []), t("x_out", FLOAT, ["n", "w"]),
              t("y_row", FLOAT, ["w"])],
             initializer=[const("one", np.int32(1)), const("two", np.int32(2)), const("off", np.int32(offset))])
    m = model([helper.make_node("Shape", ["x"], ["dims"]),
               helper.make_node("Gather", ["dims", "zero"], ["n64"], axis=0),
               helper.make_node("Cast", ["n64"], ["n"], to=INT32),
               helper.make_node("Less", ["first_c", "n"], ["go"]),
               helper.make_node("Loop", ["", "go", "i0", "n", "x"], ["i_last", "n_last", "x_last", "y"], body=b, name="w")],
              [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "w"]), t("i_last", INT32, [])],
              initializer=[const("zero", np.int64(0)), const("first_c", np.int32(first)), const("i0", np.int32(0))])
    low, report = _lower(m)
    assert COUNTED in [r["how"] for r in report.rewrites]
    assert "Loop" not in ops_of(low)  # counter and pass-throughs gone: the body batches
    # (offset 0 or a first of 1 reads x[n] on the last step: the original fails there too.)
    feeds = [_x(n, 3) for n in (1, 2, 4)]
    for backend in ("reference", "onnxruntime"):
        for f in feeds:
            try:
                want = Executor(m, backend=backend).run(f).outputs
            except Exception:  # noqa: BLE001 - the program itself reads past x
                continue
            got = Executor(low, backend=backend).run(f).outputs
            for k, v in want.items():
                if v.size == 0 and v.ndim == 2:  # no step: [0, w] against the runtimes' [0, 0], as above
                    assert got[k].shape == (0, 3)
                    continue
                np.testing.assert_array_equal(got[k], v, err_msg=f"{backend} n={f['x'].shape[0]}: {k}")
