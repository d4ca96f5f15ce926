"""``reverse=0`` written out on every CumSum that leaves it to the default, for onnx2torch
(quirk "cumsum-reverse-default").

onnx2torch 1.5.15 reads a missing ``reverse`` attribute as 1 (``node_attributes.get(
'reverse', 1)``), so a plain CumSum sums from the end: ``[3, 3, 1]`` gave ``[7, 4, 1]``
where ONNX says ``[3, 6, 7]``. Silent wrong numbers in every split with run-time sizes
(the lowerings' element bounds are CumSums). Spelled out, the attribute means the same
to every other runtime. Functions and subgraphs included.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain

__all__ = ["SpellOutCumSumDirectionPass"]


class SpellOutCumSumDirectionPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.functions.values()):
            for node in ir.traversal.RecursiveGraphIterator(graph):
                if node.op_type == "CumSum" and is_default_domain(node) and "reverse" not in node.attributes:
                    node.attributes["reverse"] = ir.AttrInt64("reverse", 0)
                    modified = True
        return ir.passes.PassResult(model, modified)
