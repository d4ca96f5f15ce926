"""ReduceL1, ReduceLogSum and ReduceLogSumExp with an ``axes`` attribute become
ReduceSum with an axes input, for OpenVINO (quirk "reduce-axes-attribute-ignored").

OpenVINO 2026.4's ONNX frontend ignores the ``axes`` attribute of these three ops at
opsets 13 to 17 and reduces every axis: ReduceL1(x[2, 3], axes=[1]) gives a scalar
where ONNX gives two row sums. No error. torch exports ``torch.logsumexp`` so. At those
opsets ReduceSum takes its axes as an input, which OpenVINO reads right:

- ReduceL1(x) = ReduceSum(Abs(x))
- ReduceLogSum(x) = Log(ReduceSum(x))
- ReduceLogSumExp(x) = Log(ReduceSum(Exp(x - m))) + m, m = ReduceMax(x) over the same
  axes (kept) where finite and 0 elsewhere, as onnx's reference shifts by the max; a
  row of -inf gives -inf, a row holding +inf gives +inf.

Integer LogSum/LogSumExp (no Log or Exp of integers) are left for ``check --target``
to name. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.analysis import is_default_domain
from seqlower.builder import NameAuthority

__all__ = ["ReductionsAsSumsPass", "AXES_IGNORED", "AXES_IGNORED_OPSETS"]

AXES_IGNORED = frozenset({"ReduceL1", "ReduceLogSum", "ReduceLogSumExp"})
# ReduceSum's axes became an input at 13; these three ops' at 18.
AXES_IGNORED_OPSETS = range(13, 18)


class ReductionsAsSumsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _as_sum)


def _as_sum(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type not in AXES_IGNORED or not is_default_domain(node) or scope.opset not in AXES_IGNORED_OPSETS:
        return None
    attr = node.attributes.get("axes")
    x = node.inputs[0] if node.inputs else None
    if attr is None or x is None or x.dtype is None:
        return None
    if node.op_type != "ReduceL1" and not x.dtype.is_floating_point():
        return None
    keep = node.attributes.get("keepdims")
    keepdims = keep is None or keep.as_int() != 0
    b = scope.builder(node, names)
    base = node.name or node.op_type
    axes = b.constant(np.array(list(attr.as_ints()), np.int64), f"{base}_axes")
    out = node.outputs[0]

    def total(v: ir.Value, name: str, keep_all: bool = keepdims) -> ir.Value:
        return b.op("ReduceSum", [v, axes], name, x.dtype, keepdims=int(keep_all))

    if node.op_type == "ReduceL1":
        result = total(b.op("Abs", [x], f"{base}_abs", x.dtype, x.shape), f"{base}_l1")
    elif node.op_type == "ReduceLogSum":
        result = b.op("Log", [total(x, f"{base}_sum")], f"{base}_log_sum", x.dtype)
    else:
        top = b.op("ReduceMax", [x], f"{base}_max", x.dtype, axes=list(attr.as_ints()), keepdims=1)
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
    return "ReduceSum", "a ReduceSum with an axes input, whose axes OpenVINO reads (OpenVINO)"
