"""Running a subgraph (Loop/If/SequenceMap body) with the enclosing scope visible."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from seqlower.executor.values import np_dtype
from seqlower.io.models import innermost_type

__all__ = ["run_body", "empty_like_declared", "declared_elem_type"]


def run_body(body: Any, scope: dict[str, Any], feeds: dict[str, Any], attributes: Any) -> list[Any]:
    """Run ``body`` (a ReferenceEvaluator) seeing the outer ``scope``; its own inputs win."""
    env = dict(scope)
    env.update(feeds)
    return body.run(None, env, attributes=attributes)


def _tensor_type(tp: onnx.TypeProto | None) -> onnx.TypeProto.Tensor | None:
    if tp is None:
        return None
    inner = innermost_type(tp)
    return inner.tensor_type if inner.WhichOneof("value") == "tensor_type" else None


def declared_elem_type(tp: onnx.TypeProto | None) -> int | None:
    tt = _tensor_type(tp)
    return tt.elem_type if tt is not None and tt.elem_type else None


def empty_like_declared(tp: onnx.TypeProto | None, leading: int = 0) -> np.ndarray:
    """The empty stack of a scan output that never ran: ``[0, *declared dims]``, unknown
    dims as 0, unknown rank as ``[0]`` — what onnxruntime produces."""
    tt = _tensor_type(tp)
    et = tt.elem_type if tt is not None and tt.elem_type else onnx.TensorProto.FLOAT
    if tt is not None and tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
    else:
        dims = []
    return np.zeros((leading, *dims), dtype=np_dtype(et))
