"""An Identity between a multi-output node and the model outputs it gives, for
onnx2torch (quirk "split-tuple-output").

onnx2torch 1.5.15 turns a multi-output node (Split, TopK, ...) into a module returning a
tuple, and when a later output of it is a model output, the converted model returns the
whole tuple in the outputs' place: ``Split -> (b, c)`` came back as ``(a, b)``. An
Identity after each such output, which takes the output's name, gives torch one tensor
per output.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.ir.builder import Builder, NameAuthority, default_opset

__all__ = ["SeparateTupleOutputsPass"]


class SeparateTupleOutputsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameAuthority(model)
        modified = False
        outputs = graph.outputs
        for k, v in enumerate(list(outputs)):
            p = v.producer()
            if p is None or len(p.outputs) < 2 or p.graph is not graph:
                continue
            name = v.name
            v.name = names.fresh(f"{name}_part")
            b = Builder(graph, None, default_opset(model), names, main_graph=True, after=p)
            alone = b.identity(v, f"{name}_alone")
            alone.name, alone.type, alone.shape = name, v.type, v.shape
            outputs[k] = alone
            modified = True
        return ir.passes.PassResult(model, modified)
