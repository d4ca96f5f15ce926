"""A Loop of independent iterations that append results of data-dependent length (the
nonzero positions of each row) runs once on all rows for targets without Loop: no Loop,
no Scan. The TorchScript export it comes from, against PyTorch's outputs on the
reference backend and onnxruntime; a body it cannot batch keeps its Loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.model_io import to_proto
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, ops_of, t
from tests.test_exported_models import load_cases

BATCHED = "Loop of ragged appends run once on all rows (batched, no Loop)"
DATA = Path(__file__).resolve().parent.parent / "data" / "exported"


def _lower(m, target="tinygrad"):
    out, report = lower_with_report(load_model(m), LowerOptions(target=target))
    low = to_proto(out)
    onnx.checker.check_model(low, full_check=True)
    return low, report


@pytest.mark.parametrize("name", ["ts_nonzero_rows_loop_opset13", "ts_nonzero_rows_loop_opset17"])
@pytest.mark.parametrize("target", ["tinygrad", "onnx2torch", "tract"])
def test_torchscript_nonzero_rows_run_without_loop(name, target):
    """``for i in range(n): out.append(x[i].nonzero()[:, 0] + i * 10)``, then cat."""
    path = DATA / f"{name}.onnx"
    low, report = _lower(onnx.load(path), target)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and BATCHED in [r["how"] for r in report.rewrites]
    for backend in ("reference", "onnxruntime", *(["tract"] if target == "tract" else [])):
        ex = Executor(low, backend=backend)
        for k, (feeds, expected) in enumerate(load_cases(path)):
            out = ex.run(feeds).outputs
            for key, want in expected.items():
                np.testing.assert_array_equal(out[key], want, err_msg=f"{backend} case {k}")


def _appending(extra: list, piece: str) -> onnx.ModelProto:
    """Rows' positive positions plus a per-row offset, appended to a flat buffer, and
    their counts to another; ``extra`` nodes may compute a different piece."""
    b = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
              helper.make_node("Greater", ["row", "zero_f"], ["pos"]),
              helper.make_node("NonZero", ["pos"], ["nz"]),
              helper.make_node("Squeeze", ["nz", "axis0"], ["cols"]),
              helper.make_node("Mul", ["i", "hundred"], ["offset"]),
              helper.make_node("Add", ["cols", "offset"], ["shifted"]),
              *extra,
              helper.make_node("Shape", [piece], ["piece_dims"]),
              helper.make_node("Concat", ["acc", piece], ["acc_out"], axis=0),
              helper.make_node("Concat", ["lens", "piece_dims"], ["lens_out"], axis=0),
              helper.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("acc", INT64, [None]), t("lens", INT64, [None])],
             [t("c_out", BOOL, []), t("acc_out", INT64, [None]), t("lens_out", INT64, [None])],
             initializer=[const("hundred", np.int64(100)), const("axis0", np.array([0], np.int64)),
                          const("zero_f", np.float32(0))])
    return model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
                  helper.make_node("Loop", ["n", "", "empty", "empty"], ["flat", "lengths"], body=b, name="rows")],
                 [t("x", FLOAT, ["n", "w"])], [t("flat", INT64, [None]), t("lengths", INT64, [None])],
                 initializer=[const("zero", np.int64(0)), const("empty", np.zeros(0, np.int64))])


FEEDS = [{"x": np.array(v, np.float32).reshape(shape)} for v, shape in [
    ([1, -1, 2, 0, 3, 3], (2, 3)), ([-1, -2, -3], (3, 1)), ([], (0, 4)), ([], (3, 0)), ([5, 6, -7, 8], (1, 4))]]


def _same(m, low):
    for backend in ("reference", "onnxruntime"):
        a, b = Executor(m, backend=backend), Executor(low, backend=backend)
        for f in FEEDS:
            want, got = a.run(f).outputs, b.run(f).outputs
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{backend} {f['x'].shape} {k}")


def test_positions_plus_a_per_row_offset_batch():
    m = _appending([], "shifted")
    low, report = _lower(m)
    assert "Loop" not in ops_of(low) and BATCHED in [r["how"] for r in report.rewrites]
    _same(m, low)


def test_a_body_it_cannot_batch_keeps_its_loop():
    """A per-row sort (TopK over a row's own count) is not one of its rules."""
    m = _appending([helper.make_node("Shape", ["shifted"], ["k"]),
                    helper.make_node("TopK", ["shifted", "k"], ["sorted", "order"])], "sorted")
    low, report = _lower(m)
    assert "Loop" in ops_of(low) and BATCHED not in [r["how"] for r in report.rewrites]
    _same(m, low)
