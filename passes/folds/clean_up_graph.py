"""Remove what the lowerings left dead and put nodes back in topological order.

1. onnx_ir's ``RemoveUnusedNodesPass`` (dead nodes and initializers, in subgraphs and
   functions too), then two guards. That pass leaves the nodes inside a removed If's or
   Loop's bodies reading the outer values they read, so those values keep uses from
   nodes no graph holds (and cannot be removed safely later): such reads are dropped,
   and the pass runs again for what that made dead. It also strips trailing empty
   inputs, which turns ``Loop(M, "")`` (no condition, no carried values) into a
   one-input Loop the checker rejects, so Loops get their two leading inputs back.
2. onnx_ir's ``TopologicalSortPass`` (stable, so unchanged parts keep their order).
3. A Constant's tensor named like its output: inliners and clones rename the output
   only, and a second lowering (which clones again) would rename the tensor, so the
   lowered model would not be its own lowering.
"""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, TopologicalSortPass

from seqlower.ir.helpers import subgraphs
from seqlower.passes._rewrite import named_copy

__all__ = ["CleanUpGraphPass"]

logger = logging.getLogger(__name__)

# Ops whose leading inputs are positional even when empty: (op, how many).
_MIN_INPUTS = {"Loop": 2}


class CleanUpGraphPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        dead = sum(_remove_dead_nodes(g) for g in (model.graph, *(f.graph for f in model.functions.values())))
        modified = removed = RemoveUnusedNodesPass()(model).modified or dead > 0
        # Only a removal leaves reads behind; a walk per removal round, not per clean-up.
        while removed and _drop_reads_from_removed_bodies(model):
            removed = RemoveUnusedNodesPass()(model).modified
        _restore_leading_inputs(model)
        if not _sorted(model):
            # (onnx_ir's sort costs about 27 µs a node, the check 1: most lowerings emit in order)
            modified |= TopologicalSortPass()(model).modified
        modified |= _name_constant_tensors(model)
        return ir.passes.PassResult(model, modified)


def _remove_dead_nodes(graph: ir.Graph) -> int:
    """Remove the nodes nothing reads (in this graph and the subgraphs of what stays), in
    one ``Graph.remove`` per graph. onnx_ir's RemoveUnusedNodesPass removes them one by
    one, and each ``remove`` copies the graph's outputs into a set: quadratic in a region
    of 2,500 blocks with 2,500 outputs (0.9 s of a 10,000-node chain's lowering). That
    pass still runs after, for the initializers, inputs and optional outputs."""
    outputs = frozenset(graph.outputs)
    dead: set[ir.Node] = set()
    count = 0
    for node in reversed(graph):  # (readers before what they read)
        if all(v not in outputs and all(u.node in dead for u in v.uses()) for v in node.outputs):
            dead.add(node)
            continue
        for sub in subgraphs(node):
            count += _remove_dead_nodes(sub)
    for node in dead:
        for i in range(len(node.inputs)):
            node.replace_input_with(i, None)
    if dead:
        graph.remove(dead)
    return count + len(dead)


def _sorted(model: ir.Model) -> bool:
    """Whether every node comes after what it reads, subgraphs included. A node's
    subgraphs are checked before the node counts as seen, so what they read from outside
    must come before their holder, as TopologicalSortPass orders them."""
    def in_order(graph: ir.Graph, seen: set[ir.Node]) -> bool:
        for node in graph:
            for v in node.inputs:
                if v is not None and (p := v.producer()) is not None and p not in seen:
                    return False
            if not all(in_order(sub, seen) for sub in subgraphs(node)):
                return False
            seen.add(node)
        return True

    return all(in_order(top, set()) for top in (model.graph, *(f.graph for f in model.functions.values())))


def _name_constant_tensors(model: ir.Model) -> bool:
    renamed = False
    seen: set[int] = set()
    for top in (model.graph, *model.functions.values()):
        for node in ir.traversal.RecursiveGraphIterator(top):
            if node.op_type != "Constant" or not node.outputs or not node.outputs[0].name:
                continue
            value = node.attributes.get("value")
            if value is None or value.type != ir.AttributeType.TENSOR:
                continue
            # (.value, not .as_tensor(): its isinstance against a Protocol was 3% of a lowering)
            tensor, name = value.value, node.outputs[0].name
            if id(tensor) in seen:
                # One tensor shared by clones: each gets its own, or each would rename it.
                tensor = named_copy(tensor, name)
                node.attributes["value"] = ir.AttrTensor("value", tensor)
                renamed = True
            seen.add(id(tensor))
            if tensor.name != name:
                tensor.name = name
                renamed = True
    return renamed


def _drop_reads_from_removed_bodies(model: ir.Model) -> bool:
    """Detach every use of a live value by a node that no live graph holds."""
    live: dict[int, ir.Graph | ir.Function] = {}
    for top in (model.graph, *model.functions.values()):
        live[id(top)] = top
        if isinstance(top, ir.Function):
            live[id(top.graph)] = top  # its nodes' graph
        for node in ir.traversal.RecursiveGraphIterator(top):
            for sub in subgraphs(node):
                live[id(sub)] = sub
    dropped = False
    for g in live.values():
        values = [*g.inputs, *(g.initializers.values() if isinstance(g, ir.Graph) else ()), *(v for n in g for v in n.outputs)]
        for v in values:
            for use in list(v.uses()):
                node, index = use.node, use.idx
                if node.graph is None or id(node.graph) not in live:
                    node.replace_input_with(index, None)
                    dropped = True
    return dropped


def _restore_leading_inputs(model: ir.Model) -> None:
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for g in graphs:
        for node in ir.traversal.RecursiveGraphIterator(g):
            need = _MIN_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if need is not None and len(node.inputs) < need:
                node.resize_inputs(need)
