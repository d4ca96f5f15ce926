"""Compress as NonZero -> Reshape -> Gather for targets that lack it (OpenVINO, tract,
tinygrad: its Compress of nothing kept fails, 'index dtype dtypes.float'):
every axis (negative too, none), conditions shorter than the axis, none true, zero-size
inputs, strings, float16 and bool, opsets 9, 11 and 17; and it runs on OpenVINO, whose
own Compress fails (tf2onnx's boolean_mask)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, INT64, lower_checked, model, ops_of, t

_NP = {FLOAT: np.float32, INT64: np.int64, TensorProto.FLOAT16: np.float16, TensorProto.STRING: object, BOOL: np.bool_}


def _values(shape, dtype):
    n = int(np.prod(shape))
    if dtype == TensorProto.STRING:
        return np.array([f"s{i}" for i in range(n)], dtype=object).reshape(shape)
    if dtype == BOOL:
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) - 3).astype(_NP[dtype]).reshape(shape)


@pytest.mark.parametrize("dtype", [FLOAT, INT64, TensorProto.FLOAT16, TensorProto.STRING, BOOL])
@pytest.mark.parametrize("axis", [0, 1, -1, -2, None])
@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("target", ["openvino", "tinygrad"])
def test_compress_lowered_for_openvino(dtype, axis, opset, target):
    attrs = {} if axis is None else {"axis": axis}
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)],
              [t("x", dtype, ["n", "w"]), t("c", BOOL, ["k"])], [t("y", dtype, [None] if axis is None else [None, None])],
              opset=opset)
    n, w = 3, 4
    length = {0: n, -2: n, 1: w, -1: w, None: n * w}[axis]
    feeds = [
        {"x": _values((n, w), dtype), "c": np.arange(length) % 2 == 0},
        {"x": _values((n, w), dtype), "c": np.array([False, True])},  # shorter than the axis
        {"x": _values((n, w), dtype), "c": np.zeros(length, bool)},  # nothing selected
        {"x": _values((0, w) if axis in (1, -1) else (n, 0), dtype), "c": np.zeros(0, bool)},  # zero-size input
    ]
    low, report = lower_checked(m, inputs=feeds, target=target, tensor_only=False)
    assert "Compress" not in ops_of(low)
    rows = dtype == TensorProto.STRING and axis in (0, -2)
    hows = [r["how"] for r in report.rewrites]
    assert hows[0] == ("NonZero, GatherND" if rows else "NonZero, Gather")
    # (for OpenVINO, GatherND's Transpose of NonZero's [rank, count] too: quirk transpose-empty)
    assert hows[1:] == ([] if not rows or target != "openvino" else
                        ["its input's dims of 1 made unknown to OpenVINO, which otherwise reshapes it (OpenVINO)"])


def test_opset_9_compress_with_a_static_condition():
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)],
              [t("x", FLOAT, [4, 2]), t("c", BOOL, [4])], [t("y", FLOAT, [None, 2])], opset=9)
    feeds = [{"x": _values((4, 2), FLOAT), "c": np.array([True, False, True, True])}]
    low, _ = lower_checked(m, inputs=feeds, target="tract", backends=("reference",), tensor_only=False)
    assert ops_of(low) == ["NonZero", "Reshape", "Gather"]


def test_targets_with_compress_keep_it():
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)],
              [t("x", FLOAT, ["n"]), t("c", BOOL, ["n"])], [t("y", FLOAT, [None])])
    for target in ("generic", "onnxruntime"):
        assert "Compress" in ops_of(to_proto(lower_with_report(load_model(m), LowerOptions(target=target))[0]))


def test_a_flattened_compress_runs_on_openvino_once_lowered():
    # Bisected from tf2onnx's ragged boolean_mask (tf_ragged_mask_to_tensor): OpenVINO's
    # own Compress without an axis, of a computed tensor, fails ("Squeeze operation with
    # dynamic rank"). When this raise stops, OpenVINO fixed it: take Compress off its lacks.
    m = model([helper.make_node("ConstantOfShape", ["s"], ["d"], value=helper.make_tensor("v", INT64, [1], [7])),
               helper.make_node("Compress", ["d", "c"], ["y"])],
              [t("s", INT64, [1]), t("c", BOOL, ["n"])], [t("y", INT64, [None])], opset=13)
    feeds = {"s": np.array([3]), "c": np.array([True, False, True])}
    with pytest.raises(Exception, match="dynamic rank"):
        Executor(m, backend="openvino").run(feeds)
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="openvino"))[0])
    assert "Compress" not in ops_of(low)
    np.testing.assert_array_equal(Executor(low, backend="openvino").run(feeds).outputs["y"], np.array([7, 7]))


def test_string_slices_along_a_middle_axis():
    m = model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
              [t("x", TensorProto.STRING, [2, "k", 3]), t("c", BOOL, ["k"])], [t("y", TensorProto.STRING, [2, None, 3])])
    feeds = [{"x": _values((2, 4, 3), TensorProto.STRING), "c": np.array([True, False, False, True])},
             {"x": _values((2, 0, 3), TensorProto.STRING), "c": np.zeros(0, bool)}]
    low, report = lower_checked(m, inputs=feeds, target="openvino", tensor_only=False)
    assert ops_of(low).count("Transpose") == 3 and "GatherND" in ops_of(low)
