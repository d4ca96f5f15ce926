"""Inline an ``If`` whose condition is known at compile time and whose result goes into
a list.

TorchScript exports ``t.squeeze(1)`` as ``If(Shape(t)[1] == 1, Squeeze(t, 1), t)``: the
two branches have different ranks, so the element the list receives has no rank at
compile time, and the list cannot be lowered. The dims the condition reads are often
static even where the tensor's other dims are not (``NonZero`` of a row gives ``[1, k]``,
transposed ``[k, 1]``). This pass:

1. finds each ``If`` one of whose outputs is a list (TorchScript's ``if len(xs) > 0:
   xs.pop()`` on a list whose length is known) or reaches a list element (a sequence
   op's tensor input other than its control input, per ``seqlower.ops``), through
   up to ``_MAX_HOPS`` single-output tensor ops (``Add``, ``Cast``, ``Unsqueeze``...);
2. evaluates its condition from constants and static dims (``Shape``, ``Gather`` or
   ``Slice`` of a shape whose selected dims are static, then any arithmetic), with the
   evaluator of ``fold_sequence_arguments``;
3. replaces the ``If`` by the taken branch, inlined::

       before: y = If(c) <then: y1 = Squeeze(t, axes)> <else: y2 = Identity(t)>, c known true
       after:  y = Squeeze(t, axes)

Other ``If`` nodes are the user's and stay as they are.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from seqlower import ops
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, discard_subgraphs, hand_over, inline_graph, rewrite_each_node
from seqlower.passes.folds.fold_sequence_arguments import evaluate

__all__ = ["CARRIED_LISTS_KEY", "FoldStaticIfsPass"]

logger = logging.getLogger(__name__)

_MAX_HOPS = 4
# Set on an If whose lists a lowering made tensors (passes/lowering/convert.py's convert_if): its
# condition may become known only after (a length the lowering folds), and it is folded
# then, though no list is left for it to reach (tract fails on such an If whose branches
# give other shapes: torch fuzz seed 5412; elsewhere onnxscript's folding took it).
CARRIED_LISTS_KEY = "seqlower.if_carried_lists"


class FoldStaticIfsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _fold)


def _fold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "If" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    if not node.meta.get(CARRIED_LISTS_KEY) and \
            not any(isinstance(v.type, ir.SequenceType) or _reaches_a_list(v) for v in node.outputs):
        return None
    cond = evaluate(node.inputs[0], scope.opset)
    if cond is None or cond.size != 1:
        return None
    taken = bool(np.asarray(cond).reshape(()))
    branch = node.attributes["then_branch" if taken else "else_branch"].as_graph()
    lists = [out for out in node.outputs if isinstance(out.type, ir.SequenceType)]
    if scope.opset < 14 and any(out.is_graph_output() for out in lists):
        return None  # no Identity of a list before opset 14 to keep the output's name
    b = scope.builder(node, names)
    outs = list(branch.outputs)
    if branch.initializers:  # (rare: cloned, their values as constants)
        mapped = inline_graph(branch, {}, b, names, "if")
        made = list(b.nodes)
    else:
        made = _move_branch(branch, node, scope)
        branch.outputs.clear()  # (they are the parent's values now)
        mapped = {}
    # Each result takes the If output's place; a model output keeps its name through an
    # Identity (even where the branch returns an outer value).
    hand_over(list(node.outputs), [mapped.get(bo, bo) for bo in outs], b, scope.graph, "taken")
    # What the branch declared is not trusted out here (a declared dim can be wrong):
    # shapes of the inlined values come from inference, from the ops themselves.
    for new in [*made, *b.nodes]:
        for v in new.outputs:
            if not v.is_graph_output() and not isinstance(v.type, ir.SequenceType):
                v.shape = None
    discard_subgraphs(node)
    for i in range(len(node.inputs)):  # let the condition's arithmetic die with it
        node.replace_input_with(i, None)
    scope.graph.remove(node, safe=True)
    return "inlined", f"the {'then' if taken else 'else'} branch: its condition is known from static dims"


def _move_branch(branch: ir.Graph, node: ir.Node, scope: Scope) -> list[ir.Node]:
    """Move the taken branch's nodes before the If under their own names (the If and its
    branches go: a node the report names later is the one the input has)."""
    nodes = list(branch)
    for n in nodes:
        branch.remove(n)
        scope.graph.insert_before(node, n)
    return nodes


def _reaches_a_list(v: ir.Value) -> bool:
    frontier, hops = [v], 0
    while frontier and hops <= _MAX_HOPS:
        nxt = []
        for value in frontier:
            for use in value.uses():
                user = use.node
                if is_default_domain(user) and _takes_an_element(user.op_type, use.idx):
                    return True
                if len(user.outputs) == 1 and user.op_type not in ("If", "Loop", "Scan", "SequenceMap"):
                    nxt.append(user.outputs[0])
        frontier, hops = nxt, hops + 1
    return False


def _takes_an_element(op: str, index: int) -> bool:
    """Whether input ``index`` of ``op`` is a tensor that becomes a list element: a
    tensor input of a sequence op (seqlower.ops) that is not its control input."""
    f = ops.facts(op)
    if f is None or f.family != "sequence" or not f.inputs or index == f.control:
        return False
    return not f.inputs[min(index, len(f.inputs) - 1)]
