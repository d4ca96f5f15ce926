"""Walks over a ModelProto that several modules need: every tensor, every value info,
the innermost type, a tensor's byte size. Iterative, so deep nesting is no problem."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

import onnx

__all__ = ["ELEMENT_BYTES", "GENERATED_DIM", "scan_output_of", "canonical_subgraphs", "copy_fields", "data_bytes", "encode_varint",
           "innermost_type", "iter_tensor_protos", "names_dims", "numbered_type", "own_names", "reads_and_names", "shape_dims",
           "strict_graph", "utf8_nodes", "value_infos"]

# How onnx's inference names a dim it cannot infer.
GENERATED_DIM = re.compile(r"unk__\d+")

def scan_output_of(node: onnx.NodeProto, name: str) -> bool:
    """Whether ``name`` is one of the scan outputs of ``node`` (a Loop or a Scan)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Loop", "Scan") or name not in node.output:
        return False
    k = list(node.output).index(name)
    if node.op_type == "Loop":
        return k >= len(node.input) - 2
    scans = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
    return k >= len(node.input) - scans


def iter_tensor_protos(proto: onnx.ModelProto, *, main_initializers: bool = True,
                       main_nodes: Sequence[int] | None = None) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, Constant values, subgraphs, functions
    (``main_initializers=False``: but the main graph's initializers; ``main_nodes``: the
    main graph's nodes to look into, by index, when the others are known to hold no
    attribute).

    Iterative, so thousands of nested subgraphs do not hit Python's recursion limit.
    """
    graphs: list[onnx.GraphProto] = [proto.graph]
    node_lists = [f.node for f in proto.functions]
    main = proto.graph
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            if main_initializers or g is not main:
                yield from g.initializer
            for sp in g.sparse_initializer:
                yield sp.values
                yield sp.indices
            node_lists.append([g.node[i] for i in main_nodes] if g is main and main_nodes is not None else g.node)
            continue
        for node in node_lists.pop():
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)


_PACKED_4BIT = {onnx.TensorProto.INT4, onnx.TensorProto.UINT4, getattr(onnx.TensorProto, "FLOAT4E2M1", -1)}


def _element_bytes() -> dict[int, int]:
    sizes = {}
    for t in onnx.TensorProto.DataType.values():
        if t in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or t in _PACKED_4BIT:
            continue
        try:
            sizes[t] = onnx.helper.tensor_dtype_to_np_dtype(t).itemsize
        except (KeyError, ValueError, TypeError):
            pass
    return sizes


# Bytes per element of each type whose raw data is whole elements.
ELEMENT_BYTES = _element_bytes()


def data_bytes(tensor: onnx.TensorProto) -> int | None:
    """How many bytes a tensor's raw data takes (None: a type without a fixed size)."""
    size = ELEMENT_BYTES.get(tensor.data_type)
    if size is not None:
        return size * math.prod(tensor.dims)
    if tensor.data_type in _PACKED_4BIT:
        return (math.prod(tensor.dims) + 1) // 2
    return None


def innermost_type(tp: onnx.TypeProto) -> onnx.TypeProto:
    """The type inside every sequence and optional of ``tp`` (a tensor, map or sparse
    tensor type, or an empty one)."""
    while True:
        kind = tp.WhichOneof("value")
        if kind == "sequence_type":
            tp = tp.sequence_type.elem_type
        elif kind == "optional_type":
            tp = tp.optional_type.elem_type
        else:
            return tp



def value_infos(proto: onnx.ModelProto) -> Iterator[onnx.ValueInfoProto]:
    graphs = [proto.graph]
    while graphs:
        g = graphs.pop()
        yield from g.input
        yield from g.output
        yield from g.value_info
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
    for f in proto.functions:
        yield from f.value_info


def subgraphs_of(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a node's attributes hold (If's branches, Loop's and Scan's bodies)."""
    attrs = node.attribute
    if not attrs:
        return []
    out: list[onnx.GraphProto] = []
    for attr in attrs:
        if attr.type == onnx.AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def own_names(graphs: Iterable[onnx.GraphProto]) -> list[str]:
    """Every name ``graphs`` and their subgraphs define (inputs, initializers, node
    outputs), in the order of a walk: one namespace with the graph around them."""
    names: list[str] = []
    stack = list(graphs)
    while stack:
        g = stack.pop()
        names.extend(v.name for v in g.input)
        names.extend(t.name for t in g.initializer)
        for n in g.node:
            names.extend(o for o in n.output if o)
            if n.attribute:
                stack.extend(subgraphs_of(n))
    return names


def reads_and_names(node: onnx.NodeProto) -> tuple[set[str], set[str]]:
    """``outer_reads(node)`` and the names its subgraphs define (``own_names``), in one
    walk of its subgraphs."""
    names = {x for x in node.input if x}
    own: set[str] = set()
    if not node.attribute:
        return names, own
    for sub in subgraphs_of(node):
        defined = {v.name for v in sub.input}
        if sub.initializer:
            defined.update([t.name for t in sub.initializer])
        nodes = list(sub.node)
        for n in nodes:
            defined.update(n.output)
        own |= defined
        for n in nodes:
            if n.attribute and subgraphs_of(n):
                reads, inner = reads_and_names(n)
                own |= inner
                names.update(reads.difference(defined))
            else:
                names.update([x for x in n.input if x not in defined])
    names.discard("")
    own.discard("")
    return names, own


def outer_reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads: its inputs and, through its subgraphs, every outer name
    they use."""
    if not node.attribute:
        return {x for x in node.input if x}
    return reads_and_names(node)[0]


def canonical_subgraphs(node: onnx.NodeProto) -> tuple[tuple[Any, ...], list[str], set[str]] | None:
    """What ``node``'s attributes and subgraphs are without their names (a tuple: equal
    for equal subgraphs, and hashable); what the subgraphs read from outside (in the
    order they first read it: what is numbered in it), a subgraph output that names an
    outer value included; and every name they make (``own_names``). The subgraphs' own
    names are numbered too, in the order they are made, and graph and node names go: an
    exporter names each layer's body apart. (A name is its subgraphs' own when any of them
    makes it: a valid model reads a name only where it is in scope.) None: a subgraph
    reads a name before it makes it (nodes out of order), which numbering in one walk
    cannot tell from a name read from outside.

    Read, never written: protobuf's setters cost a copy of the node and a walk to rename."""
    numbering = _Numbering()
    try:
        return numbering.canonical(node), list(numbering.free), set(numbering.made)
    except _ReadBeforeMade:
        return None


class _Numbering:
    """``canonical_subgraphs``' walk: names made numbered ``\0#k`` and names read from
    outside ``\0$k``, in the order they come; the subgraphs met, queued."""

    def __init__(self) -> None:
        self.made: dict[str, str] = {}
        self.free: dict[str, str] = {}
        self.queue: list[onnx.GraphProto] = []

    def read(self, x: str) -> str:
        if not x:
            return ""
        token = self.made.get(x)
        if token is None:
            token = self.free.get(x)
            if token is None:
                token = self.free[x] = f"\0${len(self.free)}"
        return token

    def make(self, x: str) -> str:
        if not x:
            return ""
        if x in self.free:
            raise _ReadBeforeMade
        token = self.made[x] = f"\0#{len(self.made)}"
        return token

    def attributes(self, n: onnx.NodeProto) -> tuple[Any, ...]:
        out: list[Any] = []
        queue = self.queue
        for a in n.attribute:
            if a.type == _GRAPH:
                out.append((a.name, len(queue)))
                queue.append(a.g)
            elif a.type == _GRAPHS:
                out.append((a.name, tuple(range(len(queue), len(queue) + len(a.graphs)))))
                queue.extend(a.graphs)
            else:
                out.append(a.SerializeToString())
        return tuple(out)

    def canonical(self, node: onnx.NodeProto) -> tuple[Any, ...]:
        parts: list[Any] = [self.attributes(node)]
        k = 0
        while k < len(self.queue):
            parts.extend(self.graph(self.queue[k]))
            k += 1
        return tuple(parts)

    def graph(self, g: onnx.GraphProto) -> list[Any]:
        # (each entry tagged with what it is: the tuple says it all alone)
        read, make, made = self.read, self.make, self.made
        parts: list[Any] = [("i", *[(make(v.name), v.type.SerializeToString(deterministic=True)) for v in g.input])]
        for t in g.initializer:
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = ""
            parts.append(("t", make(t.name), c.SerializeToString(deterministic=True)))
        if g.sparse_initializer:
            parts.append(("s", g.SerializeToString()))
        for m in g.node:
            ins = tuple([read(x) for x in m.input])
            parts.append(("n", m.op_type, m.domain, m.overload, m.doc_string, ins,
                          tuple([make(o) for o in m.output]), self.attributes(m) if m.attribute else ()))
        parts.append(("o", *[(read(v.name), v.type.SerializeToString(deterministic=True)) for v in g.output]))
        # A value info of a name the graph neither makes nor reads keeps its name.
        if g.value_info:
            parts.append(("v", *[(made.get(v.name, v.name), v.type.SerializeToString(deterministic=True))
                                 for v in g.value_info]))
        return parts


_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


class _ReadBeforeMade(Exception):
    pass


def shape_dims(tp: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension]:
    tp = innermost_type(tp)
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return []
    return list(tp.tensor_type.shape.dim)


def names_dims(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` (inside its sequences and optionals) names a dim."""
    return any(d.dim_param for d in shape_dims(tp))


def numbered_type(tp: onnx.TypeProto, symbols: dict[str, str]) -> bytes:
    """``tp`` serialized with each dim name replaced by its number in ``symbols`` (new
    names numbered as they come). A name onnx made up (``unk__k``) is numbered apart from
    the model's own: the lowering takes the one for unknown and the other for a dim."""
    if not names_dims(tp):
        return tp.SerializeToString(deterministic=True)
    c = onnx.TypeProto()
    c.CopyFrom(tp)
    for d in shape_dims(c):
        if d.dim_param:
            kind = "u" if GENERATED_DIM.fullmatch(d.dim_param) else "n"
            d.dim_param = symbols.setdefault(d.dim_param, f"\0{kind}{len(symbols)}")
    return c.SerializeToString(deterministic=True)


_M = TypeVar("_M", bound=Message)


def copy_fields(dst: _M, src: Message, skip: Iterable[str] = ()) -> _M:
    """Copy every set field of ``src`` but those named in ``skip`` into ``dst`` (a model
    without its graph, a graph without its nodes: no copy of what is rebuilt)."""
    skip = set(skip)
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        # protobuf 5 deprecates ``label`` for ``is_repeated``.
        if field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED:
            getattr(dst, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
    return dst


_ONE_BYTE = [bytes((b,)) for b in range(0x80)]


def encode_varint(value: int) -> bytes:
    """A protobuf varint."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STRICT_GRAPH: type | None = None


def strict_graph() -> type:
    """onnx's GraphProto as a proto3 message: upb refuses a proto3 string field that is not
    UTF-8 while it parses, so parsing the nodes' bytes checks all their text in C."""
    global _STRICT_GRAPH
    if _STRICT_GRAPH is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fdp = descriptor_pb2.FileDescriptorProto()
        onnx.onnx_ml_pb2.DESCRIPTOR.CopyToProto(fdp)
        fdp.name, fdp.package, fdp.syntax = "seqlower_strict_onnx.proto", "seqlower_strict_onnx", "proto3"
        stack = list(fdp.message_type)
        while stack:
            m = stack.pop()
            m.ClearField("extension_range")
            stack.extend(m.nested_type)
            for f in m.field:
                f.ClearField("default_value")
                f.ClearField("options")
                if f.type_name.startswith(".onnx."):
                    f.type_name = ".seqlower_strict_onnx." + f.type_name[len(".onnx."):]
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        _STRICT_GRAPH = message_factory.GetMessageClass(pool.FindMessageTypeByName("seqlower_strict_onnx.GraphProto"))
    return _STRICT_GRAPH


def utf8_nodes(nodes: Iterable[onnx.NodeProto]) -> bool:
    """Whether every string field of ``nodes`` (their subgraphs' included) is UTF-8 text.
    False: some may not be (look field by field to say which)."""
    from google.protobuf.message import DecodeError

    parts = []
    for n in nodes:
        data = n.SerializeToString()
        parts += (b"\x0a" + encode_varint(len(data)), data)  # GraphProto.node: field 1, length-delimited
    try:
        strict_graph().FromString(b"".join(parts))
    except DecodeError:
        return False
    return True
