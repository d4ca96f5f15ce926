"""Reading and writing models safely.

Reading refuses anything that is not a well-formed ONNX model and any external-data
location that would leave the model's folder (absolute paths, ``..``, symlinks that
point out): the class of onnx's CVE-2022-25882 and CVE-2024-27318. Writing is atomic: a
temporary file in the destination folder is renamed over the destination only once it
is complete, so a failed or interrupted write never leaves half a model behind.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from seqlower.errors import ModelError, describe_node

__all__ = [
    "ModelSource",
    "read_model_proto",
    "load_model",
    "save_model",
    "to_proto",
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
        _run_checker(proto if base_dir is None else os.fspath(source), label)
        _check_structure(proto, label)
        _check_types(proto, label)
    if load_external_data and base_dir is not None:
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
        except (OSError, ValueError) as e:
            raise ModelError(f"{label}: cannot load external data ({e})") from None
    return proto


def _run_checker(proto: onnx.ModelProto | str, label: str) -> None:
    # Checked before external data is loaded (the locations were validated above), by
    # path when there is one: the checker resolves external files against the model's
    # folder then, and never needs the weights in memory.
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "invalid")
        raise ModelError(f"{label}: invalid model: {first}") from None
    except ValueError as e:  # protobuf size limits
        raise ModelError(f"{label}: invalid model: {str(e).splitlines()[0]}") from None


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
        while True:
            kind = tp.WhichOneof("value")
            if kind == "tensor_type":
                if tp.tensor_type.elem_type and tp.tensor_type.elem_type not in _DATA_TYPES:
                    raise ModelError(f"{label}: {where} has element type {tp.tensor_type.elem_type}, which does not exist")
                return
            if kind == "sequence_type":
                tp = tp.sequence_type.elem_type
            elif kind == "optional_type":
                tp = tp.optional_type.elem_type
            else:
                return

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
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx_ir raises assorted types on malformed graphs
        raise ModelError(f"{_label(source)}: cannot load model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if isinstance(source, (str, os.PathLike)):
        ir.external_data.set_base_dir(model.graph, os.path.dirname(os.path.abspath(source)))
    return model


def to_proto(model: ir.Model | onnx.ModelProto) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)


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


def save_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write atomically. Models whose weights do not fit protobuf's 2 GiB, or whose
    weights were external on input, get their weights in ``<file>.data`` beside them."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ModelError(f"{path}: output folder {str(folder)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        os.close(fd)
    except OSError as e:
        raise ModelError(f"{path}: cannot write ({e.strerror or e})") from None
    try:
        if isinstance(model, ir.Model) and (_has_external(model) or _initializer_bytes(model) > PROTOBUF_LIMIT):
            data_name = path.name + ".data"
            ir.save(model, tmp, external_data=data_name)
        else:
            proto = to_proto(model)
            data = proto.SerializeToString(deterministic=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        raise ModelError(f"{path}: cannot write ({e.strerror or e})") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(p: str) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass
