"""Small builders shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from seqlower.executor import Executor

FLOAT, INT64, INT32, BOOL, STRING = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.STRING


def t(name: str, elem: int = FLOAT, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def seq(name: str, elem: int = FLOAT, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt(name: str, inner: onnx.TypeProto) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def const(name: str, value: Any, dtype: Any = None) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _ranked(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """The checker wants a rank on top-level tensor inputs/outputs; the executor does not
    check declared shapes, so "any rank" tests declare a symbolic 1-D shape."""
    if vi.type.WhichOneof("value") == "tensor_type" and not vi.type.tensor_type.HasField("shape"):
        return helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, ["any"])
    return vi


def model(nodes, inputs, outputs, *, opset: int = 17, initializer=(), functions=(), ir_version: int = 8) -> onnx.ModelProto:
    inputs, outputs = [_ranked(v) for v in inputs], [_ranked(v) for v in outputs]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(g, opset_imports=imports, ir_version=ir_version, functions=list(functions))


def single(op: str, inputs: list, outputs: list, *, opset: int = 17, initializer=(), **attrs) -> onnx.ModelProto:
    """A one-node model; ``inputs``/``outputs`` are value infos ("" names skipped)."""
    node = helper.make_node(op, [i if isinstance(i, str) else i.name for i in inputs], [o.name for o in outputs], **attrs)
    graph_inputs = [i for i in inputs if not isinstance(i, str)]
    graph_inputs = [i for i in graph_inputs if i.name not in {c.name for c in initializer}]
    return model([node], graph_inputs, outputs, opset=opset, initializer=initializer)


def run(m: onnx.ModelProto, backend: str = "reference", policy: str = "auto", **feeds) -> dict[str, Any]:
    return Executor(m, backend=backend, keepdims_policy=policy).run(feeds).outputs


def body(nodes, inputs, outputs, initializer=()) -> onnx.GraphProto:
    return helper.make_graph(nodes, "body", inputs, outputs, initializer=list(initializer))
