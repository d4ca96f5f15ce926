"""A SequenceMap body run once on whole stacks instead of once per element.

Where every sequence input is Stacked (``[n, *elem]``), a body made only of ops that act
the same on a leading batch axis computes, on the stacks, the stack of what it computes
per element: elementwise ops (a batched operand of lower rank gets unit axes after the
batch axis, so broadcasting against the others still lines up from the right), Gather
of rows of an unbatched tensor at batched indices, Reshape to a constant shape, reductions and
softmax-like ops with their axes shifted by one, Transpose with its perm shifted, Squeeze
and Unsqueeze with explicit axes, Concat of batched operands, and MatMul where the
batched operand keeps the matrix axes. Anything else, or a value of unknown rank, and the
body is not batched (the Loop lowering takes it). No Loop: the lowering for targets
without Loop or Scan, and faster everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import inline_map_body
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import Builder, NameAuthority

__all__ = ["batched_plan", "emit_batched", "elementwise_body", "run_batched", "sliced_plan"]

UNARY = frozenset({
    "Identity", "Cast", "CastLike", "Relu", "Neg", "Abs", "Exp", "Log", "Sqrt", "Sigmoid", "Tanh", "Not", "Floor", "Ceil",
    "Round", "Sin", "Cos", "Tan", "Erf", "Reciprocal", "Sign", "IsNaN", "IsInf", "Softplus", "Softsign", "LeakyRelu", "Elu",
    "Selu", "Celu", "HardSigmoid", "HardSwish", "Gelu", "Mish", "ThresholdedRelu", "Clip",
})
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Where", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})
REDUCE = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare",
})
# (op, first opset where ``axes`` is an input rather than an attribute)
AXES_INPUT_SINCE = {"ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13}
_AXIS_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax", "ArgMax", "ArgMin", "Concat", "CumSum"})


def _rank(v: ir.Value | None) -> int | None:
    if v is None:
        return None
    if v.shape is not None:
        return v.shape.rank()
    c = const_array(v)
    return None if c is None else c.ndim


def _axes(node: ir.Node, opset: int) -> list[int] | None | str:
    """The node's axes: a list, None when absent, or "dynamic"."""
    since = AXES_INPUT_SINCE.get(node.op_type, 18)
    if opset >= since:
        a = node.inputs[1] if len(node.inputs) > 1 else None
        if a is None:
            return None
        c = const_array(a)
        return "dynamic" if c is None else [int(x) for x in c.reshape(-1)]
    attr = node.attributes.get("axes")
    return None if attr is None else list(attr.as_ints())


def _captures(node: ir.Node, values: Any) -> bool:
    """Whether a subgraph of ``node`` reads one of ``values`` from the scope outside it:
    an If or Loop in the body that reads the element without taking it as an input
    (whose branches a batched body would run on the stack, their axes unshifted)."""
    return any(v is not None and v in values
               for attr in node.attributes.values() if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for g in ([attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else attr.as_graphs())
               for inner in ir.traversal.RecursiveGraphIterator(g) for v in inner.inputs)


def batched_plan(body: ir.Graph, batched_inputs: list[ir.Value], opset: int) -> dict[ir.Node, list[int] | dict[int, int] | None] | None:
    """For each body node that reads a batched value, the axes (or perm) to give it once
    batched, or for an elementwise op the inputs to lift by how many unit axes (None:
    unchanged); None when the body cannot be batched."""
    batched: set[ir.Value] = set(batched_inputs)
    plan: dict[ir.Node, list[int] | dict[int, int] | None] = {}
    for node in body:
        ins = [v for v in node.inputs if v is not None]
        if not any(v in batched for v in ins):
            if _captures(node, batched):
                return None
            continue
        entry = _node_plan(node, ins, batched, opset)
        if entry is _CANNOT:
            return None
        plan[node] = entry  # type: ignore[assignment]
        batched.update(node.outputs)
    return plan


def elementwise_body(body: ir.Graph, batched_inputs: list[ir.Value]) -> set[ir.Value] | None:
    """Whether every output of ``body`` is computed from its batched inputs element by
    element, every other operand a scalar: then the body runs as it is on the elements'
    values flattened and concatenated (a Flat list's ``values``), whatever their shapes,
    and its results have the elements' shapes. The values computed from the batched
    inputs, or None where it does not hold."""
    batched: set[ir.Value] = set(batched_inputs)
    for node in body:
        if not is_default_domain(node) or node.op_type not in UNARY | ELEMENTWISE or node.op_type == "BitShift" \
                or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            if any(v in batched for v in node.inputs if v is not None) or _captures(node, batched):
                return None
            continue
        ins = [v for v in node.inputs if v is not None]
        if not any(v in batched for v in ins):
            continue
        if node.op_type in UNARY and node.inputs[0] not in batched:
            return None  # (Clip's bounds or CastLike's target from the element)
        if any(v not in batched and _rank(v) != 0 for v in ins):
            return None  # an operand that would broadcast the element to another shape
        batched.update(node.outputs)
    return batched if all(v in batched for v in body.outputs) else None


def sliced_plan(body: ir.Graph, sliced: ir.Value, axis: int, opset: int) -> dict[ir.Value, int] | None:
    """Whether ``body`` computes, from a piece of a tensor cut along ``axis`` (its input
    ``sliced``, the axis kept), the same piece of what it computes from the whole
    tensor: every op acts on each position along that axis alone (elementwise, with
    operands of dim 1 there; MatMul by a matrix when the axis is not the one summed;
    Softmax-like ops and reductions along other axes; Transpose moves it). Then a map over
    the pieces is the body once on the whole tensor, whatever the pieces' sizes. The axis
    of each value computed from ``sliced`` (every output is one), or None."""
    at: dict[ir.Value, int] = {sliced: axis}
    for node in body:
        ins = [v for v in node.inputs if v is not None]
        if not any(v in at for v in ins):
            if _captures(node, at.keys()):
                return None
            continue
        k = _sliced_axis(node, at, opset)
        if k is None:
            return None
        for v in node.outputs:
            at[v] = k
    return at if all(v in at for v in body.outputs) else None


def _sliced_axis(node: ir.Node, at: dict[ir.Value, int], opset: int) -> int | None:
    """Where the cut axis is in ``node``'s output, or None when the node mixes positions
    along it."""
    if not is_default_domain(node) or len(node.outputs) != 1 or any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return None
    op, x = node.op_type, node.inputs[0]
    rank = _rank(x)
    if op in UNARY:
        return at[x] if x in at and not any(v in at for v in node.inputs[1:] if v is not None) else None
    if op in ELEMENTWISE:
        out_rank = _rank(node.outputs[0])
        if out_rank is None:
            return None
        from_right = {_rank(v) - at[v] for v in node.inputs if v is not None and v in at and _rank(v) is not None}  # type: ignore[operator]
        if len(from_right) != 1 or any(v in at and _rank(v) is None for v in node.inputs if v is not None):
            return None
        k = out_rank - from_right.pop()
        for v in node.inputs:
            if v is None or v in at:
                continue
            r = _rank(v)
            if r is None:
                return None
            if k >= out_rank - r:  # the operand reaches the cut axis: only a dim of 1 broadcasts
                d = v.shape.dims[k - (out_rank - r)] if v.shape is not None else np.shape(const_array(v))[k - (out_rank - r)]
                if d != 1:
                    return None
        return k
    if x not in at or any(v in at for v in node.inputs[1:] if v is not None) or rank is None:
        return None
    k = at[x]
    if op == "MatMul":
        return k if rank >= 2 and k < rank - 1 and _rank(node.inputs[1]) == 2 else None
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        default = -1 if opset >= 13 else 1
        a = node.attributes["axis"].as_int() if "axis" in node.attributes else default
        # (before opset 13 the axis cuts the input into a matrix: all axes from it on mix)
        return k if (a % rank != k if opset >= 13 else k < a % rank) else None
    if op in REDUCE:
        axes = _axes(node, opset)
        if axes == "dynamic":
            return None
        if axes is None or axes == []:
            noop = node.attributes.get("noop_with_empty_axes")
            axes = [] if noop is not None and noop.as_int() else list(range(rank))
        reduced = {a % rank for a in axes}  # type: ignore[union-attr]
        keep = node.attributes["keepdims"].as_int() if "keepdims" in node.attributes else 1
        if k in reduced:
            return None
        return k if keep else k - sum(1 for a in reduced if a < k)
    if op == "Transpose":
        perm = list(node.attributes["perm"].as_ints()) if "perm" in node.attributes else list(reversed(range(rank)))
        return perm.index(k)
    return None


# A node's plan when the body cannot be batched through it.
_CANNOT = object()
_Plan = Any  # list[int] | dict[int, int] | None | _CANNOT


def _node_plan(node: ir.Node, ins: list[ir.Value], batched: set[ir.Value], opset: int) -> _Plan:
    if not is_default_domain(node) or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return _CANNOT
    ranks = [_rank(v) for v in ins]
    if any(r is None for r in ranks):
        return _CANNOT
    op = node.op_type
    if op in UNARY:
        # Clip's bounds or CastLike's target batched: not elementwise in x.
        return None if node.inputs[0] in batched else _CANNOT
    if op in ELEMENTWISE:
        return _elementwise_plan(node, ins, ranks, batched, opset)
    if op in REDUCE:
        return _reduce_plan(node, ins, ranks, batched, opset)
    if op in _AXIS_OPS:
        return _axis_op_plan(node, ins, ranks, batched, opset)
    planner = _PLANNERS.get(op)
    return _CANNOT if planner is None else planner(node, ins, ranks, batched, opset)


def _elementwise_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    out_rank = _rank(node.outputs[0])
    if out_rank is None or any(r > out_rank for v, r in zip(ins, ranks) if v in batched):
        return _CANNOT
    # A batched operand of lower rank gets unit axes after the batch axis, so that it
    # still lines up from the right against the others.
    lifts = {i: out_rank - r for i, (v, r) in enumerate(zip(node.inputs, [_rank(v) for v in node.inputs]))
             if v is not None and v in batched and r is not None and r < out_rank}
    return lifts or None


def _reshape_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    target = const_array(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    allowzero = node.attributes["allowzero"].as_int() if "allowzero" in node.attributes else 0
    # To a constant shape without 0s (a 0 copies an input dim, which would shift): the
    # batch axis copied in front by a 0.
    if node.inputs[0] not in batched or target is None or target.ndim != 1 or 0 in target.tolist() or allowzero:
        return _CANNOT
    return [0, *(int(d) for d in target)]


def _gather_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    data, idx = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    # Rows of an unbatched tensor at batched indices: the batch axis comes first.
    return None if data not in batched and idx in batched and axis == 0 else _CANNOT


def _reduce_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    if node.inputs[0] not in batched or any(v in batched for v in node.inputs[1:]):
        return _CANNOT
    axes = _axes(node, opset)
    if axes == "dynamic":
        return _CANNOT
    if axes is None or axes == []:
        noop = node.attributes.get("noop_with_empty_axes")
        axes = [] if noop is not None and noop.as_int() else list(range(ranks[0]))
    return [a + 1 if a >= 0 else a for a in axes]


def _axis_op_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    op = node.op_type
    if op == "CumSum":
        return _CANNOT  # axis is an input; not worth it
    if op == "Concat" and not all(v in batched for v in ins):
        return _CANNOT
    if op in ("ArgMax", "ArgMin") and node.inputs[0] not in batched:
        return _CANNOT
    default = -1 if op in ("Softmax", "LogSoftmax", "Hardmax") else 0
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else default
    return [axis + 1 if axis >= 0 else axis]


def _transpose_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    perm = list(node.attributes["perm"].as_ints()) if "perm" in node.attributes else list(reversed(range(ranks[0])))
    return [0] + [p + 1 for p in perm]


def _squeeze_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    if any(v in batched for v in node.inputs[1:]):
        return _CANNOT
    axes = _axes(node, opset)
    if axes is None or axes == "dynamic":
        return _CANNOT  # Squeeze without axes would drop a batch of one
    return [a + 1 if a >= 0 else a for a in axes]


def _matmul_plan(node: ir.Node, ins: list[ir.Value], ranks: list[int], batched: set[ir.Value], opset: int) -> _Plan:
    a, b = node.inputs[0], node.inputs[1]
    ra, rb = _rank(a), _rank(b)
    assert ra is not None and rb is not None
    ok = all(r >= 2 and r >= max(ra, rb) for v, r in ((a, ra), (b, rb)) if v in batched)
    ok = ok or (a in batched and b not in batched and ra == 1 and rb == 2)
    return None if ok else _CANNOT


_PLANNERS = {
    "Reshape": _reshape_plan, "Gather": _gather_plan, "Transpose": _transpose_plan,
    "Squeeze": _squeeze_plan, "Unsqueeze": _squeeze_plan, "MatMul": _matmul_plan,
}


def emit_batched(body: ir.Graph, plan: dict[ir.Node, list[int] | dict[int, int] | None], cloned: list[ir.Node], b: Builder) -> None:
    """Give the clones of planned nodes their shifted axes, perm or axis, and outputs
    with the batch axis in front."""
    for original, node in zip(body, cloned):
        if original not in plan:
            continue
        for v in node.outputs:
            v.shape = None if v.shape is None else ir.Shape([None, *v.shape.dims])
        shifted = plan[original]
        if shifted is None:
            continue
        if isinstance(shifted, dict):
            before = Builder(b.graph, node, b.opset, b.names, main_graph=b.main_graph)
            for i, k in shifted.items():
                v = node.inputs[i]
                assert v is not None
                node.replace_input_with(i, before.unsqueeze(v, list(range(1, k + 1)), f"{v.name or 'x'}_lifted"))
            continue
        op = node.op_type
        if op == "Reshape":
            node.replace_input_with(1, b.constant(np.array(shifted, np.int64), f"{node.name or op}_batched_shape"))
        elif op == "Transpose":
            node.attributes["perm"] = ir.AttrInt64s("perm", shifted)
        elif op in _AXIS_OPS:
            node.attributes["axis"] = ir.AttrInt64("axis", shifted[0])
        elif b.opset >= AXES_INPUT_SINCE.get(op, 18):
            axes = b.constant(np.array(shifted, np.int64), f"{node.name or op}_batched_axes")
            if len(node.inputs) < 2:
                node.resize_inputs(2)
            node.replace_input_with(1, axes)
            if not shifted:
                node.attributes["noop_with_empty_axes"] = ir.AttrInt64("noop_with_empty_axes", 1)
        else:
            node.attributes["axes"] = ir.AttrInt64s("axes", shifted)


def run_batched(
    body: ir.Graph,
    plan: dict[ir.Node, list[int] | dict[int, int] | None],
    value_map: dict[ir.Value, ir.Value | None],
    batched_inputs: list[ir.Value],
    outputs: list[tuple[ir.Value, str]],
    count1: ir.Value,
    o: Ops,
    names: NameAuthority,
) -> list[tuple[ir.Value, bool]]:
    """Clone ``body`` before ``o``'s anchor with its inputs bound by ``value_map`` (the
    batched ones to whole stacks), batch the planned clones, and give each of
    ``outputs`` (a body output and a name) its stack: the batched value, or, where it
    does not depend on a batched input, its value repeated ``count1`` times (False
    with it)."""
    mapped = inline_map_body(body, value_map, o.b, names)
    # inline_map_body appends the body's clones last, in order.
    n_body = len(list(body))
    emit_batched(body, plan, o.b.nodes[len(o.b.nodes) - n_body :] if n_body else [], o.b)
    batched = set(batched_inputs)
    for n in body:
        if any(v in batched for v in n.inputs if v is not None):
            batched.update(n.outputs)
    stacks = []
    for bo, name in outputs:
        y = mapped.get(bo, bo)
        if bo not in batched:
            # The same for every element: one copy per element.
            target = o.concat([count1, o.shape(y, f"{name}_dims")], 0, f"{name}_target")
            y = o.op("Expand", [o.unsqueeze(y, [0], f"{name}_one"), target], f"{name}_repeated")
        stacks.append((y, bo in batched))
    return stacks
