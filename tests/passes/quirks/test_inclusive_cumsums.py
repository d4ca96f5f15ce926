"""Quirk cumsum-exclusive-empty (onnx2torch): an exclusive CumSum written as an inclusive
one shifted by a zero. Every direction and axis, empty axes and empty other dims, int64
and float, against the original on the reference backend and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor.verify import verify
from seqlower.io.models import load_model, to_proto
from seqlower.passes.quirks.inclusive_cumsums import InclusiveCumSumsPass
from seqlower.lowering import _run_passes
from tests.helpers import FLOAT, INT64, const, model, ops_of, t


@pytest.mark.parametrize("elem", [INT64, FLOAT])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_exclusive_sums_keep_their_values(elem, axis, reverse):
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=reverse)],
              [t("x", elem, ["a", "b"])], [t("y", elem, ["a", "b"])], initializer=[const("axis", np.int64(axis))])
    low = to_proto(_run_passes([InclusiveCumSumsPass()], load_model(m)))
    onnx.checker.check_model(low, full_check=True)
    cumsums = [n for n in low.graph.node if n.op_type == "CumSum"]
    assert len(cumsums) == 1 and all(a.name != "exclusive" for a in cumsums[0].attribute)
    np_t = onnx.helper.tensor_dtype_to_np_dtype(elem)
    feeds = [{"x": (np.arange(a * b) % 7 - 2).astype(np_t).reshape(a, b)} for a, b in [(3, 4), (1, 1), (0, 3), (3, 0), (0, 0)]]
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, inputs=feeds, backend=backend)
        assert rep.equivalent, (backend, rep.to_json())


def test_an_inclusive_sum_is_left_alone():
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [t("x", FLOAT, [3])], [t("y", FLOAT, [3])],
              initializer=[const("axis", np.int64(0))])
    assert ops_of(to_proto(_run_passes([InclusiveCumSumsPass()], load_model(m)))) == ["CumSum"]
