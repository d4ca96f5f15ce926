"""Reductions a runtime gets wrong or lacks become ReduceSum (axes as an input) and
elementwise ops, for OpenVINO (quirk "reduce-axes-attribute-ignored") and onnx2torch
(quirk "no-reduce-18").

OpenVINO 2026.4's ONNX frontend ignores the ``axes`` attribute of ReduceL1,
ReduceLogSum and ReduceLogSumExp at opsets 13 to 17 and reduces every axis:
ReduceL1(x[2, 3], axes=[1]) gives a scalar where ONNX gives two row sums. No error.
torch exports ``torch.logsumexp`` so. onnx2torch 1.5 has no converter for any
reduction but ReduceSum at opset 18 and later (their axes became an input there).
Both read ReduceSum with an axes input right:

- ReduceL1(x) = ReduceSum(Abs(x)); ReduceSumSquare(x) = ReduceSum(x * x);
  ReduceL2(x) = Sqrt(ReduceSum(x * x)); ReduceLogSum(x) = Log(ReduceSum(x))
- ReduceMean(x) = ReduceSum(x) / n, n the product of the reduced dims (or a sum of ones
  where the axes are known only at run time); 0 / 0 is NaN, as the mean of nothing is in
  onnx's reference
- ReduceLogSumExp(x) = Log(ReduceSum(Exp(x - m))) + m, m = ReduceMax(x) over the same
  axes (kept) where finite and 0 elsewhere, as onnx's reference shifts by the max; a
  row of -inf gives -inf, a row holding +inf gives +inf (OpenVINO only: it needs
  ReduceMax, which onnx2torch lacks at 18 too)

For onnx2torch, ReduceMax, ReduceMin and ReduceProd over dims of static sizes are then
their slices combined by Max, Min and Mul (``passes/legalize.py``, which the lowering's
own writes go through too). What a rewrite cannot take (integers where Log, Sqrt or a
mean's division need floats; ReduceMax, ReduceMin and ReduceProd over a dim known only
at run time) is left for ``check --target`` to name. Functions and subgraphs included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.options import LowerOptions
from seqlower.targets import Target
from seqlower.targets.registry import QUIRKS

__all__ = ["ReductionsAsSumsPass", "Reach", "OPENVINO", "ONNX2TORCH", "for_openvino", "for_onnx2torch"]


@dataclass(frozen=True)
class Reach:
    """The reductions a runtime needs as sums, at which opsets, and why (the report)."""

    ops: frozenset[str]
    opsets: range
    why: str


# ReduceSum's axes became an input at 13; the other reductions' at 18.
OPENVINO = Reach(frozenset(QUIRKS["reduce-axes-attribute-ignored"].ops), range(13, 18),
                 "a ReduceSum with an axes input, whose axes OpenVINO reads (OpenVINO)")
ONNX2TORCH = Reach(frozenset(QUIRKS["no-reduce-18"].ops), range(18, 1000),
                   "a ReduceSum, which onnx2torch converts at opset 18 (onnx2torch)")
_INTEGER_OK = frozenset({"ReduceL1", "ReduceSumSquare"})


class ReductionsAsSumsPass(ir.passes.InPlacePass):
    def __init__(self, reach: Reach) -> None:
        super().__init__()
        self.reach = reach

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, lambda node, scope, names: _as_sum(node, scope, names, self.reach))


def _axes(node: ir.Node, b: Builder, base: str) -> ir.Value | None:
    """The axes as an input value; None: every axis (or none, with noop_with_empty_axes)."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return b.constant(np.array(list(attr.as_ints()), np.int64), f"{base}_axes")
    return node.inputs[1] if len(node.inputs) > 1 else None


def _count(node: ir.Node, x: ir.Value, axes: ir.Value | None, noop, total, b: Builder, base: str) -> ir.Value:
    """How many elements each mean divides by, as ``x``'s type: the product of the reduced
    dims where the axes are constant and the rank known (no Size or ReduceProd: onnx2torch
    has neither at opset 18), else a sum of ones over the same axes."""
    rank = x.shape.rank() if x.shape is not None else None
    known = const_array(axes) if axes is not None else np.zeros(0, np.int64)
    if rank is not None and known is not None:
        reduced = sorted({int(a) % rank for a in known.reshape(-1)}) if known.size else (
            [] if noop is not None and noop.as_int() else list(range(rank)))
        if not reduced:
            return b.constant(np.ones((), x.dtype.numpy()), f"{base}_one")
        dims = b.op("Shape", [x], f"{base}_dims", ir.DataType.INT64, [rank])
        count = None
        for a in reduced:
            dim = b.op("Gather", [dims, b.constant(np.array(a, np.int64), f"{base}_axis")], f"{base}_dim", ir.DataType.INT64, [],
                       axis=0)
            count = dim if count is None else b.op("Mul", [count, dim], f"{base}_count", ir.DataType.INT64, [])
        return b.op("Cast", [count], f"{base}_n", x.dtype, [], to=x.dtype)
    ones = b.op("Expand", [b.constant(np.ones((), x.dtype.numpy()), f"{base}_one"),
                           b.op("Shape", [x], f"{base}_dims", ir.DataType.INT64)], f"{base}_ones", x.dtype, x.shape)
    return total(ones, f"{base}_n")


def _as_sum(node: ir.Node, scope: Scope, names: NameAuthority, reach: Reach) -> tuple[str, str] | None:
    if node.op_type not in reach.ops or not is_default_domain(node) or scope.opset not in reach.opsets:
        return None
    x = node.inputs[0] if node.inputs else None
    if x is None or x.dtype is None:
        return None
    if node.op_type not in _INTEGER_OK and not x.dtype.is_floating_point():
        return None
    if reach is OPENVINO and "axes" not in node.attributes:
        return None  # every axis reduced: what OpenVINO does anyway
    keep = node.attributes.get("keepdims")
    keepdims = keep is None or keep.as_int() != 0
    noop = node.attributes.get("noop_with_empty_axes")
    b = scope.builder(node, names)
    base = node.name or node.op_type
    axes = _axes(node, b, base)
    out = node.outputs[0]

    def total(v: ir.Value, name: str, keep_all: bool = keepdims) -> ir.Value:
        attrs: dict[str, object] = {"keepdims": int(keep_all)}
        if noop is not None:
            attrs["noop_with_empty_axes"] = noop.as_int()
        return b.op("ReduceSum", [v] if axes is None else [v, axes], name, x.dtype, **attrs)

    op = node.op_type
    if op == "ReduceL1":
        result = total(b.op("Abs", [x], f"{base}_abs", x.dtype, x.shape), f"{base}_l1")
    elif op in ("ReduceSumSquare", "ReduceL2"):
        result = total(b.op("Mul", [x, x], f"{base}_squares", x.dtype, x.shape), f"{base}_sum_squares")
        if op == "ReduceL2":
            result = b.op("Sqrt", [result], f"{base}_l2", x.dtype)
    elif op == "ReduceLogSum":
        result = b.op("Log", [total(x, f"{base}_sum")], f"{base}_log_sum", x.dtype)
    elif op == "ReduceMean":
        result = b.op("Div", [total(x, f"{base}_sum"), _count(node, x, axes, noop, total, b, base)], f"{base}_mean", x.dtype)
    else:
        top = b.op("ReduceMax", [x], f"{base}_max", x.dtype, axes=list(node.attributes["axes"].as_ints()), keepdims=1)
        zero = b.constant(np.zeros((), x.dtype.numpy()), f"{base}_zero")
        inf = b.constant(np.array(np.inf, x.dtype.numpy()), f"{base}_inf")
        # IsInf takes 16-bit floats only from opset 20: |m| == inf instead.
        infinite = b.op("Equal", [b.op("Abs", [top], f"{base}_max_abs", x.dtype), inf], f"{base}_max_infinite", ir.DataType.BOOL)
        shift = b.op("Where", [infinite, zero, top], f"{base}_shift", x.dtype)
        exps = b.op("Exp", [b.op("Sub", [x, shift], f"{base}_shifted", x.dtype, x.shape)], f"{base}_exp", x.dtype, x.shape)
        logs = b.op("Log", [total(exps, f"{base}_sum_exp", True)], f"{base}_log_sum_exp", x.dtype)
        result = b.op("Add", [logs, shift], f"{base}_logsumexp", x.dtype)
        if not keepdims:
            result = b.op("Squeeze", [result, axes], f"{base}_squeezed", x.dtype)
    replace_output(out, result, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "ReduceSum", reach.why


def for_openvino(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk reduce-axes-attribute-ignored's rewrite (seqlower.targets.registry)."""
    return [ReductionsAsSumsPass(OPENVINO)]


def for_onnx2torch(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk no-reduce-18's rewrite (seqlower.targets.registry): the sums (ReduceMax,
    ReduceMin and ReduceProd over dims of static sizes are quirk no-converter's, as their
    slices combined: ``passes/legalize.py``)."""
    return [ReductionsAsSumsPass(ONNX2TORCH)]
