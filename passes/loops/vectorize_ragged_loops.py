"""A Loop whose iterations are independent and append results of data-dependent length
(the nonzero positions of row i, ...) run once on all rows, for targets without Loop.

TorchScript's ``for i in range(n): out.append(x[i].nonzero() + i * 10)`` lowers to a
Loop that appends each row's values to a flat buffer and each row's length to another
(the Flat list): no Scan takes it (the buffers grow) and the batched body of
``vectorize_loops`` cannot (a row's length is data). Here every body value is one of

- unbatched: the same for every iteration (outer values, constants);
- dense: one per iteration, stacked ``[M, *per_row]`` (the iteration number is
  ``Range(0, M)``, row i of an outer tensor is that tensor's rows);
- ragged: per iteration a tensor of run-time length along one axis, 1 along axes before
  it and the same dims for every iteration after it (``DIM``), stored as its values over
  all iterations in order (``[K, *dims]``), the iteration each value row belongs to
  (``[K]``) and each iteration's length (``[M]``).

Ragged values come from ``NonZero`` of a dense row mask (``NonZero`` of the stacked
masks lists the positions row by row), ``Slice`` with per-iteration bounds (tf2onnx's
map over a RaggedTensor reads row i as ``values[splits[i]:splits[i+1]]``), ``Range``
with per-iteration bounds and ``Compress`` of a row by its own mask; their positions
come from ``NonZero`` of ``j < length`` over ``[M, max length]``. Elementwise ops of
ragged values with per-iteration values gather those by iteration; Transpose, Squeeze
and Unsqueeze move unit axes; ``Shape`` of a ragged value is dense (the lengths);
``Reshape`` to ``[-1]`` flattens it; ReduceSum/Mean/Max/Min over the ragged axis pad
the rows (a gather with a filler) and reduce them, dense again. An append
``Concat(carried, piece)`` of a buffer the body reads nowhere else is the buffer's
initial value followed by every piece, in order; a scan output is the dense value
itself. Anything else, and the Loop is left to the other rewrites. The result has no
Loop and no Scan, and zero trips give empty appends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import ELEMENTWISE, UNARY
from seqlower.passes._rewrite import Scope, discard_subgraphs, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.passes.quirks.pad_reduced_axes import neutral_element
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.helpers import loop_runs_all_trips
from seqlower.ir.builder import Builder, NameAuthority

__all__ = ["VectorizeRaggedLoopsPass"]


@dataclass(frozen=True)
class Dense:
    value: ir.Value  # [M, *per_row]
    rank: int  # per-iteration rank
    units: frozenset[int] = frozenset()  # per-iteration axes known to be 1


DIM = -1  # in a Ragged pattern: a dim after the ragged axis, the same for every iteration


@dataclass(frozen=True)
class Ragged:
    flat: ir.Value  # [K, *the DIM dims]
    rows: ir.Value  # [K]: the iteration of each value row
    lengths: ir.Value  # [M]
    # Per-iteration dims: None the ragged axis, 1 a unit axis, DIM a dim of ``flat``
    # (every DIM after the ragged axis, in flat's order).
    pattern: tuple[int | None, ...]

    @property
    def dims(self) -> int:
        return sum(1 for d in self.pattern if d == DIM)


class _Cannot(Exception):
    pass


class VectorizeRaggedLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _vectorize)


def _appends(node: ir.Node, body: ir.Graph) -> dict[int, ir.Value] | None:
    """Per carried slot, the piece its body appends (``Concat(carried, piece)``, axis 0,
    the carried value read nowhere else); None unless every carried value is one."""
    pieces = {}
    for k, (bi, bo) in enumerate(zip(body.inputs[2:], body.outputs[1 : 1 + len(node.inputs) - 2])):
        p = bo.producer()
        if p is None or p.op_type != "Concat" or not is_default_domain(p) or len(p.inputs) != 2 or p.inputs[0] is not bi:
            return None
        axis = p.attributes.get("axis")
        if axis is None or axis.as_int() != 0 or len(bi.uses()) != 1 or (bi.shape is not None and bi.shape.rank() < 1):
            return None
        pieces[k] = p.inputs[1]
    return pieces


def _vectorize(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    if not node.inputs or node.inputs[0] is None or len(node.inputs) < 3 or any(v is None for v in node.inputs[2:]):
        return None
    body = node.attributes["body"].as_graph()
    n_carried = len(node.inputs) - 2
    if not loop_runs_all_trips(node, body):
        return None
    pieces = _appends(node, body)
    if pieces is None:
        return None
    # Built aside and moved in only when the whole body batches: a body that does not
    # leaves the model as it was (no stray constant to clean up, no extra round).
    scratch = ir.Graph([], [], nodes=[], name="scratch", opset_imports={"": scope.opset})
    o = Ops(Builder(scratch, None, scope.opset, names, main_graph=False))
    base = node.name or "loop"
    m = node.inputs[0]
    trips = o.reshape(m, o.ints([]), f"{base}_trips") if m.shape is None or m.shape.rank() != 0 else m
    env = _Env(o, base, body, trips)
    try:
        finals = []
        for k in range(n_carried):
            value = env.get(pieces[k])
            finals.append(o.concat([node.inputs[2 + k], env.flatten(value, f"{base}_{k}")], 0, f"{base}_appended_{k}"))
        for k, v in enumerate(body.outputs[1 + n_carried:]):
            finals.append(env.stacked(env.get(v), f"{base}_scan_{k}"))
    except _Cannot:
        return None
    for made in list(scratch):
        scratch.remove(made)
        scope.graph.insert_before(node, made)
    for out, value in zip(node.outputs, finals):
        replace_output(out, value, scope, names, node, owned=True)
    discard_subgraphs(node)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "Loop of ragged appends run once on all rows (batched, no Loop)"


class _Env:
    """Body values as unbatched (the value), Dense or Ragged, computed on demand."""

    def __init__(self, o: Ops, base: str, body: ir.Graph, trips: ir.Value) -> None:
        self.o, self.base, self.body = o, base, body
        self.trips = trips
        self.known: dict[ir.Value, ir.Value | Dense | Ragged] = {}
        # A trip count read off a shape is never negative: no Max (TVM converts none of a dim).
        self.count = trips if _a_dim(trips) else o.op("Max", [trips, o.scalar(0)], f"{base}_count", dtype=INT64, shape=[])
        iterations = o.op("Range", [o.scalar(0), self.count, o.scalar(1)], f"{base}_iterations", dtype=INT64, shape=[None])
        self.known[body.inputs[0]] = Dense(iterations, 0)
        self.inside = {v for n in body for v in n.outputs} | set(body.inputs)

    def get(self, v: ir.Value) -> ir.Value | Dense | Ragged:
        if v in self.known:
            return self.known[v]
        if v.name in self.body.initializers and self.body.initializers[v.name] is v and v.const_value is not None:
            c = self.o.b.constant(v.const_value.numpy(), v.name or "c")
            self.known[v] = c
            return c
        if v not in self.inside:
            return v  # an outer value
        p = v.producer()
        if p is None or not is_default_domain(p) or len(p.outputs) != 1 or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in p.attributes.values()):
            raise _Cannot
        out = self._node(p)
        self.known[v] = out
        return out

    def _node(self, p: ir.Node) -> ir.Value | Dense | Ragged:
        o, name = self.o, f"{self.base}_{p.name or p.op_type}"
        ins = [self.get(x) if x is not None else None for x in p.inputs]
        op = p.op_type
        if all(isinstance(x, ir.Value) or x is None for x in ins):
            # The same on every iteration (a Constant, arithmetic on outer values): once.
            out = _same_op(o, p, ins, name)
            out.shape = p.outputs[0].shape  # unbatched: the body's own value
            return out
        if op == "Gather":
            return self._gather(p, ins, name)
        if op == "NonZero" and isinstance(ins[0], Dense) and ins[0].rank == 1:
            mask = ins[0].value
            rows, flat = self._nonzero_pairs(mask, name)
            if mask.dtype is None:
                raise _Cannot
            zero = o.b.constant(np.zeros((), mask.dtype.numpy()), f"{name}_zero")
            nonzero = o.op("Not", [o.op("Equal", [mask, zero], f"{name}_is_zero", dtype=ir.DataType.BOOL)],
                           f"{name}_set", dtype=ir.DataType.BOOL)
            lengths = o.b.reduce("ReduceSum", o.op("Cast", [nonzero], f"{name}_ones", dtype=INT64, to=INT64), [1],
                                 f"{name}_lengths", keepdims=False)
            return Ragged(flat, rows, lengths, (1, None))
        if op in ("Transpose", "Squeeze", "Unsqueeze") and isinstance(ins[0], Ragged):
            return self._move_units(p, ins[0])
        if op in ("Squeeze", "Unsqueeze") and isinstance(ins[0], Dense):
            axes = _axes(p)
            rank = ins[0].rank + (len(axes) if op == "Unsqueeze" and axes is not None else 0)
            if axes is None or rank == 0:
                raise _Cannot
            axes = sorted(a % rank for a in axes)
            made = o.unsqueeze(ins[0].value, [a + 1 for a in axes], name) if op == "Unsqueeze" else \
                o.b.squeeze(ins[0].value, [a + 1 for a in axes], name)
            return Dense(made, rank if op == "Unsqueeze" else rank - len(axes))
        if op == "Shape" and not p.attributes:
            return self._shape(ins[0], name)
        if op == "Slice" and isinstance(ins[0], Dense) and ins[0].rank == 1 and all(isinstance(x, ir.Value) for x in ins[1:] if x is not None):
            starts, ends = (const_array(x) for x in p.inputs[1:3])
            axes = const_array(p.inputs[3]) if len(p.inputs) > 3 and p.inputs[3] is not None else np.array([0])
            steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else None
            if starts is None or ends is None or axes is None or int(axes.reshape(-1)[0]) != 0 or (steps is not None and int(steps.reshape(-1)[0]) != 1):
                raise _Cannot
            return Dense(o.slice(ins[0].value, o.ints([int(starts.reshape(-1)[0])]), o.ints([int(ends.reshape(-1)[0])]), [1], name), 1)
        if op == "Slice" and not isinstance(ins[0], Ragged) and len(ins) >= 3:
            return self._slice_by_rows(p, ins, name)
        if op == "Range" and not any(isinstance(x, Ragged) for x in ins):
            return self._range_by_rows(p, ins, name)
        if op == "Compress" and isinstance(ins[0], Dense) and ins[0].rank == 1 and isinstance(ins[1], Dense) and ins[1].rank == 1:
            axis = p.attributes.get("axis")
            if axis is not None and axis.as_int() not in (0, -1):
                raise _Cannot
            return self._compress_rows(ins[0].value, ins[1].value, name)
        if op == "Reshape" and isinstance(ins[0], Ragged):
            target = const_array(p.inputs[1])
            if target is None or [int(d) for d in target.reshape(-1)] != [-1]:
                raise _Cannot
            return self._flattened(ins[0], name)
        if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin") and isinstance(ins[0], Ragged):
            return self._reduce_rows(p, ins[0], name)
        if op in UNARY and op not in ("Clip", "CastLike") and len(ins) == 1:
            x = ins[0]
            if isinstance(x, Dense):
                return Dense(_same_op(o, p, [x.value], name), x.rank)
            if isinstance(x, Ragged):
                return Ragged(_same_op(o, p, [x.flat], name), x.rows, x.lengths, x.pattern)
        if op in ELEMENTWISE and op != "Where" and len(ins) == 2:
            return self._binary(p, ins, name)
        raise _Cannot

    def _count(self) -> ir.Value:
        return self.count

    # -- dense and unbatched ----------------------------------------------------------

    def _gather(self, p: ir.Node, ins: list, name: str) -> Dense | Ragged:
        o = self.o
        data, index = ins[0], ins[1]
        axis = p.attributes.get("axis")
        axis = 0 if axis is None else axis.as_int()
        if isinstance(data, ir.Value) and isinstance(index, Dense):
            rank = data.shape.rank() if data.shape is not None else None
            if rank is None or axis % rank != 0:
                raise _Cannot
            return Dense(o.op("Gather", [data, index.value], name, dtype=data.dtype, axis=0), index.rank + rank - 1)
        if isinstance(data, Dense) and isinstance(index, Ragged) and data.rank > 0 and axis % data.rank == 0:
            # Row i's own positions (a Compress lowered to NonZero -> Gather).
            v = data.value
            dims = o.shape(v, f"{name}_dims")
            w = o.op("Gather", [dims, o.scalar(1)], f"{name}_w", dtype=INT64, shape=[], axis=0)
            at = o.op("Cast", [index.flat], f"{name}_at64", dtype=INT64, to=INT64)
            at = o.op("Where", [o.op("Less", [at, o.scalar(0)], f"{name}_negative", dtype=ir.DataType.BOOL),
                                o.op("Add", [at, w], f"{name}_from_end", dtype=INT64), at], f"{name}_fwd", dtype=INT64)
            if index.dims:
                raise _Cannot
            at = o.op("Add", [o.op("Mul", [index.rows, w], f"{name}_row_start",
                                   dtype=INT64), at], f"{name}_index", dtype=INT64)
            merged = o.reshape(v, o.concat([o.ints([-1]), o.slice(dims, o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")],
                                           0, f"{name}_merged_dims"), f"{name}_merged")
            flat = o.op("Gather", [merged, at], name, dtype=v.dtype, axis=0)
            return Ragged(flat, index.rows, index.lengths, (*index.pattern, *[DIM] * (data.rank - 1)))
        if isinstance(data, Dense) and isinstance(index, ir.Value) and data.rank > 0:
            ri = index.shape.rank() if index.shape is not None else None
            if ri is None:
                raise _Cannot
            return Dense(o.op("Gather", [data.value, index], name, dtype=data.value.dtype, axis=axis % data.rank + 1),
                         data.rank - 1 + ri)
        raise _Cannot

    def _shape(self, x, name: str) -> ir.Value | Dense:
        o = self.o
        if isinstance(x, Dense):
            # The same on every iteration: the stacked value's dims after the first.
            return o.slice(o.shape(x.value, f"{name}_stacked"), o.ints([1]), o.ints([MAX_INT64]), [0], name)
        if not isinstance(x, Ragged):
            raise _Cannot
        m = o.unsqueeze(self._count(), [0], f"{name}_m")
        dims = o.shape(x.flat, f"{name}_flat") if x.dims else None
        cols, j = [], 0
        for d in x.pattern:
            if d is None:
                cols.append(o.unsqueeze(x.lengths, [1], f"{name}_len"))
                continue
            if d == DIM:
                j += 1
                one = o.op("Gather", [dims, o.ints([j])], f"{name}_dim", dtype=INT64, shape=[1], axis=0)
            else:
                one = o.ints([1])
            cols.append(o.unsqueeze(o.repeat(one, m, f"{name}_col"), [1], f"{name}_column"))
        return Dense(o.concat(cols, 1, name), 1)

    # -- ragged -------------------------------------------------------------------------

    def _per_row(self, x, name: str) -> ir.Value:
        """A per-iteration scalar (or one-element) operand as ``[M]`` int64."""
        o = self.o
        if isinstance(x, Dense):
            v = o.reshape(x.value, o.ints([-1]), f"{name}_rows") if x.rank else x.value
        elif isinstance(x, ir.Value):
            v = o.op("Expand", [o.reshape(x, o.ints([]), f"{name}_one"), o.unsqueeze(self._count(), [0], f"{name}_m")],
                     f"{name}_rows", dtype=x.dtype, shape=[None])
        else:
            raise _Cannot
        return v

    def _positions(self, lengths: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """Per value of a ragged result in order, its iteration and its place in that
        iteration's row: ``NonZero`` of ``j < length`` over ``[M, max length]``."""
        return self._nonzero_pairs(self._inside(lengths, name)[1], name)

    def _inside(self, lengths: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """``j`` (``[1, longest]``) and the mask ``j < length`` (``[M, longest]``)."""
        o = self.o
        longest = o.b.reduce("ReduceMax", o.concat([lengths, o.ints([0])], 0, f"{name}_or_none"), [0], f"{name}_longest",
                             keepdims=False)
        j = o.unsqueeze(o.op("Range", [o.scalar(0), longest, o.scalar(1)], f"{name}_places", dtype=INT64, shape=[None]),
                        [0], f"{name}_place")
        return j, o.op("Less", [j, o.unsqueeze(lengths, [1], f"{name}_length")], f"{name}_inside", dtype=ir.DataType.BOOL)

    def _nonzero_pairs(self, mask: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """The set places of a ``[M, w]`` mask in order: the row of each, its column."""
        o = self.o
        nz = o.op("NonZero", [mask], f"{name}_nonzero", dtype=INT64, shape=[2, None])
        rows = o.op("Gather", [nz, o.scalar(0)], f"{name}_rows", dtype=INT64, shape=[None], axis=0)
        cols = o.op("Gather", [nz, o.scalar(1)], f"{name}_cols", dtype=INT64, shape=[None], axis=0)
        return rows, cols

    def _slice_by_rows(self, p: ir.Node, ins: list, name: str) -> Ragged:
        """``x[start_i:end_i]`` along axis 0 with per-iteration bounds, step 1."""
        o = self.o
        data = ins[0]
        axes = const_array(p.inputs[3]) if len(p.inputs) > 3 and p.inputs[3] is not None else np.array([0])
        steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else np.array([1])
        if axes is None or steps is None or axes.size != 1 or steps.size != 1 or int(steps.reshape(-1)[0]) != 1:
            raise _Cannot
        if isinstance(data, Dense):
            rank, stacked = data.rank, data.value
        else:
            rank, stacked = (data.shape.rank() if data.shape is not None else None), None
        if not rank or int(axes.reshape(-1)[0]) % rank != 0:
            raise _Cannot
        source = stacked if stacked is not None else data
        n = o.op("Gather", [o.shape(source, f"{name}_dims"), o.scalar(1 if stacked is not None else 0)], f"{name}_n",
                 dtype=INT64, shape=[], axis=0)
        zero = o.scalar(0)

        def bound(x, tag: str) -> ir.Value:
            v = o.op("Cast", [self._per_row(x, f"{name}_{tag}")], f"{name}_{tag}64", dtype=INT64, to=INT64)
            from_end = o.op("Add", [v, n], f"{name}_{tag}_from_end", dtype=INT64)
            v = o.op("Where", [o.op("Less", [v, zero], f"{name}_{tag}_negative", dtype=ir.DataType.BOOL), from_end, v],
                     f"{name}_{tag}_fwd", dtype=INT64)
            return o.op("Max", [o.op("Min", [v, n], f"{name}_{tag}_max", dtype=INT64), zero], f"{name}_{tag}_in", dtype=INT64)

        start, end = bound(ins[1], "start"), bound(ins[2], "end")
        lengths = o.op("Max", [o.op("Sub", [end, start], f"{name}_span", dtype=INT64), zero], f"{name}_lengths", dtype=INT64)
        rows, cols = self._positions(lengths, name)
        index = o.op("Add", [o.op("Gather", [start, rows], f"{name}_first", dtype=INT64, axis=0), cols], f"{name}_index", dtype=INT64)
        if stacked is not None:
            # Row i of the stacked value starts at i * n once its first two axes merge.
            index = o.op("Add", [index, o.op("Mul", [rows, n], f"{name}_row_start", dtype=INT64)], f"{name}_at", dtype=INT64)
            rest = o.slice(o.shape(stacked, f"{name}_stacked_dims"), o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")
            source = o.reshape(stacked, o.concat([o.ints([-1]), rest], 0, f"{name}_merged_dims"), f"{name}_merged")
        flat = o.op("Gather", [source, index], name, dtype=p.outputs[0].dtype, axis=0)
        return Ragged(flat, rows, lengths, (None, *[DIM] * (rank - 1)))

    def _range_by_rows(self, p: ir.Node, ins: list, name: str) -> Ragged:
        """``Range(start_i, limit_i, delta_i)``: ``max(ceil((limit - start) / delta), 0)``
        values per iteration, ``start + place * delta``."""
        o = self.o
        dtype = p.outputs[0].dtype or next((x.value.dtype if isinstance(x, Dense) else x.dtype) for x in ins)
        if dtype is None or any(isinstance(x, Dense) and x.rank != 0 for x in ins):
            raise _Cannot
        start, limit, delta = (self._per_row(x, f"{name}_{k}") for k, x in zip(("start", "limit", "delta"), ins))
        double = ir.DataType.DOUBLE
        span = o.op("Div", [o.op("Cast", [o.op("Sub", [limit, start], f"{name}_span", dtype=dtype)], f"{name}_span_d", dtype=double, to=double),
                            o.op("Cast", [delta], f"{name}_delta_d", dtype=double, to=double)], f"{name}_steps", dtype=double)
        count = o.op("Cast", [o.op("Ceil", [span], f"{name}_ceil", dtype=double)], f"{name}_count", dtype=INT64, to=INT64)
        lengths = o.op("Max", [count, o.scalar(0)], f"{name}_lengths", dtype=INT64)
        rows, cols = self._positions(lengths, name)
        step = o.op("Mul", [o.op("Cast", [cols], f"{name}_place", dtype=dtype, to=dtype),
                            o.op("Gather", [delta, rows], f"{name}_delta_of", dtype=dtype, axis=0)], f"{name}_offset", dtype=dtype)
        flat = o.op("Add", [o.op("Gather", [start, rows], f"{name}_start_of", dtype=dtype, axis=0), step], name, dtype=dtype)
        return Ragged(flat, rows, lengths, (None,))

    def _compress_rows(self, data: ir.Value, condition: ir.Value, name: str) -> Ragged:
        """``Compress(row_i, mask_i)``: a mask shorter than the row keeps only its part."""
        o = self.o
        mask = o.op("Cast", [condition], f"{name}_mask", dtype=ir.DataType.BOOL, to=ir.DataType.BOOL)
        width = o.op("Gather", [o.shape(mask, f"{name}_mask_dims"), o.ints([1])], f"{name}_width", dtype=INT64, shape=[1], axis=0)
        kept = o.slice(data, o.ints([0]), width, [1], f"{name}_kept")
        rows, cols = self._nonzero_pairs(mask, name)
        index = o.op("Add", [o.op("Mul", [rows, width], f"{name}_row_start", dtype=INT64), cols], f"{name}_index", dtype=INT64)
        flat = o.op("Gather", [o.reshape(kept, o.ints([-1]), f"{name}_all"), index], name, dtype=data.dtype, axis=0)
        lengths = o.b.reduce("ReduceSum", o.op("Cast", [mask], f"{name}_ones", dtype=INT64, to=INT64), [1],
                             f"{name}_lengths", keepdims=False)
        return Ragged(flat, rows, lengths, (None,))

    def _move_units(self, p: ir.Node, r: Ragged) -> Ragged:
        """Transpose, Squeeze and Unsqueeze that move only unit axes (and keep the
        ragged axis before every DIM, the DIMs in order) change the pattern alone."""
        pattern = list(r.pattern)
        if p.op_type == "Transpose":
            perm = p.attributes.get("perm")
            order = list(perm.as_ints()) if perm is not None else list(reversed(range(len(pattern))))
            kept = [i for i in order if pattern[i] != 1]
            if kept != sorted(kept):
                raise _Cannot
            return Ragged(r.flat, r.rows, r.lengths, tuple(pattern[i] for i in order))
        axes = _axes(p)
        if p.op_type == "Squeeze":
            axes = [a % len(pattern) for a in (axes if axes is not None else [i for i, d in enumerate(pattern) if d == 1])]
            if any(pattern[a] != 1 for a in axes):
                raise _Cannot
            pattern = [d for i, d in enumerate(pattern) if i not in axes]
        else:
            if axes is None:
                raise _Cannot
            for a in sorted(a % (len(pattern) + len(axes)) for a in axes):
                pattern.insert(a, 1)
        return Ragged(r.flat, r.rows, r.lengths, tuple(pattern))

    def _flattened(self, r: Ragged, name: str) -> Ragged:
        """``Reshape(row, [-1])``: each iteration's values, its DIMs merged in."""
        o = self.o
        if not r.dims:
            return Ragged(r.flat, r.rows, r.lengths, (None,))
        per = o.b.reduce("ReduceProd", o.slice(o.shape(r.flat, f"{name}_dims"), o.ints([1]), o.ints([MAX_INT64]), [0],
                                               f"{name}_inner"), [0], f"{name}_per", keepdims=True)
        count = o.op("Shape", [r.rows], f"{name}_k", dtype=INT64, shape=[1])
        rows = o.reshape(o.op("Expand", [o.unsqueeze(r.rows, [1], f"{name}_row"), o.concat([count, per], 0, f"{name}_grid")],
                              f"{name}_rows_grid", dtype=INT64), o.ints([-1]), f"{name}_rows")
        lengths = o.op("Mul", [r.lengths, per], f"{name}_lengths", dtype=INT64)
        return Ragged(o.reshape(r.flat, o.ints([-1]), name), rows, lengths, (None,))

    def _reduce_rows(self, p: ir.Node, r: Ragged, name: str) -> Dense:
        """A reduction over the ragged axis (and unit axes): the rows padded to
        ``[M, longest, *DIMs]`` by a gather with a filler that changes nothing, reduced."""
        o = self.o
        op = p.op_type
        dtype = r.flat.dtype or p.outputs[0].dtype
        axes = _axes(p)
        keep = p.attributes.get("keepdims")
        keepdims = keep is None or keep.as_int() != 0
        noop = p.attributes.get("noop_with_empty_axes")
        if dtype is None or (not axes and noop is not None and noop.as_int()):
            raise _Cannot
        axes = set(range(len(r.pattern))) if not axes else {a % len(r.pattern) for a in axes}
        ragged_axis = r.pattern.index(None)
        if ragged_axis not in axes or any(r.pattern[a] == DIM for a in axes):
            raise _Cannot
        fill = neutral_element(op, dtype)
        if fill is None or (op == "ReduceMean" and not dtype.is_floating_point()):
            raise _Cannot
        inner = o.slice(o.shape(r.flat, f"{name}_dims"), o.ints([1]), o.ints([MAX_INT64]), [0], f"{name}_inner")
        filler = o.op("Expand", [o.b.constant(fill, f"{name}_fill"), o.concat([o.ints([1]), inner], 0, f"{name}_fill_dims")],
                      f"{name}_filler", dtype=dtype)
        values = o.concat([r.flat, filler], 0, f"{name}_values")
        nothing = o.op("Shape", [r.rows], f"{name}_k", dtype=INT64, shape=[1])
        starts = o.op("Sub", [o.op("CumSum", [r.lengths, o.scalar(0)], f"{name}_ends", dtype=INT64), r.lengths],
                      f"{name}_starts", dtype=INT64)
        j, inside = self._inside(r.lengths, name)
        index = o.op("Where", [inside, o.op("Add", [o.unsqueeze(starts, [1], f"{name}_start"), j], f"{name}_at", dtype=INT64),
                               o.reshape(nothing, o.ints([]), f"{name}_none")], f"{name}_index", dtype=INT64)
        padded = o.op("Gather", [values, index], f"{name}_padded", dtype=dtype, axis=0)
        reduced = o.b.reduce("ReduceSum" if op == "ReduceMean" else op, padded, [1], f"{name}_reduced", keepdims=False)
        if op == "ReduceMean":
            count = o.op("Cast", [r.lengths], f"{name}_count", dtype=dtype, to=dtype)
            if r.dims:
                count = o.unsqueeze(count, list(range(1, 1 + r.dims)), f"{name}_count_b")
            reduced = o.op("Div", [reduced, count], name, dtype=dtype)  # 0 / 0: NaN, as ReduceMean of nothing
        pattern = [1 if i in axes else d for i, d in enumerate(r.pattern)] if keepdims else \
            [d for i, d in enumerate(r.pattern) if i not in axes]
        units = [i + 1 for i, d in enumerate(pattern) if d != DIM]
        return Dense(o.unsqueeze(reduced, units, f"{name}_dense") if units else reduced, len(pattern),
                     frozenset(u - 1 for u in units))

    def _binary(self, p: ir.Node, ins: list, name: str) -> Dense | Ragged:
        o = self.o
        a, b = ins
        ragged = [x for x in ins if isinstance(x, Ragged)]
        if ragged:
            r = ragged[0]
            if len(ragged) == 2 and (a.rows is not b.rows or a.pattern != b.pattern):
                raise _Cannot
            operands = []
            for x in ins:
                if isinstance(x, Ragged):
                    operands.append(x.flat)
                    continue
                rank = x.rank if isinstance(x, Dense) else (x.shape.rank() if x.shape is not None else None)
                if rank is None or rank > len(r.pattern):
                    raise _Cannot
                # Aligned from the right, the operand meets trailing DIMs, or the ragged
                # and unit axes with axes of its own known to be 1 (a keepdims reduction).
                facing = r.pattern[len(r.pattern) - rank:]
                units = x.units if isinstance(x, Dense) else frozenset()
                squeeze = [j for j, d in enumerate(facing) if d != DIM]
                if any(j not in units for j in squeeze) or (squeeze and not isinstance(x, Dense)):
                    raise _Cannot
                if isinstance(x, Dense):
                    v = o.b.squeeze(x.value, [j + 1 for j in squeeze], f"{name}_units") if squeeze else x.value
                    by_row = o.op("Gather", [v, r.rows], f"{name}_by_row", dtype=x.value.dtype, axis=0)
                    lift = list(range(1, 1 + r.dims - (rank - len(squeeze))))
                    operands.append(o.unsqueeze(by_row, lift, f"{name}_lift") if lift else by_row)
                else:
                    operands.append(x)
            return Ragged(_same_op(o, p, operands, name), r.rows, r.lengths, r.pattern)
        # Dense with dense or unbatched: per-iteration ranks must agree from the right.
        ranks = [x.rank if isinstance(x, Dense) else (x.shape.rank() if x.shape is not None else None) for x in ins]
        if None in ranks:
            raise _Cannot
        out_rank = max(ranks)
        operands = []
        for x, r in zip(ins, ranks):
            if isinstance(x, Dense) and r < out_rank:
                operands.append(o.unsqueeze(x.value, list(range(1, 1 + out_rank - r)), f"{name}_lift"))
            else:
                operands.append(x.value if isinstance(x, Dense) else x)
        return Dense(_same_op(o, p, operands, name), out_rank)

    def flatten(self, v: ir.Value | Dense | Ragged, name: str) -> ir.Value:
        """What the appends (along axis 0) of every iteration add up to, in order."""
        o = self.o
        if isinstance(v, Ragged):
            if v.pattern[0] is not None:
                raise _Cannot
            units = [i for i, d in enumerate(v.pattern) if d == 1]
            return o.unsqueeze(v.flat, units, f"{name}_units") if units else v.flat
        if not isinstance(v, Dense):
            v = self._dense(v, name)
        if v.rank == 1:
            return o.reshape(v.value, o.ints([-1]), f"{name}_flat")
        if v.rank < 1:
            raise _Cannot
        rest = o.slice(o.shape(v.value, f"{name}_dims"), o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")
        return o.reshape(v.value, o.concat([o.ints([-1]), rest], 0, f"{name}_merged_dims"), f"{name}_flat")

    def _dense(self, v: ir.Value, name: str) -> Dense:
        rank = v.shape.rank() if v.shape is not None else None
        if rank is None:
            raise _Cannot
        return Dense(self.stacked(v, name), rank)

    def stacked(self, v: ir.Value | Dense | Ragged, name: str) -> ir.Value:
        """A scan output: every iteration's value, stacked."""
        o = self.o
        if isinstance(v, Dense):
            return v.value
        if isinstance(v, Ragged):
            raise _Cannot
        m = o.unsqueeze(self._count(), [0], f"{name}_m")
        return o.op("Expand", [o.unsqueeze(v, [0], f"{name}_one"), o.concat([m, o.shape(v, f"{name}_dims")], 0, f"{name}_all")],
                    f"{name}_stacked", dtype=v.dtype)


def _a_dim(v: ir.Value) -> bool:
    """``v`` is read off a Shape (through Gather, Slice, Squeeze, Reshape, Cast, Identity)."""
    p = v.producer()
    while p is not None and p.op_type in ("Gather", "Slice", "Squeeze", "Reshape", "Cast", "Identity") and p.inputs[0] is not None:
        p = p.inputs[0].producer()
    return p is not None and p.op_type in ("Shape", "Size")


def _axes(p: ir.Node) -> list[int] | None:
    if len(p.inputs) > 1 and p.inputs[1] is not None:
        c = const_array(p.inputs[1])
        if c is None:
            raise _Cannot
        return [int(a) for a in c.reshape(-1)]
    a = p.attributes.get("axes")
    return None if a is None else list(a.as_ints())


def _same_op(o: Ops, p: ir.Node, inputs: list[ir.Value], name: str) -> ir.Value:
    """``p``'s op with its attributes on new inputs."""
    attrs = [ir.Attr(a.name, a.type, a.value) for a in p.attributes.values()]
    node = ir.Node("", p.op_type, inputs, attrs, num_outputs=1, name=o.b.names.fresh(name))
    if o.b.anchor is not None:
        o.b.graph.insert_before(o.b.anchor, node)
    else:
        o.b.graph.append(node)
    o.b.nodes.append(node)
    out = node.outputs[0]
    out.name = o.b.names.fresh(name)
    out.dtype = p.outputs[0].dtype
    return out
