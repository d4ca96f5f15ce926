"""The bundled example behind ``seqlower demo``: a small model that uses the sequence
ops the way exporters do (split into ragged chunks, insert, erase, map, concat)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["build_demo_model"]


def build_demo_model() -> onnx.ModelProto:
    """x[6,4] split into chunks of 1, 2 and 3 rows; y[2,4] inserted at position 1; the
    last chunk erased; each chunk shifted by an outer-scope bias; lengths and concat."""
    body = helper.make_graph(
        [helper.make_node("Add", ["chunk", "bias"], ["shifted"], name="add_bias")],
        "shift",
        [helper.make_tensor_value_info("chunk", TensorProto.FLOAT, ["rows", 4])],
        [helper.make_tensor_value_info("shifted", TensorProto.FLOAT, ["rows", 4])],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["chunks"], name="split", axis=0),
        helper.make_node("SequenceInsert", ["chunks", "y", "one"], ["with_y"], name="insert_y"),
        helper.make_node("SequenceErase", ["with_y", "minus_one"], ["trimmed"], name="erase_last"),
        helper.make_node("SequenceMap", ["trimmed"], ["shifted_seq"], name="shift_each", body=body),
        helper.make_node("SequenceLength", ["shifted_seq"], ["count"], name="count"),
        helper.make_node("ConcatFromSequence", ["shifted_seq"], ["joined"], name="join", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "seqlower_demo",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("joined", TensorProto.FLOAT, [5, 4]),
            helper.make_tensor_value_info("count", TensorProto.INT64, []),
        ],
        initializer=[
            numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "sizes"),
            numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
            numpy_helper.from_array(np.array(-1, dtype=np.int64), "minus_one"),
            numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32), "bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.producer_name = "seqlower-demo"
    onnx.checker.check_model(model, full_check=True)
    return model
