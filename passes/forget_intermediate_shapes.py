"""Forget the shapes of intermediate values (their types stay), for targets whose
analysis trips over the symbolic dims seqlower's inference writes into value_info: tract
0.23.9 fails on a ReduceSum or Split whose declared output dims are named ``w`` once its
input fact says 3. The model's inputs and outputs keep their declared shapes."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["ForgetIntermediateShapesPass"]


class ForgetIntermediateShapesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        boundary = {*model.graph.inputs, *model.graph.outputs}
        for graph in (model.graph, *(f for f in model.functions.values())):
            for node in ir.traversal.RecursiveGraphIterator(graph):
                for v in node.outputs:
                    if v not in boundary and v.shape is not None and not _is_subgraph_output(v):
                        v.shape = None
                        modified = True
        return ir.passes.PassResult(model, modified)


def _is_subgraph_output(v: ir.Value) -> bool:
    # A subgraph's declared outputs are part of its signature (Loop scan outputs need them).
    return v.is_graph_output()
