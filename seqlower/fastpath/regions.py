"""Sequence regions (DESIGN.md, "Core v2": Regions): the part of a model the passes rewrite,
cut out of the ModelProto, lowered alone and spliced back. The rest of the model is never
converted to onnx_ir, inferred, checked by inference or re-serialized by seqlower: a model
with one small sequence region costs about what reading and writing it costs, and a model
with none costs exactly that.

A region is every node of the main graph that holds an op some pass rewrites (a sequence,
optional or map op, a control-flow op the schedule touches, an op the target lacks), at
any depth of its subgraphs, with every node a sequence value can reach from there (through
Identity, If, Loop, Scan and custom ops). Its sub-model reads the region's inputs as graph
inputs (small constants as initializers, so the folds still see them) and declares the
values the rest of the model reads as its outputs. Where the model declares no type for a
region input, onnx shape inference runs on the input's upstream cone only, with the
weights replaced by typed inputs.

``find`` says which nodes are the region (``seqlower.fastpath.submodel`` makes them a
sub-model, ``seqlower.fastpath.splice`` puts the lowered one back). ``find`` and ``cut``
say None when the region way does not apply (sequences at the model boundary or
in functions, external data, a target whose rewrites touch every node); the caller then
lowers the whole model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from dataclasses import dataclass, field

import onnx

from seqlower import ops
from seqlower.targets.registry import QUIRKS, relevant_ops
from seqlower.io.protos import canonical_subgraphs, own_names, reads_and_names, subgraphs_of
from seqlower.io.weights import Weights

__all__ = ["Found", "Region", "find", "has_work", "node_kinds", "relevant_ops"]


DEFAULT_DOMAINS = ("", "ai.onnx")
# ai.onnx.ml ops that make sequences of maps (ZipMap): the region takes them.
_ML_OPS = ops.names("ml", domain="ai.onnx.ml")
# Ops whose outputs may be sequences when an input is: a value from the region keeps
# growing the region through them.
CARRIERS = frozenset({"Identity", "If", "Loop", "Scan", "SequenceMap", "Optional", "OptionalGetElement"})
# Target quirks whose rewrites run over every node, not only sequence ones
# (seqlower.targets.registry), and of those, the ones with work only where the model has
# one of their ops.
_WHOLE_MODEL_QUIRKS = frozenset(q.id for q in QUIRKS.values() if q.rewrite and q.whole_model)
_WHOLE_MODEL_OPS = {q.id: frozenset(q.ops) for q in QUIRKS.values() if q.rewrite and q.whole_model and q.ops}
# Element types of weights, never of positions, sizes, shapes or masks.
NUMBER_TYPES = frozenset(getattr(onnx.TensorProto, t) for t in (
    "FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
    "FLOAT8E5M2", "FLOAT8E5M2FNUZ") if hasattr(onnx.TensorProto, t))


def _string_scans(node: onnx.NodeProto) -> bool:
    """A Loop with a string scan output: carry_string_scans rewrites it for every target."""
    if node.op_type != "Loop" or node.domain not in DEFAULT_DOMAINS:
        return False
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None:
        return False
    carried = len(node.input) - 2
    return any(v.type.tensor_type.elem_type == onnx.TensorProto.STRING for v in body.output[1 + carried:])


def _is_relevant(node: onnx.NodeProto, relevant: frozenset[str]) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.domain in DEFAULT_DOMAINS and n.op_type in relevant or _string_scans(n):
            return True
        if n.domain == "ai.onnx.ml" and n.op_type in _ML_OPS:
            return True
        for g in subgraphs_of(n):
            stack.extend(g.node)
            if any(_non_tensor(v.type) for v in (*g.input, *g.output, *g.value_info)):
                return True
    return False


def _non_tensor(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") not in ("tensor_type", None)


def inner_names(node: onnx.NodeProto) -> set[str]:
    """Every name defined inside a node's subgraphs (one namespace with the outer graph)."""
    return set(own_names(subgraphs_of(node))) if node.attribute else set()


def node_kinds(nodes: Sequence[onnx.NodeProto]) -> list[tuple[str, str, bool]]:
    """(op type, domain, has attributes) of each of a graph's ``nodes`` (``list(graph.node)``):
    read once for ``has_work`` and ``cut`` (a protobuf field read costs a wrapper; a big
    graph is tens of thousands of nodes)."""
    return [(n.op_type, n.domain, len(n.attribute) > 0) for n in nodes]


def has_work(model: onnx.ModelProto, lacks: Iterable[str] = (), quirks: Iterable[str] = (),
             kinds: list[tuple[str, str, bool]] | None = None) -> bool:
    """Whether any pass has anything to do in ``model``: a relevant op or a non-tensor
    value anywhere (functions, subgraphs, the boundary). ``kinds``: ``node_kinds`` of the
    main graph, when read already."""
    whole = set(_WHOLE_MODEL_QUIRKS & set(quirks))
    if "static-empty-input" in whole:
        whole.discard("static-empty-input")  # (work only where an input is declared with a dim of 0)
        if any(d.HasField("dim_value") and d.dim_value == 0 for v in model.graph.input
               if v.type.WhichOneof("value") == "tensor_type" for d in v.type.tensor_type.shape.dim):
            return True
    if whole - _WHOLE_MODEL_OPS.keys():
        return True
    relevant = relevant_ops(lacks, quirks) | {op for q in whole for op in _WHOLE_MODEL_OPS[q]}
    g = model.graph
    if any(_non_tensor(v.type) for v in (*g.input, *g.output, *g.value_info)):
        return True
    for f in model.functions:
        if any(_is_relevant(n, relevant) for n in f.node):
            return True
    if kinds is None:
        return any(_is_relevant(n, relevant) for n in g.node)
    return any(op in relevant and domain in DEFAULT_DOMAINS or domain == "ai.onnx.ml" and op in _ML_OPS
               or (attributed or op == "Loop") and _is_relevant(g.node[i], relevant)
               for i, (op, domain, attributed) in enumerate(kinds))


@dataclass
class Region:
    model: onnx.ModelProto  # the sub-model: the region's nodes, inputs and outputs
    nodes: list[int]  # indices of the region's nodes in the main graph
    inputs: list[str]  # names the region reads from the rest (graph inputs of the sub-model)
    outputs: list[str]  # names of the region the rest reads (graph outputs of the sub-model)
    constants: set[str] = field(default_factory=set)  # main-graph initializers copied in
    reserved: set[str] = field(default_factory=set)  # every name outside the region
    last_producer: int = -1  # the last node outside the region that makes one of its inputs
    first_reader: int = 0  # the first node outside the region that reads one of its outputs
    constant_nodes: dict[str, int] = field(default_factory=dict)  # inputs from Constant nodes: where
    own_constants: set[str] = field(default_factory=set)  # constants only the region reads
    # What each main-graph node reads (its subgraphs' outer reads included), by index:
    # the splice finds the readers to rename here.
    reads: list[list[str] | set[str]] = field(default_factory=list)
    model_inputs: list[str] = field(default_factory=list)  # the region's inputs that are not constants
    names: set[str] = field(default_factory=set)  # every name the region's nodes make, in subgraphs too


@dataclass
class Found:
    """The main graph's nodes as ``find`` read them, and which of them are the region."""
    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    kinds: list[tuple[str, str, bool]]
    outs: list[list[str]]  # each node's outputs
    reads: list[list[str] | set[str]]  # what each node reads, its subgraphs' outer reads included
    outer: dict[int, set[str]]  # nodes with subgraphs: every name they read
    region: set[int]
    inner: dict[int, set[str]] = field(default_factory=dict)  # nodes with subgraphs: the names they define
    # Nodes with subgraphs: ``protos.canonical_subgraphs`` of each (None where it cannot
    # say), which told ``outer`` and ``inner`` (and the keys of ``seqlower.fastpath.repeats`` read).
    canonical: dict[int, Any] = field(default_factory=dict)
    _index: _Index | None = None

    @property
    def index(self) -> _Index:
        """Who makes and who reads each name, read once for every ``build``."""
        if self._index is None:
            self._index = _Index(self)
        return self._index


class _Index:
    """Lookups ``build`` makes for any part of the graph, so that building a small part
    (a template, ``seqlower.fastpath.repeats``) costs its boundary, not the model."""

    def __init__(self, found: Found) -> None:
        g = found.model.graph
        # Only the names the region makes or reads: every part is of the region.
        near = {x for i in found.region for x in (*found.outs[i], *found.reads[i]) if x}
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}
        producer, readers = self.producer, self.readers
        for i, (made, r) in enumerate(zip(found.outs, found.reads)):
            for o in made:
                if o in near:
                    producer[o] = i
            for x in near.intersection(r) if len(r) > 2 else [x for x in r if x in near]:
                got = readers.get(x)
                if got is None:
                    readers[x] = [i]
                elif got[-1] != i:
                    got.append(i)  # (in node order: each list is sorted)
        self.inner = found.inner
        self.graph_inputs = [v.name for v in g.input]
        self.graph_outputs = {v.name for v in g.output}
        self.init_names = [t.name for t in g.initializer]
        self.overridable = set(self.graph_inputs).intersection(self.init_names)
        self.names = set().union(found.outs and set().union(*found.outs), self.graph_inputs, self.init_names,
                                 *self.inner.values())
        self.names.discard("")
        self.types: dict[str, onnx.TypeProto] = {}
        for v in (*g.input, *g.value_info, *g.output):
            if v.type.WhichOneof("value") is not None:
                self.types.setdefault(v.name, v.type)
        self.value_info = {v.name: v for v in g.value_info}
        self.value_info_order = {v.name: k for k, v in enumerate(g.value_info)}


def find(model: onnx.ModelProto, lacks: Iterable[str] = (), quirks: Iterable[str] = (),
         weights: Weights | None = None, kinds: list[tuple[str, str, bool]] | None = None,
         nodes: list[onnx.NodeProto] | None = None) -> Found | None:
    """The nodes of ``model``'s main graph that make its sequence region, or None when the
    region way does not apply (see the module's doc). Arguments as ``cut``'s; ``nodes``:
    ``list(model.graph.node)``, when read already (``kinds`` were read off it)."""
    if _WHOLE_MODEL_QUIRKS & set(quirks):
        return None
    g = model.graph
    relevant = relevant_ops(lacks, quirks)
    if any(_non_tensor(v.type) for v in (*g.input, *g.output)):
        return None  # the boundary ABI rewrites the model's signature
    if any(_is_relevant(n, relevant) for f in model.functions for n in f.node):
        return None
    # (Held weights: none of the main graph's initializers is external but the stubs.)
    if weights is None and any(t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer):
        return None
    nodes = nodes if nodes is not None else list(g.node)
    # Each node's fields read once (a protobuf field read costs a wrapper; a big graph is
    # tens of thousands of nodes): the passes below are set tests on these. (A slice of a
    # repeated field is a list made in C: a third faster than a tuple of its items.)
    kinds = kinds if kinds is not None else node_kinds(nodes)
    outs = [n.output[:] for n in nodes]
    region: set[int] = set()
    outer: dict[int, set[str]] = {}
    inner: dict[int, set[str]] = {}
    canonical: dict[int, Any] = {}
    for i, (op, domain, attributed) in enumerate(kinds):
        n = nodes[i]
        if attributed and subgraphs_of(n):
            # One walk of the subgraphs for the names and for what repeats' keys read.
            c = canonical[i] = canonical_subgraphs(n)
            if c is not None:
                outer[i] = {x for x in n.input if x}.union(c[1])
                inner[i] = c[2]
            else:
                outer[i], inner[i] = reads_and_names(n)
        if op in relevant and domain in DEFAULT_DOMAINS or domain == "ai.onnx.ml" and op in _ML_OPS:
            region.add(i)
        elif op == "Loop" and _string_scans(n):
            region.add(i)
        elif i in outer and _is_relevant(n, relevant):
            region.add(i)
    if not region:
        return None
    reads = [outer[i] if i in outer else n.input[:] for i, n in enumerate(nodes)]
    # A value from the region reaches further through ops that carry sequences.
    carriers = [i for i, (op, domain, _) in enumerate(kinds) if domain not in DEFAULT_DOMAINS or op in CARRIERS]
    frontier = {o for i in region for o in outs[i] if o}
    while frontier:
        grown: set[str] = set()
        for i in carriers:
            if i not in region and not frontier.isdisjoint(reads[i]):
                region.add(i)
                grown.update(o for o in outs[i] if o)
        frontier = grown
    region |= _control_cones(nodes, kinds, outs, region, {v.name for v in g.input})
    return Found(model, nodes, kinds, outs, reads, outer, region, inner, canonical)


# The most nodes a control value's cone may hold to come into the region.
_CONE_NODES = 64
# Ops whose output reads only their input's shape: a cone stops there.
_SHAPE_READERS = frozenset({"Shape", "Size"})


def _control_cones(nodes: list[onnx.NodeProto], kinds: list[tuple[str, str, bool]], outs: list[list[str]],
                   region: set[int], graph_inputs: set[str]) -> set[int]:
    """The small computations of the region's control values (a Loop's trip count and
    condition, an If's condition, a position or split): TorchScript's ``len(xs) > 2``
    and positions computed from lengths or static dims. In the region they fold with it
    (a loop that runs no iteration, a branch never taken); cut off, they are run-time
    inputs of its sub-model. Only a cone that reads what the region makes, reads no model
    input at all (TorchScript's trip count ``min`` of constant lengths), or holds an Expand
    comes in (one of model inputs and shapes alone stays where it is); one of more than
    ``_CONE_NODES`` nodes, or reaching a node with subgraphs, stays out."""
    wanted: list[str] = []
    for i in region:
        op, domain, _ = kinds[i]
        if domain not in DEFAULT_DOMAINS:
            continue
        n = nodes[i]
        if op in ("Loop", "If"):
            wanted.extend(x for x in n.input[: 2 if op == "Loop" else 1] if x)
        else:
            f = ops.facts(op)
            if f is not None and f.control is not None and len(n.input) > f.control and n.input[f.control]:
                wanted.append(n.input[f.control])
    if not wanted:
        return set()
    producer = {o: i for i, made in enumerate(outs) for o in made if o}
    added: set[int] = set()
    for x in wanted:
        cone: set[int] = set()
        touches = reads_input = False
        stack = [x]
        crossed: set[int] = set()
        while stack and len(cone) <= _CONE_NODES:
            name = stack.pop()
            i = producer.get(name)
            reads_input |= i is None and name in graph_inputs
            if i is not None and i in region:
                touches = True
                # A tensor op in the region (one the target lacks, a quirk's): what it
                # reads is part of the computation too.
                if i not in crossed and ops.facts(kinds[i][0]) is None and not (kinds[i][2] and subgraphs_of(nodes[i])):
                    crossed.add(i)
                    stack.extend(y for y in nodes[i].input if y)
                continue
            if i is None or i in cone:
                continue
            if kinds[i][2] and subgraphs_of(nodes[i]):
                cone = set(range(_CONE_NODES + 1))  # (too big: a node with subgraphs)
                break
            cone.add(i)
            if kinds[i][0] not in _SHAPE_READERS:
                stack.extend(y for y in nodes[i].input if y)
            else:
                reads_input = True  # a run-time shape, unless inference proves it static
        # A cone holding an Expand comes in too: TorchScript's chunk sizes expand to a
        # computed [0], which onnxruntime's optimizer gets wrong once the lowering reads
        # the sizes' Shape (passes/folds/fold_sequence_arguments.py folds it in the region).
        if (touches or not reads_input or any(kinds[i][0] == "Expand" for i in cone)) and len(cone) <= _CONE_NODES:
            added |= cone
    return added
