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

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import elementwise_body
from seqlower.passes._rewrite import (
    Scope,
    append_once,
    inline_map_body,
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
from seqlower.analysis.analyzer import (
    Analysis,
    dynamic_split_squeezes,
    model_input_dims,
    node_label,
)
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.ir.builder import Builder
from seqlower.errors import ModelError
from seqlower.ir.helpers import anchored_shape, loop_shapes_consistent, open_when_empty
from seqlower.analysis.splits import unchanged_split_source

__all__ = ["LowerFlatSequencesPass"]

logger = logging.getLogger(__name__)



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


class LowerFlatSequencesPass(WebLoweringPass):
    """Rewrite every Flat web (see ``seqlower.analysis.analyzer``) into tensor ops; with
    ``runtime_ranks`` False, a web where a tensor of unknown rank enters waits (kept)."""

    web_repr = "flat"
    instead = "Flat"

    @staticmethod
    def lowerer(model: ir.Model, analysis: Analysis, policy: str) -> Converter:
        return _Lowerer(model, analysis, policy)


class _Lowerer(Converter):
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
        return _seq_tensors(self.seq(v))

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
        return [o.identity(t, f"{name}_elem"), _scan_row(row, width, o, f"{name}_appended")]

    def append_types(self, carried: ir.Value, t: ir.Value, base: str) -> list[Proto]:
        assert t.shape is not None
        return [(self.names.fresh(f"{base}_scan"), ir.TensorType(self.seq(carried).dtype), ir.Shape([None, *t.shape.dims])),
                (self.names.fresh(f"{base}_scan_rows"), ir.TensorType(INT64), ir.Shape([None, 1, self.layout(carried)[0]]))]

    def bind_appended(self, out: ir.Value, carried: ir.Value, t: ir.Value, scans: list[ir.Value], o: Ops) -> None:
        init = self.seq(carried)
        scan, rows = scans
        name = out.name or "appended"
        values = o.concat([init.values, o.reshape(scan, o.ints([-1]), f"{name}_scan_flat")], 0, f"{name}_flat")
        rows = _unscan_rows(rows, init.width, o, name)
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
            ends = o.op("CumSum", [sizes, o.scalar(0)], f"{base}_ends")
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


def _attr(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()


@rule("SequenceEmpty", "flat")
def _sequence_empty(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    width, ranked = lw.layout(out)
    dtype = ir.DataType(_attr(node, "dtype", ir.DataType.FLOAT.value))
    values = o.empty(dtype)
    shapes = o.b.constant(np.zeros((0, width or 0), dtype=np.int64), f"{out.name}_rows")
    ranks = o.b.constant(np.zeros(0, dtype=np.int64), f"{out.name}_rank_list") if ranked else None
    lw.make(out, values, shapes, ranks, o, dtype)
    return "constants"


def _flat_tensor(t: ir.Value, o: Ops, name: str) -> ir.Value:
    return o.reshape(t, o.ints([-1]), f"{name}_flat")


@rule("SequenceConstruct", "flat")
def _sequence_construct(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    width, ranked = lw.layout(out)
    base = out.name or "seq"
    values, rows, ranks = [], [], []
    for i, t in enumerate(node.inputs):
        assert t is not None
        values.append(_flat_tensor(t, o, f"{base}_{i}"))
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
def _identity(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    lw.seqs[node.outputs[0]] = lw.seq(node.inputs[0])
    return "same tensors"


@rule("SequenceInsert", "flat")
def _sequence_insert(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    t = node.inputs[1]
    out = node.outputs[0]
    base = out.name or "seq"
    pos = node.inputs[2] if len(node.inputs) > 2 else None
    flat_t = _flat_tensor(t, o, base)
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
def _sequence_erase(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
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
def _sequence_at(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "elem"
    p = lw.normalise(fs, node.inputs[1], o, f"{base}_pos", "n")
    elem = lw.element(fs, p, o, base, out.shape)
    lw.output(out, elem, node, scope)
    return "Gather + Slice + Reshape"


@rule("SequenceLength", "flat")
def _sequence_length(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    n = lw.derive(fs, "count")
    lw.output(node.outputs[0], o.identity(n, f"{node.outputs[0].name or 'length'}_n"), node, scope)
    return "Shape"


@rule("SplitToSequence", "flat")
def _split_to_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    base = out.name or "split"
    width, ranked = lw.layout(out)
    squeeze = dynamic_split_squeezes(node, lw.policy)
    assert squeeze is not None
    if x.shape is None:
        return _split_of_unknown_rank(lw, node, o, squeeze)
    r = x.shape.rank()
    a = _attr(node, "axis", 0) % r
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

    parts = [o.rows(pre, n1, f"{base}_pre_rows")] if a else []
    if not squeeze:
        parts.append(o.unsqueeze(sizes, [1], f"{base}_size_col"))
    if r - a - 1:
        parts.append(o.rows(post, n1, f"{base}_post_rows"))
    er = r - 1 if squeeze else r
    if width is not None and width > er:
        parts.append(o.rows(o.ints([1] * (width - er)), n1, f"{base}_pad_rows"))
    if parts:
        shapes = o.concat(parts, 1, f"{base}_rows")
    else:  # scalars out of a 1-D input
        shapes = o.rows(o.b.zeros(INT64, (0,), "row0"), n1, f"{base}_rows")
    ranks = o.repeat(o.ints([er]), n1, f"{base}_rank_list") if ranked else None
    flat_x = _flat_tensor(x, o, base)
    leading_ones = all(dd == 1 for dd in x.shape.dims[:a])
    if a == 0 or leading_ones:
        values = flat_x
    elif split is None:
        perm = [a, *(i for i in range(r) if i != a)]
        values = _flat_tensor(o.op("Transpose", [x], f"{base}_axis_first", perm=perm), o, f"{base}_t")
        how += ", Transpose"
    else:
        values = _element_major(o, flat_x, pre, post, sizes, base)
        how += ", Gather through a permutation"
    lw.make(out, values, shapes, ranks, o, x.dtype)
    return how


def _split_of_unknown_rank(lw: _Lowerer, node: ir.Node, o: Ops, squeeze: bool) -> str:
    """SplitToSequence of a tensor whose rank is only known at run time: the axis, the
    rows and the permutation into element-major order are all computed in the graph."""
    x, out = node.inputs[0], node.outputs[0]
    assert x is not None
    base = out.name or "split"
    axis = _attr(node, "axis", 0)
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

    parts = [o.rows(pre, n1, f"{base}_pre_rows")]
    if not squeeze:
        parts.append(o.unsqueeze(sizes, [1], f"{base}_size_col"))
    parts.append(o.rows(post, n1, f"{base}_post_rows"))
    shapes = o.concat(parts, 1, f"{base}_rows")
    er = o.op("Sub", [r1, o.ints([1])], f"{base}_elem_rank") if squeeze else r1
    ranks = o.repeat(er, n1, f"{base}_rank_list")
    flat_x = _flat_tensor(x, o, base)
    if axis == 0:
        values = flat_x
    else:
        values = _element_major(o, flat_x, pre, post, sizes, base)
        how += ", Gather through a permutation"
    lw.make(out, values, shapes, ranks, o, x.dtype)
    return how + " (rank known at run time)"


def _element_major(o: Ops, flat_x: ir.Value, pre: ir.Value, post: ir.Value, sizes: ir.Value, base: str) -> ir.Value:
    """The values of a tensor of dims ``pre + [sum(sizes)] + post`` (``flat_x``, in C
    order) cut along that middle axis, element after element."""
    p = o.b.reduce("ReduceProd", pre, None, f"{base}_p", keepdims=True)
    q = o.b.reduce("ReduceProd", post, None, f"{base}_q", keepdims=True)
    return o.op("Gather", [flat_x, _inverse_index(o, p, q, sizes, base)], f"{base}_flat")


def _inverse_index(o: Ops, p: ir.Value, q: ir.Value, sizes: ir.Value, base: str) -> ir.Value:
    """Where each entry of the element-major order is in a [P, sum(sizes), Q] tensor
    cut along its middle axis: the inverse of :meth:`Ops.concat_index`."""
    elem_sizes = o.op("Mul", [sizes, o.op("Mul", [p, q], f"{base}_pq")], f"{base}_elem_sizes")
    offsets = o.op("CumSum", [elem_sizes, o.scalar(0)], f"{base}_offsets", exclusive=1)
    index = o.concat_index(p, q, sizes, offsets, f"{base}_perm")
    total = o.shape(index, f"{base}_total")
    zeros = o.repeat(o.ints([0]), total, f"{base}_zeros")
    iota = o.op("Range", [o.scalar(0), o.reshape(total, o.ints([]), f"{base}_total_s"), o.scalar(1)], f"{base}_iota", dtype=INT64)
    return o.op("ScatterElements", [zeros, index, iota], f"{base}_inverse", axis=0)


@rule("ConcatFromSequence", "flat")
def _concat_from_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "concat"
    r = fs.width
    axis = _attr(node, "axis", 0)
    new_axis = _attr(node, "new_axis", 0)
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


def _concat_of_unknown_rank(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    """ConcatFromSequence of elements whose (common) rank is only known at run time:
    the axis is normalised in the graph and the elements are gathered through the
    permutation of :meth:`Ops.concat_index`; new_axis stacks them as a concatenation of
    elements with a 1 inserted at the axis."""
    fs = lw.seq(node.inputs[0])
    out = node.outputs[0]
    base = out.name or "concat"
    assert fs.ranks is not None
    axis = _attr(node, "axis", 0)
    new_axis = _attr(node, "new_axis", 0)
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


def _seq_tensors(fs: FlatSeq) -> list[ir.Value]:
    return [fs.values, fs.shapes] + ([fs.ranks] if fs.ranks is not None else [])


@rule("If", "flat")
def _if(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    convert_if(lw, node, scope)
    return "If returning the tensors"


@rule("Loop", "flat")
def _loop(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    return convert_loop(lw, node, scope)


def _append_once(lw: _Lowerer, node: ir.Node, body: ir.Graph, k: int) -> tuple[ir.Node, ir.Value] | None:
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


def _scan_row(row: ir.Value, width: int, o: Ops, name: str) -> ir.Value:
    """A shape row as a Loop scan output, [1, W] per step (see :func:`_unscan_rows`)."""
    out = o.unsqueeze(row, [0], f"{name}_row_scan")
    out.shape = ir.Shape([1, width])
    return out


def _unscan_rows(scan: ir.Value, width: int | None, o: Ops, name: str) -> ir.Value:
    """The [n, 1, W] scan of :func:`_scan_row` as [n, W] shape rows. After no iteration
    OpenVINO gives a scan output [0, 0, ...] while its shape inference says [0, *step];
    a Reshape to what it infers would be dropped as a no-op, this Squeeze changes the
    rank (and, unlike a Reshape to [-1, W], holds for W = 0: scalar elements)."""
    assert width is not None
    rows = o.b.squeeze(scan, [1], f"{name}_scan_rows")
    rows.shape = ir.Shape([None, width])
    return rows


@rule("SequenceMap", "flat")
def _sequence_map(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    lw.graph(Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False))
    info = lw.analysis.info.get(node.inputs[0])
    if info is not None and info.length == 0:
        # A map over a list that is provably empty makes empty lists: no Loop (its body's
        # shapes, never computed, may not even have a rank).
        for out, bo in zip(node.outputs, body.outputs):
            width, ranked = lw.layout(out)
            out_info = lw.analysis.info.get(out)
            dtype = bo.dtype or (out_info.dtype if out_info is not None else None)
            assert dtype is not None
            shapes = o.b.constant(np.zeros((0, width or 0), dtype=np.int64), f"{out.name}_rows")
            ranks = o.b.constant(np.zeros(0, dtype=np.int64), f"{out.name}_rank_list") if ranked else None
            lw.make(out, o.empty(dtype), shapes, ranks, o, dtype)
        return "empty lists: the mapped list is empty"
    first = lw.seq(node.inputs[0])
    if _elementwise_map(lw, node, body, first, o):
        return "the body once on the values (elementwise): no Loop"

    def element(inp: ir.Value, it: ir.Value, bo_ops: Ops, name: str) -> ir.Value:
        return lw.element(lw.seq(inp), it, bo_ops, name, None)

    def collect(k: int, y: ir.Value, bo: ir.Value, bo_ops: Ops) -> Collected:
        return _collect(lw, node.outputs[k], y, bo, first, bo_ops, o)

    return map_as_loop(lw, node, o, scope, element, lw.derive(first, "count"), collect)


def _elementwise_map(lw: _Lowerer, node: ir.Node, body: ir.Graph, first: FlatSeq, o: Ops) -> bool:
    """A map whose body works element by element with scalars (normalising images of
    any sizes: Cast, Div, Sub) runs once on the list's values; its lists keep the
    input's shapes. False where it does not apply (then a Loop)."""
    if any(lw.owns(v) for v in node.inputs[1:] if v is not None):
        return False
    batched = elementwise_body(body, [body.inputs[0]])
    if batched is None:
        return False
    if any(lw.layout(out) != lw.layout(node.inputs[0]) for out in node.outputs):
        return False
    value_map: dict[ir.Value, ir.Value | None] = {body.inputs[0]: first.values}
    value_map.update(zip(body.inputs[1:], node.inputs[1:]))
    mapped = inline_map_body(body, value_map, o.b, lw.names)
    for v in batched - set(body.inputs):
        mapped[v].shape = ir.Shape([None])  # the values of every element, one after another
    for out, bo in zip(node.outputs, body.outputs):
        values = mapped[bo]
        assert bo.dtype is not None or values.dtype is not None
        lw.make(out, values, first.shapes, first.ranks, o, values.dtype or bo.dtype)
    return True


def _collect(lw: _Lowerer, out: ir.Value, y: ir.Value, bo: ir.Value, first: FlatSeq, bo_ops: Ops, o: Ops) -> Collected:
    """How the map's Loop collects output ``out`` (``y`` in the step): a scan output
    where the body's output shape is static; else the values carried by Concat with a
    scan output of shape rows, or, when the rank is only known at run time, with the
    shapes carried too and a scan output of ranks."""
    m = _MapOutput(lw, out, bo, first, bo_ops, o)
    shape = bo.shape
    r = shape.rank() if shape is not None else None
    w = m.width if m.width is not None else r
    flat_y = _flat_tensor(y, bo_ops, f"{m.name}_y")
    if shape is not None and all(isinstance(d, int) for d in shape.dims):
        assert r is not None and w is not None
        return m.scanned(flat_y, [int(d) for d in shape.dims], w)
    if r is not None and w is not None:
        return m.carried_with_rows(y, flat_y, r, w)
    return m.carried_with_shapes(y, flat_y)


class _MapOutput:
    """One output of a map's Loop, collected one of three ways (see :func:`_collect`)."""

    def __init__(self, lw: _Lowerer, out: ir.Value, bo: ir.Value, first: FlatSeq, bo_ops: Ops, o: Ops) -> None:
        self.lw, self.out, self.first, self.bo_ops, self.o = lw, out, first, bo_ops, o
        self.width, self.ranked = lw.layout(out)
        assert bo.dtype is not None
        self.dtype: ir.DataType = bo.dtype
        self.name = out.name or "map"
        self.c = Collected()

    def carry(self, t: ir.Value, dtype: ir.DataType, what: str) -> None:
        acc = ir.Value(name=self.lw.names.fresh(f"{self.name}_{what}_acc"), type=ir.TensorType(dtype), shape=ir.Shape([None]))
        self.c.carried.append((self.o.empty(dtype), acc, self.bo_ops.concat([acc, t], 0, f"{self.name}_{what}_acc_next")))

    def named(self, v: ir.Value, suffix: str, dtype: ir.DataType) -> ir.Value:
        v.name, v.type = self.lw.names.fresh(f"{self.name}_{suffix}"), ir.TensorType(dtype)
        return v

    def ranks_of(self, rank: int) -> ir.Value | None:
        if not self.ranked:
            return None
        return self.o.repeat(self.o.ints([rank]), self.lw.derive(self.first, "count1"), f"{self.name}_rank_list")

    def scanned(self, flat_y: ir.Value, dims: list[int], w: int) -> Collected:
        lw, o, name = self.lw, self.o, self.name
        flat_y.shape = ir.Shape([int(np.prod(dims, dtype=np.int64))])
        self.c.scans.append(flat_y)

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            scan = self.named(scans[0], "scan", self.dtype)
            row = o.ints(dims + [1] * (w - len(dims)))
            shapes = o.rows(row, lw.derive(self.first, "count1"), f"{name}_rows")
            lw.make(self.out, o.reshape(scan, o.ints([-1]), f"{name}_flat"), shapes, self.ranks_of(len(dims)), o, self.dtype)

        self.c.finish, self.c.how = finish, "scan output"
        return self.c

    def carried_with_rows(self, y: ir.Value, flat_y: ir.Value, r: int, w: int) -> Collected:
        self.carry(flat_y, self.dtype, "values")
        row = self.lw.padded_dims(y, r, w, self.bo_ops, f"{self.name}_y")
        row.shape = ir.Shape([w])
        self.c.scans.append(_scan_row(row, w, self.bo_ops, f"{self.name}_y"))

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            values, scan = self.named(carried[0], "flat", self.dtype), self.named(scans[0], "scan", INT64)
            self.lw.make(self.out, values, _unscan_rows(scan, w, self.o, self.name), self.ranks_of(r), self.o, self.dtype)

        self.c.finish, self.c.how = finish, "carried Concat"
        return self.c

    def carried_with_shapes(self, y: ir.Value, flat_y: ir.Value) -> Collected:
        bo_ops, name = self.bo_ops, self.name
        self.carry(flat_y, self.dtype, "values")
        dims = bo_ops.shape(y, f"{name}_y_dims")
        self.carry(dims, INT64, "dims")
        rank = bo_ops.reshape(bo_ops.shape(dims, f"{name}_y_rank1"), bo_ops.ints([]), f"{name}_y_rank")
        rank.shape = ir.Shape([])
        self.c.scans.append(rank)

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            values, dims_flat = self.named(carried[0], "flat", self.dtype), self.named(carried[1], "dims_flat", INT64)
            ranks = self.named(scans[0], "scan", INT64)
            self.lw.make(self.out, values, self.lw.rows_from_dims(dims_flat, ranks, self.o, name), ranks, self.o, self.dtype)

        self.c.finish, self.c.how = finish, "carried Concat of values and shapes"
        return self.c


RULES = rules("flat")
