"""Constant nodes that give their value as ``value_int(s)``, ``value_float(s)`` or
``value_string(s)`` rewritten to give it as a ``value`` tensor, for onnx2torch (quirk
"constant-list-value": it hands such a value to its converters as a Python list, and its
Unsqueeze converter then fails with "'list' object has no attribute 'tolist'"; dynamo
writes the axes of every Unsqueeze so). The same value, dtype and shape: a scalar for
the singular forms, a 1-D tensor for the plural ones. Subgraphs and functions included.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain

__all__ = ["ConstantValuesAsTensorsPass"]

_FORMS = {
    "value_int": lambda a: np.array(a.as_int(), np.int64),
    "value_ints": lambda a: np.array(list(a.as_ints()), np.int64),
    "value_float": lambda a: np.array(a.as_float(), np.float32),
    "value_floats": lambda a: np.array(list(a.as_floats()), np.float32),
    "value_string": lambda a: np.array(a.as_string(), dtype=object),
    "value_strings": lambda a: np.array(list(a.as_strings()), dtype=object),
}


class ConstantValuesAsTensorsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *model.functions.values()):
            for node in ir.traversal.RecursiveGraphIterator(graph):
                if node.op_type != "Constant" or not is_default_domain(node):
                    continue
                form = next((k for k in _FORMS if k in node.attributes), None)
                if form is None:
                    continue
                array = _FORMS[form](node.attributes[form])
                del node.attributes[form]
                # Through a TensorProto: onnx_ir's tensor from a numpy array does not write strings.
                proto = onnx.numpy_helper.from_array(array, node.outputs[0].name or "value")
                node.attributes["value"] = ir.AttrTensor("value", ir.serde.deserialize_tensor(proto))
                modified = True
        return ir.passes.PassResult(model, modified)
