"""A while loop that provably runs its trip count made a plain counted Loop, for targets
without Loop: tf2onnx's ``tf.map_fn`` and ``TensorArray`` loops.

tf2onnx writes ``for i in range(n)`` as a Loop with a trip count ``n``, a condition
``iteration < n and i + 1 < n``, and carried values of its own: the counter ``i`` (from
0, plus 1 each step) and ``n`` passed through. The condition then never stops the loop
before its trip count, and ``i`` is the iteration number, but no Loop rewrite can see
it: a condition may stop a loop early, and a carried value may be anything. This pass
proves it with a small affine analysis over the body:

- a value is ``iteration + c`` (the body's iteration number, a carried value that starts
  at the constant c and gains 1 a step, plus or minus constants, through casts) or
  ``M`` (the trip count, through casts and a carried pass-through of it);
- ``Less(iteration + c, M)`` holds on every step but the last when c <= 1, ``And`` of
  such holds, the body's own condition passed through holds; the initial condition
  ``Less(c, M)`` with c <= 0 is false only when the trip count is not positive.

Then the condition is dropped, the counter is computed from the iteration number, the
pass-through is read from outside, and both leave the carried values (their final
values: ``c + max(M, 0)`` and the initial one). What is left is a Loop that runs all
its trips and carries what the program carries: the batched body
(``vectorize_loops``), a Scan, or ``--max-trips`` take it from there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rebuild_node, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["CountedLoopsPass"]

# ("iteration", c): the iteration number plus c; ("trips", 0): the trip count.
Fact = tuple[str, int]
_PASS_THROUGH = ("Identity", "Cast")


class CountedLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _count)


def _root(v: ir.Value | None) -> ir.Value | None:
    """``v`` without the Identity, Cast, Squeeze/Unsqueeze/Reshape of one element before it."""
    while v is not None and (p := v.producer()) is not None and is_default_domain(p) and p.inputs \
            and p.op_type in (*_PASS_THROUGH, "Squeeze", "Unsqueeze", "Reshape"):
        v = p.inputs[0]
    return v


def _count(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None  # no condition to drop
    body = node.attributes["body"].as_graph()
    m = node.inputs[0]
    # What the loop counts up to: the trip count, or (a while loop) what its initial
    # condition compares a constant with.
    start_cmp = None if m is not None else _constant_less(node.inputs[1]) or _started(node, body)
    if m is None and start_cmp is None:
        return None
    bound = _root(m) if m is not None else start_cmp[1]
    facts: dict[ir.Value, Fact] = {body.inputs[0]: ("iteration", 0)}
    counters: dict[int, int] = {}  # carried slot -> its start
    through: set[int] = set()  # carried slots the body passes through unchanged
    n_carried = len(node.inputs) - 2
    for k in range(n_carried):
        bi, bo, init = body.inputs[2 + k], body.outputs[1 + k], node.inputs[2 + k]
        if init is None:
            continue
        if _same_value(bo) is bi:
            through.add(k)
            if _is_bound(init, bound):
                facts[bi] = ("trips", 0)
            continue
        if bi.dtype is None or not bi.dtype.is_integer():
            continue
        start = const_array(init)
        if start is not None and start.size == 1 and _is_plus_one(bo, bi):
            facts[bi] = ("iteration", int(start.reshape(())))
            counters[k] = int(start.reshape(()))
    if m is not None:
        if not _holds_before_last(body.outputs[0], body.inputs[1], facts, bound) or not _starts_iff_trips(node.inputs[1], bound):
            return None
        trips = m
    else:
        c = _counted_by(body.outputs[0], facts, bound)
        if c is None:
            return None
        trips = _while_trips(node, start_cmp[0], bound, c, scope, names)
    _drop_condition(node, body, scope, names, trips, counters, through)
    return "Loop", "while condition proven to end the loop only at its trip count: a counted Loop"


def _is_bound(v: ir.Value | None, bound: ir.Value | None) -> bool:
    """``v`` is the count ``bound``: the same value (through casts), or, where folding
    made both constants (shapes fixed), the same integral number."""
    if v is None or bound is None:
        return False
    r = _root(v)
    if r is bound:
        return True
    a, b = const_array(r) if r is not None else None, const_array(bound)
    return a is not None and b is not None and a.size == 1 and b.size == 1 \
        and float(a.reshape(())) == float(b.reshape(())) and float(a.reshape(())).is_integer()


def _same_value(v: ir.Value) -> ir.Value:
    while (p := v.producer()) is not None and p.op_type == "Identity" and is_default_domain(p) and p.inputs[0] is not None:
        v = p.inputs[0]
    return v


def _started(node: ir.Node, body: ir.Graph) -> tuple[None, ir.Value] | None:
    """``(None, R)`` for a while loop whose initial condition is a constant true (its
    ``a < R`` folded, once the shapes were fixed) and whose body compares with ``R``, a
    value it carries through unchanged from R outside, or reads from outside."""
    start = const_array(node.inputs[1])
    if start is None or start.size != 1 or not bool(start.reshape(())):
        return None
    p = _same_value(body.outputs[0]).producer()
    if p is None or not is_default_domain(p) or p.op_type not in ("Less", "Greater") or len(p.inputs) != 2:
        return None
    big = _root(p.inputs[1] if p.op_type == "Less" else p.inputs[0])
    if big is None or big in body.inputs[:2]:
        return None
    if big not in body.inputs[2:]:
        # A value from outside the body (dynamo reads the bound as an outer constant).
        owner = big.graph if big.producer() is None else big.producer().graph
        return (None, big) if owner is not body and big.dtype is not None and big.dtype.is_integer() else None
    k = body.inputs.index(big) - 2
    init = node.inputs[2 + k] if 2 + k < len(node.inputs) else None
    if init is None or _same_value(body.outputs[1 + k]) is not big:
        return None
    r = _root(init)
    return (None, r) if r is not None and r.dtype is not None and r.dtype.is_integer() else None


def _constant_less(cond: ir.Value) -> tuple[int, ir.Value] | None:
    """``(a, R)`` when ``cond`` is ``a < R`` with ``a`` an integral constant (through casts)."""
    p = _same_value(cond).producer()
    if p is None or not is_default_domain(p) or p.op_type not in ("Less", "Greater") or len(p.inputs) != 2:
        return None
    small, big = p.inputs if p.op_type == "Less" else tuple(reversed(p.inputs))
    a = const_array(small) if small is not None else None
    r = _root(big)
    if a is None or a.size != 1 or r is None or r.dtype is None or not r.dtype.is_integer():
        return None
    value = float(a.reshape(()))
    return (int(value), r) if value.is_integer() else None


def _counted_by(cond: ir.Value, facts: dict[ir.Value, Fact], bound: ir.Value) -> int | None:
    """c when the body's condition is ``iteration + c < R``."""
    p = _same_value(cond).producer()
    if p is None or not is_default_domain(p) or p.op_type not in ("Less", "Greater") or len(p.inputs) != 2:
        return None
    small, big = p.inputs if p.op_type == "Less" else tuple(reversed(p.inputs))
    f, g = _fact(small, facts, bound), _fact(big, facts, bound)
    return f[1] if f is not None and f[0] == "iteration" and g == ("trips", 0) else None


def _is_dim(v: ir.Value) -> bool:
    """``v`` is read off a Shape (so not negative), through casts and selections of it."""
    for _ in range(16):
        p = v.producer()
        if p is None or not is_default_domain(p) or not p.inputs or p.inputs[0] is None:
            return False
        if p.op_type == "Shape":
            return True
        if p.op_type not in (*_PASS_THROUGH, "Squeeze", "Unsqueeze", "Reshape", "Slice", "Gather"):
            return False
        v = p.inputs[0]
    return False


def _while_trips(node: ir.Node, a: int | None, bound: ir.Value, c: int, scope: Scope, names: NameAuthority) -> ir.Value:
    """The trips of ``while``: the first runs when ``a < R`` (always: ``a`` None), step k+1
    when ``k + c < R``, so ``R - c + 1`` of them (at least one) if the first runs, else none."""
    o = Ops(scope.builder(node, names))
    base = node.name or "loop"
    known = const_array(bound)
    if known is not None and known.size == 1:
        # (shapes fixed: a constant count, which a Loop unrolling reads)
        value = int(known.reshape(()))
        return o.scalar(0 if a is not None and not a < value else max(value - c + 1, 1))
    r = bound if bound.dtype == INT64 else o.op("Cast", [bound], f"{base}_bound", dtype=INT64, to=INT64)
    if r.shape is None or r.shape.rank() != 0:
        r = o.reshape(r, o.ints([]), f"{base}_bound_scalar")
    if a == 0 and c == 1 and _is_dim(bound):
        # ``i = 0; while i < n: ...; i += 1`` over a dim n: n trips, and a trip count that
        # is a dim (tract types a Scan over it, not over a computed one).
        return r
    steps = o.op("Max", [o.op("Add", [r, o.scalar(1 - c)], f"{base}_steps_if_run", dtype=INT64, shape=[]), o.scalar(1)],
                 f"{base}_steps_run", dtype=INT64, shape=[])
    if a is None:
        return steps
    runs = o.op("Less", [o.scalar(a), r], f"{base}_runs", dtype=ir.DataType.BOOL, shape=[])
    return o.op("Where", [runs, steps, o.scalar(0)], f"{base}_trip_count", dtype=INT64, shape=[])


def _is_plus_one(bo: ir.Value, bi: ir.Value) -> bool:
    p = bo.producer()
    while p is not None and p.op_type in _PASS_THROUGH and is_default_domain(p):
        p = p.inputs[0].producer() if p.inputs[0] is not None else None
    if p is None or p.op_type != "Add" or not is_default_domain(p) or len(p.inputs) != 2:
        return False
    for a, b in (p.inputs, reversed(p.inputs)):
        c = const_array(b) if b is not None else None
        if c is not None and c.size == 1 and int(c.reshape(())) == 1 and _root(a) is bi:
            return True
    return False


def _fact(v: ir.Value | None, facts: dict[ir.Value, Fact], trips: ir.Value | None, depth: int = 0) -> Fact | None:
    if v is None or depth > 16:
        return None
    if v in facts:
        return facts[v]
    if _is_bound(v, trips):
        return ("trips", 0)
    p = v.producer()
    if p is None or not is_default_domain(p):
        return None
    if p.op_type in _PASS_THROUGH and p.inputs:
        return _fact(p.inputs[0], facts, trips, depth + 1)
    if p.op_type in ("Add", "Sub") and len(p.inputs) == 2:
        c = const_array(p.inputs[1]) if p.inputs[1] is not None else None
        if c is not None and c.size == 1 and np.issubdtype(c.dtype, np.integer):
            f = _fact(p.inputs[0], facts, trips, depth + 1)
            if f is not None and f[0] == "iteration":
                return ("iteration", f[1] + int(c.reshape(())) * (1 if p.op_type == "Add" else -1))
    return None


def _holds_before_last(cond: ir.Value, cond_in: ir.Value, facts: dict[ir.Value, Fact], trips: ir.Value | None) -> bool:
    """``cond`` (a body's condition output) is true on every iteration but the last."""
    if _root(cond) is cond_in:
        return True

    def leaf(p: ir.Node) -> bool:
        if p.op_type in ("Less", "Greater") and len(p.inputs) == 2:
            small, big = p.inputs if p.op_type == "Less" else reversed(p.inputs)
            f, g = _fact(small, facts, trips), _fact(big, facts, trips)
            # iteration + c < M for every iteration up to M - 2 exactly when c <= 1.
            return f is not None and g == ("trips", 0) and f[0] == "iteration" and f[1] <= 1
        if p.op_type == "Identity" and p.inputs:
            return _holds_before_last(p.inputs[0], cond_in, facts, trips)
        return False

    return _all_of(cond, leaf)


def _starts_iff_trips(cond: ir.Value, trips: ir.Value | None) -> bool:
    """The initial condition is false only where the trip count is not positive."""

    def leaf(p: ir.Node) -> bool:
        if p.op_type in _PASS_THROUGH and p.inputs and p.inputs[0] is not None:
            return _starts_iff_trips(p.inputs[0], trips)
        if p.op_type in ("Less", "Greater") and len(p.inputs) == 2:
            small, big = p.inputs if p.op_type == "Less" else reversed(p.inputs)
            s = const_array(small) if small is not None else None
            # c < M with c <= 0: false means M <= c <= 0, no iteration either way.
            return s is not None and s.size == 1 and float(s.reshape(())) <= 0 and _is_bound(big, trips)
        return False

    return _all_of(cond, leaf)


def _all_of(cond: ir.Value, leaf: Callable[[ir.Node], bool]) -> bool:
    """A constant true, or an And of terms each of which is, or whose producer ``leaf`` holds of."""
    c = const_array(cond)
    if c is not None:
        return c.size == 1 and bool(c.reshape(()))
    p = cond.producer()
    if p is None or not is_default_domain(p):
        return False
    if p.op_type == "And":
        return all(x is not None and _all_of(x, leaf) for x in p.inputs)
    return leaf(p)


def _drop_condition(node: ir.Node, body: ir.Graph, scope: Scope, names: NameAuthority, m: ir.Value,
                    counters: dict[int, int], through: set[int]) -> None:
    """No condition; counters from the iteration number and pass-throughs from outside,
    both out of the carried values."""
    o = Ops(scope.builder(node, names))
    n_carried = len(node.inputs) - 2
    iteration = body.inputs[0]
    gone = set(counters) | through
    keep = [k for k in range(n_carried) if k not in gone]
    # The final values of what leaves: the start plus the trips run, and the initial one.
    m0 = o.reshape(m, o.ints([]), f"{node.name or 'loop'}_trips") if m.shape is None or m.shape.rank() != 0 else m
    ran = o.op("Max", [m0, o.scalar(0)], f"{node.name or 'loop'}_trips_run", dtype=INT64, shape=[])
    finals: dict[int, ir.Value] = {}
    for k, start in counters.items():
        out = node.outputs[k]
        v = o.op("Add", [ran, o.scalar(start)], f"{out.name or 'counter'}_final", dtype=INT64, shape=[])
        finals[k] = v if out.dtype in (None, INT64) else o.op("Cast", [v], f"{out.name or 'counter'}_final_cast",
                                                               dtype=out.dtype, shape=[], to=out.dtype)
    for k in through:
        finals[k] = node.inputs[2 + k]
    old_inputs = list(body.inputs)
    true = body.inputs[1]
    body.outputs[0] = true
    new_body_inputs = [body.inputs[0], body.inputs[1], *(body.inputs[2 + k] for k in keep)]
    new_body_outputs = [true, *(body.outputs[1 + k] for k in keep), *body.outputs[1 + n_carried :]]
    body.inputs.clear()
    body.inputs.extend(new_body_inputs)
    body.outputs.clear()
    body.outputs.extend(new_body_outputs)
    # Now that they are neither inputs nor outputs of the body, their uses move.
    bo_ = Ops(_body_builder(body, scope, names))
    for k, start in counters.items():
        bi = old_inputs[2 + k]
        assert bi.dtype is not None
        i = iteration if bi.dtype == INT64 else bo_.op("Cast", [iteration], f"{bi.name or 'i'}_iteration", dtype=bi.dtype, shape=[], to=bi.dtype)
        if start:
            i = bo_.op("Add", [i, bo_.b.constant(np.array(start, bi.dtype.numpy()), "start")], f"{bi.name or 'i'}_counted",
                       dtype=bi.dtype, shape=[])
        ir.convenience.replace_all_uses_with(bi, i)
    for k in through:
        ir.convenience.replace_all_uses_with(old_inputs[2 + k], node.inputs[2 + k])
    kept_outputs = [node.outputs[k] for k in keep] + list(node.outputs[n_carried:])
    new = rebuild_node(node, [m, None, *(node.inputs[2 + k] for k in keep)],
                       [(v.name, v.type, v.shape) for v in kept_outputs])
    outs = scope.graph.outputs
    for old, nv in zip(kept_outputs, new.outputs):
        for j, v in enumerate(outs):
            if v is old:
                outs[j] = nv
        ir.convenience.replace_all_uses_with(old, nv)
    for k, v in finals.items():
        replace_output(node.outputs[k], v, scope, names, node, owned=k in counters)
    scope.graph.remove(node, safe=True)


def _body_builder(body: ir.Graph, scope: Scope, names: NameAuthority):
    """A builder that puts nodes at the start of ``body``."""
    from seqlower.ir.builder import Builder

    first = next(iter(body), None)
    return Builder(body, first, scope.opset, names, main_graph=False)
