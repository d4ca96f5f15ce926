"""Turn Loops into Scans, for targets that have Scan but no Loop (tract).

What the unrolling leaves is a Loop over a run-time trip count: TorchScript's
``for i in range(x.size(0))``, and the Loops the sequence lowerings build for a
SequenceMap whose body does not batch or for an append loop. Such a Loop is a Scan when

- it has a trip count ``M`` and its condition cannot stop it early;
- every tensor it carries keeps one shape from iteration to iteration (Scan requires it:
  onnxruntime preallocates its states), proven by the body declaring the same shape, of
  numbers and named dims, for the carried input and its output: by induction each
  iteration then sees the initial shape;
- every scan output has a known rank and type (see the zero-trip case below);
- no sequence or optional value is carried (those are lowered first).

The Scan iterates over ``Range(0, M, 1)``, whose elements are the iteration numbers the
Loop body read from its first input; the body's condition input becomes a constant
true and its condition output goes. A Scan over an empty scan input fails on every
runtime measured (onnx's reference, onnxruntime 1.31, tract 0.23.9), so unless ``M`` is
a constant of at least 1 the Scan sits in an ``If (M > 0)`` whose else branch returns the
initial states and empty scan outputs: ``[0, *step]``, with 0 for each step dim that is
not a number, as onnxruntime's Loop gives after no iteration.

A Loop that stays has its reason recorded (``LOOP_REASONS_KEY``), and the target report
says it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node, take_places
from seqlower.passes.loops._zero_trips import zero_trip_guard
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain, model_input_dims, node_label
from seqlower.ir.helpers import loop_runs_all_trips
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes.keys import LOOP_REASONS_KEY

__all__ = ["LoopsToScansPass", "LOOP_REASONS_KEY", "carries_one_shape", "why_not_a_scan"]



class LoopsToScansPass(ir.passes.InPlacePass):
    def __init__(self, nested: bool = True, known_steps: bool = False) -> None:
        super().__init__()
        # False for a target that runs a Scan inside a Scan wrong (tract: quirk
        # "nested-scan-state"): a Loop whose body holds a Scan stays a Loop.
        self.nested = nested
        # True for a target whose If needs one shape from both branches (tract: quirk
        # "if-branch-facts"): the If for no iteration gives empty scan outputs built from
        # the step dims, which must then be known (else tract fails it, unnamed).
        self.known_steps = known_steps

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        reasons: dict[str, str] = model.meta.setdefault(LOOP_REASONS_KEY, {})
        input_dims = model_input_dims(model)

        def rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
            if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
                return None
            body = node.attributes["body"].as_graph()
            why = why_not_a_scan(node, body)
            if why is None and not self.nested and any(n.op_type == "Scan" for n in ir.traversal.RecursiveGraphIterator(body)):
                why = "its body holds a Scan, and the target runs a Scan inside a Scan wrong"
            if why is None and self.known_steps:
                why = _unknown_step(node, body)
            if why is not None:
                reasons[node_label(node)] = f"it cannot be a Scan: {why}"
                return None
            reasons.pop(node_label(node), None)
            guarded = _to_scan(node, body, scope, names, input_dims)
            return "Scan", "Loop as a Scan over its iteration numbers" + (" (in an If: the trip count may be 0)" if guarded else "")

        return rewrite_each_node(model, rewrite)


def _unknown_step(node: ir.Node, body: ir.Graph) -> str | None:
    """Why the empty scan outputs after no iteration could not have the Scan's own shape."""
    n_carried = len(node.inputs) - 2
    for bo in body.outputs[1 + n_carried :]:
        assert bo.shape is not None
        if not all(isinstance(d, int) or (d.value is not None and not d.value.startswith("unk__")) for d in bo.shape.dims):
            return (f"its scan output '{bo.name}' has step dims known only at run time, so the If around it for no "
                    "iteration would give two shapes (quirk if-branch-facts)")
    return None


def _has_sequences(values: list[ir.Value | None]) -> bool:
    return any(v is not None and isinstance(v.type, (ir.SequenceType, ir.OptionalType)) for v in values)


def _invariant(shape: ir.Shape | None, other: ir.Shape | None) -> bool:
    """Both declared, equal, and every dim a number or a named dim (two unknown dims
    prove nothing)."""
    if shape is None or other is None or shape != other:
        return False
    return all(isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value is not None) for d in shape.dims)


def carries_one_shape(node: ir.Node, body: ir.Graph) -> bool:
    """Whether every tensor the Loop carries provably keeps one shape across iterations."""
    n_carried = len(node.inputs) - 2
    return all(_invariant(bi.shape, bo.shape) for bi, bo in zip(body.inputs[2:], body.outputs[1 : 1 + n_carried]))


def why_not_a_scan(node: ir.Node, body: ir.Graph) -> str | None:
    """Why this Loop cannot be a Scan, or None when it can."""
    if not node.inputs or node.inputs[0] is None:
        return "it has no trip count: it runs until its condition stops it, which Scan cannot express"
    if not loop_runs_all_trips(node, body):
        return "its condition can stop it before the trip count (a while loop or a break), which Scan cannot express"
    n_carried = len(node.inputs) - 2
    if any(v is None for v in node.inputs[2:]):
        return "one of the values it carries has no initial value"
    carried_in, carried_out = body.inputs[2:], body.outputs[1 : 1 + n_carried]
    if _has_sequences([*node.inputs[2:], *node.outputs]) or any(
        _has_sequences([*n.inputs, *n.outputs]) for n in ir.traversal.RecursiveGraphIterator(body)
    ):
        return "it still carries or makes a sequence"
    for bi, bo in zip(carried_in, carried_out):
        if not _invariant(bi.shape, bo.shape):
            return (f"the tensor it carries ('{bi.name}') is not proven to keep one shape across iterations "
                    "(it may grow), and a Scan state must")
    for bo in body.outputs[1 + n_carried :]:
        if bo.shape is None or bo.dtype is None:
            return f"its scan output '{bo.name}' has no known rank or type, needed for the empty result after no iteration"
    return None


def _to_scan(node: ir.Node, body: ir.Graph, scope: Scope, names: NameAuthority,
             input_dims: dict[str, tuple[ir.Value, int]]) -> bool:
    """Replace the Loop by a Scan (in an If unless it surely runs); True when guarded."""
    o = Ops(scope.builder(node, names))
    base = node.name or "loop"
    m = node.inputs[0]
    assert m is not None
    trips = const_array(m)
    if m.shape is None or m.shape.rank() != 0:
        m = o.reshape(m, o.ints([]), f"{base}_trips")
    iterations = o.op("Range", [o.scalar(0), m, o.scalar(1)], f"{base}_iterations", dtype=INT64)
    _loop_body_as_scan_body(body, names, scope.opset)
    node.attributes.pop("body")
    inits = list(node.inputs[2:])
    n_carried = len(inits)
    guarded = trips is None or trips.size != 1 or int(trips.reshape(())) < 1

    def scan() -> ir.Node:
        return ir.Node("", "Scan", [*inits, iterations], [ir.AttrGraph("body", body), ir.AttrInt64("num_scan_inputs", 1)],
                       num_outputs=len(node.outputs), name=names.fresh(f"{base}_scan"))

    if not guarded:
        made = scan()
        o.b.graph.insert_before(node, made)
        results = list(made.outputs)
    else:
        steps = [(bo.shape, bo.dtype) for bo in body.outputs[n_carried:]]
        results = zero_trip_guard(o, m, None, inits, steps, list(node.outputs), scan, scope, names, input_dims, base)
    take_places(list(node.outputs), results, scope.graph)
    scope.graph.remove(node, safe=True)
    return guarded


def _loop_body_as_scan_body(body: ir.Graph, names: NameAuthority, opset: int) -> None:
    """Loop body (i, cond, carried...) -> (cond, carried..., scans...) becomes the Scan
    body (carried..., i) -> (carried..., scans...), in place."""
    i, cond = body.inputs[0], body.inputs[1]
    if cond.uses() or cond.is_graph_output():
        b = Builder(body, body[0] if len(body) else None, opset, names, main_graph=False)
        true = b.constant(np.array(True), f"{cond.name or 'cond'}_true")
        outputs = body.outputs
        for k, v in enumerate(outputs):
            if v is cond:
                outputs[k] = b.identity(true, f"{cond.name or 'cond'}_out")
        ir.convenience.replace_all_uses_with(cond, true)
    body.outputs.pop(0)
    body.inputs.pop(0)
    body.inputs.pop(0)
    body.inputs.append(i)
    if i.shape is None:
        i.shape = ir.Shape([])
