"""Lower sequences known only at run time into the Flat representation.

Each sequence value of a web the analysis decided to make Flat becomes two tensors
(three when element ranks differ), whatever its length:

    values  1-D, the elements flattened in C order and concatenated
    shapes  int64 [n, W], one row per element (padded with 1 past an element's rank)
    ranks   int64 [n], only when the web mixes element ranks

When a rank that enters a web is only known at run time (a model input of unknown rank,
a body whose output rank depends on the element), W is too: rows are as wide as the
largest rank they hold, ``Pad`` widens them (with 1) where lists join, ``ranks`` is always
there, and splits, concatenations and maps normalise their axis in the graph.

Derived once per value, where the value is made: ``bounds`` = [0, cumsum(sizes)]
(element i is ``values[bounds[i]:bounds[i+1]]``) and the count ``n``. The rules (the
table ``RULES``):

1. ``SequenceEmpty`` / ``SequenceConstruct`` -> constants / ``Reshape`` + ``Concat``.
2. ``SequenceInsert`` / ``SequenceErase`` at any position (negatives normalised at run
   time) -> ``Slice`` + ``Concat`` of values, shapes (and ranks).
3. ``SequenceAt`` -> ``Gather`` of the bounds + ``Slice`` + ``Reshape``;
   ``SequenceLength`` -> ``Shape`` of shapes.
4. ``SplitToSequence`` (dynamic dims, run-time scalar or 1-D split) -> the chunk sizes
   computed in the graph; along axis 0 the values are the input itself, otherwise one
   ``Gather`` through a permutation of the input.
5. ``ConcatFromSequence`` -> along axis 0 a ``Reshape`` of the values; other axes one
   ``Gather`` through a permutation; new_axis -> ``Reshape`` (+ ``Transpose``).
6. ``SequenceMap`` -> ``Loop`` over the length: scan outputs where the body's output
   shape is static, else carried ``Concat``.
7. ``Loop``-carried and ``If``-returned sequences -> their tensors carried / returned.
8. Sequence-typed model inputs and outputs -> the ABI tensors, recorded in the
   ``seqlower.abi`` metadata (see docs/abi.md).

Reshape uses allowzero from opset 14; before, zero-size elements are made by padding to
a non-zero shape and slicing back, so no element shape is ever misread.
"""

from __future__ import annotations



import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope
from seqlower.passes.lowering.convert import Converter, WebLoweringPass, rule, rules
from seqlower.analysis.analyzer import Analysis, dynamic_split_squeezes, node_label
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.errors import ModelError
from seqlower.ir.helpers import open_when_empty
from seqlower.analysis.splits import unchanged_split_source


# (registers the Flat rules of If, Loop and SequenceMap)
from seqlower.passes.lowering import flat_maps  # noqa: F401
from seqlower.passes.lowering.flat import FlatLowerer, attr_int, flat_tensor

__all__ = ["LowerFlatSequencesPass"]


class LowerFlatSequencesPass(WebLoweringPass):
    """Rewrite every Flat web (see ``seqlower.analysis.analyzer``) into tensor ops; with
    ``runtime_ranks`` False, a web where a tensor of unknown rank enters waits (kept)."""

    web_repr = "flat"
    instead = "Flat"

    @staticmethod
    def lowerer(model: ir.Model, analysis: Analysis, policy: str) -> Converter:
        return FlatLowerer(model, analysis, policy)


@rule("SequenceEmpty", "flat")
def _sequence_empty(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    width, ranked = lw.layout(out)
    dtype = ir.DataType(attr_int(node, "dtype", ir.DataType.FLOAT.value))
    values = o.empty(dtype)
    shapes = o.b.constant(np.zeros((0, width or 0), dtype=np.int64), f"{out.name}_rows")
    ranks = o.b.constant(np.zeros(0, dtype=np.int64), f"{out.name}_rank_list") if ranked else None
    lw.make(out, values, shapes, ranks, o, dtype)
    return "constants"



@rule("SequenceConstruct", "flat")
def _sequence_construct(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    width, ranked = lw.layout(out)
    base = out.name or "seq"
    values, rows, ranks = [], [], []
    for i, t in enumerate(node.inputs):
        assert t is not None
        values.append(flat_tensor(t, o, f"{base}_{i}"))
        row, r = lw.row(t, width, o, f"{base}_{i}")
        rows.append(row)
        ranks.append(r)
    v = o.concat(values, 0, f"{base}_flat")
    s = o.concat(lw.fit(rows, width, o, f"{base}_rows"), 0, f"{base}_rows")
    rk = None
    if ranked:
        static = all(isinstance(r, int) for r in ranks)
        rk = o.b.ints(ranks, f"{base}_rank_list") if static else o.concat([o.ints([r]) if isinstance(r, int) else r for r in ranks], 0, f"{base}_rank_list")
    lw.make(out, v, s, rk, o, node.inputs[0].dtype)
    return "Reshape + Concat"


@rule("Identity", "flat")
def _identity(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    lw.seqs[node.outputs[0]] = lw.seq(node.inputs[0])
    return "same tensors"


@rule("SequenceInsert", "flat")
def _sequence_insert(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    t = node.inputs[1]
    out = node.outputs[0]
    base = out.name or "seq"
    pos = node.inputs[2] if len(node.inputs) > 2 else None
    flat_t = flat_tensor(t, o, base)
    row, r = lw.row(t, fs.width, o, base)
    rank_t = (o.ints([r]) if isinstance(r, int) else r) if fs.ranks is not None else None
    rows, row = lw.fit([fs.shapes, row], fs.width, o, f"{base}_rows")
    if pos is None:
        values = o.concat([fs.values, flat_t], 0, f"{base}_flat")
        shapes = o.concat([rows, row], 0, f"{base}_rows")
        ranks = o.concat([fs.ranks, rank_t], 0, f"{base}_rank_list") if fs.ranks is not None else None
        lw.make(out, values, shapes, ranks, o, fs.dtype)
        return "Concat (append)"
    p = lw.normalise(fs, pos, o, f"{base}_pos", "n")
    p1 = o.reshape(p, o.ints([1]), f"{base}_pos1")
    off = o.op("Gather", [lw.derive(fs, "bounds"), p1], f"{base}_offset")
    values = o.splice(fs.values, off, off, flat_t, 0, f"{base}_flat")
    shapes = o.splice(rows, p1, p1, row, 0, f"{base}_rows")
    ranks = o.splice(fs.ranks, p1, p1, rank_t, 0, f"{base}_rank_list") if fs.ranks is not None else None
    lw.make(out, values, shapes, ranks, o, fs.dtype)
    return "Slice + Concat"


@rule("SequenceErase", "flat")
def _sequence_erase(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "seq"
    pos = node.inputs[1] if len(node.inputs) > 1 else None
    p = lw.normalise(fs, pos, o, f"{base}_pos", "last")
    p1, next1, start, end = lw.span(fs, p, o, base)
    values = o.splice(fs.values, start, end, None, 0, f"{base}_flat")
    shapes = o.splice(fs.shapes, p1, next1, None, 0, f"{base}_rows")
    ranks = o.splice(fs.ranks, p1, next1, None, 0, f"{base}_rank_list") if fs.ranks is not None else None
    lw.make(out, values, shapes, ranks, o, fs.dtype)
    return "Slice + Concat"


@rule("SequenceAt", "flat")
def _sequence_at(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "elem"
    p = lw.normalise(fs, node.inputs[1], o, f"{base}_pos", "n")
    elem = lw.element(fs, p, o, base, out.shape)
    lw.output(out, elem, node, scope)
    return "Gather + Slice + Reshape"


@rule("SequenceLength", "flat")
def _sequence_length(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    n = lw.derive(fs, "count")
    lw.output(node.outputs[0], o.identity(n, f"{node.outputs[0].name or 'length'}_n"), node, scope)
    return "Shape"


@rule("SplitToSequence", "flat")
def _split_to_sequence(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    base = out.name or "split"
    width, ranked = lw.layout(out)
    squeeze = dynamic_split_squeezes(node, lw.policy)  # None: decided in the graph
    if x.shape is None:
        return _split_of_unknown_rank(lw, node, o, squeeze)
    r = x.shape.rank()
    a = attr_int(node, "axis", 0) % r
    xs = o.shape(x, f"{base}_xdims")
    if open_when_empty(x):
        # A scan output of no iteration may come with another rank (the reference and
        # OpenVINO: [0] where the body's output declares none): r dims, zeros past its own.
        xs = o.slice(o.concat([xs, o.ints([0] * r)], 0, f"{base}_xdims_padded"), o.ints([0]), o.ints([r]), [0],
                     f"{base}_xdims_r")
    d1 = o.slice(xs, o.ints([a]), o.ints([a + 1]), [0], f"{base}_dim1")
    d = o.reshape(d1, o.ints([]), f"{base}_dim")
    split = node.inputs[1] if len(node.inputs) > 1 else None
    sizes, how = o.split_sizes(d, d1, split, base)
    n1 = o.shape(sizes, f"{base}_n1")
    pre = o.slice(xs, o.ints([0]), o.ints([a]), [0], f"{base}_pre")
    post = o.slice(xs, o.ints([a + 1]), o.ints([r]), [0], f"{base}_post")

    pre_rows = o.rows(pre, n1, f"{base}_pre_rows") if a else None
    post_rows = o.rows(post, n1, f"{base}_post_rows") if r - a - 1 else None
    if squeeze is None:
        assert ranked, "the analysis lets either rank enter the web"
        squeezed = _runtime_squeeze(o, sizes, pre, post, base)
        wide = max(width or r, r)  # (both row forms as wide as the unsqueezed one, for Where)
        shapes = o.op("Where", [squeezed, _split_rows(o, pre_rows, None, post_rows, n1, r - 1, wide, f"{base}_sq"),
                                _split_rows(o, pre_rows, sizes, post_rows, n1, r, wide, f"{base}_kept")],
                      f"{base}_rows")
        er1 = o.op("Where", [squeezed, o.ints([r - 1]), o.ints([r])], f"{base}_rank")
        ranks = o.repeat(er1, n1, f"{base}_rank_list")
    else:
        er = r - 1 if squeeze else r
        shapes = _split_rows(o, pre_rows, None if squeeze else sizes, post_rows, n1, er, width, base)
        ranks = o.repeat(o.ints([er]), n1, f"{base}_rank_list") if ranked else None
    flat_x = flat_tensor(x, o, base)
    leading_ones = all(dd == 1 for dd in x.shape.dims[:a])
    if a == 0 or leading_ones:
        values = flat_x
    elif split is None:
        perm = [a, *(i for i in range(r) if i != a)]
        values = flat_tensor(o.op("Transpose", [x], f"{base}_axis_first", perm=perm), o, f"{base}_t")
        how += ", Transpose"
    else:
        values = _element_major(o, flat_x, pre, post, sizes, base)
        how += ", Gather through a permutation"
    lw.make(out, values, shapes, ranks, o, x.dtype)
    return how


def _split_of_unknown_rank(lw: FlatLowerer, node: ir.Node, o: Ops, squeeze: bool) -> str:
    """SplitToSequence of a tensor whose rank is only known at run time: the axis, the
    rows and the permutation into element-major order are all computed in the graph."""
    x, out = node.inputs[0], node.outputs[0]
    assert x is not None
    base = out.name or "split"
    axis = attr_int(node, "axis", 0)
    xs = o.shape(x, f"{base}_xdims")
    r1 = o.shape(xs, f"{base}_xrank")
    a1 = o.ints([axis]) if axis >= 0 else o.op("Add", [r1, o.ints([axis])], f"{base}_axis")
    after1 = o.op("Add", [a1, o.ints([1])], f"{base}_axis_next")
    d1 = o.slice(xs, a1, after1, [0], f"{base}_dim1")
    split = node.inputs[1] if len(node.inputs) > 1 else None
    sizes, how = o.split_sizes(o.reshape(d1, o.ints([]), f"{base}_dim"), d1, split, base)
    n1 = o.shape(sizes, f"{base}_n1")
    pre = o.slice(xs, o.ints([0]), a1, [0], f"{base}_pre")
    post = o.slice(xs, after1, r1, [0], f"{base}_post")

    pre_rows, post_rows = o.rows(pre, n1, f"{base}_pre_rows"), o.rows(post, n1, f"{base}_post_rows")
    kept = o.concat([pre_rows, o.unsqueeze(sizes, [1], f"{base}_size_col"), post_rows], 1, f"{base}_kept_rows")
    er_squeezed = o.op("Sub", [r1, o.ints([1])], f"{base}_elem_rank")
    if squeeze is None:
        # Squeezed rows keep the width: a 1 stands where the axis was, past the rank.
        ones = o.repeat(o.ints([1]), n1, f"{base}_ones")
        rows_sq = o.concat([pre_rows, post_rows, o.unsqueeze(ones, [1], f"{base}_one_col")], 1, f"{base}_sq_rows")
        squeezed = _runtime_squeeze(o, sizes, pre, post, base)
        shapes = o.op("Where", [squeezed, rows_sq, kept], f"{base}_rows")
        er = o.op("Where", [squeezed, er_squeezed, r1], f"{base}_rank")
    elif squeeze:
        shapes, er = o.concat([pre_rows, post_rows], 1, f"{base}_rows"), er_squeezed
    else:
        shapes, er = kept, r1
    ranks = o.repeat(er, n1, f"{base}_rank_list")
    flat_x = flat_tensor(x, o, base)
    if axis == 0:
        values = flat_x
    else:
        values = _element_major(o, flat_x, pre, post, sizes, base)
        how += ", Gather through a permutation"
    lw.make(out, values, shapes, ranks, o, x.dtype)
    return how + " (rank known at run time)"


def _split_rows(o: Ops, pre_rows: ir.Value | None, sizes: ir.Value | None, post_rows: ir.Value | None,
                n1: ir.Value, er: int, width: int | None, base: str) -> ir.Value:
    """The shapes rows of a split's chunks: the dims before the axis, the chunk's size
    there (None: squeezed away), the dims after it, padded with 1 to ``width``."""
    parts = [pre_rows] if pre_rows is not None else []
    if sizes is not None:
        parts.append(o.unsqueeze(sizes, [1], f"{base}_size_col"))
    if post_rows is not None:
        parts.append(post_rows)
    if width is not None and width > er:
        parts.append(o.rows(o.ints([1] * (width - er)), n1, f"{base}_pad_rows"))
    if parts:
        return o.concat(parts, 1, f"{base}_rows") if len(parts) > 1 else parts[0]
    return o.rows(o.b.zeros(INT64, (0,), "row0"), n1, f"{base}_rows")  # scalars out of a 1-D input


def _runtime_squeeze(o: Ops, sizes: ir.Value, pre: ir.Value, post: ir.Value, base: str) -> ir.Value:
    """Whether a run-time scalar split with keepdims=0 squeezes its chunks, as the
    executor's keepdims policy decides it (seqlower/analysis/splits.py): every chunk of
    size 1 along the axis, or no chunk with an element (a bool [1])."""
    not_one = o.op("Cast", [o.op("Equal", [sizes, o.ints([1])], f"{base}_is_one", dtype=ir.DataType.BOOL)],
                   f"{base}_one_i", dtype=INT64, to=INT64)
    others = o.b.reduce("ReduceSum", o.op("Sub", [o.ints([1]), not_one], f"{base}_not_one"), [0], f"{base}_others",
                        keepdims=True)
    rest = o.b.reduce("ReduceProd", o.concat([pre, post], 0, f"{base}_rest_dims"), None, f"{base}_rest", keepdims=True)
    return o.op("Or", [o.op("Equal", [others, o.ints([0])], f"{base}_all_ones", dtype=ir.DataType.BOOL),
                       o.op("Equal", [rest, o.ints([0])], f"{base}_no_rest", dtype=ir.DataType.BOOL)],
                f"{base}_squeezed", dtype=ir.DataType.BOOL)


def _element_major(o: Ops, flat_x: ir.Value, pre: ir.Value, post: ir.Value, sizes: ir.Value, base: str) -> ir.Value:
    """The values of a tensor of dims ``pre + [sum(sizes)] + post`` (``flat_x``, in C
    order) cut along that middle axis, element after element."""
    p = o.b.reduce("ReduceProd", pre, None, f"{base}_p", keepdims=True)
    q = o.b.reduce("ReduceProd", post, None, f"{base}_q", keepdims=True)
    return o.op("Gather", [flat_x, _inverse_index(o, p, q, sizes, base)], f"{base}_flat")


def _inverse_index(o: Ops, p: ir.Value, q: ir.Value, sizes: ir.Value, base: str) -> ir.Value:
    """Where each entry of the element-major order is in a [P, sum(sizes), Q] tensor
    cut along its middle axis: the inverse of :meth:`Ops.concat_index`."""
    elem_sizes = o.op("Mul", [sizes, o.op("Mul", [p, q], f"{base}_pq")], f"{base}_elem_sizes", shape=[None])
    offsets = o.op("CumSum", [elem_sizes, o.scalar(0)], f"{base}_offsets", exclusive=1)
    index = o.concat_index(p, q, sizes, offsets, f"{base}_perm")
    total = o.shape(index, f"{base}_total")
    zeros = o.repeat(o.ints([0]), total, f"{base}_zeros")
    iota = o.op("Range", [o.scalar(0), o.reshape(total, o.ints([]), f"{base}_total_s"), o.scalar(1)], f"{base}_iota", dtype=INT64)
    return o.op("ScatterElements", [zeros, index, iota], f"{base}_inverse", axis=0)


@rule("ConcatFromSequence", "flat")
def _concat_from_sequence(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "concat"
    r = fs.width
    axis = attr_int(node, "axis", 0)
    new_axis = attr_int(node, "new_axis", 0)
    if r is None:
        return _concat_of_unknown_rank(lw, node, o, scope)
    lo, hi = (-r - 1, r) if new_axis else (-r, r - 1)
    if not lo <= axis <= hi:
        raise ModelError(f"{node_label(node)}: axis {axis} is out of range [{lo}, {hi}]")
    source = unchanged_split_source(node, lw.policy)
    if source is not None:
        lw.output(out, source, node, scope)
        return "the split's input itself"
    first = o.op("Gather", [fs.shapes, o.scalar(0)], f"{base}_first", shape=[r])
    if new_axis:
        a = axis % (r + 1)
        dims = o.concat([lw.derive(fs, "count1"), first], 0, f"{base}_dims")
        stacked = o.reshape_exact(fs.values, dims, r + 1, f"{base}_stacked", fs.dtype)
        if a == 0:
            lw.output(out, stacked, node, scope)
            return "Reshape (stack)"
        perm = [*range(1, a + 1), 0, *range(a + 1, r + 1)]
        lw.output(out, o.op("Transpose", [stacked], f"{base}_t", perm=perm), node, scope)
        return "Reshape + Transpose (stack)"
    a = axis % r
    along = o.op("Gather", [fs.shapes, o.scalar(a)], f"{base}_along", axis=1)
    total = o.b.reduce("ReduceSum", along, [0], f"{base}_total", keepdims=True)
    pre = o.slice(first, o.ints([0]), o.ints([a]), [0], f"{base}_pre")
    post = o.slice(first, o.ints([a + 1]), o.ints([r]), [0], f"{base}_post")
    dims = o.concat([x for x in (pre if a else None, total, post if r - a - 1 else None) if x is not None], 0, f"{base}_dims")
    if a == 0:
        values = fs.values
        how = "Reshape"
    else:
        p = o.b.reduce("ReduceProd", pre, None, f"{base}_p", keepdims=True)
        q = o.b.reduce("ReduceProd", post, None, f"{base}_q", keepdims=True) if r - a - 1 else o.ints([1])
        bounds = lw.derive(fs, "bounds")
        offsets = o.slice(bounds, o.ints([0]), o.ints([-1]), [0], f"{base}_offsets")
        index = o.concat_index(p, q, along, offsets, f"{base}_perm")
        values = o.op("Gather", [fs.values, index], f"{base}_gathered")
        how = "Gather through a permutation + Reshape"
    lw.output(out, o.reshape_exact(values, dims, r, base, fs.dtype, out.shape), node, scope)
    return how


def _concat_of_unknown_rank(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    """ConcatFromSequence of elements whose (common) rank is only known at run time:
    the axis is normalised in the graph and the elements are gathered through the
    permutation of :meth:`Ops.concat_index`; new_axis stacks them as a concatenation of
    elements with a 1 inserted at the axis."""
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "concat"
    assert fs.ranks is not None
    axis = attr_int(node, "axis", 0)
    new_axis = attr_int(node, "new_axis", 0)
    source = unchanged_split_source(node, lw.policy)
    if source is not None:
        lw.output(out, source, node, scope)
        return "the split's input itself"
    r1 = o.op("Gather", [fs.ranks, o.ints([0])], f"{base}_rank")
    first = o.slice(o.op("Gather", [fs.shapes, o.scalar(0)], f"{base}_first_row"), o.ints([0]), r1, [0], f"{base}_first")
    out_r1 = o.op("Add", [r1, o.ints([1])], f"{base}_out_rank") if new_axis else r1
    a1 = o.ints([axis]) if axis >= 0 else o.op("Add", [out_r1, o.ints([axis])], f"{base}_axis")
    count1 = lw.derive(fs, "count1")
    if new_axis:
        along = o.repeat(o.ints([1]), count1, f"{base}_ones")
        pre = o.slice(first, o.ints([0]), a1, [0], f"{base}_pre")
        post = o.slice(first, a1, r1, [0], f"{base}_post")
        middle = count1
    else:
        a = o.reshape(a1, o.ints([]), f"{base}_axis_s")
        along = o.op("Gather", [fs.shapes, a], f"{base}_along", axis=1)
        pre = o.slice(first, o.ints([0]), a1, [0], f"{base}_pre")
        post = o.slice(first, o.op("Add", [a1, o.ints([1])], f"{base}_axis_next"), r1, [0], f"{base}_post")
        middle = o.b.reduce("ReduceSum", along, [0], f"{base}_total", keepdims=True)
    dims = o.concat([pre, middle, post], 0, f"{base}_dims")
    if axis == 0:
        values, how = fs.values, "Reshape"
    else:
        p = o.b.reduce("ReduceProd", pre, None, f"{base}_p", keepdims=True)
        q = o.b.reduce("ReduceProd", post, None, f"{base}_q", keepdims=True)
        offsets = o.slice(lw.derive(fs, "bounds"), o.ints([0]), o.ints([-1]), [0], f"{base}_offsets")
        values = o.op("Gather", [fs.values, o.concat_index(p, q, along, offsets, f"{base}_perm")], f"{base}_gathered")
        how = "Gather through a permutation + Reshape"
    lw.output(out, o.reshape_exact(values, dims, None, base, fs.dtype, out.shape), node, scope)
    return how + " (rank known at run time)"




RULES = rules("flat")
