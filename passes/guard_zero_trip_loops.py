"""Put a Loop that grows what it carries in an ``If (M > 0)``, for OpenVINO (quirk
"loop-assumes-an-iteration").

OpenVINO 2026.4 infers a Loop's carried outputs as if the body ran at least once: a list
that starts empty and gains a row per iteration comes out with a lower bound of one row,
and a Concat after it then fails at run time when the Loop ran no iteration ("Descriptor's
shape: {2 - ?, 1} is incompatible with provided dimensions: {1, 1}"). In an If, the
outputs merge the branches' shapes, and the else branch gives the initial states and
empty scan outputs, which is what the Loop gives after no iteration (``passes/_zero_trips``).

The If runs the Loop when its trip count (if a run-time value) is positive and its
initial condition (if a run-time value) holds. Loops whose carried tensors provably keep
one shape, and Loops whose trip count and condition are constants, are left alone.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node, take_places
from seqlower.passes._tensor_ops import Ops
from seqlower.passes._zero_trips import zero_trip_guard
from seqlower.passes.loops_to_scans import carries_one_shape
from seqlower.analysis import const_array, is_default_domain, model_input_dims
from seqlower.builder import NameAuthority

__all__ = ["GuardZeroTripLoopsPass"]



def _guarded(node: ir.Node) -> bool:
    """Last in a branch that returns its outputs: what the guard builds (so lowering a
    lowered model changes nothing), with what a rewrite after it may have put before
    the Loop (OpenVINO's run-time empty states, made again after folding)."""
    g = node.graph
    return g is not None and len(g.inputs) == 0 and list(g)[-1] is node and list(g.outputs) == list(node.outputs)


class GuardZeroTripLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        input_dims = model_input_dims(model)

        def rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
            if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes or _guarded(node):
                return None
            m = node.inputs[0] if node.inputs else None
            cond = node.inputs[1] if len(node.inputs) > 1 else None
            # What may make it run no iteration: a run-time trip count, a run-time condition.
            m = m if m is not None and const_array(m) is None else None
            cond = cond if cond is not None and const_array(cond) is None else None
            if m is None and cond is None:
                return None
            body = node.attributes["body"].as_graph()
            n_carried = len(node.inputs) - 2
            if any(v is None for v in node.inputs[2:]) or carries_one_shape(node, body):
                return None
            if any(bo.shape is None or bo.dtype is None for bo in body.outputs[1 + n_carried :]):
                return None
            o = Ops(scope.builder(node, names))
            base = node.name or "loop"
            trips = o.reshape(m, o.ints([]), f"{base}_trips") if m is not None and (m.shape is None or m.shape.rank() != 0) else m
            steps = [(bo.shape, bo.dtype) for bo in body.outputs[1 + n_carried :]]
            node.attributes.pop("body")

            def loop() -> ir.Node:
                inner = ir.Node("", "Loop", list(node.inputs), [ir.AttrGraph("body", body)], num_outputs=len(node.outputs),
                                name=names.fresh(f"{base}_loop"))
                return inner

            results = zero_trip_guard(o, trips, cond, list(node.inputs[2:]), steps, list(node.outputs), loop, scope, names, input_dims, base)
            take_places(list(node.outputs), results, scope.graph)
            scope.graph.remove(node, safe=True)
            return "tensor ops", "Loop in an If for no iteration (OpenVINO)"

        return rewrite_each_node(model, rewrite)
