"""Lower packed webs (see ``seqlower.analysis.analyzer``): each sequence value becomes one tensor.

- Stacked, where every element of the group has one shape (numbers and model-input
  dims): ``data [n, *elem]``, element ``i`` is ``Gather(data, i, axis=0)``. SequenceAt is
  one Gather, SequenceLength one Shape, an unbind or a stack a Transpose, a concatenation
  a Transpose and a Reshape; a Loop's append-once sequence is a scan output, SequenceMap
  a Loop with scan outputs. An empty sequence is a ``[0, *elem]`` tensor (model-input
  dims read from the inputs' shapes at run time).
- Ragged, where elements differ along one axis ``a`` only (``split`` with sizes): the
  elements concatenated along ``a`` in ``data`` and their sizes along it in
  ``lengths [n]``; element ``i`` is ``data[off[i]:off[i+1]]`` along ``a`` (``off`` the
  running sum of ``lengths``). The split is its input and the concatenation along ``a``
  is ``data``: no copy at all.

The fast paths: no bounds of flattened values, no shape rows. Webs that touch the model
boundary stay Flat (the ABI), and so does everything the analysis cannot prove packable.
"""

from __future__ import annotations


import onnx_ir as ir

from seqlower.passes._rewrite import Scope
from seqlower.passes.lowering.convert import Converter, WebLoweringPass, rule, rules
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import Analysis, dynamic_split_squeezes, is_default_domain
from seqlower.ir.helpers import loop_runs_all_trips, open_when_empty
from seqlower.analysis.splits import unchanged_split_source

# (registers the Packed rules of If, Loop and SequenceMap)
from seqlower.passes.lowering import packed_maps  # noqa: F401
from seqlower.passes.lowering.packed import PackedLowerer, empty_list, len_along, perm_from_front, perm_to_front, transpose

__all__ = ["LowerPackedSequencesPass"]


class LowerPackedSequencesPass(WebLoweringPass):
    """Rewrite every packed web into Stacked or Ragged tensors."""

    web_repr = "packed"
    instead = "packed"

    @staticmethod
    def lowerer(model: ir.Model, analysis: Analysis, policy: str) -> Converter:
        return PackedLowerer(model, analysis, policy)


@rule("SequenceEmpty", "packed")
def _sequence_empty(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    attr = node.attributes.get("dtype")
    return empty_list(lw, out, ir.DataType(attr.as_int()) if attr is not None else ir.DataType.FLOAT, o)


@rule("SequenceConstruct", "packed")
def _sequence_construct(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    name = out.name or "construct"
    ts = [t for t in node.inputs if t is not None]
    axis = lw.axis(out)
    if axis is None:
        rows = [o.unsqueeze(t, [0], f"{name}_{k}") for k, t in enumerate(ts)]
        lw.set(out, o.concat(rows, 0, f"{name}_data") if len(rows) > 1 else o.identity(rows[0], f"{name}_data"))
        return "Concat of Unsqueeze"
    data = o.concat(ts, axis, f"{name}_data") if len(ts) > 1 else o.identity(ts[0], f"{name}_data")
    lw.set(out, data, o.concat([len_along(t, axis, o, f"{name}_{k}") for k, t in enumerate(ts)], 0, f"{name}_lengths"))
    return "Concat along the axis"


@rule("Identity", "packed")
def _identity(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    ps = lw.seq(node.inputs[0])
    name = node.outputs[0].name or "seq"
    lengths = None if ps.lengths is None else o.identity(ps.lengths, f"{name}_lengths")
    lw.set(node.outputs[0], o.identity(ps.data, f"{name}_data"), lengths)
    return "Identity"


@rule("SequenceInsert", "packed")
def _sequence_insert(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    ps = lw.seq(node.inputs[0])
    out = node.outputs[0]
    name = out.name or "insert"
    t = node.inputs[1]
    assert t is not None
    p = node.inputs[2] if len(node.inputs) > 2 else None
    if ps.lengths is None:
        row = o.unsqueeze(t, [0], f"{name}_row")
        data = _settled(ps.data, t, len(lw.elem(out).dims), o, name)
        if p is None:
            lw.set(out, o.concat([data, row], 0, f"{name}_data"))
            return "Concat (append)"
        p1 = o.reshape(lw.normalise(ps, p, o, name), o.ints([1]), f"{name}_pos1")
        lw.set(out, o.splice(data, p1, p1, row, 0, f"{name}_data"))
        return "Slice + Concat"
    a = ps.axis
    assert a is not None
    length = len_along(t, a, o, name)
    if p is None:
        lw.set(out, o.concat([ps.data, t], a, f"{name}_data"), o.concat([ps.lengths, length], 0, f"{name}_lengths"))
        return "Concat (append)"
    p1 = o.reshape(lw.normalise(ps, p, o, name), o.ints([1]), f"{name}_pos1")
    start, _ = lw.span(ps, p1, o, name)
    lw.set(out, o.splice(ps.data, start, start, t, a, f"{name}_data"), o.splice(ps.lengths, p1, p1, length, 0, f"{name}_lengths"))
    return "Slice + Concat"


def _settled(data: ir.Value, t: ir.Value, rank: int, o: Ops, name: str) -> ir.Value:
    """Stacked ``data`` given ``t``'s element shape where it may be a scan output of no
    iteration. The spec leaves the trailing dims of such an output open (onnxruntime
    says what its inference says, OpenVINO and the reference 0 where a dim is symbolic),
    and Concat with a real row then fails everywhere but onnxruntime, which skips empty
    inputs; the original, whose sequence is simply empty, never noticed."""
    if not open_when_empty(data):
        return data
    trips = _every_trip(data)
    if trips is not None:
        # Not read off the output's shape: OpenVINO bounds that count below by 1 (quirk
        # loop-assumes-an-iteration), and below opset 14 the padded Reshape's Expand then
        # made no element (fuzz seeds 9959, 10241; ts_rows_of_no_trip_appended_2177).
        count = o.op("Max", [trips, o.scalar(0)], f"{name}_count", dtype=INT64, shape=[])
        count1 = o.reshape(count, o.ints([1]), f"{name}_count1")
    else:
        count1 = o.slice(o.shape(data, f"{name}_have_dims"), o.ints([0]), o.ints([1]), [0], f"{name}_count1")
    target = o.concat([count1, o.shape(t, f"{name}_elem_dims")], 0, f"{name}_settled_shape")
    assert data.dtype is not None
    flat = o.reshape(data, o.ints([-1]), f"{name}_settled_flat")
    return o.reshape_exact(flat, target, rank + 1, f"{name}_settled", data.dtype)


def _every_trip(v: ir.Value) -> ir.Value | None:
    """The trip count of the Loop whose scan output ``v`` is (through Identity) when the
    Loop runs every trip."""
    while (p := v.producer()) is not None and p.op_type == "Identity" and is_default_domain(p) and p.inputs[0] is not None:
        v = p.inputs[0]
    loop = v.producer()
    if loop is None or loop.op_type != "Loop" or not is_default_domain(loop) or not loop.inputs or loop.inputs[0] is None:
        return None
    return loop.inputs[0] if loop_runs_all_trips(loop, loop.attributes["body"].as_graph()) else None


@rule("SequenceErase", "packed")
def _sequence_erase(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    ps = lw.seq(node.inputs[0])
    out = node.outputs[0]
    name = out.name or "erase"
    p = node.inputs[1] if len(node.inputs) > 1 else None
    if ps.lengths is None and p is None:
        lw.set(out, o.slice(ps.data, o.ints([0]), o.ints([-1]), [0], f"{name}_data"))
        return "Slice (drop last)"
    p1 = o.reshape(lw.normalise(ps, p, o, name, default="last"), o.ints([1]), f"{name}_pos1")
    next1 = o.op("Add", [p1, o.ints([1])], f"{name}_next1")
    if ps.lengths is None:
        lw.set(out, o.splice(ps.data, p1, next1, None, 0, f"{name}_data"))
        return "Slice + Concat"
    assert ps.axis is not None
    start, end = lw.span(ps, p1, o, name)
    lw.set(out, o.splice(ps.data, start, end, None, ps.axis, f"{name}_data"), o.splice(ps.lengths, p1, next1, None, 0, f"{name}_lengths"))
    return "Slice + Concat"


@rule("SequenceAt", "packed")
def _sequence_at(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    ps = lw.seq(node.inputs[0])
    out = node.outputs[0]
    name = out.name or "at"
    if ps.axis is None and ps.data.dtype == ir.DataType.STRING:
        # onnxruntime 1.31's Gather copies one string per row of a string tensor (the rest
        # come out empty): a row of strings is a Slice.
        p1 = o.reshape(lw.normalise(ps, node.inputs[1], o, name), o.ints([1]), f"{name}_pos1")
        row = o.slice(ps.data, p1, o.op("Add", [p1, o.ints([1])], f"{name}_next1"), [0], f"{name}_row")
        lw.output(out, o.b.squeeze(row, [0], f"{name}_elem"), node, scope)
        return "Slice"
    if ps.axis is None:
        # Gather takes negative indices itself.
        p = o.reshape(node.inputs[1], o.ints([]), f"{name}_pos")
        lw.output(out, o.op("Gather", [ps.data, p], f"{name}_elem", shape=out.shape, axis=0), node, scope)
        return "Gather"
    p1 = o.reshape(lw.normalise(ps, node.inputs[1], o, name), o.ints([1]), f"{name}_pos1")
    start, end = lw.span(ps, p1, o, name)
    lw.output(out, o.slice(ps.data, start, end, [ps.axis], f"{name}_elem"), node, scope)
    return "Slice along the axis"


@rule("SequenceLength", "packed")
def _sequence_length(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    lw.output(out, lw.count(lw.seq(node.inputs[0]), o, out.name or "len"), node, scope)
    return "Shape"


@rule("SplitToSequence", "packed")
def _split_to_sequence(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    name = out.name or "split"
    assert x is not None and x.shape is not None
    rank = x.shape.rank()
    axis = node.attributes["axis"].as_int() % rank if "axis" in node.attributes else 0
    squeeze = dynamic_split_squeezes(node, lw.policy)
    assert squeeze is not None
    if lw.axis(out) is not None:
        d1 = len_along(x, axis, o, name)
        split = node.inputs[1] if len(node.inputs) > 1 else None
        sizes, how = o.split_sizes(o.reshape(d1, o.ints([]), f"{name}_d"), d1, split, name)
        lw.set(out, o.identity(x, f"{name}_data"), sizes)
        return f"the input itself, {how}"
    front = perm_to_front(rank, axis)
    if squeeze:
        lw.set(out, transpose(x, front, o, f"{name}_data"))
        return "Transpose (unbind)"
    chunk = lw.elem(out).dims[axis]
    assert isinstance(chunk, int)
    if chunk == 1:
        lw.set(out, o.unsqueeze(transpose(x, front, o, f"{name}_front"), [axis + 1], f"{name}_data"))
        return "Transpose + Unsqueeze"
    # Equal chunks of c: [.., d, ..] -> [.., n, c, ..] -> n to the front.
    dims = o.shape(x, f"{name}_dims")
    length = lw.analysis.info[out].length
    if length is not None:
        n = o.ints([length])
    else:
        d = o.slice(dims, o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_d")
        n = o.op("Div", [d, o.ints([chunk])], f"{name}_n")
    target = o.concat(
        [o.slice(dims, o.ints([0]), o.ints([axis]), [0], f"{name}_pre"), n, o.ints([chunk]),
         o.slice(dims, o.ints([axis + 1]), o.ints([MAX_INT64]), [0], f"{name}_post")],
        0, f"{name}_target",
    )
    assert x.dtype is not None
    grouped = o.reshape_exact(o.reshape(x, o.ints([-1]), f"{name}_flat"), target, rank + 1, f"{name}_grouped", x.dtype)
    lw.set(out, transpose(grouped, perm_to_front(rank + 1, axis), o, f"{name}_data"))
    return "Reshape + Transpose (equal chunks)"


@rule("ConcatFromSequence", "packed")
def _concat_from_sequence(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    src = node.inputs[0]
    ps = lw.seq(src)
    out = node.outputs[0]
    name = out.name or "concat"
    source = unchanged_split_source(node, lw.policy)
    if source is not None:
        lw.output(out, source, node, scope)
        return "the split's input itself"
    if ps.axis is not None:
        # The analysis packs Ragged only where every concat joins along the axis.
        lw.output(out, ps.data, node, scope)
        return "the data itself"
    data = ps.data
    r = len(lw.elem(src).dims)
    new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
    axis = node.attributes["axis"].as_int()
    if new_axis:
        axis %= r + 1
        lw.output(out, transpose(data, perm_from_front(r + 1, axis), o, f"{name}_stacked"), node, scope)
        return "Transpose (stack)"
    axis %= r
    t = transpose(data, perm_from_front(r + 1, axis), o, f"{name}_moved")
    rest = [d for i, d in enumerate(lw.elem(src).dims) if i != axis]
    if all(isinstance(d, int) and d > 0 for d in rest):
        # The other dims are known and not zero: -1 is exact (0 when the list or the axis
        # is empty), and the target a constant.
        target_dims = [*rest[:axis], -1, *rest[axis:]]
        lw.output(out, o.op("Reshape", [t, o.b.ints(target_dims, f"{name}_shape")], f"{name}_joined"), node, scope)
        return "Transpose + Reshape"
    dims = o.shape(t, f"{name}_dims")
    pair = o.slice(dims, o.ints([axis]), o.ints([axis + 2]), [0], f"{name}_pair")
    merged = o.b.reduce("ReduceProd", pair, [0], f"{name}_merged", keepdims=True)
    target = o.concat(
        [o.slice(dims, o.ints([0]), o.ints([axis]), [0], f"{name}_pre"), merged,
         o.slice(dims, o.ints([axis + 2]), o.ints([MAX_INT64]), [0], f"{name}_post")],
        0, f"{name}_target",
    )
    assert data.dtype is not None
    joined = o.reshape_exact(o.reshape(t, o.ints([-1]), f"{name}_flat"), target, r, f"{name}_joined", data.dtype, out.shape)
    lw.output(out, joined, node, scope)
    return "Transpose + Reshape"


RULES = rules("packed")
