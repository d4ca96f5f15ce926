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

``cut`` says None when the region way does not apply (sequences at the model boundary or
in functions, external data, a target whose rewrites touch every node); the caller then
lowers the whole model.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from seqlower import ops
from seqlower.io.inference import infer_shapes
from seqlower.targets.registry import QUIRKS, relevant_ops
from seqlower.keys import OPEN_WHEN_EMPTY
from seqlower.io.protos import canonical_subgraphs, outer_reads, scan_output_of, own_names, reads_and_names, subgraphs_of
from seqlower.io.weights import Weights, is_stub

__all__ = ["Region", "cut", "splice", "has_work", "node_kinds", "relevant_ops", "topological"]


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
# A splice that removes and inserts at most this many nodes edits the node list in place;
# more, and one rebuilt list is cheaper than that many shifts.
_IN_PLACE = 512
# Constants at most this big are copied into the sub-model as initializers (the folds
# read split sizes, positions, shapes); bigger ones are typed graph inputs.
_SMALL_BYTES = 1 << 16


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


def _inner_names(node: onnx.NodeProto) -> set[str]:
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


def cut(model: onnx.ModelProto, lacks: Iterable[str] = (), quirks: Iterable[str] = (),
        inferred: Mapping[str, onnx.TypeProto] | None = None, weights: Weights | None = None,
        kinds: list[tuple[str, str, bool]] | None = None) -> Region | None:
    """The sequence region of ``model``'s main graph as a sub-model, or None when the region
    way does not apply (see the module's doc). ``model`` is not changed. ``inferred``:
    types inference already found for the main graph's values (else the region's inputs
    that the model does not type are inferred on their cone). ``weights``: the weights
    ``model``'s stubs stand for (``seqlower.io.weights``); the region reads them itself.
    ``kinds``: ``node_kinds`` of the main graph, when read already.

    A few passes over the nodes, each a set test per node: a model of 40,000 nodes is cut
    in a tenth of a second."""
    found = find(model, lacks, quirks, weights, kinds)
    return None if found is None else build(found, found.region, inferred, weights)


def build(found: Found, part: set[int], inferred: Mapping[str, onnx.TypeProto] | None = None,
          weights: Weights | None = None, apart: Iterable[int] = (),
          lowered: Mapping[str, onnx.TypeProto] | None = None,
          output_types: Mapping[str, onnx.TypeProto] | None = None, weights_typed: bool = False) -> Region:
    """The nodes ``part`` of ``found``'s graph as a Region (``cut``'s arguments). ``apart``:
    nodes of ``part`` that another way lowers (``seqlower.fastpath.repeats``): the Region still
    covers them (inputs, outputs, where it goes), but its sub-model leaves them out and
    reads what they make as inputs and declares what they read as outputs. ``lowered``:
    the types of values other nodes of the region make, as their lowering declares them
    (they type the sub-model's inputs before what the model declares or inference found).
    ``output_types``: how the sub-model declares its outputs, where not as the model does
    (when given, the others only as the model does: no inference for them).
    ``weights_typed``: every initializer of numbers (a float type) comes in as a typed
    input, as held weights do, whatever its size (a template: ``seqlower.fastpath.repeats``)."""
    model, nodes, kinds, outs, reads = found.model, found.nodes, found.kinds, found.outs, found.reads
    index = found.index
    g = model.graph
    region = part
    order = sorted(region)
    defined = {o for i in order for o in outs[i] if o}
    inputs = list(dict.fromkeys(x for i in order for x in reads[i] if x and x not in defined))
    wanted = set(inputs)
    read_outside: set[str] = index.graph_outputs & defined
    inner = set().union(*(index.inner[i] for i in order if i in index.inner))
    reserved = index.names - defined - inner
    last_producer, first_reader = -1, len(nodes)
    constant_nodes: dict[str, onnx.NodeProto] = {}
    constant_at: dict[str, int] = {}
    shared: set[str] = set()  # inputs of the region that the rest of the model reads too
    for x in inputs:
        i = index.producer.get(x)
        if i is not None:
            if kinds[i][0] == "Constant" and kinds[i][1] in DEFAULT_DOMAINS and not nodes[i].input:
                # Comes along as a constant: a place after it only if the lowering reads it.
                constant_nodes[x] = nodes[i]
                constant_at[x] = i
            else:
                last_producer = max(last_producer, i)
        if any(r not in region for r in index.readers.get(x, ())):
            shared.add(x)
    for o in defined:
        outside = [r for r in index.readers.get(o, ()) if r not in region]
        if outside:
            read_outside.add(o)
            first_reader = min(first_reader, *outside)
    outputs = [o for i in order for o in outs[i] if o in read_outside]

    apart = set(apart)
    kept = [i for i in order if i not in apart]
    # The sub-model's boundary: the region's, and between the nodes kept and those apart.
    sub_in, sub_out = inputs, outputs
    if apart:
        made_apart = {o for i in apart for o in outs[i] if o}
        kept_made = {o for i in kept for o in outs[i] if o}
        kept_reads: list[str] = []
        for i in kept:
            kept_reads.extend(x for x in reads[i] if x and x not in kept_made)
        kept_reads = list(dict.fromkeys(kept_reads))
        read_apart = {x for i in apart for x in reads[i]}
        sub_in = [x for x in kept_reads if x in wanted or x in made_apart]
        sub_out = [o for i in kept for o in outs[i] if o and (o in read_outside or o in read_apart)]

    types = dict(index.types)
    # A held weight of numbers (a float type) comes in as a typed input: the lowering reads
    # the values of positions, sizes, shapes and masks, which are integers or booleans.
    # An initializer that is also a graph input is a default the caller may override: it
    # comes in as an input like any other, never as a constant.
    overridable = index.overridable
    initializers = {x: weights.tensor(x) if weights is not None and x in weights.spans
                    and g.initializer[i].data_type not in NUMBER_TYPES else g.initializer[i]
                    for i, x in enumerate(index.init_names) if x in wanted and x not in overridable}
    # What the sub-model's boundary needs a type for and nothing else gives: not the values
    # that come in as constants, nor what ``lowered`` and ``output_types`` type.
    needed = [x for x in sub_in if x not in initializers and (lowered is None or x not in lowered)
              and not (x in constant_nodes and small_constant(constant_value(constant_nodes[x])))]
    if output_types is None:
        needed += sub_out
    missing = [x for x in dict.fromkeys(needed) if not full_type(types.get(x))]
    if missing and inferred is not None:
        types.update((x, inferred[x]) for x in missing if x in inferred)
    elif missing:
        types.update(_infer_cone(model, nodes, missing, types, region))

    sub_inputs, sub_inits, constants, model_inputs = [], [], set(), []
    taken = set(sub_in)
    for x in dict.fromkeys([*inputs, *sub_in]):
        t = initializers.get(x)
        if t is None and x in constant_nodes:
            t = constant_value(constant_nodes[x])
            if t is None:  # a Constant of a kind that is not one tensor: a run-time value
                last_producer = max(last_producer, constant_at[x])
        if small_constant(t) and not (weights_typed and x in initializers and t.data_type in NUMBER_TYPES):
            constants.add(x)
            if x in taken:
                sub_inits.append(t)
            continue
        if x in wanted:
            model_inputs.append(x)
        if x not in taken:
            continue
        if t is not None:
            sub_inputs.append(helper.make_tensor_value_info(x, t.data_type, list(t.dims)))
        else:
            sub_inputs.append(_typed(x, lowered if lowered is not None and x in lowered else types))
            i = index.producer.get(x)
            if i is not None and scan_output_of(nodes[i], x):
                sub_inputs[-1].metadata_props.add(key=OPEN_WHEN_EMPTY, value="1")
    sub_outputs = [_typed(x, output_types if output_types is not None and x in output_types else types)
                   for x in sub_out]
    sub_graph = helper.make_graph([nodes[i] for i in kept], g.name or "main", sub_inputs, sub_outputs,
                                  initializer=sub_inits)
    region_names = defined | {n for i in kept if i in index.inner for n in index.inner[i]}
    order_of = index.value_info_order
    sub_graph.value_info.extend(index.value_info[x] for x in sorted(region_names & order_of.keys(), key=order_of.get))
    sub = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    sub.opset_import.extend(model.opset_import)
    sub.functions.extend(model.functions)
    sub.graph.CopyFrom(sub_graph)
    shared.update(v.name for v in g.output)
    return Region(sub, order, inputs, outputs, constants, reserved - set(inputs), last_producer, first_reader,
                  {k: v for k, v in constant_at.items() if k in constants}, constants - shared, reads, model_inputs,
                  defined | inner)


def small_constant(t: onnx.TensorProto | None) -> bool:
    """Whether a region input's value comes into its sub-model as an initializer."""
    return t is not None and len(t.raw_data) + 8 * len(t.int64_data) <= _SMALL_BYTES and not t.string_data \
        and not is_stub(t)


def _typed(name: str, types: Mapping[str, onnx.TypeProto]) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto(name=name)
    if name in types:
        vi.type.CopyFrom(types[name])
    return vi


def constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """A Constant node's value as a tensor named like its output (None: a kind kept as a
    run-time value: sparse, strings)."""
    attr = node.attribute[0] if len(node.attribute) == 1 else None
    if attr is None:
        return None
    name = node.output[0]
    if attr.name == "value":
        t = onnx.TensorProto()
        t.CopyFrom(attr.t)
        t.name = name
        return t
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attr.name not in kinds:
        return None
    return onnx.numpy_helper.from_array(np.asarray(helper.get_attribute_value(attr), kinds[attr.name]), name)


def full_type(tp: onnx.TypeProto | None) -> bool:
    return tp is not None and (tp.WhichOneof("value") != "tensor_type" or (
        tp.tensor_type.elem_type != 0 and tp.tensor_type.HasField("shape")))


def _infer_cone(model: onnx.ModelProto, nodes: list[onnx.NodeProto], wanted: list[str],
                types: dict[str, onnx.TypeProto], region: set[int]) -> dict[str, onnx.TypeProto]:
    """onnx shape inference on what ``wanted`` depends on (stopping at values the model types
    fully), weights replaced by typed inputs: types for ``wanted``."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    initializers = {t.name: t for t in model.graph.initializer}
    cone: set[int] = set()
    stack = list(wanted)
    seen: set[str] = set()
    inputs: list[onnx.ValueInfoProto] = []
    inits: list[onnx.TensorProto] = []
    while stack:
        x = stack.pop()
        if x in seen or not x:
            continue
        seen.add(x)
        i = producer.get(x)
        if i is not None and (i in region or not full_type(types.get(x))):
            if i not in cone:
                cone.add(i)
                stack.extend(outer_reads(nodes[i]) if subgraphs_of(nodes[i]) else nodes[i].input)
            continue
        if x in initializers:
            t = initializers[x]
            if len(t.raw_data) <= _SMALL_BYTES and not t.external_data and not is_stub(t):
                inits.append(t)
            else:
                inputs.append(helper.make_tensor_value_info(x, t.data_type, list(t.dims)))
        elif x in types:
            vi = onnx.ValueInfoProto(name=x)
            vi.type.CopyFrom(types[x])
            inputs.append(vi)
    graph = helper.make_graph([nodes[i] for i in sorted(cone)], "cone", inputs,
                              [onnx.ValueInfoProto(name=x) for x in wanted], initializer=inits)
    m = onnx.ModelProto(ir_version=model.ir_version)
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    m.graph.CopyFrom(graph)
    try:
        inferred = infer_shapes(m, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # best effort: inference failing leaves these unknown, as before
        return {}
    found = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)
             if v.type.WhichOneof("value") is not None}
    return {x: found[x] for x in wanted if x in found}


def splice(model: onnx.ModelProto, region: Region, lowered: onnx.ModelProto,
           nodes: list[onnx.NodeProto] | None = None, value_info: Sequence[onnx.ValueInfoProto] = (),
           ) -> onnx.ModelProto | None:
    """``model`` with the region's nodes replaced by ``lowered``'s (its lowered sub-model),
    or None when the two do not fit (a name taken twice, an input or output lost); the
    caller then lowers the whole model. ``model`` is changed in place on success.
    ``nodes``: ``lowered``'s nodes, kept out of its graph; ``value_info``: value infos of
    ``lowered`` beside its graph's (copies made for the model, one copy into a graph less:
    ``seqlower.fastpath.repeats.assemble``)."""
    g, lg = model.graph, lowered.graph
    lowered_nodes = list(lg.node) if nodes is None else nodes
    if [v.name for v in lg.input] != region.model_inputs:
        return None
    if [v.name for v in lg.output] != region.outputs:
        return None
    # One walk of the lowered nodes (tens of thousands, copies of a template): what they
    # make, which of the region's constants they read (a bypassed Identity's input
    # included: its readers outside read that input once it is bypassed), their Identities.
    constants = region.own_constants | region.constant_nodes.keys()
    made = {t.name for t in lg.initializer}
    reads: set[str] = set()
    identities: list[str] = []
    for n in lowered_nodes:
        made.update(n.output)
        if n.attribute:
            made |= _inner_names(n)
            if constants:
                reads.update(constants.intersection(outer_reads(n)))
        elif constants and not constants.isdisjoint(n.input):
            reads.update(constants.intersection(n.input))
        if n.op_type == "Identity":
            identities.append(n.output[0])
    made.discard("")
    if not made.isdisjoint(region.reserved):
        return None
    in_region = set(region.nodes)
    model_nodes = list(g.node)
    last_producer, first_reader = region.last_producer, region.first_reader
    if region.constant_nodes:
        last_producer = max([last_producer, *(i for x, i in region.constant_nodes.items() if x in reads)])
    # Where the region began, unless an input is made later: the untouched nodes keep their
    # order around it, and lowering the output again puts everything where it was.
    at = max(region.nodes[0], last_producer + 1)
    rename, region_nodes = _bypass_identities(lowered_nodes, set(region.outputs) - {v.name for v in g.output}) \
        if identities else ({}, lowered_nodes)
    # Constants only the region read, which its lowering no longer reads, go with it.
    dropped = region.own_constants - reads
    remove = sorted(in_region | {region.constant_nodes[x] for x in dropped if x in region.constant_nodes})
    merged = None
    # Region nodes with untouched ones between them (a quirk's op, such as OpenVINO's
    # Unsqueeze, anywhere in the graph): the same ordering, or the untouched ones would
    # move and a second lowering would not give the same model.
    interleaved = region.nodes[-1] - region.nodes[0] + 1 != len(region.nodes)
    if last_producer >= first_reader or interleaved:
        # The region reads what a reader of its outputs makes (blocks with other nodes
        # between them): no one place fits, so every node goes where what it reads is
        # made, the untouched ones in their order and the lowered ones where the region
        # began. None: the lowering joined what the model kept apart (a cycle).
        gone = set(remove)
        kept = [i for i in range(len(model_nodes)) if i not in gone]
        # A node the lowering kept (by name) goes where it was, the new ones after the
        # one before them: lowering a lowered model again puts every node where it was.
        was = {model_nodes[i].name: i for i in region.nodes if model_nodes[i].name}
        places, place = [], region.nodes[0]
        for n in region_nodes:
            place = was.get(n.name, place) if n.name else place
            places.append(place)
        order = topological([*(model_nodes[i] for i in kept), *region_nodes],
                            [*kept, *places],
                            [*([rename.get(x, x) for x in region.reads[i]] for i in kept),
                             *(reads_of(n) for n in region_nodes)])
        if order is None:
            return None
        merged, at = order, 0
    if rename:
        for i in range(at, len(model_nodes)):
            if i not in in_region and not rename.keys().isdisjoint(region.reads[i]):
                _rename_reads(model_nodes[i], rename)
    bypassed = set(rename)  # (the Identities ``_bypass_identities`` took out)
    old = region.names
    if merged is not None:
        del g.node[:]
        g.node.extend(merged)
    elif len(remove) + len(region_nodes) <= _IN_PLACE:
        # In place: the untouched nodes are not copied (a rebuilt list copies every node).
        place = at - sum(1 for i in remove if i < at)
        for i in reversed(remove):
            del g.node[i]
        for k, n in enumerate(region_nodes):
            g.node.insert(place + k, n)
    else:
        gone = set(remove)
        new_nodes = [*(n for i, n in enumerate(model_nodes) if i not in gone and i < at), *region_nodes,
                     *(n for i, n in enumerate(model_nodes) if i not in gone and i >= at)]
        del g.node[:]
        g.node.extend(new_nodes)
    have = {t.name for t in g.initializer}
    if not dropped.isdisjoint(have):
        kept_inits = [t for t in g.initializer if t.name not in dropped]
        del g.initializer[:]
        g.initializer.extend(kept_inits)
        have -= dropped
    added = [t for t in lg.initializer if t.name not in have and t.name not in region.constants]
    g.initializer.extend(added)
    have.update(t.name for t in added)
    # Value infos: the region's old ones go (sequence types the lowering removed), the
    # lowered sub-model's come in.
    # A model output the region makes is declared as the lowering declares it (a declared
    # shape a keepdims policy corrected).
    lowered_types = {v.name: v.type for v in lg.output}
    for v in g.output:
        if v.name in lowered_types and v.type != lowered_types[v.name]:
            v.type.CopyFrom(lowered_types[v.name])
    # An entry the lowering still types keeps its place, so lowering again changes nothing.
    skip = {v.name for v in g.output} | bypassed | have | region.constants
    new = {v.name: v for v in (*lg.value_info, *value_info, *lg.output)
           if v.name not in skip and v.type.WhichOneof("value")}
    keep = [new.pop(v.name, v) for v in g.value_info if v.name not in old or v.name in new]
    keep.extend(new.values())
    del g.value_info[:]
    g.value_info.extend(keep)
    have_ops = {(o.domain, o.version) for o in model.opset_import}
    model.opset_import.extend(o for o in lowered.opset_import if (o.domain, o.version) not in have_ops)
    for prop in lowered.metadata_props:
        if prop.key.startswith("seqlower."):
            model.metadata_props.add(key=prop.key, value=prop.value)
    return model


def reads_of(node: onnx.NodeProto) -> list[str] | set[str]:
    return outer_reads(node) if node.attribute and subgraphs_of(node) else node.input[:]


def topological(nodes: list[onnx.NodeProto], priorities: Sequence[int] | None = None,
                reads: Sequence[Iterable[str]] | None = None, outputs: Sequence[Iterable[str]] | None = None,
                ) -> list[onnx.NodeProto] | None:
    """``nodes`` in an order where each is after what makes what it reads (``reads``, else
    read off the nodes) and makes (``outputs``, else read off the nodes); of the nodes that
    may go next, the one of lowest priority (else the first in ``nodes``). None: they make
    a cycle."""
    reads = reads if reads is not None else [reads_of(n) for n in nodes]
    made = {o: k for k, outs in enumerate(outputs if outputs is not None else (n.output for n in nodes))
            for o in outs if o}
    if priorities is None and all(made.get(x, -1) < k for k, r in enumerate(reads) for x in r):
        return nodes  # in order already (copies of a chain of blocks)
    needs = [0] * len(nodes)
    readers: list[list[int]] = [[] for _ in nodes]
    for k, r in enumerate(reads):
        deps = {made[x] for x in r if x in made and made[x] != k}
        needs[k] = len(deps)
        for d in deps:
            readers[d].append(k)
    rank = priorities if priorities is not None else range(len(nodes))
    ready = [(rank[k], k) for k, c in enumerate(needs) if c == 0]
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(nodes[k])
        for r in readers[k]:
            needs[r] -= 1
            if needs[r] == 0:
                heapq.heappush(ready, (rank[r], r))
    return order if len(order) == len(nodes) else None


def _bypass_identities(nodes: list[onnx.NodeProto], internal: set[str]) -> tuple[dict[str, str], list[onnx.NodeProto]]:
    """The lowered region's nodes without the Identities that only hand a value to the rest
    of the model under its old name (a Split/Concat pair that cancels out leaves one), and
    the renaming the readers of those names take to read the value itself."""
    rename: dict[str, str] = {}
    kept: list[onnx.NodeProto] = []
    for n in nodes:
        if n.op_type == "Identity" and n.domain in DEFAULT_DOMAINS and n.output[0] in internal:
            rename[n.output[0]] = rename.get(n.input[0], n.input[0])
        else:
            kept.append(n)
    return rename, kept


def _rename_reads(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    for k, x in enumerate(node.input):
        if x in rename:
            node.input[k] = rename[x]
    for sub in subgraphs_of(node):
        for n in sub.node:
            _rename_reads(n, rename)
        for v in sub.output:  # a subgraph output that is an outer value, named directly
            if v.name in rename:
                v.name = rename[v.name]
