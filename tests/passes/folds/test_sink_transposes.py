"""passes/folds/sink_transposes.py: a Transpose moves down through the ops that commute with it
to the next Transpose, and the two become one (nothing where they cancel); where no
Transpose ends the chain, nothing moves. Each rewritten model is run against the
original on the reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.io.models import from_proto, to_proto
from seqlower.passes.folds.sink_transposes import SinkTransposesPass
from tests.helpers import FLOAT, const, model, ops_of, t

RNG = np.random.default_rng(0)


def _sunk(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    ir_model = from_proto(onnx.shape_inference.infer_shapes(m, strict_mode=True))
    SinkTransposesPass()(ir_model)
    out = to_proto(ir_model)
    onnx.checker.check_model(out, full_check=True)
    for name, want in Executor(m, backend="reference").run(feeds).outputs.items():
        np.testing.assert_allclose(Executor(out, backend="reference").run(feeds).outputs[name], want, rtol=1e-5, atol=1e-6)
    return out


def _between(middle: list, perm: list[int], back: list[int], dims: list[int], inits=(), opset: int = 18) -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=perm), *middle,
             helper.make_node("Transpose", ["z"], ["y"], perm=back)]
    out_dims = [dims[p] for p in perm]
    out_dims = [out_dims[p] for p in back]
    return model(nodes, [t("x", FLOAT, dims)], [t("y", FLOAT, out_dims)], initializer=list(inits), opset=opset)


def test_inverse_transposes_around_a_row_wise_body_cancel():
    w = RNG.standard_normal((5, 5)).astype(np.float32)
    m = _between([helper.make_node("MatMul", ["a", "w"], ["h"]), helper.make_node("Relu", ["h"], ["z"])],
                 [1, 0, 2], [1, 0, 2], [3, 4, 5], [const("w", w)])
    out = _sunk(m, {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)})
    assert ops_of(out) == ["MatMul", "Relu"]
    assert out.graph.output[0].name == "y"


def test_two_transposes_that_do_not_cancel_become_one():
    m = _between([helper.make_node("Tanh", ["a"], ["z"])], [1, 0, 2], [0, 2, 1], [3, 4, 5])
    out = _sunk(m, {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)})
    assert ops_of(out) == ["Tanh", "Transpose"]
    assert list(out.graph.node[1].attribute[0].ints) == [1, 2, 0]


def test_a_constant_operand_is_transposed_back_and_a_softmax_axis_follows():
    bias = RNG.standard_normal((3, 1)).astype(np.float32)  # (broadcasts from the right)
    m = _between([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Softmax", ["s"], ["z"], axis=1)],
                 [2, 0, 1], [1, 2, 0], [3, 4, 5], [const("b", bias)])
    out = _sunk(m, {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)})
    assert ops_of(out) == ["Add", "Softmax"]


@pytest.mark.parametrize("opset", [17, 18])
def test_a_reduction_keeping_its_dims_moves_its_axes(opset):
    reduce = (helper.make_node("ReduceMax", ["a", "axes"], ["z"], keepdims=1) if opset >= 18
              else helper.make_node("ReduceMax", ["a"], ["z"], axes=[2], keepdims=1))
    inits = [const("axes", np.array([2], np.int64))] if opset >= 18 else []
    m = _between([reduce], [1, 2, 0], [2, 0, 1], [3, 4, 5], inits, opset=opset)
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1  # (axis 0 of x reduced)
    out = _sunk(m, {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)})
    assert ops_of(out) == ["ReduceMax"]


def test_nothing_moves_without_a_transpose_to_meet_or_past_a_second_reader():
    alone = model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]), helper.make_node("Relu", ["a"], ["y"])],
                  [t("x", FLOAT, [2, 3])], [t("y", FLOAT, [3, 2])])
    assert ops_of(_sunk(alone, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})) == ["Transpose", "Relu"]
    shared = model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]), helper.make_node("Relu", ["a"], ["r"]),
                    helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
                   [t("x", FLOAT, [2, 3])], [t("y", FLOAT, [2, 3]), t("r", FLOAT, [3, 2])])
    assert ops_of(_sunk(shared, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})) == ["Transpose", "Relu", "Transpose"]


def test_a_matmul_that_sums_over_a_moved_axis_stops_it():
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    m = _between([helper.make_node("MatMul", ["a", "w"], ["z"])], [1, 0], [1, 0], [3, 3], [const("w", w)])
    out = _sunk(m, {"x": RNG.standard_normal((3, 3)).astype(np.float32)})
    assert ops_of(out) == ["Transpose", "MatMul", "Transpose"]
