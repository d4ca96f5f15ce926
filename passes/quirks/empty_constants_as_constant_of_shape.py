"""Every empty constant written as a ConstantOfShape of its dims, for OpenVINO (quirk
"empty-constant").

OpenVINO 2026.4's ONNX frontend reads a zero-size initializer or Constant as a tensor of
shape ``[]``: a Slice of it fails shape inference ("input shapes {[], ...}"), a Gather or
Concat of it fails to convert, its Shape comes out empty, and a Loop that takes or reads
one fails ("Accessing out-of-range dimension"). The lowerings start every list as such a
constant (``[0]`` values, ``[0, rank]`` shape rows). The same empty tensor made by
``ConstantOfShape`` of its dims (a non-empty constant) is read right everywhere, Loop
states included. (The empty shape of a Reshape to a scalar is read right as it is.) Run after constant folding (which would fold it back). Strings stay:
OpenVINO has none. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node, walk_scopes
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import Builder, NameAuthority

__all__ = ["EmptyConstantsAsConstantOfShapePass"]


def _empty(t: ir.TensorProtocol | None) -> bool:
    return t is not None and t.dtype != ir.DataType.STRING and 0 in tuple(t.shape)


class EmptyConstantsAsConstantOfShapePass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        names = NameAuthority(model)
        modified = False
        for scope in walk_scopes(model):
            graph = scope.graph
            if not isinstance(graph, ir.Graph):
                continue
            overridable = set(graph.inputs)
            for name, v in list(graph.initializers.items()):
                if v in overridable or not _empty(v.const_value) or v.is_graph_output() or _shapes_only(v):
                    continue
                b = Builder(graph, graph[0] if len(graph) else None, scope.opset, names, main_graph=scope.main)
                made = _constant_of_shape(b, v.const_value, f"{name}_of_shape")
                v.replace_all_uses_with(made)
                graph.initializers.pop(name)
                modified = True
        result = rewrite_each_node(model, _rewrite_constant)
        return ir.passes.PassResult(model, modified or result.modified)


def _shapes_only(v: ir.Value) -> bool:
    """Read by nothing, or only as the shape of Reshapes to a scalar (which OpenVINO
    reads right: the shape [] it sees says the same)."""
    return all(u.node.op_type == "Reshape" and u.idx == 1 for u in v.uses())


def _rewrite_constant(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Constant" or not is_default_domain(node) or "value" not in node.attributes:
        return None
    value = node.attributes["value"]
    if value.type != ir.AttributeType.TENSOR or not _empty(value.value):
        return None
    out = node.outputs[0]
    if _shapes_only(out) and not out.is_graph_output():
        return None
    if out.is_graph_output() and scope.main:
        return None  # (a model returning an empty constant: nothing reads it)
    made = _constant_of_shape(scope.builder(node, names), value.value, f"{out.name or 'empty'}_of_shape")
    # A branch or body returning it: the If or Loop reads it (an If whose branches both
    # give an empty list, graph program 20371: "Slice `data` input can't be a scalar").
    outputs = scope.graph.outputs
    for k, o in enumerate(outputs):
        if o is out:
            outputs[k] = made
    out.replace_all_uses_with(made)
    scope.graph.remove(node, safe=True)
    return "ConstantOfShape", "an empty constant made by ConstantOfShape of its dims (OpenVINO)"


def _constant_of_shape(b: Builder, t: ir.TensorProtocol, name: str) -> ir.Value:
    dims = b.constant(np.array(tuple(t.shape), dtype=np.int64), f"{name}_dims")
    zero = ir.tensor(np.zeros((1,), dtype=t.dtype.numpy()), dtype=t.dtype)
    return b.op("ConstantOfShape", [dims], name, dtype=t.dtype, shape=list(t.shape), value=zero)
