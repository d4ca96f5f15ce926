"""The Flat rules of the ops that carry lists through subgraphs: If and Loop (their
tensors returned and carried) and SequenceMap (a Loop over the length: scan outputs where
the body's output shape is the same every iteration, else carried Concat)."""

from __future__ import annotations

from __future__ import annotations


import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import elementwise_body
from seqlower.passes._rewrite import Scope, inline_map_body
from seqlower.passes.lowering.convert import Collected, rule
from seqlower.passes.lowering.convert_control import map_as_loop
from seqlower.analysis.analyzer import node_label
from seqlower.passes.lowering._tensor_ops import INT64, Ops


from seqlower.passes.lowering.flat import FlatLowerer, FlatSeq, flat_tensor, scan_row, unscan_rows

__all__: list[str] = []


@rule("SequenceMap", "flat")
def _sequence_map(lw: FlatLowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    lw.lower_subgraph(Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False, scope.legalize))
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


def _elementwise_map(lw: FlatLowerer, node: ir.Node, body: ir.Graph, first: FlatSeq, o: Ops) -> bool:
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


def _collect(lw: FlatLowerer, out: ir.Value, y: ir.Value, bo: ir.Value, first: FlatSeq, bo_ops: Ops, o: Ops) -> Collected:
    """How the map's Loop collects output ``out`` (``y`` in the step): a scan output
    where the body's output shape is static; else the values carried by Concat with a
    scan output of shape rows, or, when the rank is only known at run time, with the
    shapes carried too and a scan output of ranks."""
    m = _MapOutput(lw, out, bo, first, bo_ops, o)
    shape = bo.shape
    info = lw.analysis.info.get(out)
    if shape is not None and (info is None or info.elem_shape != shape):
        # What the analysis proved of every element, not the body's declared shape:
        # inferred from the first element's, it may not hold for the others.
        shape = ir.Shape([None] * shape.rank())
    r = shape.rank() if shape is not None else None
    w = m.width if m.width is not None else r
    flat_y = flat_tensor(y, bo_ops, f"{m.name}_y")
    if shape is not None and all(isinstance(d, int) for d in shape.dims):
        assert r is not None and w is not None
        return m.scanned(flat_y, [int(d) for d in shape.dims], w)
    if r is not None and w is not None:
        return m.carried_with_rows(y, flat_y, r, w)
    return m.carried_with_shapes(y, flat_y)


class _MapOutput:
    """One output of a map's Loop, collected one of three ways (see :func:`_collect`)."""

    def __init__(self, lw: FlatLowerer, out: ir.Value, bo: ir.Value, first: FlatSeq, bo_ops: Ops, o: Ops) -> None:
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
        self.c.scans.append(scan_row(row, w, self.bo_ops, f"{self.name}_y"))

        def finish(carried: list[ir.Value], scans: list[ir.Value]) -> None:
            values, scan = self.named(carried[0], "flat", self.dtype), self.named(scans[0], "scan", INT64)
            self.lw.make(self.out, values, unscan_rows(scan, w, self.o, self.name), self.ranks_of(r), self.o, self.dtype)

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
