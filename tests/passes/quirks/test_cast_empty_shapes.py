"""onnx2torch's Shape of a scalar is an empty float32 tensor (quirk empty-shape-float):
lowered for it, a Shape that may give no dims is read through a Cast to int64."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from seqlower.targets import load_target
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t


def _dims_of_scalar() -> onnx.ModelProto:
    # [3] after the (empty) dims of a scalar: what the Flat lowering's shape rows hold.
    return model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Concat", ["s", "three"], ["d"], axis=0),
                  helper.make_node("Shape", ["m"], ["ms"])],
                 [t("x", FLOAT, []), t("m", FLOAT, [2, 3])], [t("d", INT64, [1]), t("ms", INT64, [2])],
                 initializer=[const("three", np.array([3], np.int64))], opset=17)


def test_a_shape_that_may_be_empty_is_cast_for_onnx2torch_and_no_other():
    assert "empty-shape-float" in dict(load_target("onnx2torch").quirks)
    m = _dims_of_scalar()
    feeds = [{"x": np.array(1.5, np.float32), "m": np.zeros((2, 3), np.float32)}]
    low, report = lower_checked(m, inputs=feeds, target="onnx2torch", promises=True)
    assert ops_of(low).count("Cast") == 1 and ops_of(low).count("Shape") == 2
    assert [r["how"] for r in report.rewrites if r["op"] == "Shape"] == \
        ["read through a Cast to int64 (onnx2torch makes an empty shape float32)"]
    generic = to_proto(lower_with_report(load_model(m), LowerOptions())[0])
    assert "Cast" not in ops_of(generic)


def test_onnx2torch_gives_the_cast_shape_as_int64():
    """Runs only where onnx2torch is installed (it is not a test dependency)."""
    import sys
    from pathlib import Path

    if importlib.util.find_spec("onnx2torch") is None:
        pytest.skip("onnx2torch is not installed (not a test dependency)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
    from runtimes import _stub_torchvision, run_onnx2torch

    _stub_torchvision()
    m = _dims_of_scalar()
    feeds = {"x": np.array(1.5, np.float32), "m": np.zeros((2, 3), np.float32)}
    assert np.asarray(run_onnx2torch(m, feeds)["d"]).dtype == np.float32  # the quirk, as exported
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="onnx2torch"))[0])
    out = np.asarray(run_onnx2torch(low, feeds)["d"])
    assert out.dtype == np.int64 and out.tolist() == [3]
