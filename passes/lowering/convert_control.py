"""The conversion of control flow, written once for every representation (see
``convert``): an If's outputs, a Loop's carried values (and what it appends, where the
representation offers it), and a SequenceMap run as a Loop."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from seqlower import coverage
from seqlower.analysis.analyzer import node_label
from seqlower.ir.builder import Builder
from seqlower.passes._rewrite import (
    Scope,
    inline_map_body,
    map_loop_body,
    rebuild_node,
    returned_by,
    rewrite_record,
    take_over,
)
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.folds.fold_static_ifs import CARRIED_LISTS_KEY

from seqlower.passes.lowering.convert import Collected, Converter, Proto, proto_of, rule

__all__ = ["convert_if", "convert_loop", "map_as_loop"]


def convert_if(cv: Converter, node: ir.Node, scope: Scope) -> bool:
    """Lower both branches, then make every output ``cv`` owns the tensors it becomes.
    Returns False when nothing is left of the If: every output was a list that is empty
    in both branches (an If must have an output, and ONNX nodes have no side effects)."""
    branches = [node.attributes["then_branch"].as_graph(), node.attributes["else_branch"].as_graph()]
    for key, g in zip(("then_branch", "else_branch"), branches):
        cv.graph(Scope(g, f"{scope.label} > {node_label(node)}.{key}", scope.opset, False, scope.legalize))
    returned: list[list[ir.Value]] = [[], []]
    protos: list[Proto] = []
    spans: list[tuple[ir.Value, int, int | None]] = []
    for k, out in enumerate(node.outputs):
        start = len(protos)
        if not cv.owns(out):
            protos.append(proto_of(out, cv.names))
            for side, g in enumerate(branches):
                returned[side].append(g.outputs[k])
            spans.append((out, start, None))
            continue
        types = cv.types(out, out.name or "seq")
        for side, g in enumerate(branches):
            ts = cv.tensors(g.outputs[k], Builder(g, None, scope.opset, cv.names, main_graph=False))
            assert len(ts) == len(types), f"{node_label(node)}: branch {side} of '{out.name}' gives {len(ts)} tensors, not {len(types)}"
            returned[side] += ts
        protos += types
        spans.append((out, start, len(types)))
    if not protos:
        for out, _, _ in spans:
            cv.bind(out, [], scope, None)
        for g in branches:
            g.outputs.clear()
        return False
    for side, g in enumerate(branches):
        fixed = returned_by(g, returned[side], cv.names, scope.opset)
        g.outputs.clear()
        g.outputs.extend(fixed)
    new = rebuild_node(node, list(node.inputs), protos)
    new.meta[CARRIED_LISTS_KEY] = True  # (FoldStaticIfsPass folds it once its condition is known)
    for out, start, count in spans:
        if count is None:
            take_over(out, new.outputs[start], scope.graph)
        else:
            cv.bind(out, new.outputs[start : start + count], scope, new)
    return True


def convert_loop(cv: Converter, node: ir.Node, scope: Scope) -> str:
    """Make the carried values ``cv`` owns their tensors, in the body's signature, the
    node's inputs and its outputs; values appended once per step become scan outputs
    where ``cv`` offers it (O(n) in total, where carrying them is O(n^2))."""
    loop = _LoopConversion(cv, node, scope)
    loop.convert_body()
    new = loop.rebuild()
    loop.bind_outputs(new)
    if loop.appends:
        return f"Loop carrying {cv.carrying}; appends as scan outputs" if loop.keep else "Loop: appends as scan outputs"
    return f"Loop carrying {cv.carrying}"


class _LoopConversion:
    """One Loop's conversion (see :func:`convert_loop`), in the order it must happen: the
    body's signature, the body, then the node's."""

    def __init__(self, cv: Converter, node: ir.Node, scope: Scope) -> None:
        self.cv, self.node, self.scope = cv, node, scope
        self.body = node.attributes["body"].as_graph()
        self.bscope = Scope(self.body, f"{scope.label} > {node_label(node)}.body", scope.opset, False, scope.legalize)
        self.carried = list(node.inputs[2:])
        self.n_scans = len(self.body.outputs) - 1 - len(self.carried)
        self.mine = [cv.carries(node, k) for k in range(len(self.carried))]
        self.appends = {k: a for k in range(len(self.carried)) if self.mine[k] and (a := cv.appended(node, k)) is not None}
        self.keep = [k for k in range(len(self.carried)) if k not in self.appends]

    def out(self, k: int) -> ir.Value | None:
        return self.node.outputs[k] if k < len(self.node.outputs) else None

    def convert_body(self) -> None:
        cv, body = self.cv, self.body
        bo_ops = Ops(Builder(body, None, self.scope.opset, cv.names, main_graph=False))
        steps = {k: cv.append_step(self.node, k, t, bo_ops, body.outputs[1 + k].name or "appended") for k, (_, t) in self.appends.items()}
        into = {k: cv.into(body.inputs[2 + k]) for k in self.appends}
        # The body's inputs first: its own rules read them.
        new_inputs = list(body.inputs[:2])
        for k in self.keep:
            bi = body.inputs[2 + k]
            if not self.mine[k]:
                new_inputs.append(bi)
                continue
            ins = [ir.Value(name=n, type=t, shape=s) for n, t, s in cv.types(bi, bi.name or "carried")]
            new_inputs += ins
            cv.bind(bi, ins, self.bscope, None)
        body.inputs.clear()
        body.inputs.extend(new_inputs)
        for k, (ins_node, _) in self.appends.items():
            # The step's first scan output takes the sequence's output slot, so what
            # lowering the body replaces it by lands there too.
            body.outputs[1 + k] = steps[k][0]
            cv.records.append(rewrite_record(ins_node, self.bscope, into[k], "append as a Loop scan output"))
            # (the Loop's rule lowers this insert: it is the insert's lowering all the same)
            coverage.hit(f"rule:{cv.representation}:SequenceInsert", self.bscope.label)
            body.remove(ins_node, safe=False)
        cv.graph(self.bscope)
        body_b = Builder(body, None, self.scope.opset, cv.names, main_graph=False)
        outputs = [body.outputs[0]]
        for k in self.keep:
            bo = body.outputs[1 + k]
            outputs += cv.tensors(bo, body_b) if self.mine[k] else [bo]
        outputs += list(body.outputs[1 + len(self.carried) :])
        for k in self.appends:
            outputs += [body.outputs[1 + k], *steps[k][1:]]
        fixed = returned_by(body, outputs, cv.names, self.scope.opset)
        body.outputs.clear()
        body.outputs.extend(fixed)

    def rebuild(self) -> ir.Node:
        """The node with the converted inputs and outputs (typed by the converter)."""
        cv = self.cv
        outer_b = self.scope.builder(self.node, cv.names)
        inputs: list[ir.Value | None] = list(self.node.inputs[:2])
        self.protos: list[Proto] = []
        self.spans: list[tuple[ir.Value | None, int, int | None]] = []
        for k in self.keep:
            out, init, start = self.out(k), self.carried[k], len(self.protos)
            if self.mine[k]:
                assert init is not None
                inputs += cv.tensors(init, outer_b)
                self.protos += cv.types(init, (out.name if out is not None else None) or "carried")
                self.spans.append((out, start, len(self.protos) - start))
            else:
                inputs.append(init)
                self.protos.append(proto_of(out, cv.names))
                self.spans.append((out, start, None))
        for out in self.node.outputs[len(self.carried) : len(self.carried) + self.n_scans]:
            self.spans.append((out, len(self.protos), None))
            self.protos.append(proto_of(out, cv.names))
        self.scan_spans: list[tuple[int, int, int]] = []
        for k, (_, t) in self.appends.items():
            out, init = self.out(k), self.carried[k]
            assert init is not None
            types = cv.append_types(init, t, (out.name if out is not None else None) or "appended")
            self.scan_spans.append((k, len(self.protos), len(types)))
            self.protos += types
        return rebuild_node(self.node, inputs, self.protos)

    def bind_outputs(self, new: ir.Node) -> None:
        for out, start, count in self.spans:
            if out is None:
                continue
            if count is None:
                take_over(out, new.outputs[start], self.scope.graph)
            else:
                self.cv.bind(out, new.outputs[start : start + count], self.scope, new)
        after = Ops(Builder(self.scope.graph, self.node, self.scope.opset, self.cv.names, main_graph=self.scope.main))
        for k, start, count in self.scan_spans:
            out, init = self.out(k), self.carried[k]
            if out is not None and init is not None:
                self.cv.bind_appended(out, init, self.appends[k][1], list(new.outputs[start : start + count]), after)


def map_as_loop(
    cv: Converter,
    node: ir.Node,
    o: Ops,
    scope: Scope,
    element: Callable[[ir.Value, ir.Value, Ops, str], ir.Value],
    count: ir.Value,
    collect: Callable[[int, ir.Value, ir.Value, Ops], Collected],
) -> str:
    """A SequenceMap as a Loop over ``count`` elements: each sequence input read at the
    step by ``element(sequence, i, body_ops, name)``, the body inlined, and output ``k``
    (``y`` in the step, the map's body output ``bo``) collected by
    ``collect(k, y, bo, body_ops)``."""
    body = node.attributes["body"].as_graph()
    base = node.outputs[0].name or "map"
    loop_body, it, cond, loop_builder = map_loop_body(cv.names, base, scope.opset)
    bo_ops = Ops(loop_builder)
    value_map: dict[ir.Value, ir.Value | None] = {}
    for inp, bi in zip(node.inputs, body.inputs):
        value_map[bi] = element(inp, it, bo_ops, f"{bi.name or 'x'}_elem") if cv.owns(inp) and inp is not None else inp
    mapped = inline_map_body(body, value_map, bo_ops.b, cv.names)
    cond_out = bo_ops.identity(cond, f"{base}_cond_out")
    plans = [collect(k, mapped[bo], bo, bo_ops) for k, bo in enumerate(body.outputs)]
    carried = [c for p in plans for c in p.carried]
    scans = [s for p in plans for s in p.scans]
    loop_body.inputs.extend(acc for _, acc, _ in carried)
    loop_body.outputs.extend(returned_by(loop_body, [cond_out, *(nxt for _, _, nxt in carried), *scans], cv.names, scope.opset))
    loop = ir.Node("", "Loop", [count, None, *(init for init, _, _ in carried)], [ir.AttrGraph("body", loop_body)],
                   num_outputs=len(carried) + len(scans), name=cv.names.fresh(f"{base}_loop"))
    o.b.graph.insert_before(node, loop)
    carried_results = list(loop.outputs[: len(carried)])
    scan_results = list(loop.outputs[len(carried) :])
    hows = []
    for p in plans:
        c, s = len(p.carried), len(p.scans)
        p.finish(carried_results[:c], scan_results[:s])
        carried_results, scan_results = carried_results[c:], scan_results[s:]
        hows.append(p.how)
    node.attributes.pop("body")
    return "Loop: " + ", ".join(hows)


# The representations whose values an If returns and a Loop carries as their tensors
# (``Converter.carrying``); Unrolled has its own If (an empty list is nothing to return).
@rule("If", "flat", "packed", "optional")
def _if(cv: Converter, node: ir.Node, _helper: object, scope: Scope) -> str:
    convert_if(cv, node, scope)
    return f"If returning {cv.carrying}"


@rule("Loop", "flat", "packed", "optional")
def _loop(cv: Converter, node: ir.Node, _helper: object, scope: Scope) -> str:
    return convert_loop(cv, node, scope)
