"""Remove what the lowerings left dead and put nodes back in topological order.

1. onnx_ir's ``RemoveUnusedNodesPass`` (dead nodes and initializers, in subgraphs and
   functions too), then a guard: that pass strips trailing empty inputs, which turns
   ``Loop(M, "")`` (no condition, no carried values) into a one-input Loop the checker
   rejects, so Loops get their two leading inputs back.
2. onnx_ir's ``TopologicalSortPass`` (stable, so unchanged parts keep their order).
"""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, TopologicalSortPass

__all__ = ["CleanUpGraphPass"]

logger = logging.getLogger(__name__)

# Ops whose leading inputs are positional even when empty: (op, how many).
_MIN_INPUTS = {"Loop": 2}


class CleanUpGraphPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = RemoveUnusedNodesPass()(model).modified
        _restore_leading_inputs(model)
        modified |= TopologicalSortPass()(model).modified
        return ir.passes.PassResult(model, modified)


def _restore_leading_inputs(model: ir.Model) -> None:
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for g in graphs:
        for node in ir.traversal.RecursiveGraphIterator(g):
            need = _MIN_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if need is not None and len(node.inputs) < need:
                node.resize_inputs(need)
