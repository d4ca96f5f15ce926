"""Quirk nonzero-layout (onnx2torch): NonZero written with TopK and strides. Every rank
from 1 to 3, empty and all-set masks, bool, int and float inputs, against the original
on the reference backend and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor.verify import verify
from seqlower.io.models import load_model, to_proto
from seqlower.passes.quirks.nonzero_by_topk import NonZeroByTopKPass
from seqlower.lowering import _run_passes
from tests.helpers import BOOL, FLOAT, INT64, model, ops_of, t


@pytest.mark.parametrize("elem", [BOOL, INT64, FLOAT])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
def test_positions_in_onnx_layout(elem, shape):
    dims = [f"d{k}" for k in range(len(shape))]
    m = model([helper.make_node("NonZero", ["x"], ["y"])], [t("x", elem, dims)], [t("y", INT64, [len(shape), None])])
    low = to_proto(_run_passes([NonZeroByTopKPass()], load_model(m)))
    onnx.checker.check_model(low, full_check=True)
    assert "NonZero" not in ops_of(low) and "TopK" in ops_of(low)
    np_t = onnx.helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(0)
    feeds = [{"x": (rng.random(shape) > 0.5).astype(np_t)}, {"x": np.zeros(shape, np_t)}, {"x": np.ones(shape, np_t)},
             {"x": np.zeros((0,) + shape[1:], np_t)}, {"x": np.zeros(shape[:-1] + (0,), np_t)}]
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, inputs=feeds, backend=backend)
        assert rep.equivalent, (backend, rep.to_json())
