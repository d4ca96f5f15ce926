"""The Packed lowerer: the one tensor each sequence value of a Stacked or Ragged web
becomes (elements stacked along an axis, or concatenated with their lengths), and the
index arithmetic its rules share. The rules are ``lower_packed_sequences`` (the list ops)
and ``packed_maps`` (If, Loop and SequenceMap)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, append_once, replace_output, sequence_abi_entry
from seqlower.passes.lowering.convert import Converter, Proto
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import Analysis, model_input_dims
from seqlower.ir.builder import Builder

__all__ = ["PackedLowerer", "Packed", "empty_list", "len_along", "perm_from_front", "perm_to_front", "transpose"]


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


class PackedLowerer(Converter):
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


def perm_to_front(rank: int, axis: int) -> list[int]:
    return [axis] + [i for i in range(rank) if i != axis]


def perm_from_front(rank: int, axis: int) -> list[int]:
    """Transpose ``[n, e0, ..]`` (``rank`` axes) so that ``n`` lands at ``axis``."""
    return list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))


def transpose(x: ir.Value, perm: list[int], o: Ops, name: str) -> ir.Value:
    if perm == sorted(perm):
        return x
    return o.op("Transpose", [x], name, perm=perm)


def len_along(t: ir.Value, axis: int, o: Ops, name: str) -> ir.Value:
    return o.slice(o.shape(t, f"{name}_dims"), o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_len")


def empty_list(lw: PackedLowerer, out: ir.Value, dtype: ir.DataType, o: Ops) -> str:
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
