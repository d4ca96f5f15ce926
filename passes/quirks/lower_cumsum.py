"""Lower ``CumSum`` to a masked ``ReduceSum``, for targets that lack it (tract 0.23.9 fails
to analyse CumSum over a computed vector, which the Ragged and Flat element bounds use).

Along the axis, with ``n`` steps, output ``i`` sums the inputs ``j`` that a triangular
``[n, n]`` mask admits: ``j <= i`` (``j < i`` with ``exclusive``; mirrored with
``reverse``). The axis is moved last, the input broadcast against the mask, summed over
the last axis and moved back: O(n^2) work, which is what a runtime without CumSum pays.
The axis must be a constant; a CumSum with a run-time axis stays (and the target check
names it).
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["LowerCumSumPass", "masked_cumsum"]


class LowerCumSumPass(ir.passes.InPlacePass):
    """``kept``: element types whose CumSums stay (the target runs them); None: none stays."""

    def __init__(self, kept: frozenset[ir.DataType] | None = None) -> None:
        super().__init__()
        self.kept = kept

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, lambda node, scope, names: _lower(node, scope, names, self.kept))


def _lower(node: ir.Node, scope: Scope, names: NameAuthority,
           kept: frozenset[ir.DataType] | None = None) -> tuple[str, str] | None:
    if node.op_type != "CumSum" or not is_default_domain(node) or len(node.inputs) < 2:
        return None
    x, axis_v = node.inputs[0], node.inputs[1]
    if kept is not None and (x is None or x.dtype is None or x.dtype in kept):
        return None
    axis_c = const_array(axis_v)
    if x is None or x.shape is None or axis_c is None or axis_c.size != 1:
        return None
    rank = x.shape.rank()
    axis = int(axis_c.reshape(())) % rank
    exclusive = node.attributes["exclusive"].as_int() if "exclusive" in node.attributes else 0
    reverse = node.attributes["reverse"].as_int() if "reverse" in node.attributes else 0
    o = Ops(scope.builder(node, names))
    out = node.outputs[0]
    back = masked_cumsum(o, x, axis, exclusive, reverse, out.name or "cumsum", scope.opset)
    replace_output(out, back, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "masked ReduceSum"


def masked_cumsum(o: Ops, x: ir.Value, axis: int, exclusive: int, reverse: int, name: str, opset: int) -> ir.Value:
    """CumSum of ``x`` (of known rank) along the constant ``axis``, as a masked ReduceSum."""
    rank = x.shape.rank()
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = x if axis == rank - 1 else o.op("Transpose", [x], f"{name}_last", perm=perm)
    n = o.reshape(o.slice(o.shape(x, f"{name}_dims"), o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_n1"), o.ints([]), f"{name}_n")
    steps = o.op("Range", [o.scalar(0), n, o.scalar(1)], f"{name}_steps", dtype=INT64)
    i = o.unsqueeze(steps, [1], f"{name}_i")  # rows: the output step
    j = o.unsqueeze(steps, [0], f"{name}_j")  # columns: the input step
    if opset >= 12:
        compare = {(0, 0): "LessOrEqual", (1, 0): "Less", (0, 1): "GreaterOrEqual", (1, 1): "Greater"}[(exclusive, reverse)]
        mask = o.op(compare, [j, i], f"{name}_mask", dtype=ir.DataType.BOOL)
    else:
        # Opset 11 has no LessOrEqual / GreaterOrEqual: j <= i is not (j > i).
        strict = {(0, 0): "Greater", (1, 0): "Less", (0, 1): "Less", (1, 1): "Greater"}[(exclusive, reverse)]
        mask = o.op(strict, [j, i], f"{name}_strict", dtype=ir.DataType.BOOL)
        if not exclusive:
            mask = o.op("Not", [mask], f"{name}_mask", dtype=ir.DataType.BOOL)
    rows = o.unsqueeze(moved, [rank - 1], f"{name}_rows")  # [..., 1, n] against [n, n]
    zero = o.b.zeros(x.dtype, (), f"{name}_zero") if x.dtype is not None else None
    assert zero is not None
    kept = o.op("Where", [mask, rows, zero], f"{name}_kept")
    summed = o.b.reduce("ReduceSum", kept, [-1], f"{name}_sum", keepdims=False)
    # onnxruntime reduces an empty [0, 0] to [0, 0], not [0]: give the sum its shape back.
    summed = o.reshape_exact(o.reshape(summed, o.ints([-1]), f"{name}_sum_flat"), o.shape(moved, f"{name}_moved_dims"), rank,
                             f"{name}_sum_shaped", x.dtype)
    back = summed if axis == rank - 1 else o.op("Transpose", [summed], f"{name}_back", perm=[perm.index(k) for k in range(rank)])
    return back
