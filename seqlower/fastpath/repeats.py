"""Webs that repeat (DESIGN.md, "Core v2": Regions): lowered once, copied under new names.

A model built of blocks holds the same web over and over: a layer stack that splits,
maps and joins in every layer. Lowering is a function of what the passes read, not of
names, so equal webs lower to equal nodes up to names. Each group of equal webs is lowered
once, as a sub-model of its first member (the template); every member takes a copy of the
template's lowered nodes with its own names. The cost of a model of N equal blocks is one
block's lowering and N copies, not N lowerings.

A component is the region's nodes joined by the values that may be sequences (tensors
made by ConcatFromSequence, SequenceAt, SequenceLength and other tensor ops do not join).
Two components are equal (their ``key``) when everything a lowering reads is: their nodes
in order (op, domain, attributes, with what subgraphs read from outside as positions), how
they are wired, the types of what they read and of what the rest of the model reads of
them, the values of the constants they read and the declared types of their values.

In place, a lowering also sees what the rest of the region lowers to: a size another web
counts, a shape inference learns once that web is gone. A component that reads anything
from the rest of the region other than a tensor of numbers (float types) whose shape is
fully known would lower differently alone, so it stays in the region.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from seqlower import ops
from seqlower.errors import describe_node
from seqlower.io.protos import (canonical_subgraphs, names_dims, numbered_type, outer_reads, own_names, shape_dims,
                             subgraphs_of)
from seqlower.fastpath.regions import CARRIERS, DEFAULT_DOMAINS, NUMBER_TYPES, Found, Region
from seqlower.fastpath.submodel import constant_value, full_type, small_constant
from seqlower.fastpath.splice import reads_of, topological
from seqlower.io.weights import Weights, is_stub

__all__ = ["Member", "Group", "Plan", "fits", "instantiate", "assemble", "MIN_MEMBERS"]

# A group is lowered apart when it has at least this many members: lowering a template
# costs a pass pipeline of its own (tens of milliseconds), which a few members lowered in
# place cost as well.
MIN_MEMBERS = 4

# Ops whose outputs may be sequences (or optionals, maps): the values that join a component.
_JOINING = frozenset((ops.names("sequence") - {"ConcatFromSequence", "SequenceAt", "SequenceLength"})
                     | ops.names("optional") | CARRIERS)


@dataclass
class Member:
    nodes: list[int]  # indices in the main graph, in order
    inputs: list[str]  # what it reads from outside, in the order the key numbers them
    outputs: list[str]  # what the rest of the model reads of it, in node order
    values: list[str]  # every value its nodes make (top level), in node order
    labels: list[str]  # each node's label (as the report names it)
    shape: bytes = b""  # the part of its key that names do not change: nodes, wiring, declared types
    declared: list[tuple[int, onnx.TypeProto]] = field(default_factory=list)  # its values' declared types, by number
    # The dim names its key read, in the order it numbered them (a template's and a
    # copy's pair up: see ``_renamed``).
    symbols: list[str] = field(default_factory=list)


@dataclass
class Group:
    key: bytes
    members: list[Member] = field(default_factory=list)


def _components(found: Found) -> list[list[int]]:
    parent = {i: i for i in found.region}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer = {o: i for i in found.region for o in found.outs[i] if o}
    for c in sorted(found.region):
        for x in found.reads[c]:
            p = producer.get(x)
            if p is None:
                continue
            op, domain, _ = found.kinds[p]
            if domain not in DEFAULT_DOMAINS or op in _JOINING:
                a, b = root(p), root(c)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    comps: dict[int, list[int]] = {}
    for i in sorted(found.region):
        comps.setdefault(root(i), []).append(i)
    return list(comps.values())


def _rename(node: onnx.NodeProto, names: Mapping[str, str], *, all_names: bool) -> None:
    """Rename in place what ``node`` reads (``all_names``: and makes, its subgraphs' own
    names included) by ``names``."""
    ins = node.input
    if not names.keys().isdisjoint(ins):
        ins[:] = [names.get(x, x) for x in ins]
    if all_names and not names.keys().isdisjoint(node.output):
        node.output[:] = [names.get(x, x) for x in node.output]
    if not node.attribute:
        return
    for g in subgraphs_of(node):
        if all_names:
            for v in (*g.input, *g.value_info):
                if v.name in names:
                    v.name = names[v.name]
            for t in g.initializer:
                if t.name in names:
                    t.name = names[t.name]
        for v in g.output:
            if v.name in names:
                v.name = names[v.name]
        for n in g.node:
            _rename(n, names, all_names=all_names)


class _Keys:
    """Reads each component's key; see the module's doc."""

    def __init__(self, found: Found, inferred: Mapping[str, onnx.TypeProto] | None, weights: Weights | None) -> None:
        self.found = found
        self.weights = weights
        g = found.model.graph
        # As ``submodel.build`` types a sub-model's boundary: declared, else inferred.
        self.types = found.index.types
        self.inferred = inferred if inferred is not None else {}
        # The model's inference has not run (``model_check.InferredTypes``): a key asks it
        # for nothing the lowering of another member tells, and outputs are checked on the
        # template's lowering (``Plan.outputs_fit``) instead of on inferred types.
        self.lazy = bool(getattr(inferred, "pending", False))
        self.initializers = {t.name: k for k, t in enumerate(g.initializer)}
        self.declared = {v.name: v.type for v in g.value_info}
        self.graph_outputs = {v.name for v in g.output}
        self.producer = {o: i for i in found.region for o in found.outs[i] if o}
        self.constant_nodes = {found.outs[i][0]: i for i, (op, domain, _) in enumerate(found.kinds)
                               if op == "Constant" and domain in DEFAULT_DOMAINS and i not in found.region and found.outs[i]}
        self.readers = found.index.readers
        # What more than one component of the region reads (a value another makes).
        self.region_reads = {x for i in found.region for x in found.reads[i]
                             if x in self.producer and self.producer[x] != i}
        self._fixed: dict[str, bytes] = {}
        self._attribute_ids: dict[Any, int] = {}

    def _constant(self, x: str) -> onnx.TensorProto | None:
        """The value ``x`` comes into a sub-model with (as ``submodel.build`` decides), or None."""
        k = self.initializers.get(x)
        t: onnx.TensorProto | None = None
        if k is not None:
            t = self.found.model.graph.initializer[k]
            if t.data_type in NUMBER_TYPES:
                return None  # a weight: a typed input of the template (``build``'s weights_typed)
            if is_stub(t) and self.weights is not None and x in self.weights.spans:
                t = self.weights.tensor(x)
        elif x in self.constant_nodes:
            t = constant_value(self.found.nodes[self.constant_nodes[x]])
        return t if small_constant(t) else None

    def _described(self, x: str) -> bytes:
        """What the key holds of a constant or weight ``x`` (b"": neither)."""
        t = self._constant(x)
        if t is not None:
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = ""
            return b"c" + c.SerializeToString()
        k = self.initializers.get(x)
        if k is not None:
            t = self.found.model.graph.initializer[k]
            return b"w" + bytes(repr((t.data_type, list(t.dims))), "ascii")
        return b""

    def _type(self, x: str) -> onnx.TypeProto | None:
        tp = self.types.get(x)
        if not full_type(tp) and x in self.inferred:
            return self.inferred[x]
        return tp

    def _input(self, x: str, comp: set[int], known: Mapping[str, onnx.TypeProto] | None,
               symbols: dict[str, str]) -> bytes | None:
        """What the key holds of an input ``x``: its value (a constant) or its type (only its
        element type while ``known`` is None: the first, structural key); None: the
        component cannot be lowered apart."""
        fixed = self._fixed.get(x)
        if fixed is None:
            fixed = self._fixed[x] = self._described(x)
        if fixed:
            return fixed
        if self.lazy and known is None:
            return b"t?"  # the typed key looks at it (a stack's first block reads the model's input)
        p = self.producer.get(x)
        tp = known[x] if known is not None and x in known else self._type(x)
        if p is not None and p not in comp:
            # Made elsewhere in the region: only numbers (see the module's doc), of a known
            # shape unless the lowering of their maker declared it.
            if tp is None or tp.WhichOneof("value") != "tensor_type" or tp.tensor_type.elem_type not in NUMBER_TYPES:
                return None
            if known is not None and x not in known and not _static(tp):
                return None
        if known is None:
            return b"t" + (bytes(str(tp.tensor_type.elem_type), "ascii")
                           if tp is not None and tp.WhichOneof("value") == "tensor_type" else b"?")
        return b"t" + (numbered_type(tp, symbols) if tp is not None else b"?")

    def key(self, m: Member, known: Mapping[str, onnx.TypeProto] | None = None) -> bytes | None:
        """The member's key; see ``_input`` for ``known``. With ``known``, the dim names of
        what it reads and declares are numbered in the order they come (a layer's input
        named ``unk__7`` where the last one's was ``unk__5`` is the same): ``m.symbols``."""
        inside = set(m.nodes)
        described = [m.shape]
        symbols: dict[str, str] = {}
        for x in m.inputs:
            d = self._input(x, inside, known, symbols)
            if d is None:
                return None
            described.append(d)
        if known is not None:
            described.extend(b"v%d" % token + numbered_type(tp, symbols) for token, tp in m.declared)
            m.symbols = list(symbols)
        if self.lazy:
            return b"\0".join(described)
        for o in m.outputs:
            tp = self._type(o)
            if not self.output_fits(o, tp):
                return None
            # The template declares only the element type (``output_types``): the lowering
            # declares the shape, where inference may have named unknown dims per member.
            described.append(b"o" + bytes(str(tp.tensor_type.elem_type), "ascii"))
        return b"\0".join(described)

    def output_fits(self, o: str, tp: onnx.TypeProto | None) -> bool:
        """Whether a member's output ``o`` of type ``tp`` lets it be lowered apart: a tensor,
        of numbers where the rest of the region reads it (see the module's doc)."""
        if tp is None or tp.WhichOneof("value") != "tensor_type":
            return False
        return tp.tensor_type.elem_type in NUMBER_TYPES or o not in self.region_reads

    def _attributes(self, attrs: Any) -> int:
        """A number for ``attrs`` (what a node's attributes are without names), the same for
        equal ones: a key holds the number, not the bytes or tuple (written out again per
        member, a subgraph's were most of its key's cost)."""
        return self._attribute_ids.setdefault(attrs, len(self._attribute_ids))

    def member(self, comp: list[int]) -> Member | None:
        found = self.found
        nodes, kinds, outs_of, outer = found.nodes, found.kinds, found.outs, found.outer
        # Names as numbers: what the member makes from 0 up, what it reads from outside
        # from -1 down, in the order they come.
        local: dict[str, int] = {}
        inputs: dict[str, int] = {}
        parts: list[Any] = []
        values: list[str] = []
        labels: list[str] = []

        def tokens(names: Any) -> list[int | None]:
            out: list[int | None] = []
            for x in names:
                if not x:
                    out.append(None)
                    continue
                t = local.get(x)
                if t is None:
                    t = inputs.get(x)
                    if t is None:
                        t = inputs[x] = -1 - len(inputs)
                out.append(t)
            return out

        for i in comp:
            n = nodes[i]
            op, domain, attributed = kinds[i]
            ins: list[Any] = tokens(n.input)
            if i in outer:
                if not self.declared.keys().isdisjoint(found.inner[i]):
                    return None  # the model types a subgraph's own value: names the key does not hold
                canonical = found.canonical[i] if i in found.canonical else canonical_subgraphs(n)
                if canonical is None:
                    return None
                attrs = self._attributes(canonical[0])
                ins.append("|")
                ins += tokens(canonical[1])
            else:
                attrs = self._attributes(b"".join([a.SerializeToString() for a in n.attribute])) if attributed else -1
            outs = outs_of[i]
            parts.append((op, domain, tuple(ins), len(outs), attrs))
            labels.append(describe_node(op, n.name, outs))
            for o in outs:
                if o:
                    local[o] = len(local)
                    values.append(o)
        if self.graph_outputs.intersection(values):
            return None  # a model output: its declared type is the lowering's to correct
        # What a node outside the member reads.
        inside = set(comp)
        outputs = [o for o in values if any(r not in inside for r in self.readers.get(o, ()))]
        declared = [(local[o], self.declared[o]) for o in values if o in self.declared]
        shape = [repr((parts, [local[o] for o in outputs])).encode()]
        numbered: dict[str, str] = {}
        shape.extend(b"v%d" % token + numbered_type(tp, numbered) for token, tp in declared)
        return Member(comp, list(inputs), outputs, values, labels, b"\0".join(shape), declared)


def _renamed(tp: onnx.TypeProto, names: Mapping[str, str], suffix: str) -> onnx.TypeProto:
    """A template's type as a copy declares it: the template's dim names as the copy's
    (``names``), and a name the template's lowering made up (``unk__k``) made the copy's
    own with ``suffix``: one name in two copies would say the two dims are equal."""
    if not names_dims(tp):
        return tp
    c = onnx.TypeProto()
    c.CopyFrom(tp)
    for d in shape_dims(c):
        if d.dim_param:
            d.dim_param = names.get(d.dim_param, d.dim_param + suffix)
    return c


def _static(tp: onnx.TypeProto) -> bool:
    return tp.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tp.tensor_type.shape.dim)


class Plan:
    """Which members of the region are lowered apart, found member by member in the
    model's order: a member's key holds the types its inputs have once what makes them is
    lowered (a web that stacks rows declares the shape inference could not find)."""

    def __init__(self, found: Found, inferred: Mapping[str, onnx.TypeProto] | None,
                 weights: Weights | None = None) -> None:
        self.candidates: list[Member] = []
        # Lowered types of what members lowered apart make.
        self.known: dict[str, onnx.TypeProto] = {}
        self._budget: dict[bytes, int] = {}
        self._shape_of: dict[int, bytes] = {}
        self._outputs: dict[int, list[tuple[onnx.TypeProto, bool]]] = {}  # a template's, by id
        if inferred is None:
            return  # ``build`` would infer types the keys do not hold
        comps = _components(found)
        if len(comps) < MIN_MEMBERS:
            return
        self.keys = _Keys(found, inferred, weights)
        by_key: dict[bytes, list[Member]] = {}
        for comp in comps:
            m = self.keys.member(comp)
            k = self.keys.key(m) if m is not None else None
            if k is not None:
                by_key.setdefault(k, []).append(m)
        for k, ms in by_key.items():
            if len(ms) >= MIN_MEMBERS:
                # At most one template a few members (equal shapes, unequal types), and one
                # more: a stack's first block often reads what no other does (the model's
                # input, static where the rest read an inferred dim).
                self._budget[k] = len(ms) // MIN_MEMBERS + 1
                for m in ms:
                    self._shape_of[id(m)] = k
                self.candidates.extend(ms)
        self.candidates.sort(key=lambda m: m.nodes[0])

    def key(self, m: Member) -> bytes | None:
        """``m``'s key with what is known now; None: it stays in the region."""
        return self.keys.key(m, self.known)

    def output_types(self, m: Member) -> dict[str, onnx.TypeProto]:
        """How a template declares its outputs: their element types (see ``_Keys.key``);
        none where the model's inference has not run: the lowering finds them."""
        out: dict[str, onnx.TypeProto] = {}
        if self.keys.lazy:
            return out
        for o in m.outputs:
            tp = onnx.TypeProto()
            tp.tensor_type.elem_type = self.keys._type(o).tensor_type.elem_type
            out[o] = tp
        return out

    def outputs_fit(self, m: Member, lowered: onnx.ModelProto) -> bool:
        """What ``_Keys.key`` asks of a member's outputs, asked of its lowering where the
        model's inference has not run: tensors, of numbers where the rest of the region
        reads them."""
        if not self.keys.lazy:
            return True
        types = {v.name: v.type for v in lowered.graph.output}
        return all(self.keys.output_fits(o, types.get(o)) for o in m.outputs)

    def may_make_template(self, m: Member) -> bool:
        k = self._shape_of[id(m)]
        if self._budget[k] <= 0:
            return False
        self._budget[k] -= 1
        return True

    def learn(self, m: Member, group: Group, lowered: onnx.ModelProto) -> None:
        """``m``, the last of ``group``'s members, is a copy of ``lowered``: what it makes
        has the types ``lowered`` declares, in its own dim names."""
        names, suffix = _symbol_names(group, len(group.members) - 1)
        outputs = self._outputs.get(id(lowered))
        if outputs is None:
            outputs = self._outputs[id(lowered)] = [(v.type, names_dims(v.type)) for v in lowered.graph.output]
        for o, (tp, named) in zip(m.outputs, outputs):
            self.known[o] = _renamed(tp, names, suffix) if named else tp


def fits(m: Member, lowered: onnx.ModelProto) -> bool:
    """Whether a member's lowering can be a template: it makes each output with a node
    and declares them in the member's order."""
    lg = lowered.graph
    return [v.name for v in lg.output] == m.outputs and set(m.outputs) <= {o for n in lg.node for o in n.output}


@dataclass
class Instances:
    """A group's copies of its template's lowering."""
    nodes: list[onnx.NodeProto]  # every member's, member after member
    reads: list[list[str] | set[str]]  # what each of them reads (``splice.topological``'s)
    made: list[list[str]]  # what each of them makes
    first: list[int]  # per member, the main-graph index of its first node (where its nodes go)
    counts: list[int]  # per member, how many nodes it has in ``nodes``
    initializers: list[onnx.TensorProto]  # the template's own constants, once
    value_info: list[onnx.ValueInfoProto]
    outputs: dict[str, onnx.TypeProto]  # type of each member output
    rewrites: list[dict[str, str]]
    notes: list[str]


def _names_of(lowered: onnx.GraphProto) -> list[str]:
    """Every name the lowered template makes: node outputs and its subgraphs' own names."""
    names = [o for n in lowered.node for o in n.output if o]
    names += own_names(g for n in lowered.node if n.attribute for g in subgraphs_of(n))
    return list(dict.fromkeys(names))


def instantiate(group: Group, lowered: onnx.ModelProto, rewrites: list[dict[str, str]], notes: list[str],
                taken: set[str], node_names: set[str]) -> Instances:
    """Every member's copy of ``lowered`` (the first member's lowering, which ``fits``),
    named after the member's own values. ``taken``: every value name the model has;
    ``node_names``: every node name (onnxruntime refuses two nodes of one name). The new
    names are added to them."""
    rep = group.members[0]
    lg = lowered.graph
    boundary = {*rep.outputs, *rep.inputs}
    own = [x for x in _names_of(lg) if x not in boundary]  # (in order: the names are the same every run)
    # A name the template made after one of the member's (``m0_stacked`` after ``m0``)
    # is made after the member's counterpart.
    theirs = sorted(((x, k) for k, x in enumerate([*rep.inputs, *rep.values]) if x), key=lambda p: -len(p[0]))

    def stem(name: str) -> tuple[int, str] | None:
        for x, k in theirs:
            if name.startswith(x) and name != x:
                return k, name[len(x):]
        return None

    stems = {t: stem(t) for t in own}
    name_stems = {n.name: stem(n.name) for n in lg.node if n.name}
    # The template's constants: read by every member, added once under a free name.
    shared: dict[str, str] = {}
    inits: list[onnx.TensorProto] = []
    for t in lg.initializer:
        if t.name in rep.inputs:
            continue
        name = _free(t.name, taken)
        shared[t.name] = name
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = name
        inits.append(c)
    label_of = {lab: k for k, lab in enumerate(rep.labels)}
    # Each rewrite with its node's place in the member, and whether it names a subgraph
    # (which the member's own labels rename, as they do the notes).
    prepared = [(r, label_of.get(r["node"]), r.get("graph", "main") != "main") for r in rewrites]
    relabeled = bool(notes) or any(in_subgraph for _, _, in_subgraph in prepared)
    # (each node with what every copy reads of it: its names, and its name's stem)
    template = [(n, n.input[:], n.output[:], bool(subgraphs_of(n)), n.name, name_stems.get(n.name) if n.name else None)
                for n in lg.node]
    out = Instances([], [], [], [], [], inits, [], {}, [], [])
    add_node, add_reads, add_made = out.nodes.append, out.reads.append, out.made.append
    out_types = {v.name: v.type for v in lg.output}
    # (with whether the type names a dim, which a copy renames: most have none)
    infos = [(v, names_dims(v.type)) for v in lg.value_info if v.name in own or v.name in rep.outputs]
    named_outputs = {o for o in rep.outputs if names_dims(out_types[o])}
    for j, m in enumerate(group.members):
        counterpart = [*m.inputs, *m.values]
        names: dict[str, str] = dict(shared)
        names.update(zip(rep.inputs, m.inputs))
        names.update(zip(rep.outputs, m.outputs))
        for t in own:
            s = stems[t]
            names[t] = _free(counterpart[s[0]] + s[1] if s is not None else f"{t}_{j}", taken)
        get = names.get
        for n, ins, outs, nested, name, s in template:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            made = [get(x, x) for x in outs]
            if nested:
                _rename(c, names, all_names=True)
                add_reads(outer_reads(c))
            else:
                reads = [get(x, x) for x in ins]
                c.input[:] = reads
                c.output[:] = made
                add_reads(reads)
            add_made(made)
            if name:
                c.name = _free(counterpart[s[0]] + s[1] if s is not None else f"{name}_{j}", node_names)
            add_node(c)
        out.first.append(m.nodes[0])
        out.counts.append(len(template))
        dims, suffix = _symbol_names(group, j)
        for v, named in infos:
            c = onnx.ValueInfoProto()
            c.CopyFrom(v)
            c.name = names[v.name]
            if named and (dims or suffix):
                c.type.CopyFrom(_renamed(v.type, dims, suffix))
            out.value_info.append(c)
        for o, mo in zip(rep.outputs, m.outputs):
            out.outputs[mo] = _renamed(out_types[o], dims, suffix) if o in named_outputs else out_types[o]
        relabel = {lab: m.labels[k] for lab, k in label_of.items()} if relabeled else {}
        for r, k, in_subgraph in prepared:
            e = dict(r)
            if k is not None:
                e["node"] = m.labels[k]
            if in_subgraph:
                for a, b in relabel.items():
                    e["graph"] = e["graph"].replace(a, b)
            out.rewrites.append(e)
        for note in notes:
            for a, b in relabel.items():
                note = note.replace(a, b)
            out.notes.append(note)
    return out


def _symbol_names(group: Group, j: int) -> tuple[dict[str, str], str]:
    """How member ``j``'s copy names the template's dims: its own names for those the keys
    paired, and a suffix for the others (none for the template itself)."""
    if j == 0:
        return {}, ""
    rep, m = group.members[0], group.members[j]
    return dict(zip(rep.symbols, m.symbols)), f"_{j}"


def _free(name: str, taken: set[str]) -> str:
    """``name``, or the first ``name_k`` no one has; taken from now on."""
    got, k = name, 0
    while got in taken:
        k += 1
        got = f"{name}_{k}"
    taken.add(got)
    return got


def assemble(region: Region, rest: onnx.ModelProto | None, instances: list[Instances], rest_at: int | None = None,
             ) -> tuple[onnx.ModelProto, list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """The region's whole lowering as ``splice`` takes it: ``rest`` (the lowered sub-model
    of what was not lowered apart) and every group's copies, in an order that makes each
    value before it is read, keeping the model's order where it can; its nodes and the
    copies' value infos apart from its graph (``splice``'s ``nodes`` and ``value_info``).
    ``rest_at``: where the first node of the rest was in the model (else where the region
    began)."""
    lowered = onnx.ModelProto()
    if rest is not None:
        lowered.CopyFrom(rest)
        del lowered.graph.node[:]
        del lowered.graph.input[:]
        del lowered.graph.output[:]
    g = lowered.graph
    rest_nodes = list(rest.graph.node) if rest is not None else []
    # Where each node was in the model: a member's copies where the member began; the
    # rest's nodes where the rest began (a stack's last block lowered in place, or the
    # Identity after it, goes after the copies: no sort has to move it there).
    at = region.nodes[0] if rest_at is None else rest_at
    placed: list[tuple[int, int, int]] = [(at, -1, k) for k in range(len(rest_nodes))]
    infos: list[onnx.ValueInfoProto] = []
    for j, inst in enumerate(instances):
        k = 0
        for first, count in zip(inst.first, inst.counts):
            placed.extend((first, j, i) for i in range(k, k + count))
            k += count
        g.initializer.extend(inst.initializers)
        infos.extend(inst.value_info)
    placed.sort(key=lambda p: p[0])
    nodes = [rest_nodes[i] if j < 0 else instances[j].nodes[i] for _, j, i in placed]
    reads = [reads_of(rest_nodes[i]) if j < 0 else instances[j].reads[i] for _, j, i in placed]
    made = [rest_nodes[i].output[:] if j < 0 else instances[j].made[i] for _, j, i in placed]
    order = topological(nodes, reads=reads, outputs=made)
    if order is None:
        raise AssertionError("the lowered region has a cycle (internal error)")
    g.input.extend(onnx.ValueInfoProto(name=x) for x in region.model_inputs)
    rest_out = {v.name: v for v in rest.graph.output} if rest is not None else {}
    for x in region.outputs:
        v = onnx.ValueInfoProto(name=x)
        if x in rest_out:
            v.CopyFrom(rest_out[x])
        else:
            for inst in instances:
                if x in inst.outputs:
                    v.type.CopyFrom(inst.outputs[x])
                    break
        g.output.append(v)
    return lowered, order, infos
