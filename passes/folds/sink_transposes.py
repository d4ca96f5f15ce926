"""A Transpose carried down through the ops that commute with it, where it then meets
another Transpose: the two become one, and nothing when they cancel (Stage 11,
"layout-aware lowering").

A batched SequenceMap runs its body on the elements stacked on a new leading axis. When
the list was cut along another axis, the stack is that tensor cut in two and the count
moved to the front (Reshape + Transpose), and the ConcatFromSequence after the body moves
it back (Transpose + Reshape): split -> map(MatMul, Relu) -> concat along axis 1 of
x[16, 200] is Reshape, Transpose, MatMul, Relu, Transpose, Reshape. The body acts the
same with the count anywhere but among the axes it works on, so the first Transpose goes
down to the second and both go: Reshape, MatMul, Relu, Reshape, as a person writes it.

A Transpose of perm p, ``y = x.transpose(p)``, moves below an op f when
``f(y) = f'(x).transpose(p)`` for an f' written here: elementwise ops (an operand of
the other side reshaped to the full rank and transposed back by p's inverse: constants
only, folded here, or a scalar), MatMul by a matrix when p leaves the last axis in place,
Softmax-like ops and reductions that keep their dims with their axes mapped through p.
A Transpose moves only along a chain of single uses in its graph that ends at a
Transpose, so a model where nothing cancels is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes.lowering._batched_map import ELEMENTWISE, UNARY
from seqlower.passes._rewrite import Scope, visit_each_node

__all__ = ["SinkTransposesPass"]

_SOFTMAX = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
_REDUCE_ATTR_AXES_UNTIL = {"ReduceSum": 13}  # (others: axes an attribute until 18)


class SinkTransposesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, visit_each_node(model, _visit))


def _visit(node: ir.Node, scope: Scope, names: NameAuthority) -> bool:
    return _is_transpose(node) and _sink(node, scope, names)


def _is_transpose(node: ir.Node) -> bool:
    return node.op_type == "Transpose" and is_default_domain(node) and bool(node.inputs) and node.inputs[0] is not None


def _perm(node: ir.Node) -> list[int] | None:
    attr = node.attributes.get("perm")
    if attr is not None:
        return list(attr.as_ints())
    x = node.inputs[0]
    return None if x is None or x.shape is None else list(range(x.shape.rank()))[::-1]


def _sink(t: ir.Node, scope: Scope, names: NameAuthority) -> bool:
    p = _perm(t)
    if p is None or sorted(p) != list(range(len(p))):
        return False
    chain, end = _chain(t, p, scope)
    if end is None:
        return False
    inv = list(np.argsort(p))
    b = scope.builder(t, names)
    below = t.inputs[0]
    assert below is not None
    for node, i in chain:
        _move_below(node, i, below, p, inv, b)
        out = node.outputs[0]
        if out.shape is not None:
            out.shape = ir.Shape([out.shape.dims[k] for k in inv])
        below = out
    q = _perm(end)
    assert q is not None
    end.replace_input_with(0, below)
    composed = [p[k] for k in q]
    end.attributes["perm"] = ir.AttrInt64s("perm", composed)
    if composed == list(range(len(composed))):
        _bypass(end, below, scope)
    if not t.outputs[0].uses() and not t.outputs[0].is_graph_output():
        scope.graph.remove(t, safe=True)
    return True


def _bypass(end: ir.Node, below: ir.Value, scope: Scope) -> None:
    """The Transposes cancelled: ``end``'s readers read ``below``; a graph output keeps
    its name (``below`` takes it where nothing else names it, else an Identity stays)."""
    out = end.outputs[0]
    if not out.is_graph_output():
        out.replace_all_uses_with(below)
        scope.graph.remove(end, safe=True)
        return
    if below.is_graph_output() or below.is_graph_input() or below.is_initializer() or below.producer() is None:
        end.op_type = "Identity"
        end.attributes.pop("perm")
        return
    name = out.name
    end.replace_input_with(0, None)
    out.replace_all_uses_with(below, replace_graph_outputs=True)
    scope.graph.remove(end, safe=True)
    out.name, below.name = None, name


def _chain(t: ir.Node, p: list[int], scope: Scope) -> tuple[list[tuple[ir.Node, int]], ir.Node | None]:
    """The ops the Transpose moves below (each with the input it reads the moved value
    at) and the Transpose that ends them, or ``(…, None)`` when none does."""
    chain: list[tuple[ir.Node, int]] = []
    v = t.outputs[0]
    while True:
        uses = list(v.uses())
        if len(uses) != 1 or v.is_graph_output():
            return chain, None
        node, i = uses[0].node, uses[0].idx
        if node.graph is not scope.graph or not is_default_domain(node):
            return chain, None
        if _is_transpose(node) and i == 0:
            q = _perm(node)
            return chain, (node if q is not None and len(q) == len(p) else None)
        if not _commutes(node, i, p, scope.opset):
            return chain, None
        chain.append((node, i))
        v = node.outputs[0]


def _rank(v: ir.Value | None) -> int | None:
    if v is None:
        return None
    c = const_array(v)
    if c is not None:
        return c.ndim
    return v.shape.rank() if v.shape is not None else None


def _commutes(node: ir.Node, i: int, p: list[int], opset: int) -> bool:
    r, op = len(p), node.op_type
    if len(node.outputs) != 1 or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                                     for a in node.attributes.values()):
        return False
    if op in UNARY:
        # (Clip's bounds and CastLike's target are read whole: only the data moves.)
        return i == 0
    if op in ELEMENTWISE:
        if _rank(node.outputs[0]) != r:
            return False
        return all(k == i or v is None or _rank(v) == 0 or (const_array(v) is not None and const_array(v).ndim <= r)
                   for k, v in enumerate(node.inputs))
    if op == "MatMul":
        # y @ W acts on y's last axis only (W a matrix): any other order of the rest.
        return i == 0 and r >= 2 and p[-1] == r - 1 and _rank(node.inputs[1]) == 2
    if op in _SOFTMAX:
        return i == 0 and opset >= 13  # (before 13, the axis cut the input into a matrix)
    if op.startswith("Reduce"):
        return i == 0 and _reduce_axes(node, opset) is not None and _keepdims(node)
    return False


def _keepdims(node: ir.Node) -> bool:
    attr = node.attributes.get("keepdims")
    return attr is None or attr.as_int() == 1


def _reduce_axes(node: ir.Node, opset: int) -> list[int] | None:
    """A reduction's constant axes ([] for all), or None when they are computed."""
    if opset >= _REDUCE_ATTR_AXES_UNTIL.get(node.op_type, 18):
        a = node.inputs[1] if len(node.inputs) > 1 else None
        if a is None:
            return []
        c = const_array(a)
        return None if c is None else [int(x) for x in c.reshape(-1)]
    attr = node.attributes.get("axes")
    return [] if attr is None else list(attr.as_ints())


def _move_below(node: ir.Node, i: int, x: ir.Value, p: list[int], inv: list[int], b: Builder) -> None:
    """Make ``node`` read ``x`` (its input ``i`` was ``x.transpose(p)``) and compute what
    it computed, transposed back by p's inverse."""
    r, op = len(p), node.op_type
    b = Builder(b.graph, node, b.opset, b.names, main_graph=b.main_graph)
    node.replace_input_with(i, x)
    if op in ELEMENTWISE:
        for k, v in enumerate(node.inputs):
            c = None if k == i or v is None or _rank(v) == 0 else const_array(v)
            if c is not None:
                full = c.reshape((1,) * (r - c.ndim) + c.shape)
                node.replace_input_with(k, b.constant(np.ascontiguousarray(full.transpose(inv)), f"{v.name or 'c'}_moved"))
    elif op in _SOFTMAX:
        attr = node.attributes.get("axis")
        axis = attr.as_int() if attr is not None else -1
        node.attributes["axis"] = ir.AttrInt64("axis", p[axis % r])
    elif op.startswith("Reduce"):
        axes = _reduce_axes(node, b.opset)
        assert axes is not None
        if not axes:
            return  # (all of them)
        moved = sorted(p[a % r] for a in axes)
        if b.opset >= _REDUCE_ATTR_AXES_UNTIL.get(op, 18):
            node.replace_input_with(1, b.ints(moved, f"{node.name or op}_moved_axes"))
        else:
            node.attributes["axes"] = ir.AttrInt64s("axes", moved)
