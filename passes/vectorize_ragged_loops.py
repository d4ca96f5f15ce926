"""A Loop whose iterations are independent and append results of data-dependent length
(the nonzero positions of row i, ...) run once on all rows, for targets without Loop.

TorchScript's ``for i in range(n): out.append(x[i].nonzero() + i * 10)`` lowers to a
Loop that appends each row's values to a flat buffer and each row's length to another
(the Flat list): no Scan takes it (the buffers grow) and the batched body of
``vectorize_loops`` cannot (a row's length is data). Here every body value is one of

- unbatched: the same for every iteration (outer values, constants);
- dense: one per iteration, stacked ``[M, *per_row]`` (the iteration number is
  ``Range(0, M)``, row i of an outer tensor is that tensor's rows);
- ragged: per iteration a tensor of run-time length along one axis and 1 along the
  others, stored as its values over all iterations in order (``[K]``), the iteration
  each value belongs to (``[K]``) and each iteration's length (``[M]``).

``NonZero`` of a dense row mask is ragged (``NonZero`` of the stacked masks lists
the positions row by row: the values in order, the iteration of each); elementwise ops
of ragged values with per-iteration scalars gather the scalars by iteration; Transpose,
Squeeze and Unsqueeze move only unit axes; ``Shape`` of a ragged value is dense (the
lengths); an append ``Concat(carried, piece)`` of a buffer the body reads nowhere else
is the buffer's initial value followed by every piece, in order. Anything else, and the
Loop is left to the other rewrites. The result has no Loop and no Scan, and zero trips
give empty appends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from seqlower.passes._batched_map import ELEMENTWISE, UNARY
from seqlower.passes._rewrite import Scope, discard_subgraphs, replace_output, rewrite_each_node
from seqlower.passes._tensor_ops import INT64, Ops
from seqlower.analysis import const_array, is_default_domain, loop_runs_all_trips
from seqlower.builder import Builder, NameAuthority

__all__ = ["VectorizeRaggedLoopsPass"]


@dataclass(frozen=True)
class Dense:
    value: ir.Value  # [M, *per_row]
    rank: int  # per-iteration rank


@dataclass(frozen=True)
class Ragged:
    flat: ir.Value  # [K]
    rows: ir.Value  # [K]: the iteration of each value
    lengths: ir.Value  # [M]
    pattern: tuple[int | None, ...]  # per-iteration dims: None the ragged axis, 1 the others


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
        if axis is None or axis.as_int() != 0 or len(bi.uses()) != 1 or bi.shape is None or bi.shape.rank() != 1:
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
    if len(body.outputs) != 1 + n_carried or not loop_runs_all_trips(node, body):
        return None  # scan outputs are vectorize_loops' job
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
        iterations = o.op("Range", [o.scalar(0), o.op("Max", [trips, o.scalar(0)], f"{base}_count", dtype=INT64, shape=[]),
                                    o.scalar(1)], f"{base}_iterations", dtype=INT64, shape=[None])
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
        if op == "Gather" and isinstance(ins[0], ir.Value) and isinstance(ins[1], Dense) and ins[1].rank == 0:
            axis = p.attributes.get("axis")
            if axis is not None and axis.as_int() != 0:
                raise _Cannot
            rank = ins[0].shape.rank() if ins[0].shape is not None else None
            if rank is None:
                raise _Cannot
            return Dense(o.op("Gather", [ins[0], ins[1].value], name, dtype=ins[0].dtype, axis=0), rank - 1)
        if op == "NonZero" and isinstance(ins[0], Dense) and ins[0].rank == 1:
            mask = ins[0].value
            nz = o.op("NonZero", [mask], name, dtype=INT64, shape=[2, None])
            rows = o.op("Gather", [nz, o.scalar(0)], f"{name}_rows", dtype=INT64, shape=[None], axis=0)
            flat = o.op("Gather", [nz, o.scalar(1)], f"{name}_cols", dtype=INT64, shape=[None], axis=0)
            if mask.dtype is None:
                raise _Cannot
            zero = o.b.constant(np.zeros((), mask.dtype.numpy()), f"{name}_zero")
            nonzero = o.op("Not", [o.op("Equal", [mask, zero], f"{name}_is_zero", dtype=ir.DataType.BOOL)],
                           f"{name}_set", dtype=ir.DataType.BOOL)
            lengths = o.b.reduce("ReduceSum", o.op("Cast", [nonzero], f"{name}_ones", dtype=INT64, to=INT64), [1],
                                 f"{name}_lengths", keepdims=False)
            return Ragged(flat, rows, lengths, (1, None))
        if op == "Transpose" and isinstance(ins[0], Ragged):
            perm = p.attributes.get("perm")
            pattern = ins[0].pattern
            order = list(perm.as_ints()) if perm is not None else list(reversed(range(len(pattern))))
            return Ragged(ins[0].flat, ins[0].rows, ins[0].lengths, tuple(pattern[i] for i in order))
        if op in ("Squeeze", "Unsqueeze") and isinstance(ins[0], Ragged):
            axes = _axes(p)
            pattern = list(ins[0].pattern)
            if op == "Squeeze":
                axes = [a % len(pattern) for a in (axes if axes is not None else [i for i, d in enumerate(pattern) if d == 1])]
                if any(pattern[a] != 1 for a in axes):
                    raise _Cannot
                pattern = [d for i, d in enumerate(pattern) if i not in axes]
            else:
                if axes is None:
                    raise _Cannot
                for a in sorted(a % (len(pattern) + len(axes)) for a in axes):
                    pattern.insert(a, 1)
            return Ragged(ins[0].flat, ins[0].rows, ins[0].lengths, tuple(pattern))
        if op == "Shape" and isinstance(ins[0], Ragged) and not p.attributes:
            r = ins[0]
            ones = o.unsqueeze(o.op("Expand", [o.scalar(1), o.unsqueeze(self._count(), [0], f"{name}_m")], f"{name}_ones",
                                    dtype=INT64, shape=[None]), [1], f"{name}_unit")
            cols = [o.unsqueeze(r.lengths, [1], f"{name}_len") if d is None else ones for d in r.pattern]
            return Dense(o.concat(cols, 1, name), 1)
        if op == "Slice" and isinstance(ins[0], Dense) and ins[0].rank == 1 and all(isinstance(x, ir.Value) for x in ins[1:] if x is not None):
            starts, ends = (const_array(x) for x in p.inputs[1:3])
            axes = const_array(p.inputs[3]) if len(p.inputs) > 3 and p.inputs[3] is not None else np.array([0])
            steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else None
            if starts is None or ends is None or axes is None or int(axes.reshape(-1)[0]) != 0 or (steps is not None and int(steps.reshape(-1)[0]) != 1):
                raise _Cannot
            return Dense(o.slice(ins[0].value, o.ints([int(starts.reshape(-1)[0])]), o.ints([int(ends.reshape(-1)[0])]), [1], name), 1)
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
        return self.o.op("Max", [self.trips, self.o.scalar(0)], f"{self.base}_m", dtype=INT64, shape=[])

    def _binary(self, p: ir.Node, ins: list, name: str) -> Dense | Ragged:
        o = self.o
        a, b = ins
        ragged = [x for x in ins if isinstance(x, Ragged)]
        if ragged:
            r = ragged[0]
            if len(ragged) == 2 and (a.flat is not b.flat and a.rows is not b.rows):
                raise _Cannot
            operands = []
            for x in ins:
                if isinstance(x, Ragged):
                    operands.append(x.flat)
                elif isinstance(x, Dense) and x.rank == 0:
                    operands.append(o.op("Gather", [x.value, r.rows], f"{name}_by_row", dtype=x.value.dtype, axis=0))
                elif isinstance(x, ir.Value) and x.shape is not None and x.shape.rank() == 0:
                    operands.append(x)
                else:
                    raise _Cannot
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
        """What the appends of every iteration add up to, in order."""
        if isinstance(v, Ragged):
            if len(v.pattern) != 1:
                raise _Cannot
            return v.flat
        if isinstance(v, Dense) and v.rank == 1:
            return self.o.reshape(v.value, self.o.ints([-1]), f"{name}_flat")
        raise _Cannot


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
