"""Quirk range-step-sign (onnx2torch): a Range's limit clamped to its start where the step
points away. The rewritten model gives ONNX's ranges, empty ones included, for every
sign of the step, constant or not, int and float, on the reference backend and
onnxruntime; a model rewritten once is not rewritten again."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor.verify import verify
from seqlower.io.models import load_model, to_proto
from seqlower.passes.quirks.clamp_range_limits import ClampRangeLimitsPass
from seqlower.lowering import _run_passes
from tests.helpers import FLOAT, INT64, const, model, ops_of, t


def _range(elem: int, constant_delta: float | None, opset: int = 17) -> onnx.ModelProto:
    np_t = onnx.helper.tensor_dtype_to_np_dtype(elem)
    inputs = [t("a", elem, []), t("b", elem, [])]
    inits = []
    if constant_delta is None:
        inputs.append(t("d", elem, []))
    else:
        inits.append(const("d", np.array(constant_delta, np_t)))
    return model([helper.make_node("Range", ["a", "b", "d"], ["y"])], inputs, [t("y", elem, [None])], initializer=inits,
                 opset=opset)


def _rewritten(m: onnx.ModelProto) -> onnx.ModelProto:
    return to_proto(_run_passes([ClampRangeLimitsPass()], load_model(m)))


# Opset 11: integer Max/Min are written as Where (they exist from 12), which a second
# lowering must recognise too.
@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("elem", [INT64, FLOAT])
@pytest.mark.parametrize("constant_delta", [None, 2, -1])
def test_ranges_keep_their_values_and_emptiness(elem, constant_delta, opset):
    m = _range(elem, constant_delta, opset)
    low = _rewritten(m)
    # A step of known sign: one Max or Min (below opset 12 on integers: one Where).
    picks = 1 if constant_delta is not None else 3
    assert ops_of(low).count("Range") == 1 and sum(ops_of(low).count(k) for k in ("Max", "Min", "Where")) == picks
    np_t = onnx.helper.tensor_dtype_to_np_dtype(elem)
    cases = [(0, 5), (5, 3), (3, 3), (3, 5), (5, 0), (-2, 4)]
    deltas = [constant_delta] if constant_delta is not None else [1, 3, -1, -2]
    feeds = [{"a": np.array(a, np_t), "b": np.array(b, np_t), **({} if constant_delta is not None else {"d": np.array(d, np_t)})}
             for a, b in cases for d in deltas]
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, inputs=feeds, backend=backend)
        assert rep.equivalent, (backend, rep.to_json())
    assert _rewritten(low).SerializeToString() == low.SerializeToString()
