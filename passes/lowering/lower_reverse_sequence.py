"""Lower ``ReverseSequence`` to index arithmetic and one ``GatherElements``, for targets
that lack it (tract, onnx2torch, tinygrad, TVM).

``ReverseSequence(x, lens, batch_axis, time_axis)`` reverses, for each batch row ``b``,
the first ``lens[b]`` steps along the time axis and keeps the rest. With ``t`` the step
index, the step read is ``lens[b] - 1 - t`` where ``t < lens[b]`` and ``t`` otherwise:
an index grid over (batch, time), laid out in the input's axis order, broadcast over the
remaining axes, and gathered along the time axis. Every dtype (GatherElements takes them
all), any rank >= 2, both axis orders, lengths 0..T, zero-size dims. A constant
``ReverseSequence`` is folded before this pass runs (fold_sequence_constants).
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import is_default_domain, node_label
from seqlower.ir.builder import NameAuthority
from seqlower.errors import ModelError

__all__ = ["LowerReverseSequencePass"]


class LowerReverseSequencePass(ir.passes.InPlacePass):
    """Every ReverseSequence node, subgraphs and functions included, as tensor ops."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _lower)


def _lower(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "ReverseSequence" or not is_default_domain(node):
        return None
    out = node.outputs[0]
    lowered = _reverse(node, Ops(scope.builder(node, names)), out.name or "reversed")
    replace_output(out, lowered, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "index grid + GatherElements"


def _reverse(node: ir.Node, o: Ops, name: str) -> ir.Value:
    x, lens = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if x is None or lens is None:
        raise ModelError(f"{node_label(node)}: needs an input and sequence_lens")
    batch_axis = node.attributes["batch_axis"].as_int() if "batch_axis" in node.attributes else 1
    time_axis = node.attributes["time_axis"].as_int() if "time_axis" in node.attributes else 0
    if {batch_axis, time_axis} != {0, 1}:
        raise ModelError(f"{node_label(node)}: batch_axis and time_axis must be 0 and 1, got {batch_axis} and {time_axis}")
    rank = x.shape.rank() if x.shape is not None else None
    if rank is not None and rank < 2:
        raise ModelError(f"{node_label(node)}: input must have rank >= 2, got {rank}")
    if lens.dtype != INT64:
        lens = o.op("Cast", [lens], f"{name}_lens64", dtype=INT64, to=INT64)
    dims = o.shape(x, f"{name}_dims")
    steps = o.reshape(o.slice(dims, o.ints([time_axis]), o.ints([time_axis + 1]), [0], f"{name}_t1"), o.ints([]), f"{name}_steps")
    t = o.op("Range", [o.scalar(0), steps, o.scalar(1)], f"{name}_t", dtype=INT64)
    # The grid in the input's own axis order: [T, B] when time comes first, else [B, T].
    if time_axis == 0:
        t_grid, l_grid = o.unsqueeze(t, [1], f"{name}_t_col"), o.unsqueeze(lens, [0], f"{name}_lens_row")
    else:
        t_grid, l_grid = o.unsqueeze(t, [0], f"{name}_t_row"), o.unsqueeze(lens, [1], f"{name}_lens_col")
    inside = o.op("Less", [t_grid, l_grid], f"{name}_inside", dtype=ir.DataType.BOOL)
    mirrored = o.op("Sub", [o.op("Sub", [l_grid, o.scalar(1)], f"{name}_last"), t_grid], f"{name}_mirrored")
    index = o.op("Where", [inside, mirrored, t_grid], f"{name}_index", dtype=INT64)
    # Broadcast over the remaining axes: [d0, d1] -> [d0, d1, 1, ...] -> the input's shape.
    lead = o.slice(dims, o.ints([0]), o.ints([2]), [0], f"{name}_lead")
    rest = o.slice(dims, o.ints([2]), o.ints([2**62]), [0], f"{name}_rest")
    ones = o.repeat(o.ints([1]), o.shape(rest, f"{name}_rest_rank"), f"{name}_ones")
    grid = o.op("Reshape", [index, o.concat([lead, ones], 0, f"{name}_grid_shape")], f"{name}_grid")
    full = o.op("Expand", [grid, dims], f"{name}_gather_index")
    return o.op("GatherElements", [x, full], f"{name}_out", axis=time_axis)
