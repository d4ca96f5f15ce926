"""Forget the shapes of intermediate values (their types stay), for targets whose
analysis trips over the symbolic dims seqlower's inference writes into value_info: tract
0.23.9 fails on a ReduceSum or Split whose declared output dims are named ``w`` once its
input fact says 3. The model's inputs and outputs keep their declared shapes; the inputs
and outputs of subgraphs keep their ranks and numbers but lose their dim names, which
tract does not bind to the model's (a Scan body's ``[w]`` state fails against its
concrete ``[3]``)."""

from __future__ import annotations

import onnx_ir as ir

from seqlower.ir.helpers import subgraphs

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
                for sub in subgraphs(node):
                    for v in (*sub.inputs, *sub.outputs):
                        if v.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value is not None for d in v.shape.dims):
                            v.shape = ir.Shape([d if isinstance(d, int) else None for d in v.shape.dims])
                            modified = True
        return ir.passes.PassResult(model, modified)

