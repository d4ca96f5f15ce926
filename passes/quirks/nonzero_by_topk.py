"""NonZero written with TopK, for onnx2torch (quirk "nonzero-layout").

onnx2torch 1.5.15 hands NonZero to ``torch.nonzero``, which lists the positions as
``[K, rank]`` where ONNX's NonZero gives ``[rank, K]``: the rows of a mask come out as
pairs (silent wrong numbers, or a Gather past the end). Here the positions are found
without NonZero: the mask is flattened, every position gets the key ``position`` where
the mask is set and ``N + position`` where not, the ``K`` smallest keys (``TopK``,
ascending) are the set positions in order, and each is unravelled into its coordinates
by the strides::

    flat = Reshape(x, [-1]); N = size; K = number set
    keys = Where(flat != 0, range(N), N + range(N))
    p = TopK(keys, K, largest=0).values          # set positions, ascending (C order)
    coordinates[d] = (p / stride[d]) % dim[d]    # stacked: [rank, K]

which is ONNX's NonZero on every runtime. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["NonZeroByTopKPass"]


class NonZeroByTopKPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "NonZero" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if x.shape is None or x.dtype is None:
        return None
    rank = x.shape.rank()
    o = Ops(scope.builder(node, names))
    base = node.name or "nonzero"
    if rank == 0:
        x = o.reshape(x, o.ints([1]), f"{base}_vector")
        rank_out = 1
    else:
        rank_out = rank
    flat = o.reshape(x, o.ints([-1]), f"{base}_flat")
    # Not Size: onnx2torch has no converter for it.
    n = o.b.reduce("ReduceProd", o.shape(x, f"{base}_shape"), [0], f"{base}_n", keepdims=False)
    positions = o.op("Range", [o.scalar(0), n, o.scalar(1)], f"{base}_positions", dtype=INT64, shape=[None])
    zero = o.b.constant(np.zeros((), x.dtype.numpy()), f"{base}_zero")
    unset = o.op("Equal", [flat, zero], f"{base}_unset", dtype=ir.DataType.BOOL, shape=[None])
    keys = o.op("Where", [unset, o.op("Add", [positions, n], f"{base}_late", dtype=INT64, shape=[None]), positions],
                f"{base}_keys", dtype=INT64, shape=[None])
    count = o.b.reduce("ReduceSum", o.op("Cast", [o.op("Not", [unset], f"{base}_set", dtype=ir.DataType.BOOL, shape=[None])],
                                         f"{base}_ones", dtype=INT64, shape=[None], to=INT64), [0], f"{base}_count", keepdims=True)
    topk = ir.Node("", "TopK", [keys, count], [ir.AttrInt64("largest", 0), ir.AttrInt64("sorted", 1)], num_outputs=2,
                   name=names.fresh(f"{base}_topk"))
    o.b.graph.insert_before(node, topk)
    found = topk.outputs[0]
    found.name, found.dtype, found.shape = names.fresh(f"{base}_found"), INT64, ir.Shape([None])
    topk.outputs[1].name = names.fresh(f"{base}_found_at")
    dims = o.shape(x, f"{base}_dims")
    # strides[d] = product of dims after d (C order): a reverse exclusive cumulative product,
    # written out per axis (the rank is known).
    rows = []
    for d in range(rank_out):
        dim = o.reshape(o.slice(dims, o.ints([d]), o.ints([d + 1]), [0], f"{base}_dim{d}"), o.ints([]), f"{base}_dim{d}_s")
        if d + 1 < rank_out:
            after = o.b.reduce("ReduceProd", o.slice(dims, o.ints([d + 1]), o.ints([rank_out]), [0], f"{base}_after{d}"),
                               [0], f"{base}_stride{d}", keepdims=False)
            # At least 1: a 0 among the dims means no position, and onnxruntime fails an
            # integer division by zero even over nothing.
            after = o.op("Max", [after, o.scalar(1)], f"{base}_stride{d}_nz", dtype=INT64, shape=[])
            q = o.op("Div", [found, after], f"{base}_q{d}", dtype=INT64, shape=[None])
        else:
            q = found
        if d > 0:
            dim = o.op("Max", [dim, o.scalar(1)], f"{base}_dim{d}_nz", dtype=INT64, shape=[])
        rows.append(o.unsqueeze(o.op("Mod", [q, dim], f"{base}_c{d}", dtype=INT64, shape=[None]) if d > 0 else q,
                                [0], f"{base}_row{d}"))
    out = o.concat(rows, 0, f"{base}_positions_by_axis") if len(rows) > 1 else rows[0]
    if rank == 0:
        # A scalar's NonZero is [0, K]: no coordinate, one column if it is set.
        out = o.slice(out, o.ints([0]), o.ints([0]), [0], f"{base}_scalar")
    replace_output(node.outputs[0], out, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "NonZero by TopK of the set positions (onnx2torch lists them transposed)"
