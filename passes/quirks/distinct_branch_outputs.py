"""An If whose two branches give one value (an outer value both return) as the same
output gives it through an Identity in its else branch, for TensorRT (quirk
"trt-if-branches": 'Output tensors of the two conditional branches ... must have
different names')."""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, rewrite_each_node

__all__ = ["DistinctBranchOutputsPass"]


class DistinctBranchOutputsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rename)


def _rename(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "If" or not is_default_domain(node):
        return None
    then, other = (node.attributes[k].as_graph() if k in node.attributes else None for k in ("then_branch", "else_branch"))
    if then is None or other is None:
        return None
    shared = [k for k, (a, b) in enumerate(zip(then.outputs, other.outputs)) if a.name == b.name]
    for k in shared:
        given = other.outputs[k]
        out = ir.Value(name=names.fresh(f"{given.name}_else"), type=given.type, shape=given.shape)
        copy = ir.Node("", "Identity", [given], outputs=[out], name=names.fresh(f"{given.name}_else_identity"))
        other.append(copy)
        other.outputs[k] = out
    return ("If", "each branch's outputs named apart (TensorRT)") if shared else None
