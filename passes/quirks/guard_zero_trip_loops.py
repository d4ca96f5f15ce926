"""Make what a Loop that grows what it carries gives run-time sized, for OpenVINO (quirk
"loop-assumes-an-iteration").

OpenVINO 2026.4 infers a Loop's carried outputs as if the body ran at least once: a list
that starts empty and gains a row per iteration comes out with a lower bound of one row,
and a Concat after it then fails at run time when the Loop ran no iteration ("Descriptor's
shape: {2 - ?, 1} is incompatible with provided dimensions: {1, 1}"). The Loop itself runs
no iteration right; only the bound is wrong. Each growing state it gives is therefore
sliced to its own shape, or, when the Loop may have run none, to its initial value's:
``Slice(out, 0, Where(runs, Shape(out), Shape(init)))``. The two are the same value when
it ran none, so the Slice is a no-op at run time, and OpenVINO's bounds of a Where are
the smaller of both.

This replaced an ``If (M > 0)`` around the Loop: OpenVINO's CPU plugin reads garbage from
such an If's outputs once a chain of Concats reads them (quirk "if-run-time-shape"; fuzz
seed 2561: a comprehension over columns concatenated along axis 1).

Loops whose carried tensors provably keep one shape, and Loops whose trip count and
condition are constants, are left alone, and so is a state nothing here reads (a graph's
output: no Concat follows it in this graph; in a region's sub-model, what reads it is
outside, and may be this pass's Slice already).
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.passes.loops.loops_to_scans import carries_one_shape
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.keys import SHAPE_HIDDEN

__all__ = ["GuardZeroTripLoopsPass", "may_run_none", "runs_at_all", "sizing_shape"]


def _sized(v: ir.Value) -> bool:
    """``v`` is read only by the Slice this pass writes and the Shape that sizes it (a
    model lowered before)."""
    for sl in (u.node for u in v.uses() if u.idx == 0):
        shape = sizing_shape(sl)
        if shape is not None:
            return all(u.node is sl or u.node is shape for u in v.uses())
    return False


def sizing_shape(node: ir.Node) -> ir.Node | None:
    """When ``node`` is a Slice this pass wrote (``Slice(out, 0, Where(runs, Shape(out),
    ...))``, a no-op when run), the Shape in its end; else None."""
    if node.op_type != "Slice" or len(node.inputs) < 3 or node.inputs[0] is None:
        return None
    ends = node.inputs[2]
    p = ends.producer() if ends is not None else None
    if p is not None and p.op_type == "Gather" and p.inputs[0] is not None:  # (some axes only)
        p = p.inputs[0].producer()
    shape = p.inputs[1].producer() if p is not None and p.op_type == "Where" and p.inputs[1] is not None else None
    return shape if shape is not None and shape.op_type == "Shape" and shape.inputs[0] is node.inputs[0] else None


class GuardZeroTripLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _guard)


def _guard(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    if not may_run_none(node):
        return None
    body = node.attributes["body"].as_graph()
    if any(v is None for v in node.inputs[2:]) or carries_one_shape(node, body):
        return None
    slots = [k for k, (init, out) in enumerate(zip(node.inputs[2:], node.outputs))
             if init is not None and isinstance(init.type, ir.TensorType) and init.shape is not None
             and init.shape.rank() > 0 and out.uses() and not _sized(out)]
    if not slots:
        return None
    o = Ops(scope.builder(node, names))
    base = node.name or "loop"
    ran = runs_at_all(node, o, base)
    # Built before the Loop, then moved right after it (no scan of the graph for the
    # node that follows it); constants stay where they are made, for other readers.
    a = Ops(scope.builder(node, names))
    for k in slots:
        _size_state(node, body, k, ran, a, base)
    for k in slots:
        if _grows_from_a_row(node, body, k):
            # OpenVINO bounds such a state below by the row plus one iteration's, and the
            # Loop node fails when it runs none: its initial value's shape is hidden
            # from it (a no-op at run time). Only growing states: hiding every state's
            # broke a Loop whose states shrink (graph program 20262).
            init = node.inputs[2 + k]
            node.replace_input_with(2 + k, o.shape_hidden(init, f"{init.name or base}{SHAPE_HIDDEN}"))
    made = [n for n in a.b.nodes if n.op_type != "Constant"]
    for n in made:
        scope.graph.remove(n)
    scope.graph.insert_after(node, made)
    return "tensor ops", "growing states sized to what the Loop ran (OpenVINO)"


def _run_time_bounds(node: ir.Node) -> tuple[ir.Value | None, ir.Value | None]:
    """The Loop's trip count and condition, each where it is known only at run time."""
    m = node.inputs[0] if node.inputs else None
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    return (m if m is not None and const_array(m) is None else None,
            cond if cond is not None and const_array(cond) is None else None)


def may_run_none(node: ir.Node) -> bool:
    """Whether a run-time trip count or condition may make the Loop run no iteration."""
    return any(v is not None for v in _run_time_bounds(node))


def runs_at_all(node: ir.Node, o: Ops, base: str) -> ir.Value:
    """A bool scalar: whether the Loop (one that ``may_run_none``) runs an iteration."""
    m, cond = _run_time_bounds(node)
    runs = []
    if m is not None:
        trips = o.reshape(m, o.ints([]), f"{base}_trips") if m.shape is None or m.shape.rank() != 0 else m
        runs.append(o.op("Greater", [trips, o.scalar(0)], f"{base}_has_trips", dtype=ir.DataType.BOOL, shape=[]))
    if cond is not None:
        runs.append(cond if cond.shape is not None and cond.shape.rank() == 0 else o.reshape(cond, o.ints([]), f"{base}_starts"))
    return runs[0] if len(runs) == 1 else o.op("And", runs, f"{base}_ran", dtype=ir.DataType.BOOL, shape=[])


def _grows_from_a_row(node: ir.Node, body: ir.Graph, k: int) -> bool:
    """The ``k``th state starts with a row known to be there and the body appends to it
    (what check --target names as loop-assumes-an-iteration when left: values.py)."""
    out = body.outputs[1 + k].producer()
    if out is None or out.op_type != "Concat" or not is_default_domain(out):
        return False
    if "axis" in out.attributes and out.attributes["axis"].as_int() != 0:
        return False
    state = body.inputs[2 + k]

    def of_state(v: ir.Value | None) -> bool:
        p = v.producer() if v is not None else None
        return v is state or (p is not None and p.op_type == "Slice" and p.inputs[0] is state)

    if all(of_state(v) for v in out.inputs):
        return False  # (it keeps or drops rows)
    init = node.inputs[2 + k]
    p = init.producer() if init is not None else None
    if p is not None and p.op_type == "Slice" and p.inputs and p.inputs[0] is not None:
        init = p.inputs[0]  # (a row padded in and sliced off again)
    return _has_a_row(init)


def _has_a_row(v: ir.Value | None, depth: int = 0) -> bool:
    if v is None:
        return False
    if v.shape is not None and v.shape.rank() > 0 and isinstance(v.shape.dims[0], int) and v.shape.dims[0] >= 1:
        return True
    p = v.producer()
    if p is None or depth > 4 or p.op_type != "Concat" or not is_default_domain(p) \
            or ("axis" in p.attributes and p.attributes["axis"].as_int() != 0):
        return False
    return any(_has_a_row(x, depth + 1) for x in p.inputs)


def _size_state(node: ir.Node, body: ir.Graph, k: int, ran: ir.Value, a: Ops, base: str) -> None:
    """The Loop's ``k``th state, read as the Loop gave it when it ran and as it came in
    otherwise, along the axes that may grow."""
    init, out = node.inputs[2 + k], node.outputs[k]
    rank = init.shape.rank()
    readers = list(out.uses())
    # Only the axes that may grow: a static dim the body gives stays static (a Flat list's
    # rows stay [?, W]: OpenVINO reshapes by a row's W entries, and a row read from a Slice
    # of [?, ..W] rows is of dynamic rank there, fuzz seed 5447). The initial value's dim
    # is W too, or not known (a run-time empty state of the same web: the same W). The
    # body's input says it as well as its output (an If in the body may leave the
    # output's [?, ?]).
    said = [s for s in (body.outputs[1 + k].shape, body.inputs[2 + k].shape) if s is not None and s.rank() == rank]
    axes = [i for i in range(rank) if not any(
        isinstance(s.dims[i], int) and (not isinstance(init.shape.dims[i], int) or s.dims[i] == init.shape.dims[i])
        for s in said)]
    if not axes:
        return
    dims = a.op("Where", [ran, a.shape(out, f"{out.name or base}_ran_dims"), a.shape(init, f"{out.name or base}_init_dims")],
                f"{out.name or base}_dims", dtype=INT64, shape=[rank])
    if len(axes) < rank:
        dims = a.op("Gather", [dims, a.ints(axes)], f"{out.name or base}_grown_dims", dtype=INT64, shape=[len(axes)])
    sized = a.slice(out, a.ints([0] * len(axes)), dims, axes, f"{out.name or base}_sized")
    sized.type, sized.shape = out.type, out.shape
    for use in readers:
        use.node.replace_input_with(use.idx, sized)
