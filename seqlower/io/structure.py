"""The structure onnx's checker lets through and seqlower would fail on later, deep inside
a pass or the writer: text that is not UTF-8, element types that do not exist, raw tensor
data of the wrong length, flags that are not 0 or 1, a Constant without its value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from seqlower.errors import ModelError, describe_node
from seqlower.io.protos import data_bytes, innermost_type, utf8_nodes
from seqlower.io.weights import Held

__all__ = ["check_structure", "check_weight"]


_DATA_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS
# Attribute types that hold nothing ``check_structure`` looks into (numbers, text).
_PLAIN_ATTRIBUTES = frozenset({onnx.AttributeProto.INT, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT,
                               onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRING, onnx.AttributeProto.STRINGS})
# Integer attributes that are flags (0 or 1) in every op that has them.
_FLAG_ATTRIBUTES = frozenset({"keepdims", "new_axis", "exclusive", "reverse", "noop_with_empty_axes", "allowzero",
                              "select_last_index"})
# Integer attributes that name an element type.
_TYPE_ATTRIBUTES = {"Cast": "to", "SequenceEmpty": "dtype", "EyeLike": "dtype", "RandomNormal": "dtype",
                    "RandomUniform": "dtype", "RandomNormalLike": "dtype", "RandomUniformLike": "dtype",
                    "Multinomial": "dtype", "Bernoulli": "dtype"}


def _check_text_fields(proto: Any, label: str, held: Held | None = None) -> None:
    """Every string field (names, op types, doc strings, metadata) is UTF-8 text:
    protobuf hands out a proto2 string that is not as bytes, and onnx_ir and the writer
    fail on it later. Tensor contents (``string_data``, ``raw_data``) are bytes fields and
    are not looked at. ``held``: what reading the model with its weights held already
    checked (the main graph's initializers, and the nodes whose bytes are UTF-8 text).
    Iterative."""
    from google.protobuf.descriptor import FieldDescriptor

    main = proto.graph if held is not None else None
    plain_nodes = held.plain_nodes if held is not None else set()
    stack: list = [proto]
    while stack:
        msg = stack.pop()
        if _plain_text(msg):
            continue
        for field, value in msg.ListFields():
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if msg is main and field.name == "initializer":
                    continue  # checked as they were read
                if field.name == "node" and repeated:
                    # Checked at once in C; field by field only to say what is not text.
                    nodes = [n for i, n in enumerate(value) if i not in plain_nodes] if msg is main else list(value)
                    if not utf8_nodes(nodes):
                        stack.extend(nodes)
                elif repeated:
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


def _plain_text(msg: Any) -> bool:
    """The common cases of ``_check_text_fields`` at one join each (a big model has tens of
    thousands of them): a node without attributes, a tensor. False: look field by field."""
    try:
        if isinstance(msg, onnx.NodeProto) and not msg.attribute:
            "".join((*msg.input, *msg.output, msg.name, msg.op_type, msg.domain, msg.doc_string,
                     msg.overload)).encode("utf-8")
            return True
        if isinstance(msg, onnx.TensorProto) and not msg.HasField("segment"):
            "".join((msg.name, msg.doc_string, *(e.key + e.value for e in msg.external_data),
                     *(e.key + e.value for e in msg.metadata_props))).encode("utf-8")
            return True
    except (TypeError, UnicodeError):
        pass
    return False


def _check_tensor(tensor: onnx.TensorProto, label: str) -> None:
    if tensor.data_type not in _DATA_TYPES:
        raise ModelError(f"{label}: tensor {tensor.name!r} has element type {tensor.data_type}, which does not exist")
    if any(d < 0 for d in tensor.dims):
        raise ModelError(f"{label}: tensor {tensor.name!r} has a negative dim {list(tensor.dims)}")
    need = data_bytes(tensor)
    if tensor.HasField("raw_data") and need is not None and len(tensor.raw_data) != need:
        raise ModelError(f"{label}: tensor {tensor.name!r} holds {len(tensor.raw_data)} bytes of data; "
                         f"its shape {list(tensor.dims)} needs {need}")


def check_weight(tensor: onnx.TensorProto, label: str) -> None:
    """``check_structure``'s checks of one main-graph initializer, for a weight read on its
    own (``seqlower.io.weights``, which reads the plain ones off their bytes)."""
    _check_text_fields(tensor, label)
    _check_tensor(tensor, label)


def _where(node: onnx.NodeProto) -> str:
    return describe_node(node.op_type, node.name, list(node.output))


def check_structure(proto: onnx.ModelProto, label: str, held: Held | None = None) -> None:
    """What onnx's checker lets through and would fail later, deep inside a pass or the
    writer: text that is not UTF-8, element types that do not exist, raw tensor data of
    the wrong length, a Constant without its value. Iterative, like the checker's walk.
    ``held``: see ``_check_text_fields``."""
    _check_text_fields(proto, label, held)
    attributed = held.attributed if held is not None else None
    # One walk for the tensors (as ``iter_tensor_protos`` finds them) and the rest.
    graphs: list[onnx.GraphProto] = [proto.graph]
    node_lists = [f.node for f in proto.functions]
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            if held is None or g is not proto.graph:  # (held: checked as they were read)
                for tensor in g.initializer:
                    _check_tensor(tensor, label)
            for sparse in g.sparse_initializer:
                _check_tensor(sparse.values, label)
                _check_tensor(sparse.indices, label)
            for v in [*g.input, *g.output, *g.value_info]:
                _check_type(v.type, label, lambda: f"value {v.name!r}")  # noqa: B023 (called before the loop goes on)
            node_lists.append([g.node[i] for i in attributed] if g is proto.graph and attributed is not None else g.node)
            continue
        for node in node_lists.pop():
            if node.attribute or node.op_type == "Constant":
                _check_attributes(node, label, graphs)


def _check_type(tp: onnx.TypeProto, label: str, where: Callable[[], str]) -> None:
    tp = innermost_type(tp)
    if tp.WhichOneof("value") == "tensor_type":
        if tp.tensor_type.elem_type and tp.tensor_type.elem_type not in _DATA_TYPES:
            raise ModelError(f"{label}: {where()} has element type {tp.tensor_type.elem_type}, which does not exist")


def _check_attributes(node: onnx.NodeProto, label: str, graphs: list[onnx.GraphProto]) -> None:
    """One node's attributes; the subgraphs they hold go on ``graphs``, to be walked."""
    op = node.op_type
    if op == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) != 1:
        raise ModelError(f"{label}: {_where(node)} has {len(node.attribute)} attributes; a Constant has exactly one")
    type_attr = _TYPE_ATTRIBUTES.get(op)
    for attr in node.attribute:
        kind = attr.type
        # onnx's checker saw that an attribute of a given type holds that field only.
        if kind == _GRAPH:
            graphs.append(attr.g)
            continue
        if kind == _GRAPHS:
            graphs.extend(attr.graphs)
            continue
        if kind in _PLAIN_ATTRIBUTES and attr.name not in _FLAG_ATTRIBUTES and attr.name != type_attr:
            continue
        if attr.HasField("t"):
            _check_tensor(attr.t, label)
        for tensor in attr.tensors:
            _check_tensor(tensor, label)
        if attr.HasField("sparse_tensor"):
            _check_tensor(attr.sparse_tensor.values, label)
            _check_tensor(attr.sparse_tensor.indices, label)
        if attr.name in _FLAG_ATTRIBUTES and attr.type == onnx.AttributeProto.INT and attr.i not in (0, 1):
            # Runtimes read these as "nonzero", onnx's inference as "== 1": they would
            # disagree on the shapes.
            raise ModelError(f"{label}: {_where(node)}: {attr.name}={attr.i}; it must be 0 or 1")
        if attr.name == type_attr and attr.type == onnx.AttributeProto.INT and attr.i not in _DATA_TYPES:
            raise ModelError(f"{label}: {_where(node)}: {attr.name}={attr.i} is not an element type")
        if attr.HasField("tp"):
            _check_type(attr.tp, label, lambda: _where(node))  # noqa: B023
        if attr.HasField("g"):
            graphs.append(attr.g)
        graphs.extend(attr.graphs)
