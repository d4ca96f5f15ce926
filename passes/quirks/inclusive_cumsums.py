"""An exclusive CumSum written as an inclusive one shifted by a zero, for onnx2torch
(quirk "cumsum-exclusive-empty").

onnx2torch computes ``exclusive=1`` with ``torch.arange(1, n)`` along the axis, which
fails where the axis is empty (n = 0: "upper bound and lower bound inconsistent with
step sign"); tf2onnx's ragged ops and seqlower's element bounds take exclusive sums of
row lengths, and a batch may have no rows. Here the sum is inclusive, a zero is put on
the side it starts from and the last element is dropped::

    exclusive(x)          = Slice(Concat(0, CumSum(x)), 0, -1)
    exclusive reverse(x)  = Slice(Concat(CumSum(x, reverse), 0), 1, end)

which is exact (no subtraction) and empty for an empty axis. Functions and subgraphs
included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import MAX_INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["InclusiveCumSumsPass"]


class InclusiveCumSumsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "CumSum" or not is_default_domain(node) or len(node.inputs) != 2 or None in node.inputs:
        return None
    ex = node.attributes.get("exclusive")
    if ex is None or ex.as_int() == 0:
        return None
    x, axis_v = node.inputs
    axis_c = const_array(axis_v)
    rank = x.shape.rank() if x.shape is not None else None
    if axis_c is None or x.dtype is None or (int(axis_c.reshape(())) < 0 and rank is None):
        return None
    axis = int(axis_c.reshape(()))
    if axis < 0:
        axis += rank
    rev = node.attributes.get("reverse")
    reverse = rev is not None and rev.as_int() == 1
    o = Ops(scope.builder(node, names))
    base = node.name or "cumsum"
    attrs = {"reverse": 1} if reverse else {"reverse": 0}
    inclusive = o.op("CumSum", [x, axis_v], f"{base}_inclusive", dtype=x.dtype, **attrs)
    dims = o.shape(x, f"{base}_dims")
    one_dims = o.concat([o.slice(dims, o.ints([0]), o.ints([axis]), [0], f"{base}_before"), o.ints([1]),
                         o.slice(dims, o.ints([axis + 1]), o.ints([MAX_INT64]), [0], f"{base}_after")], 0, f"{base}_zero_dims")
    zero = o.op("Expand", [o.b.constant(np.zeros((), x.dtype.numpy()), "zero"), one_dims], f"{base}_zero", dtype=x.dtype)
    if reverse:
        both = o.concat([inclusive, zero], axis, f"{base}_shifted")
        y = o.slice(both, o.ints([1]), o.ints([MAX_INT64]), [axis], f"{base}_exclusive")
    else:
        both = o.concat([zero, inclusive], axis, f"{base}_shifted")
        y = o.slice(both, o.ints([0]), o.ints([-1]), [axis], f"{base}_exclusive")
    replace_output(node.outputs[0], y, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "CumSum", "exclusive CumSum as an inclusive one shifted by a zero (onnx2torch)"
