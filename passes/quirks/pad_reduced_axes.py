"""Reductions over an axis that may be empty get one neutral element along it, for
tract (quirk "reduce-empty-axis"), and max and min for OpenVINO (quirk
"reduce-extremes-finite": it gets them wrong the same way, and the others right).

tract 0.23 panics (a division by zero in its reduce kernel: the process aborts) on
ReduceSum, ReduceMean, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
ReduceLogSumExp over an empty last axis, and gives ReduceMax/ReduceMin of an empty axis
as the largest finite float where ONNX says -inf/+inf (wrong numbers). A map over rows
of width 0, a ragged row's mean, a batch of no rows: lowered models reduce over such
axes. Concatenating one element that changes nothing (0 for sums, -inf or the type's
lowest for a max, +inf or its highest for a min, 1 for a product) makes the axis never
empty and the result ONNX's; a mean becomes that sum over the axis's element count (0 /
0 is NaN, as ONNX's mean of nothing). Axes whose dims are known and positive are left
alone. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import AXES_INPUT_SINCE
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.options import LowerOptions
from seqlower.targets import Target
from seqlower.targets.registry import QUIRKS

__all__ = ["PadReducedAxesPass", "REDUCTIONS", "neutral_element", "for_empty_axes", "for_extremes"]

# Reduction -> the element that leaves it unchanged ("low"/"high": the type's extremes).
REDUCTIONS: dict[str, object] = {
    "ReduceSum": 0, "ReduceMean": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceSumSquare": 0, "ReduceLogSum": 0,
    "ReduceLogSumExp": "low", "ReduceMax": "low", "ReduceMin": "high", "ReduceProd": 1,
}


class PadReducedAxesPass(ir.passes.InPlacePass):
    """``ops``: the reductions to pad; ``floats_only``: of floats only (OpenVINO gets only
    its float max and min wrong; it reduces integers through float32, where int32's
    extremes are not exact, so a padded integer axis would give wrong numbers there)."""

    def __init__(self, ops: frozenset[str] = frozenset(REDUCTIONS), floats_only: bool = False) -> None:
        super().__init__()
        self.ops = ops
        self.floats_only = floats_only

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        def pad(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
            if node.op_type not in self.ops:
                return None
            x = node.inputs[0] if node.inputs else None
            if self.floats_only and (x is None or x.dtype is None or not x.dtype.is_floating_point()):
                return None
            return _pad(node, scope, names)

        return rewrite_each_node(model, pad)


def neutral_element(op: str, dtype: ir.DataType) -> np.ndarray | None:
    """The element that leaves reduction ``op`` of ``dtype`` unchanged; None if it has none."""
    kind = dtype.numpy()
    value = REDUCTIONS[op]
    if value == "low" or value == "high":
        if np.issubdtype(kind, np.integer):
            info = np.iinfo(kind)
            return np.array(info.min if value == "low" else info.max, kind)
        if dtype.is_floating_point():
            return np.array(-np.inf if value == "low" else np.inf).astype(kind)
        return None
    return np.array(value).astype(kind)


def _axes(node: ir.Node, rank: int, opset: int) -> list[int] | None:
    """The reduced axes, normalized; None when not known here (a run-time axes input)."""
    if opset >= AXES_INPUT_SINCE.get(node.op_type, 18):
        given = node.inputs[1] if len(node.inputs) > 1 else None
        axes = None if given is None else const_array(given)
        if given is not None and axes is None:
            return None
        axes = None if axes is None or axes.size == 0 else [int(a) for a in axes.reshape(-1)]
    else:
        attr = node.attributes.get("axes")
        axes = None if attr is None else list(attr.as_ints())
    if axes is None:
        noop = node.attributes.get("noop_with_empty_axes")
        return [] if noop is not None and noop.as_int() else list(range(rank))
    return sorted({a % rank for a in axes})


def _padded_already(x: ir.Value) -> bool:
    """``x`` is a Concat whose last input is an Expand of a scalar constant (this pass's),
    or the mask of a max/min's correction computed from one."""
    p = x.producer()
    while p is not None and p.op_type in ("Cast", "Not", "Equal") and p.inputs and p.inputs[0] is not None:
        p = p.inputs[0].producer()
    if p is None or p.op_type != "Concat" or len(p.inputs) != 2 or p.inputs[1] is None:
        return False
    slab = const_array(p.inputs[1])
    if slab is not None:  # the Expand folded (a static slab): one value repeated
        return slab.size > 0 and bool(np.all(slab == slab.reshape(-1)[0]))
    q = p.inputs[1].producer()
    return q is not None and q.op_type == "Expand" and q.inputs[0] is not None and const_array(q.inputs[0]) is not None


def _corrected(node: ir.Node) -> bool:
    """``node``'s result already goes through this pass's ±inf correction."""
    return any(u.op_type == "Where" and len(u.inputs) == 3 and u.inputs[2] is node.outputs[0] and u.inputs[1] is not None
               and const_array(u.inputs[1]) is not None for u, _ in node.outputs[0].uses())


def _pad(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type not in REDUCTIONS or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if x.shape is None or x.dtype is None or _padded_already(x):
        return None
    rank = x.shape.rank()
    axes = _axes(node, rank, scope.opset)
    fill = neutral_element(node.op_type, x.dtype)
    if not axes or fill is None:
        return None
    dims = x.shape.dims
    open_axes = [a for a in axes if not (isinstance(dims[a], int) and dims[a] > 0)]
    # tract's float max and min start from the largest finite float, so a row of -inf
    # (+inf) alone comes out finite: every such reduction is corrected, not only these.
    extreme = node.op_type in ("ReduceMax", "ReduceMin") and x.dtype.is_floating_point()
    if not open_axes and (not extreme or _corrected(node)):
        return None
    o = Ops(scope.builder(node, names))
    base = node.name or node.op_type
    padded = x
    for a in open_axes:
        shape = o.shape(padded, f"{base}_dims")
        one = o.concat([o.slice(shape, o.ints([0]), o.ints([a]), [0], f"{base}_before"), o.ints([1]),
                        o.slice(shape, o.ints([a + 1]), o.ints([MAX_INT64]), [0], f"{base}_after")], 0, f"{base}_slab_dims")
        slab = o.op("Expand", [o.b.constant(fill, f"{base}_neutral"), one], f"{base}_neutral_slab", dtype=x.dtype)
        padded = o.concat([padded, slab], a, f"{base}_padded")
    if not (extreme or node.op_type == "ReduceMean"):
        node.replace_input_with(0, padded)
        return node.op_type, "one neutral element along each axis that may be empty"
    keep = node.attributes.get("keepdims")
    keepdims = keep is None or keep.as_int() != 0
    if node.op_type == "ReduceMean":
        # The padded sum over the axes' element count.
        total = o.b.reduce("ReduceSum", padded, axes, f"{base}_sum", keepdims=keepdims)
        count = o.b.reduce("ReduceProd", o.op("Gather", [o.shape(x, f"{base}_x_dims"), o.ints(axes)], f"{base}_counted",
                                              dtype=INT64, shape=[len(axes)], axis=0), [0], f"{base}_n", keepdims=False)
        result = o.op("Div", [total, o.op("Cast", [count], f"{base}_count", dtype=x.dtype, to=x.dtype)], f"{base}_mean",
                      dtype=x.dtype)
        how = "a mean as a sum with one neutral element along each axis that may be empty, over the count"
    else:
        # Where every element is the extreme (or there was none), the extreme itself.
        reduced = o.b.reduce(node.op_type, padded, axes, f"{base}_reduced", keepdims=keepdims)
        neutral = o.b.constant(fill, f"{base}_neutral")
        other = o.op("Cast", [o.op("Not", [o.op("Equal", [padded, neutral], f"{base}_is_extreme", dtype=ir.DataType.BOOL)],
                                    f"{base}_other", dtype=ir.DataType.BOOL)], f"{base}_others", dtype=INT64, to=INT64)
        none = o.op("Equal", [o.b.reduce("ReduceSum", other, axes, f"{base}_count", keepdims=keepdims), o.scalar(0)],
                    f"{base}_only_extremes", dtype=ir.DataType.BOOL)
        result = o.op("Where", [none, neutral, reduced], f"{base}_exact", dtype=x.dtype)
        how = "±inf where only ±inf (or nothing) is reduced, one neutral element along each axis that may be empty"
    replace_output(node.outputs[0], result, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return node.op_type, how


def for_empty_axes(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk reduce-empty-axis's rewrite (seqlower.targets.registry)."""
    return [PadReducedAxesPass(frozenset(QUIRKS["reduce-empty-axis"].ops))]


def for_extremes(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk reduce-extremes-finite's rewrite: float ReduceMax/ReduceMin only."""
    return [PadReducedAxesPass(frozenset(QUIRKS["reduce-extremes-finite"].ops), floats_only=True)]
