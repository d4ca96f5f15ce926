"""The conversion of signatures, written once for every representation.

A representation (Unrolled, Stacked/Ragged, Flat, optional) is a :class:`Converter`: what
tensors one value becomes, how it lowers a graph, and a few primitives. Against that
interface, and only here (MLIR's one-to-N type conversion is the model):

- an If's outputs become the tensors its branches' outputs became (``convert_control.convert_if``);
- a Loop's carried values become their tensors going in, in the body and coming out, and
  a value appended once per step leaves the carried state as scan outputs where the
  representation offers it (``convert_control.convert_loop``);
- a SequenceMap becomes a Loop over the elements whose outputs each representation
  collects its own way (``convert_control.map_as_loop``).

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

from seqlower import coverage
from seqlower.analysis.analyzer import Analysis, analyze_reusing, is_default_domain, keep_for_next_pass, node_label
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.ir.helpers import subgraphs
from seqlower.passes._rewrite import (
    REPORT_KEY,
    Scope,
    note_max_unroll,
    rewrite_record,
    subgraph_scopes,
    walk_scopes,
    write_abi,
)
from seqlower.passes.lowering._tensor_ops import Ops

__all__ = [
    "Converter", "Proto", "Collected", "Rule", "rule", "rules", "REPRESENTATIONS", "WebLoweringPass", "proto_of",
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
                mark = len(self.dead)
                for sub in subgraph_scopes(node, scope):
                    self.graph(sub)
                if rule_ is not None:
                    self._remove_dead_since(mark)
            if rule_ is None:
                continue
            label = node_label(node)
            coverage.hit(f"rule:{self.representation}:{node.op_type}", scope.label)
            into = self.into(self.first_owned(node))
            b = scope.builder(node, self.names)
            how = rule_(self, node, b if self.wants_builder else Ops(b), scope)
            self.records.append(rewrite_record(node, scope, into, how, label))
            lowered.append(node)
            self.modified = True
        if lowered:
            self.dead.append((scope.graph, lowered))

    def lower_subgraph(self, scope: Scope) -> None:
        """Lower a subgraph that a rule is about to clone (a SequenceMap's body batched or
        inlined): what was lowered in it is removed at once, where nothing reads it."""
        mark = len(self.dead)
        self.graph(scope)
        self._remove_dead_since(mark)

    def _remove_dead_since(self, mark: int) -> None:
        """Remove now what was lowered in the subgraphs just walked, where nothing reads it
        any more: the rule about to run may clone them (a SequenceMap's body inlined per
        element carried its If, lowered and emptied of its branches, into the graph)."""
        kept = []
        for graph, nodes in self.dead[mark:]:
            try:
                graph.remove(nodes, safe=True)
            except ValueError:
                kept.append((graph, nodes))  # (still read, by what the rule rewrites next)
        self.dead[mark:] = kept

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


def forget_dims(body: ir.Graph) -> None:
    """Every value of ``body`` (and of the graphs in it) keeps its rank, not its dims."""
    for graph in (body, *(g for node in ir.traversal.RecursiveGraphIterator(body) for g in subgraphs(node))):
        for v in (*graph.inputs, *(o for node in graph for o in node.outputs)):
            if v.shape is not None and v.const_value is None:
                v.shape = ir.Shape([None] * v.shape.rank())


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
        for body in analysis.unproven_bodies:
            forget_dims(body)
        lw = type(self).lowerer(model, analysis, self.keepdims_policy)
        lw.lower_model()
        return ir.passes.PassResult(model, lw.modified)
