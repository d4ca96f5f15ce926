"""The conversion of signatures, written once for every representation.

A representation (Unrolled, Stacked/Ragged, Flat, optional) is a :class:`Converter`: what
tensors one value becomes, how it lowers a graph, and a few primitives. Against that
interface, and only here (MLIR's one-to-N type conversion is the model):

- an If's outputs become the tensors its branches' outputs became (:func:`convert_if`);
- a Loop's carried values become their tensors going in, in the body and coming out, and
  a value appended once per step leaves the carried state as scan outputs where the
  representation offers it (:func:`convert_loop`);
- a SequenceMap becomes a Loop over the elements whose outputs each representation
  collects its own way (:func:`map_as_loop`).

The declared type of every tensor these signatures create comes from the converter's
``types``, never from the branch or the body that happens to produce it.

The walk is here too (``Converter.lower_model``: every graph, function and subgraph, each
node that touches the representation handed to its rule, the lowered nodes removed once
every graph is done), and the rules are registered per op and representation with
``@rule(op, into)`` (TVM's ``register_legalize``), so adding an op is one decorated
function per representation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import onnx_ir as ir

from seqlower.analysis.analyzer import Analysis, analyze_reusing, is_default_domain, keep_for_next_pass, node_label
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes._rewrite import (
    REPORT_KEY,
    Scope,
    inline_map_body,
    map_loop_body,
    note_max_unroll,
    rebuild_node,
    returned_by,
    rewrite_record,
    subgraph_scopes,
    take_over,
    walk_scopes,
    write_abi,
)
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.folds.fold_static_ifs import CARRIED_LISTS_KEY

__all__ = [
    "Converter", "Proto", "Collected", "Rule", "rule", "rules", "REPRESENTATIONS", "WebLoweringPass", "convert_if",
    "convert_loop", "map_as_loop", "proto_of",
]

# A rule lowers one node: (converter, node, emitter, scope) -> how, for the report. The
# emitter is an Ops, or a plain Builder for representations that ask for one.
Rule = Callable[[Any, ir.Node, Any, Scope], str]

REPRESENTATIONS = ("unrolled", "packed", "flat", "optional")
_RULES: dict[str, dict[str, Rule]] = {into: {} for into in REPRESENTATIONS}


def rule(op: str, *intos: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the rule that lowers ``op`` for each
    representation named."""

    def register(f: Rule) -> Rule:
        for into in intos:
            table = _RULES[into]
            old = table.get(op)
            # (a module imported again under its other name registers the same function)
            if old is not None and old.__qualname__ != f.__qualname__:
                raise ValueError(f"two {into} rules for {op}: {old.__qualname__} and {f.__qualname__}")
            table[op] = f
        return f

    return register


def rules(into: str) -> Mapping[str, Rule]:
    """The rules registered for a representation, by op (a live view)."""
    return MappingProxyType(_RULES[into])

# Name, type and shape of one tensor in a signature.
Proto = tuple[str | None, ir.TypeProtocol | None, ir.Shape | None]


def proto_of(v: ir.Value | None, names: NameAuthority) -> Proto:
    """A tensor output that stays what it is (a fresh name for an unused slot)."""
    return (names.fresh("unused"), None, None) if v is None else (v.name, v.type, v.shape)


@dataclass
class Collected:
    """How a map's Loop collects one output: carried accumulators (initial value outside,
    body input, body output), scan outputs, and what makes the output of the Loop's
    results (``finish(carried_results, scan_results)``)."""

    carried: list[tuple[ir.Value, ir.Value, ir.Value]] = field(default_factory=list)
    scans: list[ir.Value] = field(default_factory=list)
    finish: Callable[[list[ir.Value], list[ir.Value]], None] = lambda carried, scans: None
    how: str = ""


class Converter:
    """One representation: subclasses say which values are theirs and what they become,
    and name their rules (``representation``, see :func:`rule`)."""

    representation: str = ""
    names: NameAuthority
    # How a Loop that carries this representation is described in the report.
    carrying: str = "the tensors"
    # Rules take a plain Builder instead of an Ops.
    wants_builder: bool = False

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.names = NameAuthority(model)
        self.records: list[dict[str, str]] = []
        self.modified = False
        self.dead: list[tuple[ir.Graph | ir.Function, list[ir.Node]]] = []

    # -- the walk ---------------------------------------------------------------------------

    def lower_model(self) -> None:
        """Lower every graph and function (bodies as their nodes' rules or the walk reach
        them), the model boundary, and then remove what was lowered: only once every
        graph is done, since an If rewrites its branches' outputs after they were lowered
        and bodies read outer values. Inner graphs finish first, so their nodes (the
        readers) go first."""
        scopes = list(walk_scopes(self.model))
        self.model_inputs(scopes[0])
        for scope in scopes:
            self.graph(scope)
        self.model_outputs(scopes[0])
        for graph, nodes in self.dead:
            graph.remove(nodes, safe=True)
        self.model.meta.setdefault(REPORT_KEY, []).extend(self.records)

    # -- the model boundary ---------------------------------------------------------------
    # Written once: the ports this representation owns become the tensors its
    # ``abi_input``/``abi_output`` make, each recorded, and their entries go to the ABI.

    # Whether this representation's values may be model inputs or outputs.
    boundary: bool = False

    def model_inputs(self, scope: Scope) -> None:
        self._convert_ports(scope, "input")

    def model_outputs(self, scope: Scope) -> None:
        self._convert_ports(scope, "output")

    def abi_input(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        """The graph inputs that carry model input ``v`` (``v`` is bound to them), and
        its ABI entry (None: recorded another way)."""
        raise NotImplementedError

    def abi_output(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        """The graph outputs that carry model output ``v``, and its ABI entry."""
        raise NotImplementedError

    def _convert_ports(self, scope: Scope, kind: str) -> None:
        graph = self.model.graph
        ports = graph.inputs if kind == "input" else graph.outputs
        if not self.boundary or not any(self.owns(v) for v in ports):
            return
        new: list[ir.Value] = []
        entries: list[dict] = []
        for v in list(ports):
            if not self.owns(v):
                new.append(v)
                continue
            name = v.name
            tensors, entry = self.abi_input(v, scope) if kind == "input" else self.abi_output(v, scope)
            new += tensors
            if entry is not None:
                entries.append(entry)
            self.records.append({"op": kind, "node": f"model {kind} '{name}'", "graph": "main", "into": self.into(v),
                                 "how": "ABI " + ", ".join(t.name or "" for t in tensors)})
            self.modified = True
        ports.clear()
        ports.extend(new)
        if entries:
            write_abi(self.model, f"{kind}s", entries)

    def graph(self, scope: Scope) -> None:
        """Hand every node of the graph that touches this representation to its rule;
        walk into the subgraphs the rule does not lower itself."""
        lowered: list[ir.Node] = []
        for node in list(scope.graph):
            rule_ = self.rule_for(node)
            if rule_ is None or self.walks_into(node):
                for sub in subgraph_scopes(node, scope):
                    self.graph(sub)
            if rule_ is None:
                continue
            label = node_label(node)
            into = self.into(self.first_owned(node))
            b = scope.builder(node, self.names)
            how = rule_(self, node, b if self.wants_builder else Ops(b), scope)
            self.records.append(rewrite_record(node, scope, into, how, label))
            lowered.append(node)
            self.modified = True
        if lowered:
            self.dead.append((scope.graph, lowered))

    def rule_for(self, node: ir.Node) -> Rule | None:
        """The rule for ``node`` when it touches this representation, else None."""
        if not is_default_domain(node) or self.first_owned(node) is None:
            return None
        found = _RULES[self.representation].get(node.op_type)
        assert found is not None, f"no {self.representation} rule for {node_label(node)}"
        return found

    def first_owned(self, node: ir.Node) -> ir.Value | None:
        """The first value of ``node`` (a Loop's body signature included) this
        representation owns."""
        values = [*node.inputs, *node.outputs]
        if node.op_type == "Loop" and "body" in node.attributes:
            body = node.attributes["body"].as_graph()
            values += [*body.inputs, *body.outputs]
        return next((v for v in values if v is not None and self.owns(v)), None)

    def walks_into(self, node: ir.Node) -> bool:
        """Whether the walk lowers ``node``'s subgraphs before its rule runs (rules for
        If, Loop and SequenceMap lower them themselves, by default)."""
        return False

    def owns(self, v: ir.Value | None) -> bool:
        """Whether ``v`` becomes this representation's tensors."""
        raise NotImplementedError

    def into(self, v: ir.Value | None) -> str:
        """The report's name for what ``v`` becomes."""
        return self.representation

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        """The tensors standing for ``v`` in a signature, named from ``base``."""
        raise NotImplementedError

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        """The tensors ``v`` (already lowered, or a plain value this representation can
        stand for) has become; ``b`` builds in the graph that returns them."""
        raise NotImplementedError

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        """From now on ``v`` is ``tensors`` (outputs of ``made_by``, or graph inputs)."""
        raise NotImplementedError

    # -- a Loop's carried values -----------------------------------------------------------

    def carries(self, node: ir.Node, k: int) -> bool:
        body = node.attributes["body"].as_graph()
        return self.owns(body.inputs[2 + k])

    def appended(self, node: ir.Node, k: int) -> tuple[ir.Node, ir.Value] | None:
        """The insert and the tensor, when carried value ``k`` is only ever appended to
        once per step and this representation makes that a scan output."""
        return None

    def append_step(self, node: ir.Node, k: int, t: ir.Value, o: Ops, name: str) -> list[ir.Value]:
        """In the body, before it is lowered: what each step scans out for the appended
        ``t`` (the first takes the carried value's output slot)."""
        raise NotImplementedError

    def append_types(self, carried: ir.Value, t: ir.Value, base: str) -> list[Proto]:
        raise NotImplementedError

    def bind_appended(self, out: ir.Value, carried: ir.Value, t: ir.Value, scans: list[ir.Value], o: Ops) -> None:
        """After the Loop: ``out`` is the initial value followed by the scanned steps."""
        raise NotImplementedError


class WebLoweringPass(ir.passes.InPlacePass):
    """Lower every web the analysis gives this pass's representation (``web_repr``) with
    its lowerer (``lowerer(model, analysis, keepdims_policy)``)."""

    web_repr: str = ""
    lowerer: Callable[[ir.Model, Analysis, str], Converter]
    # How the report's note names what --max-unroll made a web become instead (None: no note).
    instead: str | None = None

    def __init__(self, max_unroll: int = 64, keepdims_policy: str = "auto", packed: bool = True,
                 runtime_ranks: bool = True) -> None:
        super().__init__()
        self.max_unroll = max_unroll
        self.keepdims_policy = keepdims_policy
        self.packed = packed
        self.runtime_ranks = runtime_ranks

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        params = dict(max_unroll=self.max_unroll, keepdims_policy=self.keepdims_policy, packed=self.packed,
                      runtime_ranks=self.runtime_ranks)
        analysis = analyze_reusing(model, **params)
        webs = [w for w in analysis.webs if w.repr == self.web_repr]
        if not webs:
            keep_for_next_pass(model, analysis, **params)
            return ir.passes.PassResult(model, False)
        if self.instead is not None:
            note_max_unroll(model, webs, self.instead)
        lw = type(self).lowerer(model, analysis, self.keepdims_policy)
        lw.lower_model()
        return ir.passes.PassResult(model, lw.modified)


def convert_if(cv: Converter, node: ir.Node, scope: Scope) -> bool:
    """Lower both branches, then make every output ``cv`` owns the tensors it becomes.
    Returns False when nothing is left of the If: every output was a list that is empty
    in both branches (an If must have an output, and ONNX nodes have no side effects)."""
    branches = [node.attributes["then_branch"].as_graph(), node.attributes["else_branch"].as_graph()]
    for key, g in zip(("then_branch", "else_branch"), branches):
        cv.graph(Scope(g, f"{scope.label} > {node_label(node)}.{key}", scope.opset, False))
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
        self.bscope = Scope(self.body, f"{scope.label} > {node_label(node)}.body", scope.opset, False)
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
