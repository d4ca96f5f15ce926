"""Gather(Unsqueeze(v, [0]), 0) folded to v: two nodes of nothing, and onnxruntime 1.31
miscomputes what reads them once their input's shape is static."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.folds.fold_row_gathers import FoldRowGathersPass
from tests.helpers import FLOAT, INT64, model, t

DATA = Path(__file__).resolve().parents[2] / "data"


def _row_read_back(index: int = 0, axes: list[int] = (0,)) -> onnx.ModelProto:
    """seqlower reduce's cut of ts_rows_popped_then_zipped_5447 lowered at x [1, 3]."""
    return model([
        helper.make_node("Shape", ["c"], ["dims"]),
        helper.make_node("Unsqueeze", ["dims", "axes"], ["row"]),
        helper.make_node("Gather", ["row", "k"], ["shape"]),
        helper.make_node("Reshape", ["flat", "shape"], ["r"], allowzero=1),
        helper.make_node("Mul", ["r", "two"], ["m"]),
        helper.make_node("Shape", ["m"], ["out"]),
    ], [t("flat", FLOAT, [3])], [t("out", INT64, None)], initializer=[
        helper.make_tensor("c", FLOAT, [1, 3], [1, 2, 3]), helper.make_tensor("axes", INT64, [1], list(axes)),
        helper.make_tensor("k", INT64, [], [index]), helper.make_tensor("two", FLOAT, [], [2])])


def test_onnxruntime_reads_the_row_back_wrong_and_the_fold_removes_the_pair():
    m = _row_read_back()
    flat = {"flat": np.ones(3, np.float32)}
    assert Executor(m, backend="onnxruntime").run(flat).outputs["out"].tolist() == [1]  # its bug
    assert Executor(m, backend="reference").run(flat).outputs["out"].tolist() == [1, 3]
    folded = load_model(m)
    assert FoldRowGathersPass()(folded).modified
    ops = [n.op_type for n in folded.graph]
    assert "Gather" not in ops and ops.count("Shape") == 2
    assert Executor(to_proto(folded), backend="onnxruntime").run(flat).outputs["out"].tolist() == [1, 3]


def test_other_rows_and_axes_stay():
    for m in (_row_read_back(index=1), _row_read_back(axes=[1])):
        ir_model = load_model(m)
        assert not FoldRowGathersPass()(ir_model).modified


def test_the_export_lowered_at_its_shape_gives_torchs_numbers_on_onnxruntime():
    from tests.test_exported_models import load_cases

    path = DATA / "exported" / "ts_rows_popped_then_zipped_5447_opset17.onnx"
    feeds, want = load_cases(path)[5]
    lowered, _ = lower_with_report(load_model(onnx.load(path)),
                                   LowerOptions(target="onnxruntime", input_shapes={k: v.shape for k, v in feeds.items()}))
    got = Executor(to_proto(lowered), backend="onnxruntime").run(feeds).outputs
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
