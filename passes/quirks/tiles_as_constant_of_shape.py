"""A Tile of a one-element constant becomes a ConstantOfShape of its repeats, for OpenVINO
(quirk "tile-nop-broadcast").

OpenVINO 2026.4's EliminateNopBroadcast pass, given ``Tile(fill, missing)`` with a
``missing`` its shape analysis bounds, replaces the Tile by its input and then fails its
own check ("Check 'get_partial_shape().same_scheme(value.get_shape())' failed"): the model
does not compile, at any input shape (torch fuzz seed 19476: the padding of a Reshape
before allowzero, opset 13, where a list's rows were computed from x's dims). An Expand
of the same fails the same way; ``ConstantOfShape(missing)`` with the constant as its
value is the same tensor (every dim of the constant is 1, so the result's dims are the
repeats) and compiles. Repeats computed at run time are clamped at 0 first (a no-op:
Tile refuses negative repeats): OpenVINO bounds a ConstantOfShape's shape from what
computes it and refuses one whose lower bound is below 0 ("Value for partial shape
evaluation can't be lower than zero", torch fuzz seed 22066: the pad of a Reshape before
allowzero, ``need - have``). Strings stay (OpenVINO has none), and element types
ConstantOfShape takes only from a later opset. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["TilesAsConstantOfShapePass"]

# ConstantOfShape-9's value types; opset 20 adds bfloat16 and the float8 types.
_OPSET_9_TYPES = frozenset({
    ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT8, ir.DataType.INT16,
    ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
    ir.DataType.UINT64, ir.DataType.BOOL})
_OPSET_20_TYPES = _OPSET_9_TYPES | {ir.DataType.BFLOAT16, ir.DataType.FLOAT8E4M3FN, ir.DataType.FLOAT8E4M3FNUZ,
                                    ir.DataType.FLOAT8E5M2, ir.DataType.FLOAT8E5M2FNUZ}


def clamped(repeats: ir.Value, o: Ops, opset: int, base: str) -> ir.Value:
    """``max(repeats, 0)``, so that OpenVINO bounds the shape at 0 from below."""
    if opset >= 12:  # (Max of int64 from opset 12)
        return o.op("Max", [repeats, o.ints([0])], f"{base}_repeats", dtype=repeats.dtype, shape=repeats.shape)
    negative = o.op("Less", [repeats, o.ints([0])], f"{base}_negative", dtype=ir.DataType.BOOL, shape=repeats.shape)
    return o.op("Where", [negative, o.ints([0]), repeats], f"{base}_repeats", dtype=repeats.dtype, shape=repeats.shape)


class TilesAsConstantOfShapePass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Tile" or not is_default_domain(node) or len(node.inputs) != 2 or None in node.inputs:
        return None
    one = const_array(node.inputs[0])
    dtype = node.inputs[0].dtype
    if one is None or one.size != 1 or one.ndim == 0 or dtype is None or scope.opset < 9:
        return None
    if dtype not in (_OPSET_20_TYPES if scope.opset >= 20 else _OPSET_9_TYPES):
        return None
    out = node.outputs[0]
    value = ir.tensor(np.asarray(one).reshape(1), dtype=dtype)
    o = Ops(scope.builder(node, names))
    repeats = node.inputs[1]
    if const_array(repeats) is None:
        repeats = clamped(repeats, o, scope.opset, out.name or "tile")
    made = o.op("ConstantOfShape", [repeats], f"{out.name or 'tile'}_filled", dtype=dtype, shape=out.shape, value=value)
    replace_output(out, made, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "ConstantOfShape", "a Tile of a one-element constant made by ConstantOfShape of its repeats (OpenVINO)"
