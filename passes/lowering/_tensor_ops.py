"""Index arithmetic shared by the dynamic lowerings (Flat, Stacked): thin helpers over
:class:`seqlower.ir.builder.Builder`."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.ir.builder import Builder
from seqlower.ir import helpers as irutil
from seqlower.ir.helpers import const_tensor

__all__ = ["INT64", "MAX_INT64", "Ops", "split_rank"]

INT64 = ir.DataType.INT64
MAX_INT64 = int(np.iinfo(np.int64).max)


class Ops:
    """Thin helpers over :class:`Builder` for the index arithmetic of the Flat rules."""

    def __init__(self, b: Builder) -> None:
        self.b = b

    def op(self, op: str, inputs: list[ir.Value | None], name: str, dtype: ir.DataType | None = None, shape=None, **attrs) -> ir.Value:
        return self.b.op(op, inputs, name, dtype, shape, **attrs)

    def ints(self, values: list[int]) -> ir.Value:
        return self.b.ints(values, "ints")

    def scalar(self, value: int) -> ir.Value:
        return self.b.constant(np.array(value, dtype=np.int64), "scalar")

    def shape(self, x: ir.Value, name: str) -> ir.Value:
        # A constant's shape is a constant: OpenVINO gives the Shape of an empty constant
        # as an empty tensor (quirk "empty-constant").
        c = irutil.const_array(x)
        if c is not None:
            return self.ints(list(c.shape))
        rank = x.shape.rank() if x.shape is not None else None
        return self.op("Shape", [x], name, dtype=INT64, shape=None if rank is None else [rank])

    def reshape(self, x: ir.Value, shape: ir.Value, name: str) -> ir.Value:
        return self.op("Reshape", [x, shape], name)

    def slice(self, x: ir.Value, starts: ir.Value, ends: ir.Value, axes: list[int] | ir.Value, name: str) -> ir.Value:
        return self.b.slice(x, starts, ends, axes, name)

    def concat(self, xs: list[ir.Value], axis: int, name: str) -> ir.Value:
        if len(xs) == 1:
            return xs[0]
        return self.b.concat(xs, axis, name, None)

    def unsqueeze(self, x: ir.Value, axes: list[int], name: str) -> ir.Value:
        return self.b.unsqueeze(x, axes, name)

    def identity(self, x: ir.Value, name: str) -> ir.Value:
        return self.b.identity(x, name)

    def rows(self, row: ir.Value, n1: ir.Value, name: str) -> ir.Value:
        """``n1`` ([1] int64) copies of the 1-D ``row`` stacked: [n, len(row)].

        Tile, not Expand: onnxruntime's constant folding of an Expand of a [1, k] row to
        [0, k] leaves the Concat beside it declared with the wrong dim ("Can't merge
        shape info ... Inferred=1 Declared=0", graph programs 46843, 47457, 47640)."""
        k = row.shape.dims[0] if row.shape is not None and row.shape.rank() == 1 else None
        reps = self.concat([n1, self.ints([1])], 0, f"{name}_reps")
        return self.op("Tile", [self.unsqueeze(row, [0], f"{name}_row"), reps], name, dtype=INT64,
                       shape=[None, k if isinstance(k, int) else None])

    def repeat(self, one: ir.Value, n1: ir.Value, name: str) -> ir.Value:
        """``n1`` ([1] int64) copies of the [1] ``one``: [n]. Tile, as :meth:`rows`; and
        TVM's frontend refuses an Expand of a [1] to a zero dim ('Invalid target
        dimension 0', graph program 20413's chunks of 1 of an empty dim)."""
        return self.op("Tile", [one, n1], name, dtype=one.dtype, shape=[None])

    def empty(self, dtype: ir.DataType) -> ir.Value:
        return self.b.zeros(dtype, (0,), "empty")

    def shape_hidden(self, x: ir.Value, name: str) -> ir.Value:
        """``x`` sliced to a Where of its own shape: a no-op at run time, after which
        OpenVINO knows none of its dims (what it tracks of a shape it can get wrong: a
        Transpose it takes for a Reshape, a Pad of an If output it reads garbage from)."""
        shape = self.shape(x, f"{name}_in_dims")
        always = self.op("Greater", [self.op("Size", [x], f"{name}_in_size", dtype=INT64, shape=[]), self.scalar(-1)],
                         f"{name}_always", dtype=ir.DataType.BOOL, shape=[])
        ends = self.op("Where", [always, shape, self.shape(x, f"{name}_in_dims_1")], f"{name}_in_ends", dtype=INT64,
                       shape=[None])
        # Starts of the rank ``x`` has at run time, every axis (no axes input): a declared
        # rank can be false (an If whose branches differ in rank, declared as an exporter
        # pleased: onnxruntime refused starts and ends of two lengths, guided seed 14, 604).
        starts = self.op("Mul", [shape, self.scalar(0)], f"{name}_in_starts", dtype=INT64, shape=[None])
        hidden = self.op("Slice", [x, starts, ends], f"{name}_in", dtype=x.dtype)
        hidden.type, hidden.shape = x.type, x.shape
        return hidden

    def reshape_exact(self, flat: ir.Value, shape: ir.Value, rank: int | None, name: str, dtype: ir.DataType,
                      hint: ir.Shape | None = None, allowzero: bool = True) -> ir.Value:
        """Reshape where a 0 in ``shape`` means 0 (allowzero), at every opset; with
        ``allowzero`` False, without the attribute even where the opset has it."""
        if rank == 0:
            return self.op("Reshape", [flat, shape], name, shape=hint)
        if self.b.opset >= 14 and allowzero:
            # Even where the hint's dims are all positive: a hint read off a declared
            # output can be wrong (TorchScript declared [4, 1] for an element of x[:, 1:]
            # of a [4, 1] x, torch fuzz seed 14088), and the shape computed here is right.
            return self.op("Reshape", [flat, self._pinned(shape, rank, name)], name, shape=hint, allowzero=1)
        # Before allowzero, a 0 copies the input's dim: pad to a shape with no zeros,
        # reshape, and slice back to the real shape (a no-op unless a dim is 0).
        # Their rank stated (and length, where known): a pass after this one (tract's
        # padding of reductions over axes that may be empty) sees the ReduceProd's axis
        # on the first lowering as it does on a second.
        dims = [rank]
        zero = self.op("Equal", [shape, self.scalar(0)], f"{name}_zero", dtype=ir.DataType.BOOL, shape=dims)
        safe = self.op("Where", [zero, self.scalar(1), shape], f"{name}_safe", dtype=INT64, shape=dims)
        need = self.b.reduce("ReduceProd", safe, None, f"{name}_need", keepdims=True)
        have = self.shape(flat, f"{name}_have")
        pad = self.repeat(self.b.zeros(dtype, (1,), "fill"), self.op("Sub", [need, have], f"{name}_missing"), f"{name}_pad")
        padded = self.concat([flat, pad], 0, f"{name}_padded")
        if rank is None:
            # The rank may be 0, and onnxruntime cannot slice a scalar: a leading axis of
            # 1 is sliced along too and squeezed away.
            one = self.ints([1])
            full = self.op("Reshape", [padded, self.concat([one, safe], 0, f"{name}_safe1")], f"{name}_full")
            shape1 = self.concat([one, shape], 0, f"{name}_shape1")
            # Every axis, as Slice reads starts and ends without axes: no axes computed at
            # run time (TensorRT reads axes only as constants).
            sliced = self.op("Slice", [full, self.op("Sub", [shape1, shape1], f"{name}_starts"), shape1], f"{name}_sliced")
            return self.b.squeeze(sliced, [0], name)
        full = self.op("Reshape", [padded, self._pinned(safe, rank, f"{name}_safe")], f"{name}_full")
        return self.slice(full, self.ints([0] * rank), shape, self.ints(list(range(rank))), name)

    def _pinned(self, shape: ir.Value, rank: int | None, name: str) -> ir.Value:
        """``shape`` with its length, the rank, stated by a Reshape to ``[rank]`` when known.
        A runtime that cannot see it (OpenVINO bounds a Slice of a row to 1..2 dims) makes
        the Reshape it feeds one of dynamic rank, which OpenVINO's CPU plugin refuses or
        crashes on (tf2onnx's ragged map over values with no rows: SIGSEGV)."""
        if rank is None:
            return shape
        return self.op("Reshape", [shape, self.ints([rank])], f"{name}_dims", dtype=INT64, shape=[rank])

    def concat_index(self, p: ir.Value, q: ir.Value, sizes: ir.Value, offsets: ir.Value, name: str) -> ir.Value:
        """The permutation between element-major order and the concatenation along an
        inner axis: elements i of shape [P, sizes[i], Q] stored at ``offsets[i]``; entry
        k of the result is the position in the values of entry k of the concatenation
        [P, sum(sizes), Q]."""
        if sizes.shape is None:
            # A vector by construction: said, so that the emitter can write the CumSum
            # another way for a target without it (passes/legalize.py).
            sizes.shape = ir.Shape([None])
        total = self.b.reduce("ReduceSum", sizes, [0], f"{name}_total", keepdims=False)
        incl = self.op("CumSum", [sizes, self.scalar(0)], f"{name}_incl")
        excl = self.op("Sub", [incl, sizes], f"{name}_excl")
        j = self.op("Range", [self.scalar(0), total, self.scalar(1)], f"{name}_j", dtype=INT64)
        before = self.op("Less", [self.unsqueeze(j, [1], f"{name}_jcol"), self.unsqueeze(incl, [0], f"{name}_inclrow")], f"{name}_before", dtype=ir.DataType.BOOL)
        passed = self.op("Cast", [self.op("Not", [before], f"{name}_passed_b")], f"{name}_passed", dtype=INT64, to=INT64)
        owner = self.b.reduce("ReduceSum", passed, [1], f"{name}_owner", keepdims=False)
        size_j = self.op("Gather", [sizes, owner], f"{name}_size_j")
        off_j = self.op("Gather", [offsets, owner], f"{name}_off_j")
        start_j = self.op("Gather", [excl, owner], f"{name}_start_j")
        local = self.op("Sub", [j, start_j], f"{name}_local")
        base = self.op("Add", [off_j, self.op("Mul", [local, q], f"{name}_local_q")], f"{name}_base")
        stride = self.op("Mul", [size_j, q], f"{name}_stride")
        p_scalar = self.reshape(p, self.ints([]), f"{name}_p")
        q_scalar = self.reshape(q, self.ints([]), f"{name}_q")
        ps = self.op("Range", [self.scalar(0), p_scalar, self.scalar(1)], f"{name}_ps", dtype=INT64)
        qs = self.op("Range", [self.scalar(0), q_scalar, self.scalar(1)], f"{name}_qs", dtype=INT64)
        idx = self.op(
            "Add",
            [
                self.op(
                    "Add",
                    [
                        self.unsqueeze(base, [0, 2], f"{name}_base3"),
                        self.op("Mul", [self.unsqueeze(ps, [1, 2], f"{name}_ps3"), self.unsqueeze(stride, [0, 2], f"{name}_stride3")], f"{name}_rows"),
                    ],
                    f"{name}_rowbase",
                ),
                self.unsqueeze(qs, [0, 1], f"{name}_qs3"),
            ],
            f"{name}_idx3",
        )
        return self.reshape(idx, self.ints([-1]), f"{name}_index")


# -- rules --------------------------------------------------------------------------------

    def splice(self, x: ir.Value, start: ir.Value, stop: ir.Value, middle: ir.Value | None, axis: int, name: str) -> ir.Value:
        """``x[:start] ++ middle ++ x[stop:]`` along ``axis`` (start, stop: [1]-shaped)."""
        head = self.slice(x, self.ints([0]), start, [axis], f"{name}_head")
        tail = self.slice(x, stop, self.ints([MAX_INT64]), [axis], f"{name}_tail")
        return self.concat([head, *([middle] if middle is not None else []), tail], axis, name)

    def position(self, p: ir.Value | None, n: ir.Value, name: str, default: str = "n") -> ir.Value:
        """A position input (int32/int64, scalar or [1], negatives from the end) of a
        sequence of ``n`` elements as a non-negative int64 scalar; a missing one is ``n``
        (append) or ``n - 1`` (``default="last"``)."""
        if p is None:
            return n if default == "n" else self.op("Sub", [n, self.scalar(1)], f"{name}_last")
        known = const_tensor(p)
        if known is not None and known.size == 1:
            # A constant position needs no test: itself, or counted from the end.
            k = int(known.numpy().reshape(()))
            return self.scalar(k) if k >= 0 else self.op("Add", [n, self.scalar(k)], f"{name}_from_end", dtype=INT64, shape=[])
        if p.dtype != INT64:
            p = self.op("Cast", [p], f"{name}_i64", dtype=INT64, to=INT64, shape=p.shape)
        if p.shape is None or p.shape.rank() != 0:
            # (not for a known scalar: the constant folder takes such a Reshape out again,
            # trusting the same shape, and each removal looks at every use of its shape
            # constant, which 10,000 edits at run-time positions all read: quadratic)
            p = self.reshape(p, self.ints([]), f"{name}_scalar")
        neg = self.op("Less", [p, self.scalar(0)], f"{name}_neg", dtype=ir.DataType.BOOL)
        return self.op("Where", [neg, self.op("Add", [p, n], f"{name}_wrapped"), p], f"{name}_norm", dtype=INT64, shape=[])

    def split_sizes(self, d: ir.Value, d1: ir.Value, split: ir.Value | None, base: str) -> tuple[ir.Value, str]:
        """SplitToSequence's chunk sizes as an int64 [n] tensor, for a split dim ``d``
        (scalar; ``d1`` as [1]) known only at run time, and how they were made."""
        if split is None:
            return self.repeat(self.ints([1]), d1, f"{base}_sizes"), "chunks of 1"
        if split_rank(split) == 0:
            k = split if split.dtype == INT64 else self.op("Cast", [split], f"{base}_k64", dtype=INT64, to=INT64)
            k1 = self.op("Sub", [k, self.scalar(1)], f"{base}_km1")
            count = self.op("Div", [self.op("Add", [d, k1], f"{base}_dk"), k], f"{base}_count")
            starts = self.op("Mul", [self.op("Range", [self.scalar(0), count, self.scalar(1)], f"{base}_idx", dtype=INT64), k], f"{base}_starts")
            rest = self.op("Sub", [d, starts], f"{base}_rest")
            short = self.op("Less", [rest, k], f"{base}_short", dtype=ir.DataType.BOOL)
            return self.op("Where", [short, rest, k], f"{base}_sizes"), "run-time chunks of k"
        sizes = split if split.dtype == INT64 else self.op("Cast", [split], f"{base}_split64", dtype=INT64, to=INT64)
        return sizes, "run-time split sizes"


def split_rank(split: ir.Value) -> int:
    """The rank of SplitToSequence's ``split`` (0: chunks of k; 1: sizes)."""
    r = irutil.split_rank(split)
    assert r is not None, "the analysis keeps splits of unknown rank Flat-blocked"
    return r
