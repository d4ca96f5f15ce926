"""The executor's side of the model-boundary ABI (``seqlower.abi`` in metadata_props).

A lowered model cannot take or return sequences or optionals, so each such graph input
or output of the original becomes tensors, and the mapping is written as JSON:

    {"version": 1,
     "inputs":  [{"name": "seq", "kind": "sequence", "elem_type": "FLOAT",
                  "elem_shape": ["N", 3], "width": 2,
                  "tensors": {"values": "seq_values", "shapes": "seq_shapes"}}],
     "outputs": [...]}

kinds and their tensors:
  sequence           values (1-D, elements flattened in C order and concatenated),
                     shapes (int64 [n, R]), and ranks (int64 [n]) when element ranks differ
                     (then shapes rows are padded with 0 to R = ``width``, or to the
                     largest element rank when ``width`` is null)
  optional_tensor    present (bool scalar), value (the tensor; zeros when absent)
  optional_sequence  present, values, shapes (+ ranks)
  zipmap             values (float [N, C], or [C] for one row): a ZipMap's input; the
                     entry's ``key_type`` (INT64 or STRING) and ``labels`` make each row
                     a map {label: value}, as the ZipMap did (an output only)

This module is deliberately independent of the lowering code that writes the mapping:
the executor is the judge and shares nothing with what it judges.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from seqlower.errors import ExecutionError, ModelError
from seqlower.executor.values import TensorSeq, elem_type_of, np_dtype, type_name

__all__ = ["ABI_KEY", "AbiEntry", "Abi", "read_abi"]

ABI_KEY = "seqlower.abi"
KINDS = ("sequence", "optional_tensor", "optional_sequence", "zipmap")


@dataclass
class AbiEntry:
    name: str
    kind: str
    elem_type: int
    elem_shape: list[int | str | None] | None
    tensors: dict[str, str] = field(default_factory=dict)
    width: int | None = None
    labels: list[int | str] | None = None  # zipmap only

    # -- the original (logical) type ------------------------------------------------

    def logical_type(self) -> onnx.TypeProto:
        if self.kind == "zipmap":
            value = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)
            return helper.make_sequence_type_proto(helper.make_map_type_proto(self.elem_type, value))
        tensor = helper.make_tensor_type_proto(self.elem_type, self.elem_shape)
        if self.kind == "optional_tensor":
            return helper.make_optional_type_proto(tensor)
        seq = helper.make_sequence_type_proto(tensor)
        return helper.make_optional_type_proto(seq) if self.kind == "optional_sequence" else seq

    # -- list of arrays <-> tensors ----------------------------------------------------

    def pack(self, value: Any) -> dict[str, np.ndarray]:
        """Logical value (list / array / None) to the lowered model's tensors."""
        out: dict[str, np.ndarray] = {}
        if self.kind == "zipmap":
            raise ExecutionError(f"input {self.name!r}: a ZipMap's maps are an output only; no model takes them")
        if self.kind.startswith("optional"):
            out[self.tensors["present"]] = np.array(value is not None)
            if self.kind == "optional_tensor":
                out[self.tensors["value"]] = value if value is not None else self._placeholder()
                return out
            value = [] if value is None else value
        if not isinstance(value, list):
            raise ExecutionError(f"input {self.name!r} must be a sequence (a list of arrays)")
        dtype = np_dtype(self.elem_type)
        for i, t in enumerate(value):
            if elem_type_of(t) != self.elem_type:
                raise ExecutionError(
                    f"input {self.name!r} element {i} has type {type_name(elem_type_of(t))}, "
                    f"expected {type_name(self.elem_type)}"
                )
        ranks = [t.ndim for t in value]
        if self.elem_shape is not None:
            width = len(self.elem_shape)
            if any(r != width for r in ranks):
                raise ExecutionError(f"input {self.name!r}: every element must have rank {width}, got ranks {ranks}")
        else:
            width = max(ranks, default=0) if self.width is None else self.width
            if width < max(ranks, default=0):
                raise ExecutionError(f"input {self.name!r}: elements of rank up to {max(ranks)} do not fit width {width}")
        if "ranks" not in self.tensors and len(set(ranks)) > 1:
            raise ExecutionError(f"input {self.name!r}: elements of ranks {sorted(set(ranks))} need a ranks tensor")
        shapes = np.zeros((len(value), width), dtype=np.int64)
        for i, t in enumerate(value):
            shapes[i, : t.ndim] = t.shape
        flat = [t.reshape(-1) for t in value]
        out[self.tensors["values"]] = np.concatenate(flat).astype(dtype) if flat else np.zeros(0, dtype=dtype)
        out[self.tensors["shapes"]] = shapes
        if "ranks" in self.tensors:
            out[self.tensors["ranks"]] = np.array(ranks, dtype=np.int64)
        return out

    def unpack(self, physical: dict[str, Any]) -> Any:
        """The lowered model's tensors back to a logical value."""
        if self.kind == "zipmap":
            return self._unpack_zipmap(np.asarray(physical[self.tensors["values"]]))
        if self.kind.startswith("optional"):
            if not bool(np.asarray(physical[self.tensors["present"]]).reshape(-1)[0]):
                return None
            if self.kind == "optional_tensor":
                return physical[self.tensors["value"]]
        values = np.asarray(physical[self.tensors["values"]]).reshape(-1)
        shapes = np.asarray(physical[self.tensors["shapes"]])
        if shapes.ndim != 2:
            raise ExecutionError(f"output {self.name!r}: shapes tensor must be 2-D, got shape {list(shapes.shape)}")
        n = shapes.shape[0]
        ranks = (
            np.asarray(physical[self.tensors["ranks"]]).reshape(-1).tolist()
            if "ranks" in self.tensors
            else [shapes.shape[1]] * n
        )
        if len(ranks) != n:
            raise ExecutionError(f"output {self.name!r}: {len(ranks)} ranks for {n} shapes")
        # A boundary that does not account for itself is a wrong model, never something
        # to read around: a rank past the width of shapes, a negative dim, a width other
        # than the declared element rank.
        width = shapes.shape[1]
        if "ranks" not in self.tensors and self.elem_shape is not None and width != len(self.elem_shape):
            raise ExecutionError(f"output {self.name!r}: shapes has {width} columns but the elements have rank "
                                 f"{len(self.elem_shape)}")
        for i, r in enumerate(ranks):
            if not 0 <= int(r) <= width:
                raise ExecutionError(f"output {self.name!r}: element {i} claims rank {int(r)}, past the {width} "
                                     f"columns of shapes")
        elements, offset = [], 0
        for i in range(n):
            shape = tuple(int(d) for d in shapes[i, : ranks[i]])
            if any(d < 0 for d in shape):
                raise ExecutionError(f"output {self.name!r}: element {i} has a negative dim in shape {list(shape)}")
            size = math.prod(shape)
            if any(d < 0 for d in shape) or offset + size > values.size:
                raise ExecutionError(f"output {self.name!r}: shape {list(shape)} of element {i} does not fit the values")
            elements.append(values[offset : offset + size].reshape(shape))
            offset += size
        if offset != values.size:
            raise ExecutionError(f"output {self.name!r}: shapes cover {offset} values but there are {values.size}")
        return TensorSeq(elements, self.elem_type)

    def _unpack_zipmap(self, x: np.ndarray) -> TensorSeq:
        labels = self.labels or []
        if x.dtype != np.float32 or x.ndim not in (1, 2):
            raise ExecutionError(f"output {self.name!r}: a ZipMap's values must be float32 of rank 1 or 2, got "
                                 f"{x.dtype} {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] != len(labels):
            raise ExecutionError(f"output {self.name!r}: {rows.shape[1]} columns for {len(labels)} labels")
        return TensorSeq([{k: np.asarray(v) for k, v in zip(labels, row)} for row in rows], None)

    def _placeholder(self) -> np.ndarray:
        dims = [d if isinstance(d, int) else 0 for d in (self.elem_shape or [0])]
        return np.zeros(dims, dtype=np_dtype(self.elem_type))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AbiEntry:
        kind = d["kind"]
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        if kind == "zipmap":
            key = onnx.TensorProto.DataType.Value(d["key_type"])
            if key not in (onnx.TensorProto.INT64, onnx.TensorProto.STRING):
                raise ValueError(f"entry {d['name']!r}: a ZipMap's keys are INT64 or STRING, not {d['key_type']}")
            labels = [int(k) if key == onnx.TensorProto.INT64 else str(k) for k in d["labels"]]
            if "values" not in d["tensors"]:
                raise ValueError(f"entry {d['name']!r} lacks tensors ['values']")
            return cls(d["name"], kind, key, None, {"values": d["tensors"]["values"]}, None, labels)
        et = d["elem_type"]
        elem_type = onnx.TensorProto.DataType.Value(et) if isinstance(et, str) else int(et)
        tensors = dict(d["tensors"])
        need = {"present"} if kind.startswith("optional") else set()
        need |= {"value"} if kind == "optional_tensor" else {"values", "shapes"}
        if missing := need - tensors.keys():
            raise ValueError(f"entry {d['name']!r} lacks tensors {sorted(missing)}")
        width = d.get("width")
        return cls(d["name"], kind, elem_type, d.get("elem_shape"), tensors, None if width is None else int(width))


@dataclass
class Abi:
    inputs: dict[str, AbiEntry]
    outputs: dict[str, AbiEntry]
    # What the lowering fixed (lower --input-shape / --fix-dim): {"shapes": {input: dims},
    # "dims": {name: value}}; the lowered model runs at those shapes only.
    fixed: dict[str, dict] = field(default_factory=dict)


def read_abi(proto: onnx.ModelProto) -> Abi | None:
    raw = next((p.value for p in proto.metadata_props if p.key == ABI_KEY), None)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        inputs = [AbiEntry.from_json(e) for e in doc.get("inputs", [])]
        outputs = [AbiEntry.from_json(e) for e in doc.get("outputs", [])]
        fixed = doc.get("fixed", {})
        if not isinstance(fixed, dict):
            raise TypeError("'fixed' is not an object")
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"metadata {ABI_KEY!r} is malformed: {e}") from None
    return Abi({e.name: e for e in inputs}, {e.name: e for e in outputs}, fixed)
