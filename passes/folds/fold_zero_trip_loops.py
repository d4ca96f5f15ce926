"""A ``Loop`` that provably runs no iteration is its initial values.

TorchScript guards list code with loops over lists that are empty at compile time
(``while len(xs) > 2: xs.pop()`` on ``xs = []``, ``for t in xs`` over a list nothing
appended to, ``zip`` of two of those): their trip count or first condition is known once
``fold_sequence_constants`` has folded the lengths, and what they carry out is then what
they carry in. Kept, such a loop hides the list's length (and an empty list's elements
have no rank, so a join with them cannot be lowered). A loop over such a list that was
lowered before its length was known (a comprehension over a list a folded loop left
empty) carries tensors by then, and is folded the same way: kept, it reads the empty
constants OpenVINO cannot load. This pass:

1. finds each ``Loop`` whose trip count evaluates to at most 0
   or whose initial condition evaluates to false (constants and static dims, the
   evaluator of ``fold_sequence_arguments``);
2. replaces each carried output by its initial value and each scan output by an empty
   tensor of the body's static element shape::

       before: ys, ss = Loop(M=0, cond, xs) <body: ... ys' = SequenceInsert(xs', t) ...>
       after:  ys = Identity(xs); ss = [0, *shape] constant

A loop with a used scan output whose element shape is not static stays.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, discard_subgraphs, hand_over, rewrite_each_node
from seqlower.passes.folds.fold_sequence_arguments import evaluate

__all__ = ["FoldZeroTripLoopsPass"]

logger = logging.getLogger(__name__)


class FoldZeroTripLoopsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _fold)


def _runs_no_iteration(node: ir.Node, opset: int) -> str | None:
    trips = node.inputs[0] if node.inputs else None
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if trips is not None:
        m = evaluate(trips, opset)
        if m is not None and m.size == 1 and int(np.asarray(m).reshape(())) <= 0:
            return "its trip count is 0"
    if cond is not None:
        c = evaluate(cond, opset)
        if c is not None and c.size == 1 and not bool(np.asarray(c).reshape(())):
            return "its first condition is false"
    return None


def _fold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    body = node.attributes["body"].as_graph()
    carried = len(node.inputs) - 2
    if carried < 0:
        return None
    why = _runs_no_iteration(node, scope.opset)
    if why is None:
        return None
    scans = list(zip(node.outputs[carried:], body.outputs[1 + carried:]))
    empties: list[np.ndarray | None] = []
    for out, bo in scans:
        if not out.uses() and not out.is_graph_output():
            empties.append(None)
            continue
        shape = bo.shape if bo.shape is not None else out.shape and ir.Shape(out.shape.dims[1:])
        if shape is None or not all(isinstance(d, int) for d in shape.dims) or bo.dtype is None or bo.dtype == ir.DataType.STRING:
            return None  # an empty scan output of unknown shape: the loop stays
        empties.append(np.zeros((0, *shape.dims), dtype=bo.dtype.numpy()))
    outputs = list(node.outputs[:carried])
    if scope.opset < 14 and any(v.is_graph_output() and isinstance(v.type, ir.SequenceType) for v in outputs):
        return None  # no Identity of a list before opset 14 to keep the output's name
    b = scope.builder(node, names)
    news: list[ir.Value] = [v for v in node.inputs[2:] if v is not None]
    for (out, _), empty in zip(scans, empties):
        if empty is not None:
            outputs.append(out)
            news.append(b.constant(empty, f"{out.name or 'scan'}_empty"))
    hand_over(outputs, news, b, scope.graph, "unrun")
    discard_subgraphs(node)
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    scope.graph.remove(node, safe=True)
    return "removed", f"its initial values: {why}"
