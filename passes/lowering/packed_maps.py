"""The Packed rules of the ops that carry lists through subgraphs: If and Loop (the
tensor returned and carried) and SequenceMap (the body once on the whole stack where it
batches, else a Loop over the length)."""

from __future__ import annotations


import onnx_ir as ir

from seqlower.passes._rewrite import Scope
from seqlower.passes.lowering.convert import Collected, rule
from seqlower.passes.lowering.convert_control import map_as_loop
from seqlower.passes.lowering._batched_map import batched_plan, run_batched
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import node_label

from seqlower.passes.lowering.packed import PackedLowerer, Packed, empty_list, len_along

__all__: list[str] = []


def _batched_map(lw: PackedLowerer, node: ir.Node, body: ir.Graph, o: Ops) -> bool:
    """The body once on the whole stacks (see passes/lowering/_batched_map.py), when every
    sequence in and out is Stacked and the body allows it."""
    seq_inputs = [(inp, bi) for inp, bi in zip(node.inputs, body.inputs) if inp is not None and inp in lw.seqs]
    if any(lw.seq(inp).axis is not None for inp, _ in seq_inputs) or any(lw.axis(out) is not None for out in node.outputs):
        return False
    plan = batched_plan(body, [bi for _, bi in seq_inputs], o.b.opset)
    if plan is None:
        return False
    value_map: dict[ir.Value, ir.Value | None] = {bi: inp for inp, bi in zip(node.inputs, body.inputs)}
    value_map.update({bi: lw.seq(inp).data for inp, bi in seq_inputs})
    base = node.outputs[0].name or "map"
    count1 = o.reshape(lw.count(lw.seq(seq_inputs[0][0]), o, base), o.ints([1]), f"{base}_n1")
    outputs = [(bo, out.name or "map") for out, bo in zip(node.outputs, body.outputs)]
    stacks = run_batched(body, plan, value_map, [bi for _, bi in seq_inputs], outputs, count1, o, lw.names)
    for out, (y, batched) in zip(node.outputs, stacks):
        lw.set(out, o.identity(y, f"{out.name or 'map'}_data") if batched else y)
    return True


@rule("SequenceMap", "packed")
def _sequence_map(lw: PackedLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    lw.lower_subgraph(Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False, scope.legalize))
    info = lw.analysis.info.get(node.inputs[0])
    if info is not None and info.length == 0:
        # A map over a list that is provably empty makes empty lists whose elements have
        # the group's shape, not the body's (which the batched body would give them).
        for out, bo in zip(node.outputs, body.outputs):
            out_info = lw.analysis.info.get(out)
            dtype = bo.dtype or (out_info.dtype if out_info is not None else None)
            assert dtype is not None
            empty_list(lw, out, dtype, o)
        return "empty lists: the mapped list is empty"
    if _batched_map(lw, node, body, o):
        node.attributes.pop("body")
        return "the body once on the stacks (batched)"
    base = node.outputs[0].name or "map"
    count = lw.count(lw.seq(node.inputs[0]), o, base)
    count1: list[ir.Value] = []  # made once, after the Loop, if a Stacked output needs it

    def element(inp: ir.Value, it: ir.Value, bo_ops: Ops, name: str) -> ir.Value:
        return _map_element(lw, lw.seq(inp), it, bo_ops, o, name, f"{inp.name or 'seq'}_map")

    def collect(k: int, y: ir.Value, bo: ir.Value, bo_ops: Ops) -> Collected:
        out = node.outputs[k]
        if lw.axis(out) is not None:
            return _collect_ragged(lw, out, y, bo, bo_ops, o)
        c = Collected(scans=[bo_ops.unsqueeze(y, [0], f"{out.name or base}_y_step")], how="scan output")

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            scan = scans[0]
            scan.name, scan.type = lw.names.fresh(f"{out.name or base}_scan"), ir.TensorType(bo.dtype) if bo.dtype is not None else None
            if not count1:
                count1.append(o.reshape(count, o.ints([1]), f"{base}_count1"))
            lw.set(out, lw.exact(out, scan, count1[0], o, f"{out.name or base}_{k}"))

        c.finish = finish
        return c

    map_as_loop(lw, node, o, scope, element, count, collect)
    return "Loop with scan outputs"


def _map_element(lw: PackedLowerer, ps: Packed, it: ir.Value, bo_ops: Ops, o: Ops, name: str, base: str) -> ir.Value:
    """Element ``it`` (the map Loop's step) of a packed value, in the Loop's body."""
    if ps.axis is None and ps.data.dtype != ir.DataType.STRING:
        return bo_ops.op("Gather", [ps.data, it], name, axis=0)
    it1 = bo_ops.reshape(it, bo_ops.ints([1]), f"{name}_i1")
    next1 = bo_ops.op("Add", [it1, bo_ops.ints([1])], f"{name}_i1_next")
    if ps.axis is None:  # strings: a Slice, not Gather (see _sequence_at)
        return bo_ops.b.squeeze(bo_ops.slice(ps.data, it1, next1, [0], f"{name}_row"), [0], name)
    bounds = lw.bounds(ps, o, base)
    start = bo_ops.op("Gather", [bounds, it1], f"{name}_start")
    end = bo_ops.op("Gather", [bounds, next1], f"{name}_end")
    return bo_ops.slice(ps.data, start, end, [ps.axis], name)


def _collect_ragged(lw: PackedLowerer, out: ir.Value, y: ir.Value, bo: ir.Value, bo_ops: Ops, o: Ops) -> Collected:
    """A Ragged output of a map's Loop: the data grows by a Concat along the axis, the
    lengths are a scan output."""
    axis, dtype, name = lw.axis(out), bo.dtype, out.name or "map"
    assert axis is not None and dtype is not None
    acc = ir.Value(name=lw.names.fresh(f"{name}_acc"), type=ir.TensorType(dtype), shape=lw.elem(out))
    init = o.op("Expand", [o.b.zeros(dtype, (), "zero"), lw.elem_dims(out, o, f"{name}_init", along=o.ints([0]))], f"{name}_acc_init", dtype=dtype)
    size = len_along(y, axis, bo_ops, f"{name}_y")
    c = Collected(carried=[(init, acc, bo_ops.concat([acc, y], axis, f"{name}_acc_next"))],
                  scans=[bo_ops.reshape(size, bo_ops.ints([]), f"{name}_y_size")], how="carried Concat")

    def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
        data, scan = carried[0], scans[0]
        data.name, data.type = lw.names.fresh(f"{name}_data"), ir.TensorType(dtype)
        scan.name, scan.type = lw.names.fresh(f"{name}_scan"), ir.TensorType(INT64)
        lw.set(out, data, o.reshape(scan, o.ints([-1]), f"{name}_lengths"))

    c.finish = finish
    return c
