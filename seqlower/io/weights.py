"""The main graph's weights held out of the parsed model (DESIGN.md, "Core v2": Regions).

Reading a model for ``lower`` parses everything but the main graph's initializers over
``HELD_BYTES``: each of those is parsed alone once (for its type, shape and the reader's
checks) and stands in the ModelProto as a *stub*, a reference to external data at
``PLACEHOLDER`` with the weight's name, type and shape, which is a valid ONNX tensor. So
every check, walk and pass that looks at the graph sees the same names, types and shapes,
and nothing can read a stub's data by mistake (its file does not exist). The writer puts
each weight's bytes, as they were in the file, back in place of its stub: weights are
never parsed into the graph, converted or serialized again, which is most of what reading
and writing a big model costs.

The protobuf wire format is read here directly (tags, varints, length-delimited spans),
and only at the two levels that hold the weights: the model's ``graph`` field and the
graph's ``initializer`` entries.
"""

from __future__ import annotations

import bisect
import math
import mmap
from typing import Any
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx
from google.protobuf.message import DecodeError

from seqlower.io.protos import ELEMENT_BYTES, encode_varint, strict_graph

__all__ = ["HELD_BYTES", "PLACEHOLDER", "Held", "Weights", "hold_weights", "is_stub"]

# The stand-in location of what is not at hand: a stub's, and the checker's placeholder file.
PLACEHOLDER = "seqlower.placeholder"
# Initializers whose serialized size passes this are held; smaller ones (shapes, axes,
# split sizes, positions: what the folds and shape inference read) are parsed as usual.
HELD_BYTES = 1024

_GRAPH = 7  # ModelProto.graph
_NODE = 1  # GraphProto.node
_INITIALIZER = 5  # GraphProto.initializer
_INPUT = 11  # GraphProto.input
_LEN = 2  # wire type of length-delimited fields


class _Malformed(Exception):
    """The bytes are not what the fast path reads; the caller parses the usual way."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(buf) or shift > 63:
            raise _Malformed
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, entry start, payload start, payload end) of each length-delimited
    field in ``buf[start:end]``; other fields are skipped (groups are refused). One tag
    byte and one length byte, the common case, are read inline (60,000 fields a big
    graph: the general varint costs twice as much)."""
    out = []
    append = out.append
    i = start
    while i < end:
        entry = i
        tag = buf[i]
        i += 1
        if tag >= 0x80:
            tag, i = _varint(buf, entry)
        wire = tag & 7
        if wire == _LEN:
            length = buf[i] if i < end else 0x80
            if length < 0x80:
                i += 1
            else:
                length, i = _varint(buf, i)
            if i + length > end:
                raise _Malformed
            append((tag >> 3, entry, i, i + length))
            i += length
        elif wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise _Malformed
    if i != end:
        raise _Malformed
    return out


def _entry(number: int, payload: bytes) -> bytes:
    n = len(payload)
    return encode_varint(number << 3 | _LEN) + encode_varint(n) + payload


def _varint_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3) + encode_varint(value)


def is_stub(tensor: onnx.TensorProto) -> bool:
    return (tensor.data_location == onnx.TensorProto.EXTERNAL and len(tensor.external_data) > 0
            and tensor.external_data[0].value == PLACEHOLDER)


# A stub's fields after its name (TensorProto.external_data = 13, data_location = 14).
_STUB_TAIL = (_entry(13, onnx.StringStringEntryProto(key="location", value=PLACEHOLDER).SerializeToString())
              + _varint_field(14, onnx.TensorProto.EXTERNAL))


def _shape_bytes(data_type: int, dims: tuple[int, ...]) -> tuple[bytes, bytes]:
    """A stub's fields before its name (dims = 1, data_type = 2) and a graph input's
    type field of that type and shape (ValueInfoProto.type = 2)."""
    stub = b"".join(_varint_field(1, d) for d in dims) + _varint_field(2, data_type)  # (dims checked: not negative)
    tp = onnx.TypeProto()
    tp.tensor_type.elem_type = data_type
    shape = tp.tensor_type.shape
    for d in dims:
        shape.dim.add().dim_value = d
    return stub, _entry(2, tp.SerializeToString())


@dataclass
class Weights:
    """The held weights of one model file: where each one's TensorProto is in ``data``."""

    data: bytes | mmap.mmap
    # name -> where its initializer entry starts, and its TensorProto's span
    spans: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # name -> its stub's initializer entry (tag, length, TensorProto), in the graph's order
    stubs: dict[str, bytes] = field(default_factory=dict)

    def unmapped(self) -> None:
        """Give the pages of a mapped file back until they are read again (its bytes were
        read to parse and check the model; the writer reads them again from the page
        cache). A model's weights then do not count twice in the process's memory."""
        if isinstance(self.data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            self.data.madvise(mmap.MADV_DONTNEED)

    def held_bytes(self, names: list[str] | None = None) -> int:
        """How many bytes of weights are held out of the proto (of ``names`` only)."""
        spans = self.spans.values() if names is None else [self.spans[n] for n in names if n in self.spans]
        return sum(end - start for _, start, end in spans)

    def tensor(self, name: str) -> onnx.TensorProto:
        """The weight itself, parsed (a copy)."""
        _, start, end = self.spans[name]
        return onnx.TensorProto.FromString(memoryview(self.data)[start:end])

    def restore(self, proto: onnx.ModelProto) -> None:
        """Put every held weight back into ``proto``'s main graph in place of its stub (for
        the passes that convert the whole model)."""
        view = memoryview(self.data)
        for t in proto.graph.initializer:
            if is_stub(t) and t.name in self.spans:
                _, start, end = self.spans[t.name]
                t.ParseFromString(view[start:end])

    def serialized(self, proto: onnx.ModelProto) -> list[bytes | memoryview]:
        """``proto`` serialized (deterministically), each stub replaced by its weight's
        bytes from the file: pieces to write one after another.

        A stub serializes to the bytes it was made of (its fields are in protobuf's order),
        and they hold ``PLACEHOLDER``, which the file did not (``hold_weights`` saw to it):
        so each stub's entry is found by a byte search, in the order the stubs were made
        (the graph's initializers keep their order; a dropped one is not found), and the
        written pieces must hold no placeholder."""
        raw = proto.SerializeToString(deterministic=True)
        out, view = memoryview(raw), memoryview(self.data)
        try:
            graph = [f for f in _fields(raw, 0, len(raw)) if f[0] == _GRAPH]
        except _Malformed:
            graph = []
        if len(graph) != 1:
            raise AssertionError("seqlower's own serialization did not read back (internal error)")
        _, g_entry, g_start, g_end = graph[0]
        # The weights' entries are copied as the file has them, runs of neighbours at once.
        pieces: list[bytes | memoryview] = []
        kept = [(0, g_entry), (g_end, len(raw))]  # what of ``raw`` is written
        at = g_start
        run: list[int] = []  # [start, end] in the file of the run being gathered
        for name, stub in self.stubs.items():
            entry = raw.find(stub, at, g_end)
            if entry < 0:
                continue
            w_entry, _, w_end = self.spans[name]
            if run and at == entry and run[1] == w_entry:
                run[1] = w_end
            else:
                if run:
                    pieces.append(view[run[0]:run[1]])
                pieces.append(out[at:entry])
                kept.append((at, entry))
                run = [w_entry, w_end]
            at = entry + len(stub)
        if run:
            pieces.append(view[run[0]:run[1]])
        pieces.append(out[at:g_end])
        kept.append((at, g_end))
        mark = PLACEHOLDER.encode()
        if any(raw.find(mark, a, b) >= 0 for a, b in kept):
            raise AssertionError("a held weight's stub lost its place in the graph (internal error)")
        size = sum(len(p) for p in pieces)
        return [out[:g_entry], encode_varint(_GRAPH << 3 | _LEN) + encode_varint(size), *pieces, out[g_end:]]


@dataclass
class Held:
    """A model read with its weights held; every main-graph initializer, held or not, was
    checked as it was read."""

    proto: onnx.ModelProto  # the model, each held weight a stub
    skeleton: onnx.ModelProto  # the model, each held weight a typed graph input (no stubs)
    weights: Weights
    # Main-graph nodes whose every string is UTF-8 text, read off their bytes: a node
    # without attributes has tags under 0x80 (its fields are numbered 1 to 10) and lengths
    # whose last byte is under 0x80 around its strings' bytes (a longer length makes the
    # test fail, never pass wrongly), so its bytes decode as UTF-8 exactly when its
    # strings do. Nodes that may have attributes (``attributed``) are plain when they
    # parse as a proto3 message, which upb refuses where a string is not UTF-8.
    plain_nodes: set[int]
    # Main-graph nodes that may have attributes or be a Constant (their bytes hold an
    # attribute's tag, b"*", or b"Constant"): every other node has neither, and the checks
    # that look at attributes pass over it. None: every node may.
    attributed: list[int] | None = None
    # Main-graph nodes that may hold a tensor whose data is external: their bytes hold
    # TensorProto.data_location = EXTERNAL (field 14, 1: b"\x70\x01"), which every such
    # tensor has. None: every node may.
    external: list[int] | None = None

    def nodes_moved(self) -> None:
        """The main graph's nodes were reordered (sorted): what was read off them by index
        no longer holds."""
        self.plain_nodes = set()
        self.attributed = None
        self.external = None


def hold_weights(data: bytes | mmap.mmap, check_tensor: Callable[[onnx.TensorProto], None]) -> Held | None:
    """Parse a serialized model with its big main-graph initializers held (see the module's
    doc): ``data``, the file's bytes, or the file mapped (the weights are then read from
    the page cache when written, and take no memory of the process meanwhile: see
    ``Weights.unmapped``). ``check_tensor(t)`` checks an initializer that is not plain,
    parsed. None when nothing is big enough to hold, or the bytes are not laid out the way
    this reads them (the graph field repeated, groups, external or segmented weights); the
    caller then parses them whole."""
    view = memoryview(data)
    if data.find(PLACEHOLDER.encode()) >= 0:
        return None  # (the writer finds stubs by their placeholder)
    try:
        graph = [f for f in _fields(data, 0, len(data)) if f[0] == _GRAPH]
        if len(graph) != 1:
            return None
        _, g_entry, g_start, g_end = graph[0]
        weights = Weights(data)
        light: list[bytes | memoryview] = []
        skel: list[bytes | memoryview] = []
        inputs: list[bytes] = []
        at = g_start
        shapes: dict[tuple[int, tuple[int, ...]], tuple[bytes, bytes]] = {}
        node_spans: list[tuple[int, int, int]] = []
        for number, entry, start, end in _fields(data, g_start, g_end):
            if number == _NODE:
                node_spans.append((entry, start, end))
                continue
            if number != _INITIALIZER:
                continue
            name, data_type, dims = _initializer_head(data, view, start, end, check_tensor)
            if name in weights.spans:
                return None
            if end - start <= HELD_BYTES:
                continue
            weights.spans[name] = (entry, start, end)
            key = (data_type, tuple(dims))
            if key not in shapes:
                shapes[key] = _shape_bytes(*key)
            stub, graph_input = _stub(name, *shapes[key])
            skel.append(view[at:entry])
            inputs.append(graph_input)
            weights.stubs[name] = stub
            light += [view[at:entry], stub]
            at = end
        if not weights.spans:
            return None
        plain, attributed, external = _read_nodes(data, node_spans)
        light.append(view[at:g_end])
        skel.append(view[at:g_end])
    except _Malformed:
        return None
    proto = _parse_with_graph(view[:g_entry], light, view[g_end:])
    declared = {v.name for v in proto.graph.input}
    # Weights that are graph inputs too (IR < 4) are typed there already.
    skel += [e for e, name in zip(inputs, weights.spans) if name not in declared]
    skeleton = _parse_with_graph(view[:g_entry], skel, view[g_end:])
    return Held(proto, skeleton, weights, plain, attributed, external)


def _initializer_head(data: bytes | mmap.mmap, view: memoryview, start: int, end: int,
                      check_tensor: Callable[[onnx.TensorProto], None]) -> tuple[str, int, Any]:
    """(name, element type, dims) of the main-graph initializer at ``data[start:end]``,
    checked here, once: the model's own checks then pass over it. A plain one (dims, type,
    name, raw data, in protobuf's order: tens of thousands a big model) is read and checked
    off its header bytes; any other is parsed and checked as a message. An external or
    segmented one is not held (``_Malformed``): the reader's own checks and messages apply."""
    header = _plain_tensor(data, start, end)
    if header is not None:
        return header
    t = onnx.TensorProto.FromString(view[start:end])
    if t.data_location == onnx.TensorProto.EXTERNAL or t.HasField("segment"):
        raise _Malformed
    check_tensor(t)
    return t.name, t.data_type, t.dims


def _stub(name: str, stub_head: bytes, type_entry: bytes) -> tuple[bytes, bytes]:
    """A held weight's stub initializer and its graph input, as protobuf entries of the
    graph (by hand: protobuf's messages cost 10 us a weight, a third of a second on a
    40k-node model)."""
    name_entry = _entry(8, name.encode())
    return (_entry(_INITIALIZER, stub_head + name_entry + _STUB_TAIL),
            _entry(_INPUT, b"\x0a" + name_entry[1:] + type_entry))


def _plain_tensor(data: bytes | mmap.mmap, start: int, end: int) -> tuple[str, int, list[int]] | None:
    """(name, element type, dims) of the TensorProto at ``data[start:end]`` when it is
    dims (1), data_type (2), name (8) and raw_data (9) in that order, the raw data as long
    as the type and dims say, the name UTF-8 text and the dims not negative: what a
    message read would check. None for anything else (the caller reads it as a message)."""
    # (A one-byte varint read inline: 20,000 weights of a big model, four varints each.)
    i, dims = start, []
    while i + 1 < end and data[i] == 0x08:
        d = data[i + 1]
        if d < 0x80:
            i += 2
        else:
            d, i = _varint(data, i + 1)
            if d >= 1 << 63:
                return None  # a negative dim
        dims.append(d)
    if i + 1 >= end or data[i] != 0x10:
        return None
    data_type = data[i + 1]
    if data_type < 0x80:
        i += 2
    else:
        data_type, i = _varint(data, i + 1)
    if i + 1 >= end or data[i] != 0x42:
        return None
    length = data[i + 1]
    if length < 0x80:
        i += 2
    else:
        length, i = _varint(data, i + 1)
    try:
        name = str(memoryview(data)[i:i + length], "utf-8")
    except UnicodeDecodeError:
        return None
    i += length
    if i >= end or data[i] != 0x4A:
        return None
    length, i = _varint(data, i + 1)
    size = ELEMENT_BYTES.get(data_type)
    if i + length != end or size is None or length != size * math.prod(dims):
        return None
    return name, data_type, dims


def _read_nodes(data: bytes | mmap.mmap, spans: list[tuple[int, int, int]]) -> tuple[set[int], list[int], list[int]]:
    """``Held.plain_nodes``, ``Held.attributed`` and ``Held.external`` of the node entries at
    ``spans`` (entry start, payload start, payload end). The nodes of a graph are one block
    of bytes in the files exporters and onnx write: read as one block then (one strict
    parse, one search per marker), node by node where that parse fails or they are not."""
    if not spans:
        return set(), [], []
    first, last = spans[0][0], spans[-1][2]
    starts = [entry for entry, _, _ in spans]

    def marked(*marks: bytes) -> set[int]:
        """The nodes whose bytes hold one of ``marks``, as node indices."""
        found: set[int] = set()
        for mark in marks:
            i = data.find(mark, first, last)
            while i >= 0:
                k = bisect.bisect_right(starts, i) - 1
                if i < spans[k][2]:
                    found.add(k)
                    i = data.find(mark, spans[k][2], last)
                else:  # between two node entries (the nodes are not one block)
                    i = data.find(mark, i + 1, last)
        return found

    attributed = marked(b"*", b"Constant")
    # A node with an attribute is never plain: an attribute's type field (20) takes a tag
    # byte over 0x7F, which could complete a string's broken last character.
    contiguous = all(spans[k + 1][0] == spans[k][2] for k in range(len(spans) - 1))
    view = memoryview(data)
    external = sorted(marked(b"\x70\x01") & attributed)
    if contiguous:
        # Every node read as one strict message in C (a graph's node field is field 1, as
        # theirs is in the file): upb refuses a proto3 string that is not UTF-8 text.
        try:
            strict_graph().FromString(view[first:last])
            return set(range(len(spans))), sorted(attributed), external
        except DecodeError:
            pass  # some node's text is not: which, node by node
    plain: set[int] = set()
    for k, (_, start, end) in enumerate(spans):
        if k in attributed:
            continue  # (never plain by this test: see below)
        try:
            str(view[start:end], "utf-8")
            plain.add(k)
        except UnicodeDecodeError:
            pass
    if attributed:
        # The rest read as one strict message in C, their entries as they are (a graph's
        # node field is field 1, as theirs is in the file): text throughout, or looked at
        # field by field later (``model_check``), which says where it is not.
        try:
            strict_graph().FromString(b"".join([view[spans[k][0]:spans[k][2]] for k in sorted(attributed)]))
            plain |= attributed
        except DecodeError:
            pass
    return plain, sorted(attributed), external


def _parse_with_graph(before: memoryview, graph: list[bytes | memoryview], after: memoryview) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(b"".join([before, _entry(_GRAPH, b"".join(graph)), after]))
