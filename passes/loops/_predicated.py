"""Computing both sides of a choice and keeping one, for targets without Loop or If:
the steps of a bounded Loop (``bound_loops``) and the branches of an If
(``ifs_to_selects``) run whether or not they are taken, and a Where (or, where only the
first dim may differ, a Concat and a Slice) keeps the taken one's values. A side not
taken must still run: ``guard_gathers`` gives its Gathers a filler row to read."""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes.lowering._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import Builder

__all__ = ["grows", "guard_gathers", "keeps_shape", "same_shape", "select", "select_carried", "show_dims"]


def guard_gathers(body: ir.Graph, mapped: dict[ir.Value, ir.Value], ran: ir.Value, o: Ops, name: str) -> None:
    """Make every Gather of a step's copy read a filler row (zeros, in the data's dtype,
    appended along the axis) where the loop ran no step: a body that reads row i of the
    tensor it loops over would otherwise fail on an empty one (``x[0]`` of a batch of 0),
    though its results are dropped. Where the loop ran, the copy reads what it read."""
    for node in body:
        if node.op_type != "Gather" or not is_default_domain(node) or len(node.inputs) < 2:
            continue
        copy = mapped.get(node.outputs[0])
        p = copy.producer() if copy is not None else None
        if p is None or p.inputs[0] is None or p.inputs[1] is None:
            continue
        data, index = p.inputs[0], p.inputs[1]
        rank = data.shape.rank() if data.shape is not None else None
        axis_attr = p.attributes.get("axis")
        k = axis_attr.as_int() if axis_attr is not None else 0
        if k < 0:
            if rank is None:
                continue
            k += rank
        if data.dtype is None or index.dtype is None or (rank is None and data.dtype == ir.DataType.STRING):
            continue
        # Emitted just before the copy: ``o`` may emit after the copies (an If's branches
        # inlined before the If, then guarded), which would read the filler before it is made.
        g = Ops(Builder(p.graph, p, o.b.opset, o.b.names, main_graph=o.b.main_graph, legalize=o.b.legalize))
        dims = g.shape(data, f"{name}_gather_dims")
        n1 = g.slice(dims, g.ints([k]), g.ints([k + 1]), [0], f"{name}_gather_rows")
        n = g.reshape(n1, g.ints([]), f"{name}_gather_n")
        if index.dtype != INT64:
            index = g.op("Cast", [index], f"{name}_gather_index", dtype=INT64, to=INT64)
        wrapped = g.op("Where", [g.op("Less", [index, g.scalar(0)], f"{name}_gather_neg", dtype=ir.DataType.BOOL),
                                 g.op("Add", [index, n], f"{name}_gather_wrapped", dtype=INT64), index],
                       f"{name}_gather_norm", dtype=INT64)
        safe = g.op("Where", [ran, wrapped, n], f"{name}_gather_safe", dtype=INT64)
        # The data's dims with a 1 at the axis (the rank need not be known: a constant end
        # of "to the end", which tract reads right, unlike a run-time one).
        one_row = g.concat([g.slice(dims, g.ints([0]), g.ints([k]), [0], f"{name}_gather_before"), g.ints([1]),
                            g.slice(dims, g.ints([k + 1]), g.ints([MAX_INT64]), [0], f"{name}_gather_after")],
                           0, f"{name}_gather_filler_dims")
        zero = g.op("Cast", [g.scalar(0)], f"{name}_gather_zero", dtype=data.dtype, shape=[], to=data.dtype)
        if data.dtype == ir.DataType.STRING:
            # onnx's reference Expand fails on strings (TVM's frontend fails a Tile to a
            # run-time shape, but has no strings).
            assert rank is not None
            filler = g.op("Tile", [g.reshape(zero, g.ints([1] * rank), f"{name}_gather_unit"), one_row],
                          f"{name}_gather_filler", dtype=data.dtype)
        else:
            filler = g.op("Expand", [zero, one_row], f"{name}_gather_filler", dtype=data.dtype)
        padded = g.concat([data, filler], k, f"{name}_gather_padded")
        p.replace_input_with(0, padded)
        p.replace_input_with(1, safe)


def select_carried(active: ir.Value, new: ir.Value, old: ir.Value, bi: ir.Value, bo: ir.Value, o: Ops, name: str) -> ir.Value:
    """``new`` if the step ran, else ``old``: carried value ``bi`` in, ``bo`` out of the
    body, which keeps its shape (a Where) or may change its first dim (a list it appends
    to, Flat: a Where of two shapes would broadcast)."""
    return select(active, new, old, o, name, keeps_shape(bi, bo))


def select(cond: ir.Value, a: ir.Value, b: ir.Value, o: Ops, name: str, same: bool, gathered: bool = False) -> ir.Value:
    """``a`` where the scalar ``cond`` holds, else ``b``: a Where when they have one shape
    (``same``), else (they may differ in the first dim only) the Slice of ``a`` or ``b``
    out of their Concat, or with ``gathered`` its rows Gathered by a Range (OpenVINO
    sliced 3 values where there was 1 from a list read out of such a Slice, fuzz seed
    6244; the Gather it gives right)."""
    if same:
        return o.op("Where", [cond, a, b], name, dtype=a.dtype, shape=None if a.shape is None else list(a.shape.dims))
    both = o.concat([a, b], 0, f"{name}_both")
    first = [o.slice(o.shape(v, f"{name}_{w}_dims"), o.ints([0]), o.ints([1]), [0], f"{name}_{w}_len")
             for v, w in ((a, "a"), (b, "b"))]
    start = o.op("Where", [cond, o.ints([0]), first[0]], f"{name}_start", dtype=INT64, shape=[1])
    end = o.op("Where", [cond, first[0], o.op("Add", first, f"{name}_total", dtype=INT64, shape=[1])],
               f"{name}_end", dtype=INT64, shape=[1])
    if gathered:
        rows = o.op("Range", [o.b.squeeze(start, [0], f"{name}_from"), o.b.squeeze(end, [0], f"{name}_to"), o.scalar(1)],
                    f"{name}_rows", dtype=INT64, shape=[None])
        return o.op("Gather", [both, rows], name, dtype=a.dtype, axis=0)
    return o.slice(both, start, end, [0], name)


def keeps_shape(bi: ir.Value, bo: ir.Value) -> bool:
    """The body returns carried value ``bi`` with its shape: provably the same dims, or
    ``bi`` itself."""
    while (p := bo.producer()) is not None and p.op_type == "Identity" and is_default_domain(p) and p.inputs:
        bo = p.inputs[0]
    return bo is bi or same_shape(bi.shape, bo.shape)


def grows(bi: ir.Value, bo: ir.Value) -> bool:
    """Only the first dim of carried value ``bi`` may change (a list it appends to):
    the same rank, every other dim provably equal."""
    a, b = bi.shape, bo.shape
    return a is not None and b is not None and a.rank() == b.rank() > 0 and same_shape(ir.Shape(a.dims[1:]), ir.Shape(b.dims[1:]))


def same_shape(a: ir.Shape | None, b: ir.Shape | None) -> bool:
    if a is None or b is None or a.rank() != b.rank():
        return False
    for x, y in zip(a.dims, b.dims):
        if isinstance(x, int) or isinstance(y, int):
            if x != y:
                return False
        elif x.value is None or x.value != y.value:
            return False
    return True


def show_dims(s: ir.Shape | None) -> str:
    return "unknown" if s is None else "[" + ", ".join(str(d) if isinstance(d, int) else (d.value or "?") for d in s.dims) + "]"


