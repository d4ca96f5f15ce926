"""tract quirk "empty-slice-pushed-up" (passes/quirks/empty_slices_as_constant_of_shape.py): a
Slice empty by its bounds is made by ConstantOfShape of its dims in the model lowered for
tract. The reproducer is torch fuzz seed 17401's export cut to its two nodes: tract
pushes ``x[:, :0]`` above ``x * scale`` and fails where x has one column."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.executor import Executor
from tests.helpers import FLOAT, const, lowered_for, model, t


def _sliced(starts, ends, axes, steps=None, opset: int = 20, dims=("n", "m")):
    args = [const("starts", np.array(starts, np.int64)), const("ends", np.array(ends, np.int64)),
            const("axes", np.array(axes, np.int64))] + ([const("steps", np.array(steps, np.int64))] if steps else [])
    if opset < 10:
        slice_ = helper.make_node("Slice", ["y"], ["e"], starts=starts, ends=ends, axes=axes)
        args = []
    else:
        slice_ = helper.make_node("Slice", ["y", "starts", "ends", "axes"] + (["steps"] if steps else []), ["e"])
    return model([helper.make_node("Mul", ["x", "scale"], ["y"]), slice_],
                 [t("x", FLOAT, list(dims))], [t("y", FLOAT, [None, None]), t("e", FLOAT, [None, None])],
                 opset=opset, initializer=[const("scale", np.array([1.5], np.float32)), *args])


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


def test_tract_fails_an_empty_slice_of_a_broadcast_product_and_runs_it_lowered():
    m = _sliced([0], [0], [1])
    x = np.ones((1, 1), np.float32)
    with pytest.raises(Exception, match="substitute"):
        Executor(m, backend="tract").run({"x": x})
    low = lowered_for(m, "tract")
    assert "Slice" not in _ops(low) and "ConstantOfShape" in _ops(low)
    for shape in [(1, 1), (3, 1), (2, 3), (0, 2)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        for backend in ("reference", "onnxruntime", "tract"):
            got = Executor(low, backend=backend).run({"x": x}).outputs
            np.testing.assert_array_equal(got["y"], x * np.float32(1.5))
            assert got["e"].shape == (shape[0], 0), (backend, shape)
    assert "Slice" in _ops(lowered_for(m, "generic"))


@pytest.mark.parametrize("starts, ends, axes, steps, want", [
    ([1, 0], [3, 0], [0, 1], None, lambda x: x[1:3, 0:0]),  # the other axis sliced as well
    ([-1], [-2], [-1], None, lambda x: x[:, -1:-2]),  # both from the back
    ([5], [2], [1], [2], lambda x: x[:, 5:2:2]),  # a start past the end
    ([2, -3], [2, 9], [1, 0], None, lambda x: x[-3:9, 2:2]),
])
def test_every_empty_slice_is_made_with_the_dims_it_has(starts, ends, axes, steps, want):
    low = lowered_for(_sliced(starts, ends, axes, steps), "tract")
    assert "ConstantOfShape" in _ops(low)
    for shape in [(1, 1), (5, 3), (0, 4)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        for backend in ("onnxruntime", "tract"):
            got = Executor(low, backend=backend).run({"x": x}).outputs["e"]
            assert got.shape == want(x).shape, (backend, shape)


@pytest.mark.parametrize("starts, ends, steps", [([0], [1], None), ([-1], [0], None), ([0], [0], [-1]), ([-1], [-1], [-1])])
def test_slices_that_may_hold_rows_stay(starts, ends, steps):
    # (-1..0 holds the last row when counted from both sides; a negative step from -1 to
    # -1 past the front of an empty axis is [0:-1:-1], one row in a longer one)
    assert "Slice" in _ops(lowered_for(_sliced(starts, ends, [1], steps), "tract"))


def test_an_opset_9_slice_of_attributes_is_made_the_same_way():
    low = lowered_for(_sliced([1, 0], [3, 0], [0, 1], opset=9), "tract")
    assert _ops(low).count("ConstantOfShape") == 1
    x = np.ones((4, 2), np.float32)
    assert Executor(low, backend="tract").run({"x": x}).outputs["e"].shape == (2, 0)
