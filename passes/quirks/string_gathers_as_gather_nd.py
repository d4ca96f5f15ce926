"""A Gather of string rows written as a GatherND, for onnxruntime (quirk "string-gather-rows").

onnxruntime 1.31's Gather copies one string per gathered row of a string tensor of rank 2
or more; the other strings of each row come out empty, with no error (random graph
programs 240005, 240166, 240184, 240222, 240341, 240424, each cut by ``seqlower reduce``
to the model's own one Gather). Its GatherND copies whole rows right, negative indices
included. Along axis 0, ``Gather(x, i)`` is ``GatherND(x, Unsqueeze(i, -1))``; along axis
``a`` the axis is moved first, gathered, and the gathered dims moved back to ``a``. The
data's rank must be known (and, off axis 0, the indices'); GatherND exists from opset 11.
What stays is named by ``check --target onnxruntime``.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops

__all__ = ["StringGathersAsGatherNDPass"]


class StringGathersAsGatherNDPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Gather" or not is_default_domain(node) or len(node.inputs) != 2 or scope.opset < 11:
        return None
    x, idx = node.inputs
    if x is None or idx is None or x.dtype != ir.DataType.STRING or x.shape is None or x.shape.rank() < 2:
        return None
    rank = x.shape.rank()
    axis = (node.attributes["axis"].as_int() if "axis" in node.attributes else 0) % rank
    if axis and (idx.shape is None):
        return None
    o = Ops(scope.builder(node, names))
    out = node.outputs[0]
    name = out.name or "gather"
    front = [axis, *(i for i in range(rank) if i != axis)]
    data = o.op("Transpose", [x], f"{name}_axis_first", perm=front) if axis else x
    picked = o.op("GatherND", [data, o.unsqueeze(idx, [-1], f"{name}_index")], f"{name}_rows", dtype=ir.DataType.STRING)
    if axis:
        # [*idx, *x[:a], *x[a+1:]] -> [*x[:a], *idx, *x[a+1:]]
        q = idx.shape.rank()
        back = [*range(q, q + axis), *range(q), *range(q + axis, q + rank - 1)]
        picked = o.op("Transpose", [picked], f"{name}_axis_back", perm=back)
    replace_output(out, picked, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "GatherND", "a Gather of string rows written as GatherND (onnxruntime)"
