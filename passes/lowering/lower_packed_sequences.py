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

from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from seqlower.passes._rewrite import (
    Scope,
    append_once,
    replace_output,
    sequence_abi_entry,
)
from seqlower.passes.lowering.convert import (
    Collected,
    Converter,
    Proto,
    WebLoweringPass,
    convert_if,
    convert_loop,
    map_as_loop,
    rule,
    rules,
)
from seqlower.passes.lowering._batched_map import batched_plan, run_batched
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import (
    Analysis,
    dynamic_split_squeezes,
    is_default_domain,
    model_input_dims,
    node_label,
)
from seqlower.ir.builder import Builder
from seqlower.ir.helpers import loop_runs_all_trips, open_when_empty
from seqlower.analysis.splits import unchanged_split_source

__all__ = ["LowerPackedSequencesPass"]


@dataclass(eq=False)
class Packed:
    data: ir.Value
    lengths: ir.Value | None  # Ragged only
    axis: int | None  # Ragged only
    # Where count and bounds are made, once: the graph that makes the tensors, after
    # their producer (so a Loop body reading an outer sequence does not redo them).
    home: ir.Graph | ir.Function | None = None
    after: ir.Node | None = None
    derived: dict[str, ir.Value] = field(default_factory=dict)
    # The length where the analysis knows it (a run-time position into a list of known
    # length): counted by a constant, not by Shape + Gather of the data at each edit.
    length: int | None = None

    @property
    def tensors(self) -> list[ir.Value]:
        return [self.data] if self.lengths is None else [self.data, self.lengths]


class LowerPackedSequencesPass(WebLoweringPass):
    """Rewrite every packed web into Stacked or Ragged tensors."""

    web_repr = "packed"
    instead = "packed"

    @staticmethod
    def lowerer(model: ir.Model, analysis: Analysis, policy: str) -> Converter:
        return _Lowerer(model, analysis, policy)


class _Lowerer(Converter):
    representation = "packed"
    carrying = "the packed tensors"
    boundary = True  # outputs only: a web with a model input is never packed

    def __init__(self, model: ir.Model, analysis: Analysis, policy: str) -> None:
        super().__init__(model)
        self.analysis = analysis
        self.policy = policy
        self.input_dims = model_input_dims(model)
        self.seqs: dict[ir.Value, Packed] = {}
        self.opset = 0

    def graph(self, scope: Scope) -> None:
        self.opset = scope.opset  # one per model or function: bodies share it
        super().graph(scope)

    # -- the converter (passes/lowering/convert.py) ------------------------------------------------

    def owns(self, v: ir.Value | None) -> bool:
        return self.analysis.packed(v)

    def into(self, v: ir.Value | None) -> str:
        assert v is not None
        return self.kind(v)

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        return self.seq(v).tensors

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        self.from_tensors(v, list(tensors))

    def appended(self, node: ir.Node, k: int) -> tuple[ir.Node, ir.Value] | None:
        # A Stacked append-once sequence leaves the carried state and becomes a scan
        # output (one shape every step: the group is uniform); Ragged ones differ per step.
        body = node.attributes["body"].as_graph()
        return append_once(body, k) if self.axis(body.inputs[2 + k]) is None else None

    def append_step(self, node: ir.Node, k: int, t: ir.Value, o: Ops, name: str) -> list[ir.Value]:
        # [1, *elem] per step: see `exact` (OpenVINO and zero-trip scans).
        return [o.unsqueeze(t, [0], f"{name}_elem")]

    def append_types(self, carried: ir.Value, t: ir.Value, base: str) -> list[Proto]:
        elem_type = carried.type.elem_type if isinstance(carried.type, ir.SequenceType) else None
        return [(self.names.fresh(f"{base}_scan"), elem_type, None)]

    def bind_appended(self, out: ir.Value, carried: ir.Value, t: ir.Value, scans: list[ir.Value], o: Ops) -> None:
        name = out.name or "appended"
        scan = scans[0]
        trips = o.slice(o.shape(scan, f"{name}_scan_dims"), o.ints([0]), o.ints([1]), [0], f"{name}_trips")
        self.set(out, o.concat([self.seq(carried).data, self.exact(out, scan, trips, o, f"{name}_scan")], 0, f"{name}_data"))

    def kind(self, v: ir.Value) -> str:
        return "ragged" if v in self.analysis.ragged else "stacked"

    def seq(self, v: ir.Value | None) -> Packed:
        assert v is not None and v in self.seqs, f"sequence {v} was not lowered before its use"
        return self.seqs[v]

    def elem(self, v: ir.Value) -> ir.Shape:
        """The element shape (None along a Ragged value's axis)."""
        if v in self.analysis.ragged:
            return self.analysis.ragged[v][1]
        return self.analysis.stacked_shape[v]

    def axis(self, v: ir.Value) -> int | None:
        return self.analysis.ragged[v][0] if v in self.analysis.ragged else None

    def set(self, v: ir.Value, data: ir.Value, lengths: ir.Value | None = None) -> Packed:
        if data.type is None and isinstance(v.type, ir.SequenceType):
            data.type = v.type.elem_type
        axis = self.axis(v)
        assert (axis is None) == (lengths is None), f"{v.name}: {self.kind(v)} needs {'no ' if axis is None else ''}lengths"
        dims = list(self.elem(v).dims)
        # Shape hints go on the values this lowering made: `data` may be the model's own
        # input (an unbind along axis 0 is the input itself), whose declared shape stays.
        if data.producer() is not None:
            data.shape = ir.Shape([self.length_dim(v), *dims]) if axis is None else ir.Shape(dims)
        if lengths is not None and lengths.producer() is not None:
            lengths.shape = ir.Shape([None])
        source = data if lengths is None else lengths
        p = source.producer()
        home = p.graph if p is not None else (source.graph if source.is_graph_input() else None)
        info = self.analysis.info.get(v)
        length = info.length if info is not None and isinstance(info.length, int) else None
        self.seqs[v] = Packed(data, lengths, axis, home, p, length=length)
        return self.seqs[v]

    def length_dim(self, v: ir.Value) -> str | None:
        """A Stacked value's leading dim: the model input's dim its length is (a split of
        that dim into ones, and what maps or passes it on), else unknown."""
        info = self.analysis.info.get(v)
        sym = info.length_sym if info is not None else None
        return sym[0] if sym is not None and sym[1] == 0 else None

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        """Name, type and shape of the tensors standing for ``v`` in a signature."""
        elem_type = v.type.elem_type if isinstance(v.type, ir.SequenceType) else None
        dims = list(self.elem(v).dims)
        if self.axis(v) is None:
            return [(self.names.fresh(f"{base}_data"), elem_type, ir.Shape([self.length_dim(v), *dims]))]
        return [(self.names.fresh(f"{base}_data"), elem_type, ir.Shape(dims)),
                (self.names.fresh(f"{base}_lengths"), ir.TensorType(INT64), ir.Shape([None]))]

    def from_tensors(self, v: ir.Value, tensors: list[ir.Value]) -> int:
        """Register ``v`` as the leading ``tensors``; how many it took."""
        if self.axis(v) is None:
            self.set(v, tensors[0])
            return 1
        self.set(v, tensors[0], tensors[1])
        return 2

    def elem_dims(self, v: ir.Value, o: Ops, name: str, along: ir.Value | None = None) -> ir.Value:
        """The element shape as a 1-D int64 tensor: numbers as constants, model-input
        dims read from the input's shape, ``along`` ([1]) at a Ragged value's axis."""
        parts: list[ir.Value] = []
        run: list[int] = []
        for d in self.elem(v).dims:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                parts.append(o.ints(run))
                run = []
            if isinstance(d, ir.SymbolicDim) and d.value in self.input_dims:
                source, axis = self.input_dims[d.value]
                parts.append(o.slice(o.shape(source, f"{name}_src_dims"), o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_{d.value}"))
            else:
                assert along is not None, f"{v.name}: a dim of unknown size"
                parts.append(along)
        if run or not parts:
            parts.append(o.ints(run))
        return o.concat(parts, 0, f"{name}_elem_dims")

    def _derive(self, ps: Packed, key: str, o: Ops, make) -> ir.Value:
        """``make(ops)`` once per sequence value, where its tensors are made."""
        if key in ps.derived:
            return ps.derived[key]
        if ps.home is None:
            return make(o)
        if ps.after is not None:
            b = Builder(ps.home, None, self.opset, self.names, main_graph=ps.home is self.model.graph, after=ps.after)
        else:
            b = Builder(ps.home, next(iter(ps.home), None), self.opset, self.names, main_graph=ps.home is self.model.graph)
        v = make(Ops(b))
        if b.nodes:
            ps.after = b.nodes[-1]
        ps.derived[key] = v
        return v

    def count(self, ps: Packed, o: Ops, name: str) -> ir.Value:
        if ps.length is not None:
            return o.scalar(ps.length)
        source = ps.data if ps.lengths is None else ps.lengths
        base = source.name or name
        return self._derive(ps, "count", o, lambda d: d.op("Gather", [d.shape(source, f"{base}_dims"), d.scalar(0)], f"{base}_count", dtype=INT64, shape=[]))

    def bounds(self, ps: Packed, o: Ops, name: str) -> ir.Value:
        """[0, cumsum(lengths)]: where each element of a Ragged value starts and ends."""
        lengths = ps.lengths
        assert lengths is not None
        base = lengths.name or name
        return self._derive(ps, "bounds", o, lambda d: d.concat([d.ints([0]), d.op("CumSum", [lengths, d.scalar(0)], f"{base}_ends")], 0, f"{base}_bounds"))

    def normalise(self, ps: Packed, p: ir.Value | None, o: Ops, name: str, default: str = "n") -> ir.Value:
        return o.position(p, self.count(ps, o, name), name, default)

    def span(self, ps: Packed, p1: ir.Value, o: Ops, name: str) -> tuple[ir.Value, ir.Value]:
        """Where Ragged element ``p1`` ([1], normalised) starts and ends along the axis."""
        b = self.bounds(ps, o, name)
        start = o.op("Gather", [b, p1], f"{name}_start")
        end = o.op("Gather", [b, o.op("Add", [p1, o.ints([1])], f"{name}_next1")], f"{name}_end")
        return start, end

    def exact(self, v: ir.Value, stacked: ir.Value, count1: ir.Value, o: Ops, name: str) -> ir.Value:
        """A Loop's ``[n, 1, *elem]`` scan output reshaped to ``[n, *elem]``. After no
        iteration a runtime may give scan outputs another shape (OpenVINO: [0, 0, ...],
        while its shape inference says [0, *step], so it would drop a Reshape to that
        as a no-op; scanning [1, *elem] steps makes this Reshape change the rank)."""
        target = o.concat([count1, self.elem_dims(v, o, name)], 0, f"{name}_target")
        flat = o.reshape(stacked, o.ints([-1]), f"{name}_flat")
        dtype = stacked.dtype
        assert dtype is not None
        return o.reshape_exact(flat, target, len(self.elem(v).dims) + 1, name, dtype)

    def output(self, old: ir.Value, new: ir.Value, node: ir.Node, scope: Scope) -> None:
        replace_output(old, new, scope, self.names, node, owned=True)

    def abi_output(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        """Packed model outputs leave as the Flat ABI: Stacked data and Ragged data along
        axis 0 are the values in order already; the shape rows are built from the dims."""
        o = Ops(Builder(self.model.graph, None, scope.opset, self.names, main_graph=True))
        ps = self.seq(v)
        base = v.name or "seq"
        r = len(self.elem(v).dims)
        dims = o.shape(ps.data, f"{base}_out_dims")
        rest = o.slice(dims, o.ints([1]), o.ints([MAX_INT64]), [0], f"{base}_rest")
        n1 = o.slice(o.shape(ps.data if ps.lengths is None else ps.lengths, f"{base}_n_dims"), o.ints([0]), o.ints([1]), [0], f"{base}_n1")
        if ps.lengths is None:
            rows = o.rows(rest, n1, f"{base}_rows")
        else:
            assert ps.axis == 0
            parts = [o.unsqueeze(ps.lengths, [1], f"{base}_length_col")]
            if r > 1:
                parts.append(o.rows(rest, n1, f"{base}_rest_rows"))
            rows = o.concat(parts, 1, f"{base}_rows")
        ports = []
        for key, t, shape in (("values", o.reshape(ps.data, o.ints([-1]), f"{base}_flat"), [None]), ("shapes", rows, [None, r])):
            t = o.identity(t, f"{base}_{key}")
            t.shape = ir.Shape(shape)  # the checker wants a shape on every model output
            ports.append(t)
        dtype = ps.data.dtype
        assert dtype is not None
        v.name = self.names.fresh(f"{base}_sequence")  # the old value dies with its producer
        tensors = {"values": ports[0].name or "values", "shapes": ports[1].name or "shapes"}
        return ports, sequence_abi_entry(self.model, v, dtype, r, False, tensors, base)


def _perm_to_front(rank: int, axis: int) -> list[int]:
    return [axis] + [i for i in range(rank) if i != axis]


def _perm_from_front(rank: int, axis: int) -> list[int]:
    """Transpose ``[n, e0, ..]`` (``rank`` axes) so that ``n`` lands at ``axis``."""
    return list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))


def _transpose(x: ir.Value, perm: list[int], o: Ops, name: str) -> ir.Value:
    if perm == sorted(perm):
        return x
    return o.op("Transpose", [x], name, perm=perm)


def _len_along(t: ir.Value, axis: int, o: Ops, name: str) -> ir.Value:
    return o.slice(o.shape(t, f"{name}_dims"), o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_len")


@rule("SequenceEmpty", "packed")
def _sequence_empty(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    attr = node.attributes.get("dtype")
    return _empty(lw, out, ir.DataType(attr.as_int()) if attr is not None else ir.DataType.FLOAT, o)


def _empty(lw: _Lowerer, out: ir.Value, dtype: ir.DataType, o: Ops) -> str:
    """``out`` is an empty list: data of no element, each element of the group's shape."""
    name = out.name or "empty"
    axis = lw.axis(out)
    zero = o.b.zeros(dtype, (), "zero")
    if axis is None:
        target = o.concat([o.ints([0]), lw.elem_dims(out, o, name)], 0, f"{name}_shape")
        lw.set(out, o.op("Expand", [zero, target], f"{name}_data", dtype=dtype))
        return "empty [0, *elem]"
    target = lw.elem_dims(out, o, name, along=o.ints([0]))
    lw.set(out, o.op("Expand", [zero, target], f"{name}_data", dtype=dtype), o.b.zeros(INT64, (0,), "no_lengths"))
    return "empty data, no lengths"


@rule("SequenceConstruct", "packed")
def _sequence_construct(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    name = out.name or "construct"
    ts = [t for t in node.inputs if t is not None]
    axis = lw.axis(out)
    if axis is None:
        rows = [o.unsqueeze(t, [0], f"{name}_{k}") for k, t in enumerate(ts)]
        lw.set(out, o.concat(rows, 0, f"{name}_data") if len(rows) > 1 else o.identity(rows[0], f"{name}_data"))
        return "Concat of Unsqueeze"
    data = o.concat(ts, axis, f"{name}_data") if len(ts) > 1 else o.identity(ts[0], f"{name}_data")
    lw.set(out, data, o.concat([_len_along(t, axis, o, f"{name}_{k}") for k, t in enumerate(ts)], 0, f"{name}_lengths"))
    return "Concat along the axis"


@rule("Identity", "packed")
def _identity(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    ps = lw.seq(node.inputs[0])
    name = node.outputs[0].name or "seq"
    lengths = None if ps.lengths is None else o.identity(ps.lengths, f"{name}_lengths")
    lw.set(node.outputs[0], o.identity(ps.data, f"{name}_data"), lengths)
    return "Identity"


@rule("SequenceInsert", "packed")
def _sequence_insert(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
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
    length = _len_along(t, a, o, name)
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
def _sequence_erase(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
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
def _sequence_at(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
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
def _sequence_length(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    lw.output(out, lw.count(lw.seq(node.inputs[0]), o, out.name or "len"), node, scope)
    return "Shape"


@rule("SplitToSequence", "packed")
def _split_to_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    name = out.name or "split"
    assert x is not None and x.shape is not None
    rank = x.shape.rank()
    axis = node.attributes["axis"].as_int() % rank if "axis" in node.attributes else 0
    squeeze = dynamic_split_squeezes(node, lw.policy)
    assert squeeze is not None
    if lw.axis(out) is not None:
        d1 = _len_along(x, axis, o, name)
        split = node.inputs[1] if len(node.inputs) > 1 else None
        sizes, how = o.split_sizes(o.reshape(d1, o.ints([]), f"{name}_d"), d1, split, name)
        lw.set(out, o.identity(x, f"{name}_data"), sizes)
        return f"the input itself, {how}"
    front = _perm_to_front(rank, axis)
    if squeeze:
        lw.set(out, _transpose(x, front, o, f"{name}_data"))
        return "Transpose (unbind)"
    chunk = lw.elem(out).dims[axis]
    assert isinstance(chunk, int)
    if chunk == 1:
        lw.set(out, o.unsqueeze(_transpose(x, front, o, f"{name}_front"), [axis + 1], f"{name}_data"))
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
    lw.set(out, _transpose(grouped, _perm_to_front(rank + 1, axis), o, f"{name}_data"))
    return "Reshape + Transpose (equal chunks)"


@rule("ConcatFromSequence", "packed")
def _concat_from_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
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
        lw.output(out, _transpose(data, _perm_from_front(r + 1, axis), o, f"{name}_stacked"), node, scope)
        return "Transpose (stack)"
    axis %= r
    t = _transpose(data, _perm_from_front(r + 1, axis), o, f"{name}_moved")
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


@rule("If", "packed")
def _if(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    convert_if(lw, node, scope)
    return "If returning the packed tensors"


@rule("Loop", "packed")
def _loop(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    return convert_loop(lw, node, scope)


def _batched_map(lw: _Lowerer, node: ir.Node, body: ir.Graph, o: Ops) -> bool:
    """The body once on the whole stacks (see passes/lowering/_batched_map.py), when every
    sequence in and out is Stacked and the body allows it."""
    seq_inputs = [(inp, bi) for inp, bi in zip(node.inputs, body.inputs) if inp is not None and inp in lw.seqs]
    if any(lw.seq(inp).axis is not None for inp, _ in seq_inputs) or any(lw.axis(out) is not None for out in node.outputs):
        return False
    plan = batched_plan(body, [bi for _, bi in seq_inputs], o.b.opset)
    if plan is None:
        return False
    value_map: dict[ir.Value, ir.Value | None] = {bi: inp for inp, bi in zip(node.inputs, body.inputs)}
    value_map.update({bi: lw.seq(inp).data for inp, bi in seq_inputs})
    base = node.outputs[0].name or "map"
    count1 = o.reshape(lw.count(lw.seq(seq_inputs[0][0]), o, base), o.ints([1]), f"{base}_n1")
    outputs = [(bo, out.name or "map") for out, bo in zip(node.outputs, body.outputs)]
    stacks = run_batched(body, plan, value_map, [bi for _, bi in seq_inputs], outputs, count1, o, lw.names)
    for out, (y, batched) in zip(node.outputs, stacks):
        lw.set(out, o.identity(y, f"{out.name or 'map'}_data") if batched else y)
    return True


@rule("SequenceMap", "packed")
def _sequence_map(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    lw.graph(Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False))
    info = lw.analysis.info.get(node.inputs[0])
    if info is not None and info.length == 0:
        # A map over a list that is provably empty makes empty lists whose elements have
        # the group's shape, not the body's (which the batched body would give them).
        for out, bo in zip(node.outputs, body.outputs):
            out_info = lw.analysis.info.get(out)
            dtype = bo.dtype or (out_info.dtype if out_info is not None else None)
            assert dtype is not None
            _empty(lw, out, dtype, o)
        return "empty lists: the mapped list is empty"
    if _batched_map(lw, node, body, o):
        node.attributes.pop("body")
        return "the body once on the stacks (batched)"
    base = node.outputs[0].name or "map"
    count = lw.count(lw.seq(node.inputs[0]), o, base)
    count1: list[ir.Value] = []  # made once, after the Loop, if a Stacked output needs it

    def element(inp: ir.Value, it: ir.Value, bo_ops: Ops, name: str) -> ir.Value:
        return _map_element(lw, lw.seq(inp), it, bo_ops, o, name, f"{inp.name or 'seq'}_map")

    def collect(k: int, y: ir.Value, bo: ir.Value, bo_ops: Ops) -> Collected:
        out = node.outputs[k]
        if lw.axis(out) is not None:
            return _collect_ragged(lw, out, y, bo, bo_ops, o)
        c = Collected(scans=[bo_ops.unsqueeze(y, [0], f"{out.name or base}_y_step")], how="scan output")

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            scan = scans[0]
            scan.name, scan.type = lw.names.fresh(f"{out.name or base}_scan"), ir.TensorType(bo.dtype) if bo.dtype is not None else None
            if not count1:
                count1.append(o.reshape(count, o.ints([1]), f"{base}_count1"))
            lw.set(out, lw.exact(out, scan, count1[0], o, f"{out.name or base}_{k}"))

        c.finish = finish
        return c

    map_as_loop(lw, node, o, scope, element, count, collect)
    return "Loop with scan outputs"


def _map_element(lw: _Lowerer, ps: Packed, it: ir.Value, bo_ops: Ops, o: Ops, name: str, base: str) -> ir.Value:
    """Element ``it`` (the map Loop's step) of a packed value, in the Loop's body."""
    if ps.axis is None and ps.data.dtype != ir.DataType.STRING:
        return bo_ops.op("Gather", [ps.data, it], name, axis=0)
    it1 = bo_ops.reshape(it, bo_ops.ints([1]), f"{name}_i1")
    next1 = bo_ops.op("Add", [it1, bo_ops.ints([1])], f"{name}_i1_next")
    if ps.axis is None:  # strings: a Slice, not Gather (see _sequence_at)
        return bo_ops.b.squeeze(bo_ops.slice(ps.data, it1, next1, [0], f"{name}_row"), [0], name)
    bounds = lw.bounds(ps, o, base)
    start = bo_ops.op("Gather", [bounds, it1], f"{name}_start")
    end = bo_ops.op("Gather", [bounds, next1], f"{name}_end")
    return bo_ops.slice(ps.data, start, end, [ps.axis], name)


def _collect_ragged(lw: _Lowerer, out: ir.Value, y: ir.Value, bo: ir.Value, bo_ops: Ops, o: Ops) -> Collected:
    """A Ragged output of a map's Loop: the data grows by a Concat along the axis, the
    lengths are a scan output."""
    axis, dtype, name = lw.axis(out), bo.dtype, out.name or "map"
    assert axis is not None and dtype is not None
    acc = ir.Value(name=lw.names.fresh(f"{name}_acc"), type=ir.TensorType(dtype), shape=lw.elem(out))
    init = o.op("Expand", [o.b.zeros(dtype, (), "zero"), lw.elem_dims(out, o, f"{name}_init", along=o.ints([0]))], f"{name}_acc_init", dtype=dtype)
    size = _len_along(y, axis, bo_ops, f"{name}_y")
    c = Collected(carried=[(init, acc, bo_ops.concat([acc, y], axis, f"{name}_acc_next"))],
                  scans=[bo_ops.reshape(size, bo_ops.ints([]), f"{name}_y_size")], how="carried Concat")

    def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
        data, scan = carried[0], scans[0]
        data.name, data.type = lw.names.fresh(f"{name}_data"), ir.TensorType(dtype)
        scan.name, scan.type = lw.names.fresh(f"{name}_scan"), ir.TensorType(INT64)
        lw.set(out, data, o.reshape(scan, o.ints([-1]), f"{name}_lengths"))

    c.finish = finish
    return c


RULES = rules("packed")
