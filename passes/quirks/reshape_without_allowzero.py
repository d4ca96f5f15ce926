"""Reshape with ``allowzero=1`` written without the attribute, for onnx2torch (quirk
"no-allowzero": its converter raises '"allowzero=1" is not implemented').

seqlower's own exact reshapes use allowzero from opset 14 (a 0 in a computed shape is a
zero-size dim, not a copy of the input's), and so may a model. With a constant shape that
holds no 0 the attribute changes nothing and is dropped; otherwise the input is
flattened, padded to the size of the shape with every 0 made 1, reshaped, and sliced
back to the real shape: what the lowerings emit before opset 14.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["ReshapeWithoutAllowzeroPass"]


class ReshapeWithoutAllowzeroPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _lower)


def _lower(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Reshape" or not is_default_domain(node) or len(node.inputs) < 2:
        return None
    if "allowzero" not in node.attributes or node.attributes["allowzero"].as_int() == 0:
        return None
    x, shape = node.inputs[0], node.inputs[1]
    if x is None or shape is None or x.dtype is None:
        return None
    constant = const_array(shape)
    if constant is not None and 0 not in constant.tolist():
        del node.attributes["allowzero"]
        return "Reshape", "allowzero dropped (no 0 in the shape)"
    rank = shape.shape[0] if shape.shape is not None and shape.shape.rank() == 1 and isinstance(shape.shape[0], int) else None
    o = Ops(scope.builder(node, names))
    out = node.outputs[0]
    name = out.name or "reshaped"
    flat = o.reshape(x, o.ints([-1]), f"{name}_flat")
    result = o.reshape_exact(flat, shape, rank, f"{name}_exact", x.dtype, out.shape, allowzero=False)
    replace_output(out, result, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "padded Reshape and Slice"
