"""A Slice that is empty whatever its input's dims becomes a ConstantOfShape of its
dims, for tract (quirk "empty-slice-pushed-up").

tract 0.23.9's optimizer moves a Slice above the elementwise op that feeds it
(PushSliceUp) and slices each operand alike; an operand broadcast along the sliced axis
(a ``[1]`` scale) has dim 1 there, so ``x[:, :0]`` of ``x * scale`` with one column
fails: "Trying to substitute a 1,0,F32 by 1,1,F32" (torch fuzz seed 17401: TorchScript's
``torch.cat(l + [x[:, :0]], 1)`` exported by dynamo). The bounds say the result is empty
before any dim is known: a positive step from a start at or past the end, both counted
from the same side. Its dims are the input's (sliced along its other axes, if any) with
those axes 0, which ``ConstantOfShape(Shape(x) * mask)`` gives without a Slice to push.
Only the Slices of a broadcasting op's output are rewritten: there is nothing else to
push them through wrong, and a Slice keeps more for onnx's inference (the empty start of
a dims vector stays a vector of 0 dims: a zero-trip guard's branches stay one shape).
Negative steps stay: there a start and end past the front give one row. Strings stay:
tract has none. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["EmptySlicesAsConstantOfShapePass", "slice_bounds"]

# Elementwise ops whose operands broadcast (PushSliceUp slices each operand).
_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Max", "Min", "Sum", "Mean", "Where", "BitShift",
    "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


class EmptySlicesAsConstantOfShapePass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def slice_bounds(node: ir.Node, opset: int) -> list[tuple[int, int, int, int]] | None:
    """(axis, start, end, step) of each axis a Slice names, when all are constants and the
    axes are known non-negative (a negative axis needs the rank); None otherwise."""
    if opset < 10:
        attrs = node.attributes
        if "starts" not in attrs or "ends" not in attrs:
            return None
        starts, ends = list(attrs["starts"].as_ints()), list(attrs["ends"].as_ints())
        axes = list(attrs["axes"].as_ints()) if "axes" in attrs else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        ins = list(node.inputs) + [None] * (5 - len(node.inputs))
        arrays = [const_array(v) if v is not None else None for v in ins[1:5]]
        if arrays[0] is None or arrays[1] is None or ins[3] is not None and arrays[2] is None \
                or ins[4] is not None and arrays[3] is None:
            return None
        starts, ends = [int(s) for s in arrays[0].reshape(-1)], [int(e) for e in arrays[1].reshape(-1)]
        axes = [int(a) for a in arrays[2].reshape(-1)] if arrays[2] is not None else list(range(len(starts)))
        steps = [int(s) for s in arrays[3].reshape(-1)] if arrays[3] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    rank = node.inputs[0].shape.rank() if node.inputs[0] is not None and node.inputs[0].shape is not None else None
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = [a + rank if a < 0 else a for a in axes]
    return list(zip(axes, starts, ends, steps))


def _empty(start: int, end: int, step: int) -> bool:
    # Both counted from the front, or both from the back: clamping keeps their order.
    return step > 0 and (start >= 0) == (end >= 0) and start >= end


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Slice" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    x, out = node.inputs[0], node.outputs[0]
    producer = x.producer()
    if producer is None or producer.op_type not in _BROADCASTING or not is_default_domain(producer):
        return None
    dtype = out.dtype or x.dtype
    if x.shape is None or dtype is None or dtype == ir.DataType.STRING or scope.opset < 9:
        return None  # (ConstantOfShape is opset 9's)
    bounds = slice_bounds(node, scope.opset)
    if not bounds or not any(_empty(s, e, st) for _, s, e, st in bounds):
        return None
    rank = x.shape.rank()
    o = Ops(scope.builder(node, names))
    name = out.name or "slice"
    rest = [b for b in bounds if not _empty(*b[1:])]
    if rest:
        # The other axes' lengths: a Slice of those alone (not empty, nothing to push wrong).
        axes, starts, ends, steps = (list(c) for c in zip(*rest))
        x = (o.op("Slice", [x], f"{name}_rest", starts=starts, ends=ends, axes=axes) if scope.opset < 10 else
             o.op("Slice", [x, o.ints(starts), o.ints(ends), o.ints(axes), o.ints(steps)], f"{name}_rest"))
    mask = np.ones(rank, np.int64)
    mask[[a for a, s, e, st in bounds if _empty(s, e, st)]] = 0
    dims = o.op("Mul", [o.shape(x, f"{name}_dims"), o.ints(mask.tolist())], f"{name}_empty_dims", dtype=INT64, shape=[rank])
    zero = ir.tensor(np.zeros((1,), dtype=dtype.numpy()), dtype=dtype)
    made = o.op("ConstantOfShape", [dims], f"{name}_empty", dtype=dtype, shape=out.shape, value=zero)
    replace_output(out, made, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "ConstantOfShape", "a Slice empty by its bounds made by ConstantOfShape of its dims (tract)"
