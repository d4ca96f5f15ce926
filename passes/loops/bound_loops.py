"""Unroll a Loop that runs a run-time number of times into a bounded number of
predicated steps, for targets without Loop (``--max-trips N``, ``--dim-max NAME=N``), and
for a target whose Loops must keep fixed shapes (TensorRT) the Loops that do not.

What the other Loop rewrites leave (a body that neither batches nor becomes a Scan the
target runs) is otherwise kept, and the target cannot run the model. Given a bound N,
like the max of a TensorRT optimization profile, the body is inlined N times, each copy
predicated on ``active_i = i < M and cond_i and active_(i-1)`` (the trip count M, the
condition the previous step returned):

- carried values: ``Where(active_i, step output, previous value)``, so the steps past
  the loop's end change nothing. This needs the body to keep each carried value's shape
  (the same dims, provably): a Where of two shapes would broadcast, and give wrong
  numbers where it did not fail; a Loop that changes a carried shape stays.
- scan outputs: the N steps stacked and sliced to the active ones, ``[0:count]``.
- the iteration number a step past the trip count sees is clamped to ``M - 1``, so a
  body that reads row i of an M-row tensor reads a row that exists (its result is
  dropped); a body that reads row i of an empty tensor still fails, as the original
  would if it ran.

The bound is the ``--dim-max`` of the model input dim the trip count is read from (a
``Shape``/``Gather``/``Slice`` of a value whose dim has that name, give or take a
constant), else ``--max-trips``. Where the loop would run more than N steps, the model
says so at run time: its output ``seqlower_trips_exceeded`` (bool scalar, the Or of
every bounded Loop's overflow) is true and the outputs are those of the first N
iterations. A bound that a constant trip count already meets adds no flag. Only Loops
of the main graph are bounded (the flag must reach a model output); a Loop in an
unrolled Loop's body reaches the main graph with it and is bounded in the next round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, discard_subgraphs, inline_map_body, replace_output, rewrite_each_node
from seqlower.passes.loops._predicated import grows, guard_gathers, keeps_shape, select_carried, show_dims
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.passes.keys import LOOP_REASONS_KEY
from seqlower.options import TRIPS_EXCEEDED_KEY
from seqlower.analysis.analyzer import const_array, is_default_domain, node_label
from seqlower.ir.helpers import loop_runs_all_trips

__all__ = ["BoundLoopsPass", "TRIPS_EXCEEDED", "TRIPS_EXCEEDED_KEY", "TripBounds", "loop_of_fixed_shapes", "trip_count_dim"]

# The model output that says a bounded Loop would have run past its bound.
TRIPS_EXCEEDED = "seqlower_trips_exceeded"


@dataclass(frozen=True)
class TripBounds:
    """``--max-trips`` and ``--dim-max``: the most steps a run-time trip count gets."""

    max_trips: int | None = None
    dim_max: Mapping[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.max_trips is not None or bool(self.dim_max)


class BoundLoopsPass(ir.passes.InPlacePass):
    """``select``: which Loops to bound (every one by default: a target without Loop)."""

    def __init__(self, bounds: TripBounds, select: Callable[[ir.Node], bool] | None = None) -> None:
        super().__init__()
        self.bounds = bounds
        self.select = select

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.model = model
        self.reasons: dict[str, str] = model.meta.setdefault(LOOP_REASONS_KEY, {})
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names) -> tuple[str, str] | None:
        if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
            return None
        if self.select is not None and not self.select(node):
            return None
        plan = self._plan(node, scope)
        if isinstance(plan, str):
            self.reasons[node_label(node)] = f"it cannot be bounded: {plan}"
            return None
        steps, how, overflows = plan
        o = Ops(scope.builder(node, names))
        exceeded = _unroll_predicated(node, steps, o, scope, names)
        if overflows:
            # At the graph's end: a flag Or-ed before may come from a Loop after this one.
            _raise_flag(self.model, exceeded, Ops(scope.builder(None, names)), names)
        discard_subgraphs(node)
        scope.graph.remove(node, safe=True)
        self.reasons.pop(node_label(node), None)
        return "tensor ops", f"Loop unrolled into {steps} predicated steps ({how})"

    def _plan(self, node: ir.Node, scope: Scope) -> tuple[int, str, bool] | str:
        """(steps, where the bound came from, whether the loop may run past it), or why not."""
        body = node.attributes["body"].as_graph()
        if not scope.main:
            return "it is inside a subgraph, which its overflow flag could not leave"
        carried = node.inputs[2:]
        for k, (bi, bo) in enumerate(zip(body.inputs[2:], body.outputs[1 : 1 + len(carried)])):
            if not isinstance(bi.type, ir.TensorType) or not isinstance(bo.type, ir.TensorType):
                return f"it carries a {bi.type or bo.type} (carried value {k})"
            if not keeps_shape(bi, bo) and not grows(bi, bo):
                return (f"its body may change carried value '{bi.name}' ({show_dims(bi.shape)} in, {show_dims(bo.shape)} out)"
                        " in a dim other than the first, which a predicated step cannot keep")
        for bo in body.outputs[1 + len(carried):]:
            if not isinstance(bo.type, ir.TensorType):
                return f"it scans a {bo.type}"
        m = node.inputs[0] if node.inputs else None
        static = None
        if m is not None and (c := const_array(m)) is not None and c.size == 1:
            static = max(int(c.reshape(())), 0)
        if m is None or static is not None:
            if loop_runs_all_trips(node, body):
                return "it never stops (no trip count, no condition)" if m is None else \
                    f"it runs a constant {static} trips, more than --max-unroll"
        bound, how = None, ""
        sym = trip_count_dim(m) if m is not None and static is None else None
        if sym is not None and sym[0] in self.bounds.dim_max:
            bound, how = max(self.bounds.dim_max[sym[0]] + sym[1], 0), f"--dim-max {sym[0]}"
        elif self.bounds.max_trips is not None:
            bound, how = self.bounds.max_trips, "--max-trips"
        if bound is None:
            return "its trip count is known only at run time, and no --max-trips (or --dim-max of its dim) bounds it"
        if static is not None and static <= bound:
            return max(static, 1), f"{static} trips at most", False
        if bound == 0:
            return f"{how} bounds it to 0 steps"
        return bound, f"{how} {bound}", True


def loop_of_fixed_shapes(node: ir.Node) -> bool:
    """Whether a Loop is what a runtime that compiles a Loop to fixed shapes runs (TensorRT:
    'Scan output length cannot be dynamic. The shape of Loop carried dependencies must be
    the same across all loop iterations'): no scan output unless its trip count is a
    constant, and every carried value returned with its shape."""
    body = node.attributes["body"].as_graph()
    carried = len(node.inputs) - 2
    trips = node.inputs[0] if node.inputs else None
    if len(body.outputs) > 1 + carried and (trips is None or const_array(trips) is None):
        return False
    return all(keeps_shape(bi, bo) for bi, bo in zip(body.inputs[2:], body.outputs[1 : 1 + carried]))


def trip_count_dim(v: ir.Value) -> tuple[str, int] | None:
    """``(name, offset)`` when ``v`` is a named dim of some value plus a constant: what
    exporters compute a loop's trip count from (``Shape → Gather``, ``Shape(start, end)``,
    ``Slice`` of a shape, through casts and reshapes of one element)."""
    offset = 0
    for _ in range(64):
        p = v.producer()
        if p is None or not is_default_domain(p):
            return None
        op = p.op_type
        if op in ("Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "CastLike") and p.inputs and p.inputs[0] is not None:
            v = p.inputs[0]
        elif op in ("Add", "Sub") and len(p.inputs) == 2 and p.inputs[0] is not None and p.inputs[1] is not None:
            c = const_array(p.inputs[1])
            if c is not None and c.size == 1 and np.issubdtype(c.dtype, np.integer):
                offset += int(c.reshape(())) * (1 if op == "Add" else -1)
                v = p.inputs[0]
            elif op == "Add" and (c := const_array(p.inputs[0])) is not None and c.size == 1 and np.issubdtype(c.dtype, np.integer):
                offset += int(c.reshape(()))
                v = p.inputs[1]
            else:
                return None
        elif op == "Shape":
            rank = _rank(p)
            if rank is None:
                return None
            start = _shape_start(p)
            start = max(start + rank if start < 0 else start, 0)
            # One element: the dim itself; more would be a shape, not a count.
            return _named_dim(p, start, offset) if _shape_end(p, rank) - start == 1 else None
        elif op in ("Gather", "Slice") and p.inputs and p.inputs[0] is not None and (shape_node := p.inputs[0].producer()) is not None \
                and shape_node.op_type == "Shape" and is_default_domain(shape_node):
            index = _element_index(p)
            if index is None:
                return None
            rank = _rank(shape_node)
            start = _shape_start(shape_node)
            if rank is not None and start < 0:
                start += rank
            if index < 0:
                if rank is None:
                    return None
                end = _shape_end(shape_node, rank)
                index += end - start
            return _named_dim(shape_node, start + index, offset)
        else:
            return None
    return None


def _named_dim(shape_node: ir.Node, index: int, offset: int) -> tuple[str, int] | None:
    x = shape_node.inputs[0] if shape_node.inputs else None
    if x is None or x.shape is None:
        return None
    dims = x.shape.dims
    if index < 0:
        index += len(dims)
    if not 0 <= index < len(dims):
        return None
    d = dims[index]
    if isinstance(d, ir.SymbolicDim) and d.value:
        return d.value, offset
    return None


def _rank(shape_node: ir.Node) -> int | None:
    x = shape_node.inputs[0]
    return None if x is None or x.shape is None else x.shape.rank()


def _shape_start(shape_node: ir.Node) -> int:
    a = shape_node.attributes.get("start")
    return 0 if a is None else int(a.as_int())


def _shape_end(shape_node: ir.Node, rank: int) -> int:
    a = shape_node.attributes.get("end")
    end = rank if a is None else int(a.as_int())
    return min(end + rank if end < 0 else end, rank)


def _element_index(p: ir.Node) -> int | None:
    """The one position of a shape that a Gather or Slice reads, if it is constant."""
    if p.op_type == "Gather":
        axis = p.attributes.get("axis")
        if (axis is not None and axis.as_int() != 0) or len(p.inputs) < 2 or p.inputs[1] is None:
            return None
        c = const_array(p.inputs[1])
        return int(c.reshape(())) if c is not None and c.size == 1 else None
    if len(p.inputs) < 3:
        return None  # Slice-1 (attributes) is not what opset-10+ exporters write
    starts, ends = (const_array(x) if x is not None else None for x in p.inputs[1:3])
    steps = const_array(p.inputs[4]) if len(p.inputs) > 4 and p.inputs[4] is not None else None
    if starts is None or ends is None or starts.size != 1 or ends.size != 1 or (steps is not None and int(steps.reshape(-1)[0]) != 1):
        return None
    s, e = int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])
    return s if (s >= 0 and e == s + 1) or (s < 0 and e == s + 1 and e != 0) else None


def _unroll_predicated(node: ir.Node, steps: int, o: Ops, scope: Scope, names) -> ir.Value:
    """Replace the Loop's outputs by those of ``steps`` predicated copies of its body;
    return whether it would have run another step (bool scalar)."""
    run = _Predicated(node, o)
    for i in range(steps):
        run.step(i, steps, names)
    if run.exceeded is None:
        run.exceeded = run.true  # neither a trip count nor a condition ends it: _plan refuses that
    run.replace_outputs(run.count(steps), scope, names)
    return run.exceeded


class _Predicated:
    """A Loop unrolled into predicated steps, step after step: ``active`` says whether the
    step runs, ``state`` is what the last step that ran carried, ``scans`` what each
    step appended."""

    def __init__(self, node: ir.Node, o: Ops) -> None:
        self.node, self.o = node, o
        self.body = body = node.attributes["body"].as_graph()
        self.base = base = node.name or "loop"
        self.n_carried = len(node.inputs[2:])
        self.all_trips = loop_runs_all_trips(node, body)
        self.true = o.b.constant(np.array(True), f"{base}_true")
        m = node.inputs[0] if node.inputs else None
        self.trips = None
        if m is not None:
            self.trips = o.reshape(m, o.ints([]), f"{base}_trips") if m.shape is None or m.shape.rank() != 0 else m
        cond = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None and not self.all_trips else None
        if cond is not None and (cond.shape is None or cond.shape.rank() != 0):
            cond = o.reshape(cond, o.ints([]), f"{base}_cond")
        self.active_0 = self.both(self.within(0), cond, f"{base}_active_0")
        self.active: ir.Value = self.active_0 or self.true
        self.scans: list[list[ir.Value]] = [[] for _ in range(len(body.outputs) - 1 - self.n_carried)]
        self.ran: list[ir.Value] = []  # per step, whether it ran (int64), where a condition decides
        self.exceeded: ir.Value | None = None
        # A step past the loop's end runs the body again on what the last step that ran
        # was given (its carried values and iteration number), so it computes only what
        # the original computed: a carried row index past the end (tf.while_loop's own
        # counter) is never read. Its results are dropped. Where the loop may run no step,
        # there is no such step: each copy then reads its rows through guard_gathers,
        # which give a filler row for an empty tensor.
        self.state = self.fed = list(node.inputs[2:])
        self.iteration = o.scalar(0)
        self.pairs = list(zip(body.inputs[2:], body.outputs[1 : 1 + self.n_carried]))

    def within(self, i: int) -> ir.Value | None:
        """i < M (None: always, or no trip count)."""
        if self.trips is None:
            return None
        c = const_array(self.trips)
        if c is not None and i < int(c.reshape(())):
            return None
        return self.o.op("Less", [self.o.scalar(i), self.trips], f"{self.base}_within_{i}", dtype=ir.DataType.BOOL,
                         shape=[])

    def both(self, a: ir.Value | None, b: ir.Value | None, name: str) -> ir.Value | None:
        if a is None or b is None:
            return a if b is None else b
        return self.o.op("And", [a, b], name, dtype=ir.DataType.BOOL, shape=[])

    def step(self, i: int, steps: int, names) -> None:
        o, body, base, n_carried, active = self.o, self.body, self.base, self.n_carried, self.active
        if i > 0:
            self.fed = [select_carried(active, s_, f_, bi, bo, o, f"{base}_feed_{i}")
                        for s_, f_, (bi, bo) in zip(self.state, self.fed, self.pairs)]
            self.iteration = o.op("Where", [active, o.scalar(i), self.iteration], f"{base}_iteration_{i}", dtype=INT64,
                                  shape=[])
        value_map: dict[ir.Value, ir.Value | None] = {body.inputs[0]: self.iteration, body.inputs[1]: self.true}
        value_map.update(zip(body.inputs[2:], self.fed))
        mapped = inline_map_body(body, value_map, o.b, names)
        if self.active_0 is not None:
            guard_gathers(body, mapped, self.active_0, o, f"{base}_{i}")
        outs = [mapped.get(v, v) for v in body.outputs]
        self.state = [select_carried(active, new, old, bi, bo, o, f"{base}_state_{i}")
                      for new, old, (bi, bo) in zip(outs[1 : 1 + n_carried], self.state, self.pairs)]
        for s, y in enumerate(outs[1 + n_carried :]):
            self.scans[s].append(o.unsqueeze(y, [0], f"{y.name or 'scan'}_step_{i}"))
        if self.all_trips:
            # Only the trip count ends it: step i runs iff i < M.
            if i + 1 < steps:
                self.active = self.within(i + 1) or self.true
            else:
                self.exceeded = self.within(steps)
            return
        self.ran.append(o.op("Cast", [active], f"{base}_ran_{i}", dtype=INT64, shape=[], to=INT64))
        next_cond = outs[0]
        if next_cond.shape is None or next_cond.shape.rank() != 0:
            next_cond = o.reshape(next_cond, o.ints([]), f"{base}_cond_{i + 1}")
        step_on = self.both(active, next_cond, f"{base}_continues_{i}")
        if i + 1 < steps:
            self.active = self.both(step_on, self.within(i + 1), f"{base}_active_{i + 1}") or self.true
        else:
            self.exceeded = self.both(step_on, self.within(steps), f"{base}_exceeded")

    def count(self, steps: int) -> ir.Value:
        """How many steps ran."""
        o, base = self.o, self.base
        if self.all_trips:
            assert self.trips is not None
            return o.op("Min", [o.op("Max", [self.trips, o.scalar(0)], f"{base}_trips_run", dtype=INT64, shape=[]),
                                o.scalar(steps)], f"{base}_count", dtype=INT64, shape=[])
        count = self.ran[0]
        for i, r in enumerate(self.ran[1:], 1):
            count = o.op("Add", [count, r], f"{base}_count_{i}", dtype=INT64, shape=[])
        return count

    def replace_outputs(self, count: ir.Value, scope: Scope, names) -> None:
        o, node, n_carried = self.o, self.node, self.n_carried
        n_active = o.unsqueeze(count, [0], f"{self.base}_steps_run")
        for out, stepped, bo in zip(node.outputs[n_carried:], self.scans, self.body.outputs[1 + n_carried :]):
            stacked = o.concat(stepped, 0, f"{out.name or 'scan'}_steps")
            # After no iteration the runtimes give a step dim they cannot know statically
            # as 0 (onnxruntime's Loop and onnx's reference both): so does the slice.
            unknown = [k + 1 for k, d in enumerate(bo.shape.dims) if not isinstance(d, int)] if bo.shape is not None else []
            if unknown and self.active_0 is not None:
                # The dims themselves, not INT64_MAX: tract's slice rewrites overflow on it
                # (they dropped the last column of a tf map_fn's rows).
                dims = o.op("Gather", [o.shape(stacked, f"{out.name or 'scan'}_steps_dims"), o.ints(unknown)],
                            f"{out.name or 'scan'}_step_dims", dtype=INT64, shape=[len(unknown)], axis=0)
                kept = o.op("Where", [self.active_0, dims, o.ints([0] * len(unknown))], f"{out.name or 'scan'}_kept_dims",
                            dtype=INT64, shape=[len(unknown)])
                y = o.slice(stacked, o.ints([0] * (1 + len(unknown))), o.concat([n_active, kept], 0, f"{self.base}_ends"),
                            [0, *unknown], f"{out.name or 'scan'}_ran")
            else:
                y = o.slice(stacked, o.ints([0]), n_active, [0], f"{out.name or 'scan'}_ran")
            replace_output(out, y, scope, names, node, owned=True)
        for out, value in zip(node.outputs[:n_carried], self.state):
            replace_output(out, value, scope, names, node, owned=False)


def _raise_flag(model: ir.Model, exceeded: ir.Value, o: Ops, names) -> None:
    """Or ``exceeded`` into the model's overflow output, adding the output if needed."""
    graph = model.graph
    name = model.metadata_props.get(TRIPS_EXCEEDED_KEY)
    current = next((v for v in graph.outputs if name is not None and v.name == name), None)
    if current is not None:
        # The output is made by the loop bounded before; it is now an input of the Or.
        current.name = names.fresh(f"{name}_before")
        flag = o.op("Or", [current, exceeded], "or", dtype=ir.DataType.BOOL, shape=[])
        graph.outputs[list(graph.outputs).index(current)] = flag
    else:
        flag = o.op("Identity", [exceeded], "flag", dtype=ir.DataType.BOOL, shape=[])
        name = names.fresh(TRIPS_EXCEEDED)
        model.metadata_props[TRIPS_EXCEEDED_KEY] = name
        graph.outputs.append(flag)
    flag.name = name
