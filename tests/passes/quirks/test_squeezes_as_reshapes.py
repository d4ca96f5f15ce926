"""OpenVINO quirk "squeeze-empty": the Squeeze or Unsqueeze of a tensor that is empty at
run time gets zeros for its other dims there. Lowered for OpenVINO, each is a Reshape to
the dims it keeps (passes/quirks/squeezes_as_reshapes.py), which OpenVINO gives right."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.targets import load_target
from tests.helpers import FLOAT, const, lowered_for, model, ops_of, t


def _squeezes(opset: int) -> onnx.ModelProto:
    """Unsqueeze and Squeeze of x[:0] (empty when run, not as an input)."""
    def axes_op(op: str, x: str, axis: int, out: str) -> list:
        if opset < 13:
            return [helper.make_node(op, [x], [out], axes=[axis])]
        return [helper.make_node(op, [x, "one" if axis == 1 else "axis_neg" if axis < 0 else "zero"], [out])]

    nodes = [helper.make_node("Slice", ["x", "zero", "zero", "zero"], ["none"]),
             *axes_op("Unsqueeze", "none", 0, "up"),
             *axes_op("Unsqueeze", "x", 1, "x1"),
             helper.make_node("Slice", ["x1", "zero", "zero", "zero"], ["none1"]),
             *axes_op("Squeeze", "none1", -2, "down")]
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("up", FLOAT, [1, None, None]), t("down", FLOAT, [None, None])],
                 opset=opset, initializer=[const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64)),
                                           const("axis_neg", np.array([-2], np.int64))])


def test_openvino_loses_the_dims_of_an_empty_squeeze():
    # The quirk itself: when OpenVINO is fixed, this fails and the rewrite can go.
    assert "squeeze-empty" in dict(load_target("openvino").quirks)
    got = Executor(_squeezes(18), backend="openvino").run({"x": np.ones((3, 2), np.float32)}).outputs
    assert got["up"].shape == (1, 0, 0) and got["down"].shape == (0, 0)  # ONNX: (1, 0, 2), (0, 2)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_lowered_for_openvino_squeezes_are_reshapes_with_onnx_shapes(opset):
    m = _squeezes(opset)
    low = lowered_for(m, "openvino")
    assert "Squeeze" not in ops_of(low) and "Unsqueeze" not in ops_of(low)
    for shape in [(3, 2), (0, 4), (1, 1), (2, 0)]:
        x = {"x": np.arange(np.prod(shape), dtype=np.float32).reshape(shape)}
        want = Executor(m, backend="onnxruntime").run(x).outputs
        got = Executor(low, backend="openvino").run(x).outputs
        for name in ("up", "down"):
            assert got[name].shape == want[name].shape


@pytest.mark.parametrize("rows", [3, 0])
def test_a_squeeze_of_a_tensor_of_known_dims_stays(rows):
    # Known dims, empty or not, OpenVINO gets right; a Reshape to a folded [1, 0, 2] it
    # read as "copy dim 1" (fuzz seed 9515: "'0' dimension is out of range").
    nodes = [helper.make_node("Unsqueeze", ["x", "zero"], ["y"])]
    m = model(nodes, [t("x", FLOAT, [rows, 2])], [t("y", FLOAT, [1, rows, 2])], initializer=[const("zero", np.array([0], np.int64))])
    low = lowered_for(m, "openvino")
    assert "Unsqueeze" in ops_of(low)
    x = {"x": np.ones((rows, 2), np.float32)}
    assert Executor(low, backend="openvino").run(x).outputs["y"].shape == (1, rows, 2)
    assert "Unsqueeze" in ops_of(lowered_for(_squeezes(18), "generic"))
