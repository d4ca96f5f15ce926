"""Values of a Loop body batched over its M iterations (for ``vectorize_ragged_loops``):
``Dense`` ([M, *per-iteration dims]) and ``Ragged`` (each iteration's rows of one
data-dependent length, as value rows and the iteration of each), and the arithmetic on
them (``RowOps``): slices, ranges and compressions per row, reductions of rows,
broadcasts between the two, and the flattening back into one tensor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.passes.quirks.pad_reduced_axes import neutral_element
from seqlower.analysis.analyzer import const_array

__all__ = ["DIM", "Cannot", "Dense", "Ragged", "RowOps", "axes_of", "same_op"]


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


class Cannot(Exception):
    """The body does something the vectorization does not do: the Loop stays."""


class RowOps:
    """The arithmetic on batched values, with the ``Ops`` it writes through and the
    iteration count ``count`` (M)."""

    def __init__(self, o: Ops, count: ir.Value) -> None:
        self.o, self.count = o, count


    def per_row(self, x, name: str) -> ir.Value:
        """A per-iteration scalar (or one-element) operand as ``[M]`` int64."""
        o = self.o
        if isinstance(x, Dense):
            v = o.reshape(x.value, o.ints([-1]), f"{name}_rows") if x.rank else x.value
        elif isinstance(x, ir.Value):
            v = o.op("Expand", [o.reshape(x, o.ints([]), f"{name}_one"), o.unsqueeze(self.count, [0], f"{name}_m")],
                     f"{name}_rows", dtype=x.dtype, shape=[None])
        else:
            raise Cannot
        return v

    def positions(self, lengths: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """Per value of a ragged result in order, its iteration and its place in that
        iteration's row: ``NonZero`` of ``j < length`` over ``[M, max length]``."""
        return self.nonzero_pairs(self.inside(lengths, name)[1], name)

    def inside(self, lengths: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """``j`` (``[1, longest]``) and the mask ``j < length`` (``[M, longest]``)."""
        o = self.o
        longest = o.b.reduce("ReduceMax", o.concat([lengths, o.ints([0])], 0, f"{name}_or_none"), [0], f"{name}_longest",
                             keepdims=False)
        j = o.unsqueeze(o.op("Range", [o.scalar(0), longest, o.scalar(1)], f"{name}_places", dtype=INT64, shape=[None]),
                        [0], f"{name}_place")
        return j, o.op("Less", [j, o.unsqueeze(lengths, [1], f"{name}_length")], f"{name}_inside", dtype=ir.DataType.BOOL)

    def nonzero_pairs(self, mask: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
        """The set places of a ``[M, w]`` mask in order: the row of each, its column."""
        o = self.o
        nz = o.op("NonZero", [mask], f"{name}_nonzero", dtype=INT64, shape=[2, None])
        rows = o.op("Gather", [nz, o.scalar(0)], f"{name}_rows", dtype=INT64, shape=[None], axis=0)
        cols = o.op("Gather", [nz, o.scalar(1)], f"{name}_cols", dtype=INT64, shape=[None], axis=0)
        return rows, cols

    def slice_by_rows(self, p: ir.Node, ins: list, name: str) -> Ragged:
        """``x[start_i:end_i]`` along axis 0 with per-iteration bounds, step 1."""
        o = self.o
        data = ins[0]
        axes = const_array(p.inputs[3]) if len(p.inputs) > 3 and p.inputs[3] is not None else np.array([0])
        steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else np.array([1])
        if axes is None or steps is None or axes.size != 1 or steps.size != 1 or int(steps.reshape(-1)[0]) != 1:
            raise Cannot
        if isinstance(data, Dense):
            rank, stacked = data.rank, data.value
        else:
            rank, stacked = (data.shape.rank() if data.shape is not None else None), None
        if not rank or int(axes.reshape(-1)[0]) % rank != 0:
            raise Cannot
        source = stacked if stacked is not None else data
        n = o.op("Gather", [o.shape(source, f"{name}_dims"), o.scalar(1 if stacked is not None else 0)], f"{name}_n",
                 dtype=INT64, shape=[], axis=0)
        zero = o.scalar(0)

        def bound(x, tag: str) -> ir.Value:
            v = o.op("Cast", [self.per_row(x, f"{name}_{tag}")], f"{name}_{tag}64", dtype=INT64, to=INT64)
            from_end = o.op("Add", [v, n], f"{name}_{tag}_from_end", dtype=INT64)
            v = o.op("Where", [o.op("Less", [v, zero], f"{name}_{tag}_negative", dtype=ir.DataType.BOOL), from_end, v],
                     f"{name}_{tag}_fwd", dtype=INT64)
            return o.op("Max", [o.op("Min", [v, n], f"{name}_{tag}_max", dtype=INT64), zero], f"{name}_{tag}_in", dtype=INT64)

        start, end = bound(ins[1], "start"), bound(ins[2], "end")
        lengths = o.op("Max", [o.op("Sub", [end, start], f"{name}_span", dtype=INT64), zero], f"{name}_lengths", dtype=INT64)
        rows, cols = self.positions(lengths, name)
        index = o.op("Add", [o.op("Gather", [start, rows], f"{name}_first", dtype=INT64, axis=0), cols], f"{name}_index", dtype=INT64)
        if stacked is not None:
            # Row i of the stacked value starts at i * n once its first two axes merge.
            index = o.op("Add", [index, o.op("Mul", [rows, n], f"{name}_row_start", dtype=INT64)], f"{name}_at", dtype=INT64)
            rest = o.slice(o.shape(stacked, f"{name}_stacked_dims"), o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")
            source = o.reshape(stacked, o.concat([o.ints([-1]), rest], 0, f"{name}_merged_dims"), f"{name}_merged")
        flat = o.op("Gather", [source, index], name, dtype=p.outputs[0].dtype, axis=0)
        return Ragged(flat, rows, lengths, (None, *[DIM] * (rank - 1)))

    def range_by_rows(self, p: ir.Node, ins: list, name: str) -> Ragged:
        """``Range(start_i, limit_i, delta_i)``: ``max(ceil((limit - start) / delta), 0)``
        values per iteration, ``start + place * delta``."""
        o = self.o
        dtype = p.outputs[0].dtype or next((x.value.dtype if isinstance(x, Dense) else x.dtype) for x in ins)
        if dtype is None or any(isinstance(x, Dense) and x.rank != 0 for x in ins):
            raise Cannot
        start, limit, delta = (self.per_row(x, f"{name}_{k}") for k, x in zip(("start", "limit", "delta"), ins))
        double = ir.DataType.DOUBLE
        span = o.op("Div", [o.op("Cast", [o.op("Sub", [limit, start], f"{name}_span", dtype=dtype)], f"{name}_span_d", dtype=double, to=double),
                            o.op("Cast", [delta], f"{name}_delta_d", dtype=double, to=double)], f"{name}_steps", dtype=double)
        count = o.op("Cast", [o.op("Ceil", [span], f"{name}_ceil", dtype=double)], f"{name}_count", dtype=INT64, to=INT64)
        lengths = o.op("Max", [count, o.scalar(0)], f"{name}_lengths", dtype=INT64)
        rows, cols = self.positions(lengths, name)
        step = o.op("Mul", [o.op("Cast", [cols], f"{name}_place", dtype=dtype, to=dtype),
                            o.op("Gather", [delta, rows], f"{name}_delta_of", dtype=dtype, axis=0)], f"{name}_offset", dtype=dtype)
        flat = o.op("Add", [o.op("Gather", [start, rows], f"{name}_start_of", dtype=dtype, axis=0), step], name, dtype=dtype)
        return Ragged(flat, rows, lengths, (None,))

    def compress_rows(self, data: ir.Value, condition: ir.Value, name: str) -> Ragged:
        """``Compress(row_i, mask_i)``: a mask shorter than the row keeps only its part."""
        o = self.o
        mask = o.op("Cast", [condition], f"{name}_mask", dtype=ir.DataType.BOOL, to=ir.DataType.BOOL)
        width = o.op("Gather", [o.shape(mask, f"{name}_mask_dims"), o.ints([1])], f"{name}_width", dtype=INT64, shape=[1], axis=0)
        kept = o.slice(data, o.ints([0]), width, [1], f"{name}_kept")
        rows, cols = self.nonzero_pairs(mask, name)
        index = o.op("Add", [o.op("Mul", [rows, width], f"{name}_row_start", dtype=INT64), cols], f"{name}_index", dtype=INT64)
        flat = o.op("Gather", [o.reshape(kept, o.ints([-1]), f"{name}_all"), index], name, dtype=data.dtype, axis=0)
        lengths = o.b.reduce("ReduceSum", o.op("Cast", [mask], f"{name}_ones", dtype=INT64, to=INT64), [1],
                             f"{name}_lengths", keepdims=False)
        return Ragged(flat, rows, lengths, (None,))

    def move_units(self, p: ir.Node, r: Ragged) -> Ragged:
        """Transpose, Squeeze and Unsqueeze that move only unit axes (and keep the
        ragged axis before every DIM, the DIMs in order) change the pattern alone."""
        pattern = list(r.pattern)
        if p.op_type == "Transpose":
            perm = p.attributes.get("perm")
            order = list(perm.as_ints()) if perm is not None else list(reversed(range(len(pattern))))
            kept = [i for i in order if pattern[i] != 1]
            if kept != sorted(kept):
                raise Cannot
            return Ragged(r.flat, r.rows, r.lengths, tuple(pattern[i] for i in order))
        axes = axes_of(p)
        if p.op_type == "Squeeze":
            axes = [a % len(pattern) for a in (axes if axes is not None else [i for i, d in enumerate(pattern) if d == 1])]
            if any(pattern[a] != 1 for a in axes):
                raise Cannot
            pattern = [d for i, d in enumerate(pattern) if i not in axes]
        else:
            if axes is None:
                raise Cannot
            for a in sorted(a % (len(pattern) + len(axes)) for a in axes):
                pattern.insert(a, 1)
        return Ragged(r.flat, r.rows, r.lengths, tuple(pattern))

    def flattened(self, r: Ragged, name: str) -> Ragged:
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

    def reduce_rows(self, p: ir.Node, r: Ragged, name: str) -> Dense:
        """A reduction over the ragged axis (and unit axes): the rows padded to
        ``[M, longest, *DIMs]`` by a gather with a filler that changes nothing, reduced."""
        o = self.o
        op = p.op_type
        dtype = r.flat.dtype or p.outputs[0].dtype
        axes = axes_of(p)
        keep = p.attributes.get("keepdims")
        keepdims = keep is None or keep.as_int() != 0
        noop = p.attributes.get("noop_with_empty_axes")
        if dtype is None or (not axes and noop is not None and noop.as_int()):
            raise Cannot
        axes = set(range(len(r.pattern))) if not axes else {a % len(r.pattern) for a in axes}
        ragged_axis = r.pattern.index(None)
        if ragged_axis not in axes or any(r.pattern[a] == DIM for a in axes):
            raise Cannot
        fill = neutral_element(op, dtype)
        if fill is None or (op == "ReduceMean" and not dtype.is_floating_point()):
            raise Cannot
        inner = o.slice(o.shape(r.flat, f"{name}_dims"), o.ints([1]), o.ints([MAX_INT64]), [0], f"{name}_inner")
        filler = o.op("Expand", [o.b.constant(fill, f"{name}_fill"), o.concat([o.ints([1]), inner], 0, f"{name}_fill_dims")],
                      f"{name}_filler", dtype=dtype)
        values = o.concat([r.flat, filler], 0, f"{name}_values")
        nothing = o.op("Shape", [r.rows], f"{name}_k", dtype=INT64, shape=[1])
        starts = o.op("Sub", [o.op("CumSum", [r.lengths, o.scalar(0)], f"{name}_ends", dtype=INT64), r.lengths],
                      f"{name}_starts", dtype=INT64)
        j, inside = self.inside(r.lengths, name)
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

    def binary(self, p: ir.Node, ins: list, name: str) -> Dense | Ragged:
        o = self.o
        a, b = ins
        ragged = [x for x in ins if isinstance(x, Ragged)]
        if ragged:
            r = ragged[0]
            if len(ragged) == 2 and (a.rows is not b.rows or a.pattern != b.pattern):
                raise Cannot
            operands = []
            for x in ins:
                if isinstance(x, Ragged):
                    operands.append(x.flat)
                    continue
                rank = x.rank if isinstance(x, Dense) else (x.shape.rank() if x.shape is not None else None)
                if rank is None or rank > len(r.pattern):
                    raise Cannot
                # Aligned from the right, the operand meets trailing DIMs, or the ragged
                # and unit axes with axes of its own known to be 1 (a keepdims reduction).
                facing = r.pattern[len(r.pattern) - rank:]
                units = x.units if isinstance(x, Dense) else frozenset()
                squeeze = [j for j, d in enumerate(facing) if d != DIM]
                if any(j not in units for j in squeeze) or (squeeze and not isinstance(x, Dense)):
                    raise Cannot
                if isinstance(x, Dense):
                    v = o.b.squeeze(x.value, [j + 1 for j in squeeze], f"{name}_units") if squeeze else x.value
                    by_row = o.op("Gather", [v, r.rows], f"{name}_by_row", dtype=x.value.dtype, axis=0)
                    lift = list(range(1, 1 + r.dims - (rank - len(squeeze))))
                    operands.append(o.unsqueeze(by_row, lift, f"{name}_lift") if lift else by_row)
                else:
                    operands.append(x)
            return Ragged(same_op(o, p, operands, name), r.rows, r.lengths, r.pattern)
        # Dense with dense or unbatched: per-iteration ranks must agree from the right.
        ranks = [x.rank if isinstance(x, Dense) else (x.shape.rank() if x.shape is not None else None) for x in ins]
        if None in ranks:
            raise Cannot
        out_rank = max(ranks)
        operands = []
        for x, r in zip(ins, ranks):
            if isinstance(x, Dense) and r < out_rank:
                operands.append(o.unsqueeze(x.value, list(range(1, 1 + out_rank - r)), f"{name}_lift"))
            else:
                operands.append(x.value if isinstance(x, Dense) else x)
        return Dense(same_op(o, p, operands, name), out_rank)

    def flatten(self, v: ir.Value | Dense | Ragged, name: str) -> ir.Value:
        """What the appends (along axis 0) of every iteration add up to, in order."""
        o = self.o
        if isinstance(v, Ragged):
            if v.pattern[0] is not None:
                raise Cannot
            units = [i for i, d in enumerate(v.pattern) if d == 1]
            return o.unsqueeze(v.flat, units, f"{name}_units") if units else v.flat
        if not isinstance(v, Dense):
            v = self.dense(v, name)
        if v.rank == 1:
            return o.reshape(v.value, o.ints([-1]), f"{name}_flat")
        if v.rank < 1:
            raise Cannot
        rest = o.slice(o.shape(v.value, f"{name}_dims"), o.ints([2]), o.ints([MAX_INT64]), [0], f"{name}_rest")
        return o.reshape(v.value, o.concat([o.ints([-1]), rest], 0, f"{name}_merged_dims"), f"{name}_flat")

    def dense(self, v: ir.Value, name: str) -> Dense:
        rank = v.shape.rank() if v.shape is not None else None
        if rank is None:
            raise Cannot
        return Dense(self.stacked(v, name), rank)

    def stacked(self, v: ir.Value | Dense | Ragged, name: str) -> ir.Value:
        """A scan output: every iteration's value, stacked."""
        o = self.o
        if isinstance(v, Dense):
            return v.value
        if isinstance(v, Ragged):
            raise Cannot
        m = o.unsqueeze(self.count, [0], f"{name}_m")
        return o.op("Expand", [o.unsqueeze(v, [0], f"{name}_one"), o.concat([m, o.shape(v, f"{name}_dims")], 0, f"{name}_all")],
                    f"{name}_stacked", dtype=v.dtype)


def axes_of(p: ir.Node) -> list[int] | None:
    if len(p.inputs) > 1 and p.inputs[1] is not None:
        c = const_array(p.inputs[1])
        if c is None:
            raise Cannot
        return [int(a) for a in c.reshape(-1)]
    a = p.attributes.get("axes")
    return None if a is None else list(a.as_ints())


def same_op(o: Ops, p: ir.Node, inputs: list[ir.Value], name: str) -> ir.Value:
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
