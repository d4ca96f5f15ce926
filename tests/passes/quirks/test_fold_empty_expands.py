"""TVM quirk "expand-zero-dim": an Expand of a constant to a constant shape with a zero
dim is folded to its empty constant (passes/quirks/fold_empty_expands.py); one of a computed
tensor stays and check --target names it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, INT64, const, model, ops_of, t


def _lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="tvm"))[0])
    onnx.checker.check_model(low, full_check=True)
    return low


@pytest.mark.parametrize("value,shape", [(np.int64(0), [0]), (np.float32(1.5), [2, 0]), (np.zeros((1, 3), np.float32), [0, 1]),
                                         (np.zeros((0,), np.int64), [3, 1])])
def test_a_constant_expanded_to_nothing_is_the_empty_constant(value, shape):
    dtype = INT64 if value.dtype == np.int64 else FLOAT
    m = model([helper.make_node("Expand", ["v", "s"], ["e"]), helper.make_node("Concat", ["e", "x"], ["y"], axis=-1)],
              [t("x", dtype, [None] * max(len(shape), np.ndim(value)))], [t("y", dtype, [None] * max(len(shape), np.ndim(value)))],
              initializer=[const("v", value), const("s", np.array(shape, np.int64))])
    low = _lowered(m)
    assert "Expand" not in ops_of(low)
    want_shape = np.broadcast_shapes(np.shape(value), tuple(shape))
    x = np.ones((*want_shape[:-1], 2), value.dtype)
    for backend in ("reference", "onnxruntime"):
        np.testing.assert_array_equal(Executor(low, backend=backend).run({"x": x}).outputs["y"],
                                      Executor(m, backend=backend).run({"x": x}).outputs["y"])


def test_a_computed_tensor_expanded_to_nothing_stays_and_is_named():
    m = model([helper.make_node("Expand", ["x", "s"], ["y"], name="grow")], [t("x", FLOAT, [1])], [t("y", FLOAT, [0])],
              initializer=[const("s", np.array([0], np.int64))])
    low = _lowered(m)
    assert ops_of(low) == ["Expand"]
    gaps = target_gaps(low, load_target("tvm"))
    assert [g.where for g in gaps] == ["Expand node 'grow'"] and gaps[0].why.endswith("(quirk expand-zero-dim)")
