"""Webs that repeat (DESIGN.md, "Core v2": Regions): lowered once, copied under new names
(``seqlower.fastpath.copies``).

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

import numpy as np
import onnx

from seqlower import ops
from seqlower.errors import describe_node
from seqlower.io.protos import (canonical_subgraphs, names_dims, numbered_type, shape_dims)
from seqlower.fastpath.regions import CARRIERS, DEFAULT_DOMAINS, NUMBER_TYPES, Found
from seqlower.fastpath.submodel import constant_value, full_type, small_constant
from seqlower.io.weights import Weights, is_stub

__all__ = ["Member", "Group", "Plan", "fits", "renamed", "symbol_names", "MIN_MEMBERS"]

# A group is lowered apart when it has at least this many members: lowering a template
# costs a pass pipeline of its own (tens of milliseconds), which a few members lowered in
# place cost as well.
MIN_MEMBERS = 4

# Ops whose outputs may be sequences (or optionals, maps): the values that join a component.
# Ops whose output has their inputs' element type and the broadcast of their dims.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Neg", "Abs", "Tanh", "Sigmoid", "Exp",
                          "Identity"})
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
        self._static_types: dict[str, onnx.TypeProto] = {}

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

    def _static_type(self, x: str, known: Mapping[str, onnx.TypeProto], depth: int = 0) -> onnx.TypeProto | None:
        """``x``'s type where it is static and needs no whole-model inference: lowered
        (``known``), declared, an initializer's, or made outside the members by an
        elementwise op of such values (the broadcast of their dims, as onnx's inference
        gives it). A stack's blocks joined by a residual Add read the Add's output: typed
        so, the keys do not wait for the whole model's deferred inference (0.7 s of a
        10,000-node chain's 1.8 s)."""
        tp = known[x] if x in known else self.types.get(x)
        if tp is not None:
            return tp if tp.WhichOneof("value") == "tensor_type" and _static(tp) else None
        k = self.initializers.get(x)
        if k is not None:
            t = self.found.model.graph.initializer[k]
            return onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        if x in self._static_types or depth > 64:
            return self._static_types.get(x)
        i = self.found.index.producer.get(x)
        if i is None:
            return None
        op, domain, attributed = self.found.kinds[i]
        if op not in _ELEMENTWISE or domain not in DEFAULT_DOMAINS or attributed:
            return None
        types = [self._static_type(v, known, depth + 1) if v else None for v in self.found.nodes[i].input]
        if not types or any(tp is None for tp in types) \
                or len({tp.tensor_type.elem_type for tp in types}) != 1:  # type: ignore[union-attr]
            return None
        try:
            dims = np.broadcast_shapes(*(tuple(d.dim_value for d in tp.tensor_type.shape.dim) for tp in types))  # type: ignore[union-attr]
        except ValueError:
            return None
        self._static_types[x] = onnx.helper.make_tensor_type_proto(types[0].tensor_type.elem_type, list(dims))  # type: ignore[union-attr]
        return self._static_types[x]

    def _input(self, x: str, comp: set[int], known: dict[str, onnx.TypeProto] | None,
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
        tp = known[x] if known is not None and x in known else None
        if tp is None and known is not None and not full_type(self.types.get(x)):
            tp = self._static_type(x, known)
            if tp is not None:
                # (``build`` types the template's input with it, as it types the rest)
                known[x] = tp
        if tp is None:
            tp = self._type(x)
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

    def key(self, m: Member, known: dict[str, onnx.TypeProto] | None = None) -> bytes | None:
        """The member's key; see ``_input`` for ``known``. With ``known``, the dim names of
        what it reads and declares are numbered in the order they come (a layer's input
        named ``unk__7`` where the last one's was ``unk__5`` is the same): ``m.symbols``.
        The static types it derives for what it reads (``_static_type``) go into ``known``,
        so the template's sub-model is typed by them too."""
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


def renamed(tp: onnx.TypeProto, names: Mapping[str, str], suffix: str) -> onnx.TypeProto:
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
        names, suffix = symbol_names(group, len(group.members) - 1)
        outputs = self._outputs.get(id(lowered))
        if outputs is None:
            outputs = self._outputs[id(lowered)] = [(v.type, names_dims(v.type)) for v in lowered.graph.output]
        for o, (tp, named) in zip(m.outputs, outputs):
            self.known[o] = renamed(tp, names, suffix) if named else tp


def fits(m: Member, lowered: onnx.ModelProto) -> bool:
    """Whether a member's lowering can be a template: it makes each output with a node
    and declares them in the member's order."""
    lg = lowered.graph
    return [v.name for v in lg.output] == m.outputs and set(m.outputs) <= {o for n in lg.node for o in n.output}


def symbol_names(group: Group, j: int) -> tuple[dict[str, str], str]:
    """How member ``j``'s copy names the template's dims: its own names for those the keys
    paired, and a suffix for the others (none for the template itself)."""
    if j == 0:
        return {}, ""
    rep, m = group.members[0], group.members[j]
    return dict(zip(rep.symbols, m.symbols)), f"_{j}"
