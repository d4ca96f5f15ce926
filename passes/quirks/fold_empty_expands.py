"""An Expand of a constant to a constant shape with a zero dim becomes the empty constant
itself, for TVM Relax (quirk "expand-zero-dim").

TVM's ONNX frontend refuses a zero target dim ("Invalid target dimension 0 at position
0. Target dimensions must be positive"); the Flat lowering starts a list's buffer as
``Expand(0, [0])``. ONNX's Expand broadcasts both ways, so the result is the constant
broadcast to both shapes: empty, with nothing left to compute. Functions and subgraphs
included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["FoldEmptyExpandsPass"]


class FoldEmptyExpandsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _fold)


def _fold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Expand" or not is_default_domain(node) or len(node.inputs) != 2 or None in node.inputs:
        return None
    x, shape = const_array(node.inputs[0]), const_array(node.inputs[1])
    if x is None or shape is None or x.dtype == object:
        return None
    try:
        dims = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape.reshape(-1)))
    except ValueError:
        return None  # not broadcastable: the runtime's error, not ours to fold
    if 0 not in dims:
        return None
    empty = scope.builder(node, names).constant(np.zeros(dims, x.dtype), f"{node.name or 'expand'}_empty")
    replace_output(node.outputs[0], empty, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "constant", "an Expand to a zero dim folded to its empty constant (TVM)"
