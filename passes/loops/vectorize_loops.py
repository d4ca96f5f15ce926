"""Run a Loop's body once on every iteration number at once, for targets without Loop.

TorchScript's ``for i in range(n): out.append(x[i] * i)`` is a Loop over a run-time
count that carries nothing and only scans; after the list lowerings, its body reads
``x[i]`` by a Gather and computes per row. Where the body is batch-polymorphic in the
iteration number (``passes/lowering/_batched_map.py``: elementwise ops, reductions, Squeeze and
Unsqueeze, Gather of rows at the iteration number, ...), the body runs once on
``Range(0, M)``: each scan output is the body's batched value, or its value repeated M
times where it does not depend on the iteration. No Loop, no Scan: this is what lets
tinygrad, onnx2torch and TVM run such loops, and it is faster everywhere. Zero and
negative trip counts give empty ranges and so empty scan outputs of the right shape.

A Loop that carries values, may stop early, or whose body does not batch is left for
the Scan fallback or the report.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import batched_plan, run_batched
from seqlower.passes._rewrite import Scope, discard_subgraphs, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.helpers import loop_runs_all_trips
from seqlower.ir.builder import NameAuthority

__all__ = ["VectorizeLoopsPass"]


class VectorizeLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _vectorize)


def _vectorize(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    if len(node.inputs) != 2 or node.inputs[0] is None:
        return None  # it carries values (or has no trip count)
    body = node.attributes["body"].as_graph()
    if not loop_runs_all_trips(node, body):
        return None
    if any(isinstance(v.type, (ir.SequenceType, ir.OptionalType)) for n in body for v in [*n.inputs, *n.outputs] if v is not None):
        return None
    i, cond = body.inputs[0], body.inputs[1]
    plan = batched_plan(body, [i], scope.opset)
    if plan is None:
        return None
    o = Ops(scope.builder(node, names))
    base = node.name or "loop"
    m = node.inputs[0]
    trips = o.reshape(m, o.ints([]), f"{base}_trips") if m.shape is None or m.shape.rank() != 0 else m
    iterations = o.op("Range", [o.scalar(0), trips, o.scalar(1)], f"{base}_iterations", dtype=INT64, shape=[None])
    true = o.b.constant(np.array(True), f"{base}_true")
    count1 = o.reshape(o.op("Max", [trips, o.scalar(0)], f"{base}_count", dtype=INT64), o.ints([1]), f"{base}_count1")
    outputs = [(bo, out.name or base) for out, bo in zip(node.outputs, body.outputs[1:])]
    stacks = run_batched(body, plan, {i: iterations, cond: true}, [i], outputs, count1, o, names)
    for out, (y, _) in zip(node.outputs, stacks):
        replace_output(out, y, scope, names, node, owned=True)
    discard_subgraphs(node)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "Loop body run once on every iteration number (batched)"

