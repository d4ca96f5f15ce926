"""Runtime values of the executor and their ONNX types.

A tensor is a numpy array (strings as ``object`` arrays, bfloat16/float8 via ml_dtypes);
a sequence is a list of arrays; an optional is its value, or ``None`` when empty. A
sequence that knows its element type even when empty is a :class:`TensorSeq`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

__all__ = [
    "TensorSeq",
    "Value",
    "elem_type_of",
    "np_dtype",
    "seq_elem_type",
    "normalize",
    "type_name",
    "describe_value",
]

Value = Any  # np.ndarray | list[np.ndarray] | None


class TensorSeq(list):
    """A sequence of tensors that remembers its element type, so that an empty one can
    still refuse a tensor of the wrong type (SequenceEmpty(dtype=INT64) then Insert(float))."""

    def __init__(self, items: Any = (), elem_type: int | None = None) -> None:
        super().__init__(items)
        self.elem_type = elem_type


def np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def elem_type_of(array: np.ndarray) -> int:
    if array.dtype.kind in "OUS":
        return onnx.TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def seq_elem_type(seq: list) -> int | None:
    if isinstance(seq, TensorSeq) and seq.elem_type is not None:
        return seq.elem_type
    return elem_type_of(seq[0]) if seq else None


def type_name(elem_type: int | None) -> str:
    if elem_type is None:
        return "?"
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def normalize(value: Value) -> Value:
    """Python scalars become arrays, str arrays become object arrays, tuples lists."""
    if value is None:
        return None
    if isinstance(value, dict):  # a map (ZipMap's rows): keys as Python ints/strs
        return {_key(k): np.asarray(v, dtype=np.float32) if isinstance(v, float) else np.asarray(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = TensorSeq([normalize(v) for v in value], getattr(value, "elem_type", None))
        return out
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    return arr


def _key(k: Any) -> int | str:
    if isinstance(k, (bytes, np.bytes_)):
        return bytes(k).decode()
    return str(k) if isinstance(k, (str, np.str_)) else int(k)


def describe_map(value: dict) -> str:
    key = "string" if any(isinstance(k, str) for k in value) else "int64"
    vals = {type_name(elem_type_of(np.asarray(v))) for v in value.values()} or {"float"}
    return f"map<{key},{'|'.join(sorted(vals))}>({len(value)})"


def describe_value(value: Value) -> str:
    """Short human form: ``float32[2,3]``, ``seq<float32>[3]: [2,3] [2,3] [1,3]``, ``none``."""
    if value is None:
        return "none"
    if isinstance(value, dict):
        return describe_map(value)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return f"seq<{describe_map(value[0]).split('(')[0]}>(len {len(value)})"
    if isinstance(value, list):
        shapes = " ".join(_shape_str(v.shape) for v in value[:6])
        more = " ..." if len(value) > 6 else ""
        et = type_name(seq_elem_type(value))
        return f"seq<{et}>(len {len(value)})" + (f": {shapes}{more}" if value else "")
    return f"{type_name(elem_type_of(value))}{_shape_str(value.shape)}"


def _shape_str(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
