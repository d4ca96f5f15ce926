"""Unroll Loops with a constant trip count, for targets that lack Loop (tract, onnx2torch,
tinygrad, TVM).

A Loop whose trip count is a constant of at most ``max_unroll`` and whose condition can
never stop it early (no initial ``cond`` or a constant true, and a body that passes its
condition through or returns constant true) is its body inlined once per iteration: the
iteration number a constant, carried values threaded from one copy to the next, scan
outputs the ``Concat`` of each copy's ``Unsqueeze``d output. A carried sequence becomes
straight-line sequence code, which the sequence lowerings then take (TorchScript's
``for i in range(4): out.append(...)`` becomes Unrolled). Loops that may stop early or
run a run-time number of times stay, and ``check --target`` names them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, discard_subgraphs, inline_map_body, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.loops.loops_to_scans import LOOP_REASONS_KEY
from seqlower.analysis.analyzer import const_array, is_default_domain, node_label
from seqlower.ir.helpers import loop_runs_all_trips
from seqlower.ir.builder import NameAuthority

__all__ = ["UnrollLoopsPass"]


class UnrollLoopsPass(ir.passes.InPlacePass):
    def __init__(self, max_unroll: int = 64, select: Callable[[ir.Node], bool] | None = None) -> None:
        super().__init__()
        self.max_unroll = max_unroll
        # Only the Loops this admits (a target quirk), and then no reasons are recorded.
        self.select = select

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.reasons: dict[str, str] = model.meta.setdefault(LOOP_REASONS_KEY, {})
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if self.select is not None and (node.op_type != "Loop" or not self.select(node)):
            return None
        trips = self._trips(node)
        if isinstance(trips, str) and self.select is None:
            self.reasons[node_label(node)] = f"it cannot be unrolled: {trips}"
            return None
        if trips is None or isinstance(trips, str):
            return None
        _unroll(node, trips, Ops(scope.builder(node, names)), scope, names)
        discard_subgraphs(node)
        scope.graph.remove(node, safe=True)
        return "tensor ops", f"Loop unrolled ({trips} iterations)"

    def _trips(self, node: ir.Node) -> int | str | None:
        """The trip count to unroll, or why not (None: not a Loop)."""
        if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
            return None
        if not node.inputs or node.inputs[0] is None:
            return "it has no trip count (a while loop; --max-trips N unrolls it into N predicated steps)"
        m = const_array(node.inputs[0])
        if m is None or m.size != 1:
            return "its trip count is known only at run time (--max-trips N unrolls it into N predicated steps)"
        trips = max(int(m.reshape(())), 0)
        body = node.attributes["body"].as_graph()
        if trips > self.max_unroll:
            return f"its {trips} trips are more than --max-unroll ({self.max_unroll})"
        if not loop_runs_all_trips(node, body):
            return "its condition can stop it before the trip count"
        n_scans = len(body.outputs) - 1 - (len(node.inputs) - 2)
        # After no iteration a scan output is [0, *step]: only where the step shape is known.
        if trips == 0 and any(not _static(bo) for bo in body.outputs[len(body.outputs) - n_scans :]):
            return "it runs no iteration, and the shape of a scan output, which is then empty, is not known"
        return trips


def _static(v: ir.Value) -> bool:
    return v.shape is not None and all(isinstance(d, int) for d in v.shape.dims) and v.dtype is not None


def _unroll(node: ir.Node, trips: int, o: Ops, scope: Scope, names: NameAuthority) -> None:
    body = node.attributes["body"].as_graph()
    carried = list(node.inputs[2:])
    n_carried = len(carried)
    scans: list[list[ir.Value]] = [[] for _ in range(len(body.outputs) - 1 - n_carried)]
    true = o.b.constant(np.array(True), "true")
    for i in range(trips):
        value_map: dict[ir.Value, ir.Value | None] = {body.inputs[0]: o.scalar(i), body.inputs[1]: true}
        value_map.update(zip(body.inputs[2:], carried))
        mapped = inline_map_body(body, value_map, o.b, names)
        carried = [_mapped(mapped, v) for v in body.outputs[1 : 1 + n_carried]]
        for s, bo in enumerate(body.outputs[1 + n_carried :]):
            scans[s].append(o.unsqueeze(_mapped(mapped, bo), [0], f"{bo.name or 'scan'}_{i}"))
    for out, value in zip(node.outputs[:n_carried], carried):
        replace_output(out, value, scope, names, node, owned=False)
    for out, steps, bo in zip(node.outputs[n_carried:], scans, body.outputs[1 + n_carried :]):
        if steps:
            stacked = o.concat(steps, 0, f"{out.name or 'scan'}_stacked") if len(steps) > 1 else o.identity(steps[0], f"{out.name or 'scan'}_stacked")
        else:
            assert bo.shape is not None and bo.dtype is not None
            stacked = o.b.zeros(bo.dtype, (0, *(int(d) for d in bo.shape.dims)), f"{out.name or 'scan'}_empty")
        replace_output(out, stacked, scope, names, node, owned=True)


def _mapped(mapped: dict[ir.Value, ir.Value], v: ir.Value) -> ir.Value:
    """What a body value became in this copy (a body output may be an outer value)."""
    return mapped.get(v, v)
