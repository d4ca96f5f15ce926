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
        for graph in (model.graph, *model.functions.values()):
            for node in ir.traversal.RecursiveGraphIterator(graph):
                for v in node.outputs:
                    # Graph outputs, subgraphs' included, are signatures (Loop scan
                    # outputs need theirs): they keep their shapes.
                    if v.shape is not None and not v.is_graph_output():
                        v.shape = None
                        modified = True
        return ir.passes.PassResult(model, modified)
