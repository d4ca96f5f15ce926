"""Where sequences and optionals live in a model: the ops and the typed values, in
every graph, subgraph and model-local function. Behind ``seqlower check`` and
``seqlower inspect``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

from seqlower import ops
from seqlower.io.inference import infer_shapes
from seqlower.errors import describe_node

__all__ = [
    "SEQUENCE_OPS",
    "OPTIONAL_OPS",
    "ML_SEQUENCE_OPS",
    "SeqOp",
    "SeqValue",
    "Inventory",
    "take_inventory",
    "format_type",
    "walk_graphs",
]

SEQUENCE_OPS = ops.names("sequence")
OPTIONAL_OPS = ops.names("optional")
# ai.onnx.ml ops that make sequence values (seq(map(...))).
ML_SEQUENCE_OPS = ops.names("ml", domain="ai.onnx.ml")
_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class SeqOp:
    op_type: str
    node: str
    graph: str
    notes: list[str] = field(default_factory=list)


@dataclass
class SeqValue:
    name: str
    graph: str
    type: str
    role: str  # "input" | "output" | "value"
    producer: str = ""
    consumers: list[str] = field(default_factory=list)


@dataclass
class Inventory:
    ops: list[SeqOp]
    values: list[SeqValue]

    @property
    def clean(self) -> bool:
        return not self.ops and not self.values

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor_only": self.clean,
            "ops": [asdict(o) for o in self.ops],
            "values": [asdict(v) for v in self.values],
        }


def format_type(tp: onnx.TypeProto | None) -> str:
    if tp is None:
        return "?"
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        tt = tp.tensor_type
        et = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else "?"
        if not tt.HasField("shape"):
            return f"tensor({et})"
        dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
        return f"tensor({et},[{','.join(dims)}])"
    if kind == "sequence_type":
        return f"seq({format_type(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({format_type(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{format_type(tp.map_type.value_type)})"
    return kind or "?"


def _is_seq_type(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") in ("sequence_type", "optional_type")


def walk_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, Any, bool]]:
    """(path, graph or function, is_function) for every graph, depth-first, iteratively."""
    stack: list[tuple[str, Any, bool]] = [("main", model.graph, False)]
    stack += [(f"function {f.domain}::{f.name}", f, True) for f in reversed(model.functions)]
    while stack:
        path, g, is_fn = stack.pop()
        yield path, g, is_fn
        children = []
        for node in g.node:
            if not node.attribute:
                continue
            label = describe_node(node.op_type, node.name, list(node.output))
            for attr in node.attribute:
                if attr.HasField("g"):
                    children.append((f"{path} > {label}.{attr.name}", attr.g, False))
                for i, sub in enumerate(attr.graphs):
                    children.append((f"{path} > {label}.{attr.name}[{i}]", sub, False))
        stack.extend(reversed(children))


def take_inventory(model: onnx.ModelProto, infer: bool = False) -> Inventory:
    """Every sequence/optional op and sequence/optional-typed value.

    With ``infer``, types come from onnx shape inference (which knows element types and
    a merged element shape, never lengths); without, from what the model declares.
    """
    if infer:
        try:
            model = infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
        except Exception:  # inference is best effort here; declared types still count
            pass
    ops: list[SeqOp] = []
    values: list[SeqValue] = []
    for path, g, is_fn in walk_graphs(model):
        types: dict[str, onnx.TypeProto] = {}
        roles: dict[str, str] = {}
        if not is_fn:
            for v in g.input:
                types[v.name], roles[v.name] = v.type, "input"
            for v in g.output:
                types[v.name], roles[v.name] = v.type, "output"
        for v in g.value_info:
            types.setdefault(v.name, v.type)
        producer: dict[str, onnx.NodeProto] = {}
        consumers: dict[str, list[onnx.NodeProto]] = {}
        seq_named: dict[str, str] = {}
        for node in g.node:
            for o in node.output:
                producer[o] = node
            for i in node.input:
                consumers.setdefault(i, []).append(node)
            if (node.domain in _DEFAULT_DOMAINS and node.op_type in SEQUENCE_OPS | OPTIONAL_OPS) or (
                    node.domain == "ai.onnx.ml" and node.op_type in ML_SEQUENCE_OPS):
                ops.append(SeqOp(node.op_type, _label(node), path, _op_notes(node)))
                if node.op_type in SEQUENCE_OPS | {"Optional"} | ML_SEQUENCE_OPS:
                    for o in node.output:
                        if o and node.op_type not in ("SequenceAt", "SequenceLength", "ConcatFromSequence"):
                            seq_named.setdefault(o, "")
        names = [n for n in types if _is_seq_type(types[n])] + [n for n in seq_named if n not in types]
        for name in names:
            tp = types.get(name)
            values.append(
                SeqValue(
                    name,
                    path,
                    format_type(tp),
                    roles.get(name, "value"),
                    _label(producer[name]) if name in producer else "",
                    [_label(n) for n in consumers.get(name, [])],
                )
            )
    return Inventory(ops, values)


def _label(node: onnx.NodeProto) -> str:
    return describe_node(node.op_type, node.name, list(node.output))


def _op_notes(node: onnx.NodeProto) -> list[str]:
    """Facts a reader needs about a node, like where the keepdims policy applies."""
    if node.op_type != "SplitToSequence":
        return []
    keepdims = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    has_split = len(node.input) > 1 and node.input[1] != ""
    if has_split and keepdims == 0:
        return ["keepdims=0 with a split input: if the split is a scalar, the keepdims policy decides"
                " whether the chunks are squeezed (spec: never; onnxruntime: when split == 1)"]
    return []
