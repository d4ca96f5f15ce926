"""Slices and Split outputs that give the same rows of one tensor become one value, for
tract (quirk "duplicate-computations").

tract 0.23.9 fails to evaluate a model that computes the same rows of a tensor twice and
goes on with both alike: ``x[1:2] * k`` beside ``x.split(1)[1] * k`` ends in "eval()
called on a Dummy op" (torch fuzz seed 18057, a dynamo export; two Slices with the same
constant bounds held in two initializers fail the same way). Common subexpression
elimination merges only nodes with the same inputs; this pass compares what the rows
are: each axis's bounds, constants, counted from the front once the dim is known
(clamped as Slice clamps), and a full axis left out. Without a known dim, bounds from
the front are compared as written: equal bounds give equal rows whatever the dim, and a
Split's bounds never pass its dim. The first in node order stays; the others' uses read
it; one giving all of the tensor reads the tensor. Only steps of 1; within one graph
(a subgraph's are merged among themselves).
Functions and subgraphs included.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.quirks.empty_slices_as_constant_of_shape import slice_bounds
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["MergeEqualSlicesPass"]

_Rows = frozenset[tuple[int, int, int]]


class MergeEqualSlicesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        seen: dict[int, dict[tuple[ir.Value, _Rows], ir.Value]] = {}

        def merge(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
            if not is_default_domain(node) or node.op_type not in ("Slice", "Split") or not node.inputs \
                    or node.inputs[0] is None:
                return None
            x = node.inputs[0]
            rows = _slice_rows(node, scope.opset) if node.op_type == "Slice" else _split_rows(node, scope.opset)
            first = seen.setdefault(id(scope.graph), {})
            merged = 0
            for out, r in zip(node.outputs, rows):
                if r is None or out is None:
                    continue
                # All of x (a Split into one, a Slice of every row): x itself, which tract
                # takes it for before it merges what reads both (torch fuzz 21836).
                kept = first.setdefault((x, r), out) if r else x
                if kept is out or not out.uses() and not out.is_graph_output():
                    continue
                replace_output(out, kept, scope, names, node, owned=False)
                merged += 1
            if not merged:
                return None
            if node.op_type == "Slice":
                scope.graph.remove(node, safe=True)
            return "Identity", "the same rows as an earlier Slice or Split output, or all of its input: that value read instead (tract)"

        return rewrite_each_node(model, merge)


def _dim(x: ir.Value, axis: int) -> int | None:
    if x.shape is None or axis >= x.shape.rank():
        return None
    d = x.shape[axis]
    return d if isinstance(d, int) else None


def _rows(x: ir.Value, axis: int, start: int, end: int) -> tuple[int, int, int] | None:
    """Axis ``axis``'s rows [start, end) as compared, None when not comparable, () when
    the whole axis."""
    d = _dim(x, axis)
    if d is None:
        return (axis, start, end) if 0 <= start and 0 <= end else None
    s, e = (min(max(v + d if v < 0 else v, 0), d) for v in (start, end))
    return () if (s, e) == (0, d) else (axis, s, e)


def _slice_rows(node: ir.Node, opset: int) -> list[_Rows | None]:
    bounds = slice_bounds(node, opset)
    if bounds is None or any(step != 1 for *_, step in bounds) or len({a for a, *_ in bounds}) != len(bounds):
        return [None]
    rows = [_rows(node.inputs[0], a, s, e) for a, s, e, _ in bounds]
    return [None if None in rows else frozenset(r for r in rows if r)]


def _split_rows(node: ir.Node, opset: int) -> list[_Rows | None]:
    x = node.inputs[0]
    rank = x.shape.rank() if x.shape is not None else None
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    if axis < 0:
        if rank is None:
            return [None] * len(node.outputs)
        axis += rank
    if "split" in node.attributes:
        sizes = list(node.attributes["split"].as_ints())
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        known = const_array(node.inputs[1])
        if known is None:
            return [None] * len(node.outputs)
        sizes = [int(s) for s in known.reshape(-1)]
    elif len(node.outputs) == 1:
        return [frozenset()]  # (all of x, whatever its dims)
    else:
        d = _dim(x, axis)
        if d is None:
            return [None] * len(node.outputs)
        n = len(node.outputs)
        chunk = -(-d // n)  # (Split-18's last chunk is what is left; before, d % n == 0)
        sizes = [max(0, min(chunk, d - k * chunk)) for k in range(n)]
    if len(sizes) != len(node.outputs):
        return [None] * len(node.outputs)
    out: list[_Rows | None] = []
    start = 0
    for size in sizes:
        r = _rows(x, axis, start, start + size)
        out.append(None if r is None else frozenset([r] if r else []))
        start += size
    return out
