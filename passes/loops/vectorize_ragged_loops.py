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


import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import ELEMENTWISE, UNARY
from seqlower.passes._rewrite import Scope, discard_subgraphs, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.helpers import loop_runs_all_trips
from seqlower.ir.builder import Builder, NameAuthority

from seqlower.passes.loops.ragged_rows import DIM, Cannot, Dense, Ragged, RowOps, axes_of, same_op

__all__ = ["VectorizeRaggedLoopsPass"]


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
            finals.append(o.concat([node.inputs[2 + k], env.rows.flatten(value, f"{base}_{k}")], 0, f"{base}_appended_{k}"))
        for k, v in enumerate(body.outputs[1 + n_carried:]):
            finals.append(env.rows.stacked(env.get(v), f"{base}_scan_{k}"))
    except Cannot:
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
        self.rows = RowOps(o, self.count)
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
            raise Cannot
        out = self._node(p)
        self.known[v] = out
        return out

    def _node(self, p: ir.Node) -> ir.Value | Dense | Ragged:
        o, name = self.o, f"{self.base}_{p.name or p.op_type}"
        ins = [self.get(x) if x is not None else None for x in p.inputs]
        op = p.op_type
        if all(isinstance(x, ir.Value) or x is None for x in ins):
            # The same on every iteration (a Constant, arithmetic on outer values): once.
            out = same_op(o, p, ins, name)
            out.shape = p.outputs[0].shape  # unbatched: the body's own value
            return out
        if op == "Gather":
            return self._gather(p, ins, name)
        if op == "NonZero" and isinstance(ins[0], Dense) and ins[0].rank == 1:
            return self._nonzero(ins[0].value, name)
        if op in ("Transpose", "Squeeze", "Unsqueeze") and isinstance(ins[0], Ragged):
            return self.rows.move_units(p, ins[0])
        if op in ("Squeeze", "Unsqueeze") and isinstance(ins[0], Dense):
            return self._squeeze_dense(p, ins[0], name)
        if op == "Shape" and not p.attributes:
            return self._shape(ins[0], name)
        if op == "Slice" and isinstance(ins[0], Dense) and ins[0].rank == 1 and all(isinstance(x, ir.Value) for x in ins[1:] if x is not None):
            return self._slice_dense(p, ins[0], name)
        if op == "Slice" and not isinstance(ins[0], Ragged) and len(ins) >= 3:
            return self.rows.slice_by_rows(p, ins, name)
        if op == "Range" and not any(isinstance(x, Ragged) for x in ins):
            return self.rows.range_by_rows(p, ins, name)
        if op == "Compress" and isinstance(ins[0], Dense) and ins[0].rank == 1 and isinstance(ins[1], Dense) and ins[1].rank == 1:
            axis = p.attributes.get("axis")
            if axis is not None and axis.as_int() not in (0, -1):
                raise Cannot
            return self.rows.compress_rows(ins[0].value, ins[1].value, name)
        if op == "Reshape" and isinstance(ins[0], Ragged):
            target = const_array(p.inputs[1])
            if target is None or [int(d) for d in target.reshape(-1)] != [-1]:
                raise Cannot
            return self.rows.flattened(ins[0], name)
        if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin") and isinstance(ins[0], Ragged):
            return self.rows.reduce_rows(p, ins[0], name)
        if op in UNARY and op not in ("Clip", "CastLike") and len(ins) == 1:
            x = ins[0]
            if isinstance(x, Dense):
                return Dense(same_op(o, p, [x.value], name), x.rank)
            if isinstance(x, Ragged):
                return Ragged(same_op(o, p, [x.flat], name), x.rows, x.lengths, x.pattern)
        if op in ELEMENTWISE and op != "Where" and len(ins) == 2:
            return self.rows.binary(p, ins, name)
        raise Cannot

    def _nonzero(self, mask: ir.Value, name: str) -> Ragged:
        """NonZero of each iteration's 1-D mask: its positions as ragged rows."""
        o = self.o
        rows, flat = self.rows.nonzero_pairs(mask, name)
        if mask.dtype is None:
            raise Cannot
        zero = o.b.constant(np.zeros((), mask.dtype.numpy()), f"{name}_zero")
        nonzero = o.op("Not", [o.op("Equal", [mask, zero], f"{name}_is_zero", dtype=ir.DataType.BOOL)],
                       f"{name}_set", dtype=ir.DataType.BOOL)
        lengths = o.b.reduce("ReduceSum", o.op("Cast", [nonzero], f"{name}_ones", dtype=INT64, to=INT64), [1],
                             f"{name}_lengths", keepdims=False)
        return Ragged(flat, rows, lengths, (1, None))

    def _squeeze_dense(self, p: ir.Node, x: Dense, name: str) -> Dense:
        o, op = self.o, p.op_type
        axes = axes_of(p)
        rank = x.rank + (len(axes) if op == "Unsqueeze" and axes is not None else 0)
        if axes is None or rank == 0:
            raise Cannot
        axes = sorted(a % rank for a in axes)
        made = o.unsqueeze(x.value, [a + 1 for a in axes], name) if op == "Unsqueeze" else \
            o.b.squeeze(x.value, [a + 1 for a in axes], name)
        return Dense(made, rank if op == "Unsqueeze" else rank - len(axes))

    def _slice_dense(self, p: ir.Node, x: Dense, name: str) -> Dense:
        """A constant slice of each iteration's 1-D value."""
        o = self.o
        starts, ends = (const_array(v) for v in p.inputs[1:3])
        axes = const_array(p.inputs[3]) if len(p.inputs) > 3 and p.inputs[3] is not None else np.array([0])
        steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else None
        if starts is None or ends is None or axes is None or int(axes.reshape(-1)[0]) != 0 \
                or (steps is not None and int(steps.reshape(-1)[0]) != 1):
            raise Cannot
        return Dense(o.slice(x.value, o.ints([int(starts.reshape(-1)[0])]), o.ints([int(ends.reshape(-1)[0])]), [1], name), 1)

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
                raise Cannot
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
                raise Cannot
            at = o.op("Add", [o.op("Mul", [index.rows, w], f"{name}_row_start",
                                   dtype=INT64), at], f"{name}_index", dtype=INT64)
            merged = o.reshape(v, o.concat([o.ints([-1]), o.slice(dims, o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")],
                                           0, f"{name}_merged_dims"), f"{name}_merged")
            flat = o.op("Gather", [merged, at], name, dtype=v.dtype, axis=0)
            return Ragged(flat, index.rows, index.lengths, (*index.pattern, *[DIM] * (data.rank - 1)))
        if isinstance(data, Dense) and isinstance(index, ir.Value) and data.rank > 0:
            ri = index.shape.rank() if index.shape is not None else None
            if ri is None:
                raise Cannot
            return Dense(o.op("Gather", [data.value, index], name, dtype=data.value.dtype, axis=axis % data.rank + 1),
                         data.rank - 1 + ri)
        raise Cannot

    def _shape(self, x, name: str) -> ir.Value | Dense:
        o = self.o
        if isinstance(x, Dense):
            # The same on every iteration: the stacked value's dims after the first.
            return o.slice(o.shape(x.value, f"{name}_stacked"), o.ints([1]), o.ints([MAX_INT64]), [0], name)
        if not isinstance(x, Ragged):
            raise Cannot
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


def _a_dim(v: ir.Value) -> bool:
    """``v`` is read off a Shape (through Gather, Slice, Squeeze, Reshape, Cast, Identity)."""
    p = v.producer()
    while p is not None and p.op_type in ("Gather", "Slice", "Squeeze", "Reshape", "Cast", "Identity") and p.inputs[0] is not None:
        p = p.inputs[0].producer()
    return p is not None and p.op_type in ("Shape", "Size")
