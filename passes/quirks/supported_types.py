"""Ops written on element types a target runs them on, for a target whose profile lists
each op's types (TensorRT, quirk "trt-op-types": its operator table's 'Supported Types').

The lowerings count element bounds by CumSum and find positions by NonZero, on int64
and bool; TensorRT runs CumSum on FP32, FP16 and BF16 only, and NonZero on FP32 and FP16.
A CumSum of another type is counted by a masked ReduceSum (``lower_cumsum``, exact in
any type); what a NonZero of another type reads becomes a float mask of its nonzero
entries (``x != 0``, then Cast), which has the same nonzero positions, whatever the
values (a tiny double is not rounded to zero first).
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.options import LowerOptions
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.quirks.lower_cumsum import LowerCumSumPass
from seqlower.targets import Target

__all__ = ["NonZeroOfFloatsPass", "for_target"]


def _types(target: Target, op: str) -> frozenset[ir.DataType]:
    return frozenset(ir.DataType[t] for t in target.types.get(op, ()))


def for_target(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    return [LowerCumSumPass(kept=_types(target, "CumSum")), NonZeroOfFloatsPass(_types(target, "NonZero"))]


class NonZeroOfFloatsPass(ir.passes.InPlacePass):
    """NonZero of an element type not in ``kept`` reads a float mask of its input."""

    def __init__(self, kept: frozenset[ir.DataType]) -> None:
        super().__init__()
        self.kept = kept

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if node.op_type != "NonZero" or not is_default_domain(node) or not node.inputs:
            return None
        x = node.inputs[0]
        if x is None or x.dtype is None or x.dtype in self.kept:
            return None
        o = Ops(scope.builder(node, names))
        name = x.name or "nonzero"
        mask = x if x.dtype == ir.DataType.BOOL else o.op(
            "Not", [o.op("Equal", [x, o.b.zeros(x.dtype, (), f"{name}_zero")], f"{name}_is_zero",
                         dtype=ir.DataType.BOOL)], f"{name}_set", dtype=ir.DataType.BOOL, shape=x.shape)
        floats = o.op("Cast", [mask], f"{name}_as_float", dtype=ir.DataType.FLOAT, shape=x.shape, to=ir.DataType.FLOAT)
        node.replace_input_with(0, floats)
        return "NonZero", "of a float mask of what it reads (TensorRT)"
