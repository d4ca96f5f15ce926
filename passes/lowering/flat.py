"""The Flat lowerer: the tensors each sequence value of a Flat web becomes (values,
shapes, ranks), their layout (how wide the shape rows are), and what is derived from them
once (bounds, count). The rules that use it are ``lower_flat_sequences`` (the list ops)
and ``flat_maps`` (If, Loop and SequenceMap)."""

from __future__ import annotations

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, append_once, replace_output, sequence_abi_entry
from seqlower.passes.lowering.convert import Converter, Proto
from seqlower.analysis.analyzer import Analysis, model_input_dims, node_label
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.ir.builder import Builder
from seqlower.errors import ModelError
from seqlower.ir.helpers import anchored_shape, loop_shapes_consistent


__all__ = ["FlatLowerer", "FlatSeq", "attr_int", "flat_tensor", "scan_row", "seq_tensors", "unscan_rows"]


@dataclass(eq=False)
class FlatSeq:
    values: ir.Value
    shapes: ir.Value
    ranks: ir.Value | None
    dtype: ir.DataType
    width: int | None  # None: as wide as the caller's elements (see Layout)
    # Where derived values go: this graph, after ``after`` (None: at its start).
    graph: ir.Graph | ir.Function
    after: ir.Node | None
    main: bool
    opset: int
    derived: dict[str, ir.Value] = field(default_factory=dict)


class FlatLowerer(Converter):
    representation = "flat"
    carrying = "the tensors"
    boundary = True

    def __init__(self, model: ir.Model, analysis: Analysis, policy: str) -> None:
        super().__init__(model)
        self.analysis = analysis
        self.policy = policy
        self.seqs: dict[ir.Value, FlatSeq] = {}

    # -- the converter (passes/lowering/convert.py) ------------------------------------------------

    def owns(self, v: ir.Value | None) -> bool:
        return self.analysis.flat(v)

    def _dtype(self, v: ir.Value) -> ir.DataType:
        info = self.analysis.info.get(v)
        dtype = info.dtype if info is not None else None
        if dtype is None and isinstance(v.type, ir.SequenceType) and isinstance(v.type.elem_type, ir.TensorType):
            dtype = v.type.elem_type.dtype
        assert dtype is not None, f"the element type of '{v.name}' is unknown"
        return dtype

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        width, ranked = self.layout(v)
        protos: list[Proto] = [
            (self.names.fresh(f"{base}_flat"), ir.TensorType(self._dtype(v)), ir.Shape([None])),
            (self.names.fresh(f"{base}_rows"), ir.TensorType(INT64), ir.Shape([None, width])),
        ]
        if ranked:
            protos.append((self.names.fresh(f"{base}_rank_list"), ir.TensorType(INT64), ir.Shape([None])))
        return protos

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        return seq_tensors(self.seq(v))

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        width, ranked = self.layout(v)
        assert len(tensors) == (3 if ranked else 2)
        dtype = tensors[0].dtype or self._dtype(v)
        self.seqs[v] = FlatSeq(tensors[0], tensors[1], tensors[2] if ranked else None, dtype, width, scope.graph, made_by, scope.main, scope.opset)

    def appended(self, node: ir.Node, k: int) -> tuple[ir.Node, ir.Value] | None:
        return _append_once(self, node, node.attributes["body"].as_graph(), k)

    def append_step(self, node: ir.Node, k: int, t: ir.Value, o: Ops, name: str) -> list[ir.Value]:
        # The element (through an Identity the body owns: it may be an outer value) and
        # its shape row, from t's own Shape so it is the tensor appended, dims and all.
        width, _ = self.layout(node.attributes["body"].as_graph().inputs[2 + k])
        assert t.shape is not None and width is not None
        row = self.padded_dims(t, t.shape.rank(), width, o, f"{name}_appended")
        row.shape = ir.Shape([width])
        return [o.identity(t, f"{name}_elem"), scan_row(row, width, o, f"{name}_appended")]

    def append_types(self, carried: ir.Value, t: ir.Value, base: str) -> list[Proto]:
        assert t.shape is not None
        return [(self.names.fresh(f"{base}_scan"), ir.TensorType(self.seq(carried).dtype), ir.Shape([None, *t.shape.dims])),
                (self.names.fresh(f"{base}_scan_rows"), ir.TensorType(INT64), ir.Shape([None, 1, self.layout(carried)[0]]))]

    def bind_appended(self, out: ir.Value, carried: ir.Value, t: ir.Value, scans: list[ir.Value], o: Ops) -> None:
        init = self.seq(carried)
        scan, rows = scans
        name = out.name or "appended"
        values = o.concat([init.values, o.reshape(scan, o.ints([-1]), f"{name}_scan_flat")], 0, f"{name}_flat")
        rows = unscan_rows(rows, init.width, o, name)
        shapes = o.concat([init.shapes, rows], 0, f"{name}_rows")
        ranks = None
        if init.ranks is not None:
            assert t.shape is not None
            trips = o.slice(o.shape(rows, f"{name}_rows_dims"), o.ints([0]), o.ints([1]), [0], f"{name}_trips")
            ranks = o.concat([init.ranks, o.repeat(o.ints([t.shape.rank()]), trips, f"{name}_appended_ranks")], 0, f"{name}_rank_list")
        self.make(out, values, shapes, ranks, o, init.dtype)

    def layout(self, v: ir.Value) -> tuple[int, bool]:
        lay = self.analysis.layout_of[v]
        return lay.width, lay.ranked

    def seq(self, v: ir.Value | None) -> FlatSeq:
        assert v is not None and v in self.seqs, f"sequence {v} was not lowered before its use"
        return self.seqs[v]

    def make(self, v: ir.Value, values: ir.Value, shapes: ir.Value, ranks: ir.Value | None, o: Ops, dtype: ir.DataType | None = None) -> FlatSeq:
        width, ranked = self.layout(v)
        assert ranked == (ranks is not None)
        dtype = dtype or values.dtype
        if dtype is None:
            # (a model onnx's inference fails on: a Loop counting with an int32 iteration)
            made = f"{node_label(v.producer())}: " if v.producer() is not None else ""
            raise ModelError(f"{made}the element type of '{v.name}' is unknown (onnx's inference finds none)")
        fs = FlatSeq(values, shapes, ranks, dtype, width, o.b.graph, _producer_in(shapes, o.b.graph), o.b.main_graph, o.b.opset)
        self.seqs[v] = fs
        return fs

    # -- derived values -------------------------------------------------------------------

    def _derived_ops(self, fs: FlatSeq) -> Ops:
        graph = fs.graph
        if fs.after is not None:
            b = Builder(graph, None, fs.opset, self.names, main_graph=fs.main, after=fs.after)
        else:
            first = next(iter(graph), None)
            b = Builder(graph, first, fs.opset, self.names, main_graph=fs.main)
        return Ops(b)

    def derive(self, fs: FlatSeq, key: str) -> ir.Value:
        """``bounds`` [n+1], ``count`` (scalar) or ``count1`` ([1]), made once, where the
        sequence is made (so a Loop body reading an outer sequence does not redo it)."""
        if key in fs.derived:
            return fs.derived[key]
        dims = self.derive(fs, "dims") if key in ("count", "count1") else None
        o = self._derived_ops(fs)
        base = fs.shapes.name or "seq"
        if key == "bounds":
            sizes = o.b.reduce("ReduceProd", fs.shapes, [1], f"{base}_sizes", keepdims=False)
            # One size a row of [n, W] shapes, whatever the type of ``shapes`` says (a Loop's
            # carried rows may have lost their shape): a CumSum of a known rank is one a
            # target without it (or without it on integers: TensorRT) gets rewritten.
            sizes.dtype, sizes.shape = INT64, ir.Shape([None])
            ends = o.op("CumSum", [sizes, o.scalar(0)], f"{base}_ends", shape=[None])
            v = o.concat([o.ints([0]), ends], 0, f"{base}_bounds")
        elif key == "dims":
            v = o.shape(fs.shapes, f"{base}_dims")
        elif key == "count1":
            v = o.slice(dims, o.ints([0]), o.ints([1]), [0], f"{base}_count1")
        else:
            v = o.op("Gather", [dims, o.scalar(0)], f"{base}_count", shape=[])
        fs.derived[key] = v
        if o.b.nodes:
            fs.after = o.b.nodes[-1]  # later derived values (which may read these) go after
        return v

    # -- elements ----------------------------------------------------------------------

    def element(self, fs: FlatSeq, p: ir.Value, o: Ops, name: str, shape_hint: ir.Shape | None = None) -> ir.Value:
        """Element ``p`` (a normalised int64 scalar) of ``fs``."""
        p1, _, start, end = self.span(fs, p, o, name)
        flat = o.slice(fs.values, start, end, [0], f"{name}_flat")
        shape = o.op("Gather", [fs.shapes, p], f"{name}_shape", shape=[fs.width])
        rank: int | None = fs.width
        if fs.ranks is not None:
            shape = o.slice(shape, o.ints([0]), o.op("Gather", [fs.ranks, p1], f"{name}_rank"), [0], f"{name}_shape_ranked")
            rank = None
        return o.reshape_exact(flat, shape, rank, name, fs.dtype, shape_hint)

    def span(self, fs: FlatSeq, p: ir.Value, o: Ops, name: str) -> tuple[ir.Value, ...]:
        """For element ``p`` (a normalised int64 scalar): ``p`` and ``p + 1`` as [1]
        tensors, and where its values start and end."""
        bounds = self.derive(fs, "bounds")
        p1 = o.reshape(p, o.ints([1]), f"{name}_pos1")
        next1 = o.op("Add", [p1, o.ints([1])], f"{name}_next1")
        start = o.op("Gather", [bounds, p1], f"{name}_start")
        end = o.op("Gather", [bounds, next1], f"{name}_end")
        return p1, next1, start, end

    def normalise(self, fs: FlatSeq, p: ir.Value, o: Ops, name: str, default: str) -> ir.Value:
        return o.position(p, self.derive(fs, "count"), name, default)

    @staticmethod
    def padded_dims(t: ir.Value, rank: int, width: int, o: Ops, name: str) -> ir.Value:
        """A tensor's shape padded with 1 to ``width`` entries: one row of a shapes tensor."""
        s = o.shape(t, f"{name}_dims")
        if width > rank:
            s = o.concat([s, o.ints([1] * (width - rank))], 0, f"{name}_dims_padded")
        return s

    def row(self, t: ir.Value, width: int | None, o: Ops, name: str) -> tuple[ir.Value, int | ir.Value]:
        """A tensor's shape as a [1, W] row of a shapes tensor, and its rank (a [1]
        tensor when only known at run time). W is ``width``; when the width is left to
        run time (None), the tensor's own rank, which :meth:`fit` reconciles with the
        rows it joins."""
        if t.shape is None:
            dims = o.shape(t, f"{name}_dims")
            return o.unsqueeze(dims, [0], f"{name}_row"), o.shape(dims, f"{name}_rank")
        r = t.shape.rank()
        w = r if width is None else width
        return o.unsqueeze(self.padded_dims(t, r, w, o, name), [0], f"{name}_row"), r

    @staticmethod
    def fit(rows: list[ir.Value], width: int | None, o: Ops, name: str) -> list[ir.Value]:
        """Shapes tensors padded with 1 to one width, so they can be concatenated: the
        largest of theirs, when the layout leaves the width to run time."""
        if width is not None or len(rows) < 2:
            return rows
        widths = [o.slice(o.shape(r, f"{name}_{i}_dims"), o.ints([1]), o.ints([2]), [0], f"{name}_{i}_width") for i, r in enumerate(rows)]
        w = o.b.reduce("ReduceMax", o.concat(widths, 0, f"{name}_widths"), [0], f"{name}_width", keepdims=True)
        out = []
        for i, (r, wi) in enumerate(zip(rows, widths)):
            pads = o.concat([o.ints([0, 0, 0]), o.op("Sub", [w, wi], f"{name}_{i}_short")], 0, f"{name}_{i}_pads")
            out.append(o.op("Pad", [r, pads, o.scalar(1)], f"{name}_{i}_wide"))
        return out

    @staticmethod
    def rows_from_dims(dims: ir.Value, ranks: ir.Value, o: Ops, name: str) -> ir.Value:
        """The [n, W] shapes tensor (W the largest rank, rows padded with 1) of elements
        whose shapes are given concatenated (``dims``) with their ranks."""
        w = o.b.reduce("ReduceMax", o.concat([ranks, o.ints([0])], 0, f"{name}_ranks0"), [0], f"{name}_width", keepdims=False)
        cols = o.unsqueeze(o.op("Range", [o.scalar(0), w, o.scalar(1)], f"{name}_cols", dtype=INT64), [0], f"{name}_cols_row")
        starts = o.unsqueeze(o.op("CumSum", [ranks, o.scalar(0)], f"{name}_starts", exclusive=1), [1], f"{name}_starts_col")
        inside = o.op("Less", [cols, o.unsqueeze(ranks, [1], f"{name}_ranks_col")], f"{name}_inside", dtype=ir.DataType.BOOL)
        # Past an element's rank the index points at a trailing 1: the padding.
        pad_at = o.shape(dims, f"{name}_pad_at")
        index = o.op("Where", [inside, o.op("Add", [starts, cols], f"{name}_at"), pad_at], f"{name}_index")
        return o.op("Gather", [o.concat([dims, o.ints([1])], 0, f"{name}_dims1"), index], f"{name}_rows")

    def output(self, old: ir.Value, new: ir.Value, node: ir.Node, scope: Scope) -> None:
        replace_output(old, new, scope, self.names, node, owned=True)

    # -- the model boundary --------------------------------------------------------------

    def abi_input(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        graph = self.model.graph
        o = Ops(Builder(graph, next(iter(graph), None), scope.opset, self.names, main_graph=True))
        width, ranked = self.layout(v)
        elem = v.type.elem_type if isinstance(v.type, ir.SequenceType) else None
        dtype = elem.dtype if isinstance(elem, ir.TensorType) else None
        assert dtype is not None
        base = v.name or "seq"
        values = ir.Value(name=self.names.fresh(f"{base}_values"), type=ir.TensorType(dtype), shape=ir.Shape([f"{base}_total"]))
        shapes = ir.Value(name=self.names.fresh(f"{base}_shapes"), type=ir.TensorType(INT64), shape=ir.Shape([f"{base}_count", width]))
        ports = [values, shapes]
        ranks = None
        inner = shapes
        if ranked:
            ranks = ir.Value(name=self.names.fresh(f"{base}_ranks"), type=ir.TensorType(INT64), shape=ir.Shape([f"{base}_count"]))
            ports.append(ranks)
            # The ABI pads rows with 0; inside, rows are padded with 1 so that a row's
            # product is the element's size.
            inner = o.op("Where", [self.pad_mask(ranks, width, o, base, shapes), shapes, o.ints([1])], f"{base}_shapes_inner")
        self.seqs[v] = FlatSeq(values, inner, ranks, dtype, width, graph, _producer_in(inner, graph), True, scope.opset)
        tensors = dict(zip(("values", "shapes", "ranks"), (t.name for t in ports)))
        return ports, sequence_abi_entry(self.model, v, dtype, width, ranked, tensors, base)

    def pad_mask(self, ranks: ir.Value, width: int | None, o: Ops, base: str, shapes: ir.Value | None = None) -> ir.Value:
        if width is None:
            assert shapes is not None
            w = o.op("Gather", [o.shape(shapes, f"{base}_dims"), o.scalar(1)], f"{base}_width")
            cols = o.op("Range", [o.scalar(0), w, o.scalar(1)], f"{base}_colnums", dtype=INT64)
        else:
            cols = o.ints(list(range(width)))
        return o.op("Less", [o.unsqueeze(cols, [0], f"{base}_cols"), o.unsqueeze(ranks, [1], f"{base}_ranks_col")], f"{base}_in_rank", dtype=ir.DataType.BOOL)

    def abi_output(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        o = Ops(Builder(self.model.graph, None, scope.opset, self.names, main_graph=True))
        fs = self.seq(v)
        base = v.name or "seq"
        width, ranked = self.layout(v)
        shapes = fs.shapes
        if ranked:
            assert fs.ranks is not None
            shapes = o.op("Where", [self.pad_mask(fs.ranks, width, o, f"{base}_out", shapes), shapes, o.ints([0])], f"{base}_shapes_abi")
        tensors: dict[str, str] = {}
        ports = []
        for key, t in (("values", fs.values), ("shapes", shapes), ("ranks", fs.ranks)):
            if t is None:
                continue
            t = o.identity(t, f"{base}_{key}")
            # The checker wants a shape on every model output.
            t.shape = ir.Shape([None, width] if key == "shapes" else [None])
            tensors[key] = t.name or key
            ports.append(t)
        v.name = self.names.fresh(f"{base}_sequence")  # the old value dies with its producer
        return ports, sequence_abi_entry(self.model, v, fs.dtype, width, ranked, tensors, base)


def _producer_in(v: ir.Value, graph: ir.Graph | ir.Function) -> ir.Node | None:
    p = v.producer()
    return p if p is not None and p.graph is graph else None


def attr_int(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()


def flat_tensor(t: ir.Value, o: Ops, name: str) -> ir.Value:
    return o.reshape(t, o.ints([-1]), f"{name}_flat")


def seq_tensors(fs: FlatSeq) -> list[ir.Value]:
    return [fs.values, fs.shapes] + ([fs.ranks] if fs.ranks is not None else [])


def _append_once(lw: FlatLowerer, node: ir.Node, body: ir.Graph, k: int) -> tuple[ir.Node, ir.Value] | None:
    """:func:`append_once`, where the appended tensor has one shape in every iteration
    (Loop scan outputs must), which :func:`_invariant_shape` proves."""
    if lw.layout(body.inputs[2 + k])[0] is None:
        return None  # rows as wide as run time makes them cannot be one scan output
    found = append_once(body, k)
    if found is None or not _invariant_shape(found[1], node, frozenset(model_input_dims(lw.model))):
        return None
    return found


def _invariant_shape(t: ir.Value, node: ir.Node, anchored: frozenset[str]) -> bool:
    """Whether ``t`` has the same shape in every iteration of the Loop: every dim is a
    number or a model input's dim, and the shapes inference gave it rest on carried
    tensors whose shape is the same going in, in the body and coming out."""
    if t.shape is None or not anchored_shape(t.shape, anchored):
        return False
    return loop_shapes_consistent(node)


def scan_row(row: ir.Value, width: int, o: Ops, name: str) -> ir.Value:
    """A shape row as a Loop scan output, [1, W] per step (see :func:`unscan_rows`)."""
    out = o.unsqueeze(row, [0], f"{name}_row_scan")
    out.shape = ir.Shape([1, width])
    return out


def unscan_rows(scan: ir.Value, width: int | None, o: Ops, name: str) -> ir.Value:
    """The [n, 1, W] scan of :func:`scan_row` as [n, W] shape rows. After no iteration
    OpenVINO gives a scan output [0, 0, ...] while its shape inference says [0, *step];
    a Reshape to what it infers would be dropped as a no-op, this Squeeze changes the
    rank (and, unlike a Reshape to [-1, W], holds for W = 0: scalar elements)."""
    assert width is not None
    rows = o.b.squeeze(scan, [1], f"{name}_scan_rows")
    rows.shape = ir.Shape([None, width])
    return rows
