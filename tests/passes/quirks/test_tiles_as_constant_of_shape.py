"""OpenVINO quirk "tile-nop-broadcast" (passes/quirks/tiles_as_constant_of_shape.py): a Tile of a
one-element constant is made by ConstantOfShape of its repeats in the model lowered for
OpenVINO (torch fuzz seed 19476's padding, which OpenVINO failed to compile, is in
tests/test_torch_fuzz_exports.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor import Executor
from tests.helpers import FLOAT, const, lowered_for, model, ops_of, t


def _padded(fill: np.ndarray, opset: int = 13) -> onnx.ModelProto:
    """``Tile(fill, [len(x) - 1])``: the padding's shape, from a run-time count."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(fill.dtype) if fill.dtype != object else onnx.TensorProto.STRING
    nodes = [helper.make_node("Shape", ["x"], ["n"]), helper.make_node("Sub", ["n", "one"], ["missing"]),
             helper.make_node("Tile", ["fill", "missing"], ["pad"])]
    return model(nodes, [t("x", FLOAT, ["n"])], [t("pad", elem, [None] * fill.ndim)], opset=opset,
                 initializer=[const("fill", fill), const("one", np.array([1], np.int64))])


@pytest.mark.parametrize("fill", [np.array([0.0], np.float32), np.array([7], np.int64), np.array([True]),
                                  np.array([1.5], np.float16)])
def test_a_tile_of_one_element_is_its_repeats_filled(fill):
    m = _padded(fill)
    low = lowered_for(m, "openvino")
    assert "Tile" not in ops_of(low) and "ConstantOfShape" in ops_of(low)
    for n in (1, 4):
        x = np.zeros(n, np.float32)
        want = Executor(m, backend="reference").run({"x": x}).outputs["pad"]
        for backend in ("onnxruntime", "openvino"):
            got = Executor(low, backend=backend).run({"x": x}).outputs["pad"]
            assert got.dtype == want.dtype and got.shape == want.shape == (n - 1,)
            np.testing.assert_array_equal(got, want)
    assert "Tile" in ops_of(lowered_for(m, "generic"))


def test_a_rank_two_constant_of_one_element_gives_the_repeats_as_dims():
    nodes = [helper.make_node("Tile", ["fill", "reps"], ["y"])]
    m = model(nodes, [t("reps", onnx.TensorProto.INT64, [2])], [t("y", FLOAT, [None, None])],
              initializer=[const("fill", np.full((1, 1), 2.5, np.float32))])
    low = lowered_for(m, "openvino")
    assert "Tile" not in ops_of(low)
    got = Executor(low, backend="openvino").run({"reps": np.array([2, 3], np.int64)}).outputs["y"]
    np.testing.assert_array_equal(got, np.full((2, 3), 2.5, np.float32))


def test_tiles_of_more_than_one_element_and_types_the_opset_lacks_stay():
    assert "Tile" in ops_of(lowered_for(_padded(np.array([1.0, 2.0], np.float32)), "openvino"))
    bf16 = onnx.TensorProto.BFLOAT16
    for opset, kept in ((13, True), (20, False)):
        m = model([helper.make_node("Shape", ["x"], ["n"]), helper.make_node("Tile", ["fill", "n"], ["pad"])],
                  [t("x", FLOAT, ["n"])], [t("pad", bf16, [None])], opset=opset,
                  initializer=[helper.make_tensor("fill", bf16, [1], [16256])])  # (1.0)
        assert ("Tile" in ops_of(lowered_for(m, "openvino"))) == kept


@pytest.mark.parametrize("opset", [11, 13])
def test_computed_repeats_are_clamped_at_zero_before_constant_of_shape(opset):
    # (torch fuzz seed 22066: OpenVINO refuses a ConstantOfShape whose shape it bounds
    # below 0; Max from opset 12, Where before it.)
    m = _padded(np.array([0.0], np.float32), opset=opset)
    low = lowered_for(m, "openvino")
    assert ("Max" in ops_of(low)) == (opset >= 12) and "ConstantOfShape" in ops_of(low)
    for n in (1, 4):
        got = Executor(low, backend="openvino").run({"x": np.zeros(n, np.float32)}).outputs["pad"]
        np.testing.assert_array_equal(got, np.zeros(n - 1, np.float32))
