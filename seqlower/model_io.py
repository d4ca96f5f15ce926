"""Reading and writing models safely.

Reading refuses anything that is not a well-formed ONNX model and any external-data
location that would leave the model's folder (absolute paths, ``..``, symlinks that
point out): the class of onnx's CVE-2022-25882 and CVE-2024-27318. Writing is atomic: a
temporary file in the destination folder is renamed over the destination only once it
is complete, so a failed or interrupted write never leaves half a model behind.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from seqlower.errors import ModelError, ModelWarning, describe_node

__all__ = [
    "ModelSource",
    "read_model_proto",
    "load_model",
    "save_model",
    "stage_model",
    "StagedModel",
    "check_model",
    "weightless_proto",
    "to_proto",
    "from_proto",
    "innermost_type",
    "PROTOBUF_LIMIT",
]

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike | bytes | onnx.ModelProto

# Protobuf refuses messages of 2 GiB; leave room for the graph around the weights.
PROTOBUF_LIMIT = 2**31 - 2**24


def _label(source: ModelSource) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return "<model bytes>" if isinstance(source, bytes) else "<model>"


def iter_tensor_protos(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, Constant values, subgraphs, functions.

    Iterative, so thousands of nested subgraphs do not hit Python's recursion limit.
    """
    graphs: list[onnx.GraphProto] = [proto.graph]
    node_lists = [f.node for f in proto.functions]
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            yield from g.initializer
            for sp in g.sparse_initializer:
                yield sp.values
                yield sp.indices
            node_lists.append(g.node)
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


def _check_external_data(proto: onnx.ModelProto, base_dir: str | None, label: str) -> None:
    base_real = os.path.realpath(base_dir) if base_dir is not None else None
    for tensor in iter_tensor_protos(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"{label}: tensor {tensor.name!r}"
        if base_real is None:
            raise ModelError(f"{where} keeps its data in external file {location!r}; load the model from its file path")
        if not location:
            raise ModelError(f"{where} uses external data without a location")
        if os.path.isabs(location) or Path(location).drive:
            raise ModelError(f"{where}: external data location {location!r} is absolute; refused")
        target = os.path.realpath(os.path.join(base_real, location))
        if os.path.commonpath([base_real, target]) != base_real:
            raise ModelError(f"{where}: external data location {location!r} is outside the model's folder; refused")
        if not os.path.isfile(target):
            raise ModelError(f"{where}: external data file {location!r} is missing")
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError as e:
            raise ModelError(f"{where}: bad external data offset/length ({e})") from None
        size = os.path.getsize(target)
        if offset < 0 or (length is not None and (length < 0 or offset + length > size)) or offset > size:
            raise ModelError(
                f"{where}: external data file {location!r} is truncated "
                f"(needs bytes {offset}..{offset + (length or 0)}, file has {size})"
            )
        need = _data_bytes(tensor)
        if need is not None and length is not None and length != need:
            raise ModelError(f"{where}: external data length {length} does not fit its shape {list(tensor.dims)} ({need} bytes)")
        if need is not None and offset + need > size:
            raise ModelError(
                f"{where}: external data file {location!r} is truncated "
                f"(the tensor needs bytes {offset}..{offset + need}, file has {size})"
            )


_PACKED_4BIT = {onnx.TensorProto.INT4, onnx.TensorProto.UINT4, getattr(onnx.TensorProto, "FLOAT4E2M1", -1)}


def _data_bytes(tensor: onnx.TensorProto) -> int | None:
    """How many bytes a tensor's raw data takes (None: a type without a fixed size)."""
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    count = math.prod(tensor.dims)
    if tensor.data_type in _PACKED_4BIT:
        return (count + 1) // 2
    try:
        return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None


def read_model_proto(
    source: ModelSource, *, load_external_data: bool = True, check: bool = True
) -> onnx.ModelProto:
    """Parse and validate a model from a path, bytes or a ModelProto (which is copied).

    Raises:
        ModelError: one line naming the file, for anything unreadable or invalid.
    """
    label = _label(source)
    base_dir: str | None = None
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
    else:
        if isinstance(source, bytes):
            data = source
        else:
            path = Path(source)
            if not path.exists():
                raise ModelError(f"{label}: no such file")
            if path.is_dir():
                raise ModelError(f"{label}: is a folder, not a model file")
            try:
                data = path.read_bytes()
            except OSError as e:
                raise ModelError(f"{label}: cannot read ({e.strerror})") from None
            base_dir = str(path.parent)
        if not data:
            raise ModelError(f"{label}: empty file, not an ONNX model")
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "MaxDepth" in first:
                raise ModelError(f"{label}: nested too deeply to read (protobuf reads 100 message levels: about 30"
                                 " levels of subgraphs)") from None
            raise ModelError(f"{label}: not an ONNX model (protobuf parse failed: {first})") from None
    if not proto.HasField("graph"):
        raise ModelError(f"{label}: not an ONNX model (no graph)")
    if proto.ir_version <= 0:
        raise ModelError(f"{label}: not an ONNX model (no IR version)")
    _check_external_data(proto, base_dir, label)
    if check:
        for warning in _run_checker(proto, label, base_dir):
            warnings.warn(ModelWarning(warning), stacklevel=2)
        _check_structure(proto, label)
        _check_types(proto, label)
    if load_external_data and base_dir is not None:
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
        except (OSError, ValueError) as e:
            raise ModelError(f"{label}: cannot load external data ({e})") from None
    return proto


# Checker complaints onnxruntime does not share: exporters (tf2onnx) write graph inputs
# and outputs without a shape when they do not know the rank, and onnxruntime runs them;
# onnxruntime sorts nodes that are out of order (hand-edited and merged graphs).
_SHAPELESS = re.compile(r"Field 'shape' of 'type' is required but missing")
_UNSORTED = re.compile(r"Nodes in a graph must be topologically sorted")

# External tensors up to this size are read for the checker: shape inference reads
# constant shapes, axes and sizes, which are small. Larger ones are weights; the checker
# gets them with empty data (it does not size raw data, and inference never reads them).
_CHECK_READS_BYTES = 1 << 20


def _first_line(e: BaseException) -> str:
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)


def _run_checker(proto: onnx.ModelProto, label: str, base_dir: str | None, *, full: bool = False,
                 what: str = "invalid model") -> list[str]:
    """onnx's checker (and with ``full`` its strict shape inference) with external data
    resolved against ``base_dir``, whatever the working directory, and without reading
    weights (see ``_weights_as_placeholders``).

    Returns the warnings for what is accepted although the checker refuses it.
    Raises ModelError for anything else.
    """
    found: list[str] = []
    with _weights_as_placeholders(proto, base_dir) as check:
        try:
            try:
                check(proto, full)
                return found
            except onnx.checker.ValidationError as e:
                first = _first_line(e)
                if _UNSORTED.search(first):
                    cycle = sort_nodes(proto)
                    if cycle:
                        raise ModelError(f"{label}: {what}: the graph has a cycle through {cycle} (its nodes "
                                         "cannot be topologically sorted)") from None
                    found.append(f"{label}: nodes are not in topological order; accepted, as onnxruntime does "
                                 "(sorted)")
                elif not _SHAPELESS.search(first):
                    raise
            shapeless = _shapeless_boundary(proto)
            if shapeless:
                found.append(f"{label}: graph {'inputs/outputs' if len(shapeless) > 1 else 'input/output'} "
                             f"{', '.join(repr(v.name) for v in shapeless)} declare no shape (rank unknown); "
                             "accepted, as onnxruntime does")
            # Again, without what was accepted: the checker stops at its first complaint.
            with _placeholder_shapes(shapeless):
                check(proto, full and not shapeless)
            if full and shapeless:
                onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise ModelError(f"{label}: {what}: {_first_line(e)}") from None
        except ValueError as e:  # protobuf size limits
            raise ModelError(f"{label}: {what}: {str(e).splitlines()[0]}") from None
    return found


def sort_nodes(proto: onnx.ModelProto) -> str | None:
    """Put the nodes of every graph, subgraph and function in topological order, in
    place, keeping the given order wherever it already works (a node that reads an
    outer value inside its subgraph depends on that value's producer). Returns the
    label of a node on a cycle, and then changes nothing."""
    graphs: list[Any] = [proto.graph, *proto.functions]
    orders: list[tuple[Any, list[onnx.NodeProto]]] = []
    while graphs:
        g = graphs.pop()
        nodes = list(g.node)
        produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        deps = [{produced[x] for x in _reads(n) if produced.get(x, i) != i} for i, n in enumerate(nodes)]
        users: list[list[int]] = [[] for _ in nodes]
        for i, d in enumerate(deps):
            for j in d:
                users[j].append(i)
        waiting = [len(d) for d in deps]
        ready = [i for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) < len(nodes):
            stuck = next(n for i, n in enumerate(nodes) if waiting[i])
            return describe_node(stuck.op_type, stuck.name, list(stuck.output))
        orders.append((g, [nodes[i] for i in order]))
        for n in nodes:
            for attr in n.attribute:
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
    for g, ordered in orders:
        if list(g.node) != ordered:
            copies = [onnx.NodeProto() for _ in ordered]
            for c, n in zip(copies, ordered):
                c.CopyFrom(n)
            del g.node[:]
            g.node.extend(copies)
    return None


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads: its inputs and, through its subgraphs, every outer name
    they use."""
    names = {x for x in node.input if x}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            defined = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            defined |= {o for n in sub.node for o in n.output}
            for n in sub.node:
                names |= _reads(n) - defined
    return names


def _shapeless_boundary(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for v in (*proto.graph.input, *proto.graph.output)
            if v.type.WhichOneof("value") == "tensor_type" and not v.type.tensor_type.HasField("shape")]


@contextlib.contextmanager
def _placeholder_shapes(values: list[onnx.ValueInfoProto]) -> Iterator[None]:
    """For the plain checker only (it looks at the presence of a shape, not at it)."""
    for v in values:
        v.type.tensor_type.shape.SetInParent()
    try:
        yield
    finally:
        for v in values:
            v.type.tensor_type.ClearField("shape")


_PLACEHOLDER = "seqlower.placeholder"


@contextlib.contextmanager
def _weights_as_placeholders(proto: onnx.ModelProto, base_dir: str | None) -> Iterator[Callable[[onnx.ModelProto, bool], None]]:
    """Yields a checker for ``proto`` that reads no weights and needs no file of the
    model's: for the duration, small external tensors are made inline with their data
    (shape inference reads constant shapes, axes and sizes), and every other external
    tensor points into one sparse placeholder file in a temporary folder, where the
    checker (which resolves locations against the working directory in memory, and
    wants the bytes to exist) is then run by path. Restored afterwards."""
    saved: list[tuple[onnx.TensorProto, list[tuple[str, str]]]] = []
    longest = 0
    tmp: str | None = None
    try:
        for tensor in iter_tensor_protos(proto):
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = [(e.key, e.value) for e in tensor.external_data]
            saved.append((tensor, info))
            keys = dict(info)
            length = _data_bytes(tensor)
            data = None
            if keys.get("location") != _PLACEHOLDER and length is not None and length <= _CHECK_READS_BYTES:
                data = _read_external(base_dir, keys, length)
            del tensor.external_data[:]
            if data is not None:
                tensor.data_location = onnx.TensorProto.DEFAULT
                tensor.raw_data = data
            else:
                size = length if length is not None else int(keys.get("length") or 0)
                for key, value in (("location", _PLACEHOLDER), ("offset", "0"), ("length", str(size))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, value
                longest = max(longest, size)

        if any(t.data_location == onnx.TensorProto.EXTERNAL for t, _ in saved):
            tmp = tempfile.mkdtemp(prefix="seqlower-check-")
            with open(os.path.join(tmp, _PLACEHOLDER), "wb") as f:
                f.truncate(longest)  # sparse: no disk, no memory
            path = os.path.join(tmp, "model.onnx")

            def check(p: onnx.ModelProto, full: bool) -> None:
                with open(path, "wb") as f:
                    f.write(p.SerializeToString())
                onnx.checker.check_model(path, full_check=full)
        else:
            def check(p: onnx.ModelProto, full: bool) -> None:
                onnx.checker.check_model(p, full_check=full)

        yield check
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for tensor, info in saved:
            tensor.ClearField("raw_data")
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in info:
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value


def _read_external(base_dir: str | None, keys: dict[str, str], length: int) -> bytes | None:
    if base_dir is None:
        return None
    try:
        with open(os.path.join(base_dir, keys["location"]), "rb") as f:
            f.seek(int(keys.get("offset") or 0))
            data = f.read(length)
    except (OSError, KeyError, ValueError):
        return None
    return data if len(data) == length else None


def check_model(model: ir.Model | onnx.ModelProto, label: str, *, base_dir: str | None = None,
                what: str = "invalid model") -> list[str]:
    """The full check (checker and strict shape inference) of a model in memory, external
    data resolved against ``base_dir``; an ``ir.Model`` is checked without serializing its
    weights (``weightless_proto``). Returns warnings for what is accepted all the same."""
    proto = model if isinstance(model, onnx.ModelProto) else weightless_proto(model)
    return _run_checker(proto, label, base_dir, full=True, what=what)


def weightless_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto whose initializers past ``_CHECK_READS_BYTES`` are references
    to a placeholder file: for the checker, inference and inventories, which never read
    weights, so a model over protobuf's 2 GiB, or with external weights anywhere, can be
    looked at. Small external tensors are read where their file is found."""
    swapped: list[tuple[ir.Value, object]] = []
    try:
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is None:
                    continue
                stand_in: object = ir.ExternalTensor(_PLACEHOLDER, 0, tensor.nbytes, tensor.dtype,
                                                     shape=tensor.shape, name=value.name or "")
                if tensor.nbytes <= _CHECK_READS_BYTES:
                    if not isinstance(tensor, ir.ExternalTensor):
                        continue
                    try:
                        stand_in = ir.Tensor(tensor.numpy(), name=value.name)
                    except OSError:  # a proto loaded without its folder: nothing to read
                        pass
                swapped.append((value, tensor))
                value.const_value = stand_in
        return _restore_map_types(model, ir.serde.serialize_model(model))
    finally:
        for value, tensor in swapped:
            value.const_value = tensor


def _check_types(proto: onnx.ModelProto, label: str) -> None:
    """Type errors the plain checker does not look for (a node fed a sequence where it
    takes a tensor). Not shapes: real exports declare shapes inference disagrees with."""
    if proto.ByteSize() > PROTOBUF_LIMIT:
        return  # too big to hand to inference in memory; the passes meet such errors later
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "invalid")
        # Only kind errors (a sequence or optional where a tensor goes) and types that do
        # not exist: an element type a schema does not list (ReverseSequence of bfloat16)
        # is a schema lag that runtimes accept.
        if isinstance(e, ValueError) or re.search(r"unsupported type: (seq|optional|map|sparse)", first):
            raise ModelError(f"{label}: invalid model: {first}") from None


_DATA_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
# Integer attributes that are flags (0 or 1) in every op that has them.
_FLAG_ATTRIBUTES = frozenset({"keepdims", "new_axis", "exclusive", "reverse", "noop_with_empty_axes", "allowzero",
                              "select_last_index"})
# Integer attributes that name an element type.
_TYPE_ATTRIBUTES = {"Cast": "to", "SequenceEmpty": "dtype", "EyeLike": "dtype", "RandomNormal": "dtype",
                    "RandomUniform": "dtype", "RandomNormalLike": "dtype", "RandomUniformLike": "dtype",
                    "Multinomial": "dtype", "Bernoulli": "dtype"}


def _check_text_fields(proto: onnx.ModelProto, label: str) -> None:
    """Every string field (names, op types, doc strings, metadata) is UTF-8 text:
    protobuf hands out a proto2 string that is not as bytes, and onnx_ir and the writer
    fail on it later. Tensor contents (``string_data``, ``raw_data``) are bytes fields and
    are not looked at. Iterative."""
    from google.protobuf.descriptor import FieldDescriptor

    stack: list = [proto]
    while stack:
        msg = stack.pop()
        for field, value in msg.ListFields():
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if repeated:
                    stack.extend(value)
                else:
                    stack.append(value)
            elif field.type == FieldDescriptor.TYPE_STRING:
                for text in (value if repeated else [value]):
                    try:
                        text.decode("utf-8") if isinstance(text, bytes) else text.encode("utf-8")
                    except UnicodeError:
                        where = getattr(msg, "name", "") or type(msg).__name__
                        raise ModelError(f"{label}: the {field.name} of {where!r} is not UTF-8 text") from None


def _check_structure(proto: onnx.ModelProto, label: str) -> None:
    """What onnx's checker lets through and would fail later, deep inside a pass or the
    writer: text that is not UTF-8, element types that do not exist, raw tensor data of
    the wrong length, a Constant without its value. Iterative, like the checker's walk."""

    def type_of(tp: onnx.TypeProto, where: str) -> None:
        tp = innermost_type(tp)
        if tp.WhichOneof("value") == "tensor_type":
            if tp.tensor_type.elem_type and tp.tensor_type.elem_type not in _DATA_TYPES:
                raise ModelError(f"{label}: {where} has element type {tp.tensor_type.elem_type}, which does not exist")

    _check_text_fields(proto, label)
    for tensor in iter_tensor_protos(proto):
        if tensor.data_type not in _DATA_TYPES:
            raise ModelError(f"{label}: tensor {tensor.name!r} has element type {tensor.data_type}, which does not exist")
        if any(d < 0 for d in tensor.dims):
            raise ModelError(f"{label}: tensor {tensor.name!r} has a negative dim {list(tensor.dims)}")
        need = _data_bytes(tensor)
        if tensor.HasField("raw_data") and need is not None and len(tensor.raw_data) != need:
            raise ModelError(f"{label}: tensor {tensor.name!r} holds {len(tensor.raw_data)} bytes of data; "
                             f"its shape {list(tensor.dims)} needs {need}")
    graphs: list[onnx.GraphProto] = [proto.graph]
    node_lists = [f.node for f in proto.functions]
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            for v in [*g.input, *g.output, *g.value_info]:
                type_of(v.type, f"value {v.name!r}")
            node_lists.append(g.node)
            continue
        for node in node_lists.pop():
            where = describe_node(node.op_type, node.name, list(node.output))
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) != 1:
                raise ModelError(f"{label}: {where} has {len(node.attribute)} attributes; a Constant has exactly one")
            type_attr = _TYPE_ATTRIBUTES.get(node.op_type)
            for attr in node.attribute:
                if attr.name in _FLAG_ATTRIBUTES and attr.type == onnx.AttributeProto.INT and attr.i not in (0, 1):
                    # Runtimes read these as "nonzero", onnx's inference as "== 1": they
                    # would disagree on the shapes.
                    raise ModelError(f"{label}: {where}: {attr.name}={attr.i}; it must be 0 or 1")
                if attr.name == type_attr and attr.type == onnx.AttributeProto.INT and attr.i not in _DATA_TYPES:
                    raise ModelError(f"{label}: {where}: {attr.name}={attr.i} is not an element type")
                if attr.HasField("tp"):
                    type_of(attr.tp, where)
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)


def load_model(source: ModelSource | ir.Model, *, check: bool = True) -> ir.Model:
    """Load into onnx_ir. External data stays lazy (memory-mapped on first use)."""
    if isinstance(source, ir.Model):
        return source
    proto = read_model_proto(source, load_external_data=False, check=check)
    model = from_proto(proto, _label(source))
    if isinstance(source, (str, os.PathLike)):
        ir.external_data.set_base_dir(model.graph, os.path.dirname(os.path.abspath(source)))
    return model


# onnx_ir has no map type. Values typed seq(map(...)) (scikit-learn's ZipMap output) are
# typeless in the IR, and get their type back from this side table when serialized.
MAP_TYPES_KEY = "seqlower.map_types"


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


def _holds_map(tp: onnx.TypeProto) -> bool:
    return innermost_type(tp).WhichOneof("value") == "map_type"


def _value_infos(proto: onnx.ModelProto) -> Iterator[onnx.ValueInfoProto]:
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


def from_proto(proto: onnx.ModelProto, label: str = "<model>") -> ir.Model:
    """``ir.serde.deserialize_model``, for models with map types too (see MAP_TYPES_KEY)."""
    maps = {vi.name: vi.type.SerializeToString() for vi in _value_infos(proto) if _holds_map(vi.type)}
    if maps:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        for vi in _value_infos(copy):
            if vi.name in maps:
                vi.ClearField("type")
        proto = copy
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx_ir raises assorted types on malformed graphs
        raise ModelError(f"{label}: cannot load model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if maps:
        model.meta[MAP_TYPES_KEY] = maps
    return model


def _restore_map_types(model: ir.Model, proto: onnx.ModelProto) -> onnx.ModelProto:
    maps = model.meta.get(MAP_TYPES_KEY)
    if maps:
        for vi in _value_infos(proto):
            if vi.name in maps and not vi.HasField("type"):
                vi.type.ParseFromString(maps[vi.name])
    return proto


def to_proto(model: ir.Model | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    return _restore_map_types(model, ir.serde.serialize_model(model))


def _has_external(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor)
        for g in model.graphs()
        for v in g.initializers.values()
    )


def _initializer_bytes(model: ir.Model) -> int:
    total = 0
    for g in model.graphs():
        for v in g.initializers.values():
            if v.const_value is not None:
                total += v.const_value.nbytes
    return total


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class StagedModel:
    """A model written completely beside its destination, not yet in place.

    The model (and its ``<name>.data`` when it has external weights) sit in a hidden
    temporary folder inside the destination's folder, so ``path`` can be checked and
    run with its weights resolved exactly as they will be, and ``commit`` only renames.
    Files get the user's umask (0644 under umask 022), as any tool's output does.
    """

    def __init__(self, destination: Path, folder: Path, files: list[str]) -> None:
        self.destination = destination
        self.folder = folder
        self.files = files  # the model file last: it is what makes the rest visible
        self.path = folder / destination.name

    @property
    def external_data(self) -> str | None:
        return next((f for f in self.files if f != self.destination.name), None)

    def commit(self) -> None:
        try:
            for name in self.files:
                os.replace(self.folder / name, self.destination.parent / name)
        except OSError as e:
            raise ModelError(f"{self.destination}: cannot write ({e.strerror or e})") from None
        finally:
            self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def stage_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike) -> StagedModel:
    """Write ``model`` for ``path`` into a temporary folder beside it (see StagedModel).
    Models whose weights do not fit protobuf's 2 GiB, or whose weights were external on
    input, get their weights in ``<name>.data``; the input's files are only read."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ModelError(f"{path}: output folder {str(folder)!r} does not exist")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder))
    except OSError as e:
        raise ModelError(f"{path}: cannot write ({e.strerror or e})") from None
    staged = StagedModel(path, tmp, [path.name])
    try:
        if isinstance(model, ir.Model) and (_has_external(model) or _initializer_bytes(model) > PROTOBUF_LIMIT):
            data_name = path.name + ".data"
            # Tensors under 1 KiB stay inline, as onnx.save does: shapes and axes stay readable.
            ir.save(model, staged.path, external_data=data_name, size_threshold_bytes=1024)
            if model.meta.get(MAP_TYPES_KEY):
                written = onnx.load(str(staged.path), load_external_data=False)
                staged.path.write_bytes(_restore_map_types(model, written).SerializeToString(deterministic=True))
            if (tmp / data_name).exists() and (tmp / data_name).stat().st_size:
                staged.files.insert(0, data_name)
            else:
                _unlink_quietly(tmp / data_name)
        else:
            data = to_proto(model).SerializeToString(deterministic=True)
            with open(staged.path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        mode = 0o666 & ~_umask()
        for name in staged.files:
            os.chmod(tmp / name, mode)
        return staged
    except OSError as e:
        staged.discard()
        raise ModelError(f"{path}: cannot write ({e.strerror or e})") from None
    except BaseException:
        staged.discard()
        raise


def save_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write atomically (see ``stage_model``)."""
    stage_model(model, path).commit()


def _unlink_quietly(p: str | os.PathLike) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass
