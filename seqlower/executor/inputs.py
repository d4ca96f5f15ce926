"""Feeding models: reading inputs from files, synthesizing them, saving values.

Files:
  ``X.npz``  a tensor input ``x`` under key ``x``; a sequence ``s`` under keys ``s[0]``,
             ``s[1]``, ... (an empty sequence as the single key ``s[]``); an optional
             input that is absent from the file is fed as empty.
  folder     ONNX backend test-data layout: ``input_0.pb``, ``input_1.pb``, ... holding a
             TensorProto, SequenceProto or OptionalProto each, in graph-input order.
"""

from __future__ import annotations

import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from seqlower.errors import SeqlowerError
from seqlower.executor.values import TensorSeq, normalize, np_dtype

__all__ = [
    "Port",
    "DEFAULT_DIM",
    "DEFAULT_SEQ_LEN",
    "load_inputs",
    "synthesize_inputs",
    "save_values",
    "parse_dims",
]

DEFAULT_DIM = 3
DEFAULT_SEQ_LEN = 3


@dataclass(frozen=True)
class Port:
    """A graph input or output as the user sees it (sequences as sequences)."""

    name: str
    type: onnx.TypeProto

    @property
    def kind(self) -> str:
        return self.type.WhichOneof("value") or "unknown"


class InputError(SeqlowerError):
    pass


def parse_dims(items: list[str] | None) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.strip().isdigit():
            raise InputError(f"--dim takes NAME=VALUE with a non-negative integer, got {item!r}")
        dims[name.strip()] = int(value)
    return dims


# -- reading --------------------------------------------------------------------------


def load_inputs(path: str | Path, ports: list[Port]) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        return _load_pb_folder(path, ports)
    if not path.is_file():
        raise InputError(f"{path}: no such inputs file or folder")
    if path.suffix == ".pb":
        if len(ports) != 1:
            raise InputError(f"{path}: a single .pb file feeds a model with one input; this one has {len(ports)}")
        return {ports[0].name: _read_pb(path, ports[0])}
    return _load_npz(path, ports)


def _load_npz(path: Path, ports: list[Port]) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise InputError(f"{path}: not a readable .npz file ({e})") from None
    feeds: dict[str, Any] = {}
    used: set[str] = set()
    for port in ports:
        if port.name in arrays:
            feeds[port.name] = normalize(arrays[port.name])
            used.add(port.name)
            continue
        pattern = re.compile(re.escape(port.name) + r"\[(\d*)\]")
        items = {}
        for key in arrays:
            if m := pattern.fullmatch(key):
                used.add(key)
                if m.group(1):
                    items[int(m.group(1))] = normalize(arrays[key])
        if items or f"{port.name}[]" in arrays:
            if sorted(items) != list(range(len(items))):
                raise InputError(f"{path}: sequence {port.name!r} has keys for positions {sorted(items)}, not 0..n-1")
            feeds[port.name] = TensorSeq([items[i] for i in range(len(items))], _declared_elem(port.type))
        elif port.kind == "optional_type":
            feeds[port.name] = None
        else:
            raise InputError(f"{path}: no value for input {port.name!r}")
    if extra := sorted(set(arrays) - used):
        raise InputError(f"{path}: keys {extra} match no model input")
    return feeds


def _load_pb_folder(folder: Path, ports: list[Port]) -> dict[str, Any]:
    files = sorted(folder.glob("input_*.pb"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    if len(files) != len(ports):
        raise InputError(f"{folder}: {len(files)} input_*.pb files for a model with {len(ports)} inputs")
    return {port.name: _read_pb(f, port) for f, port in zip(files, ports)}


def _read_pb(path: Path, port: Port) -> Any:
    kind = port.kind
    proto_cls = {
        "tensor_type": onnx.TensorProto,
        "sequence_type": onnx.SequenceProto,
        "optional_type": onnx.OptionalProto,
    }.get(kind)
    if proto_cls is None:
        raise InputError(f"{path}: input {port.name!r} has an unsupported type ({kind})")
    proto = proto_cls()
    try:
        proto.ParseFromString(path.read_bytes())
        if kind == "optional_type" and not any(
            proto.HasField(f) for f in ("tensor_value", "sequence_value", "sparse_tensor_value", "map_value", "optional_value")
        ):
            return None
        value = {
            "tensor_type": numpy_helper.to_array,
            "sequence_type": numpy_helper.to_list,
            "optional_type": numpy_helper.to_optional,
        }[kind](proto)
    except (DecodeError, OSError, ValueError, TypeError) as e:
        raise InputError(f"{path}: not a {proto_cls.__name__} for input {port.name!r} ({e})") from None
    return normalize(value)


# -- synthesizing ---------------------------------------------------------------------


def synthesize_inputs(
    ports: list[Port],
    seed: int = 0,
    dims: dict[str, int] | None = None,
    seq_len: int = DEFAULT_SEQ_LEN,
    default_dim: int = DEFAULT_DIM,
    int_high: int = 4,
) -> dict[str, Any]:
    """Random inputs from the declared types: floats ~ N(0, 1), integers in [0,
    ``int_high``) (1: all zero, a position valid in any list and a count of no trips),
    symbolic dims from ``dims`` (the same name gets the same size everywhere)."""
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    return {p.name: _synth(p.type, rng, dims, seq_len, default_dim, p.name, int_high) for p in ports}


def _synth(tp: onnx.TypeProto, rng, dims, seq_len, default_dim, name, int_high=4) -> Any:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return _synth_tensor(tp.tensor_type, rng, dims, default_dim, name, int_high)
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        return TensorSeq(
            [_synth(elem, rng, dims, seq_len, default_dim, name, int_high) for _ in range(seq_len)], _declared_elem(tp)
        )
    if kind == "optional_type":
        return _synth(tp.optional_type.elem_type, rng, dims, seq_len, default_dim, name, int_high)
    raise InputError(f"cannot synthesize input {name!r} of type {kind}")


# Made-up sample inputs stay below this many elements each (a hostile model may declare
# a dim of 2**62).
MAX_SYNTH_ELEMENTS = 1 << 26


def _synth_tensor(tt: onnx.TypeProto.Tensor, rng, dims, default_dim, name, int_high=4) -> np.ndarray:
    if not tt.elem_type:
        raise InputError(f"input {name!r} declares no element type; give inputs with --inputs")
    shape = []
    for d in tt.shape.dim if tt.HasField("shape") else [onnx.TensorShapeProto.Dimension(dim_param="")]:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.dim_param:
            shape.append(dims.setdefault(d.dim_param, default_dim))
        else:
            shape.append(default_dim)
    dtype = np_dtype(tt.elem_type)
    size = math.prod(shape)
    if size > MAX_SYNTH_ELEMENTS:
        raise InputError(f"input {name!r} declares shape {shape} ({size} elements): too large to make up samples for;"
                         " give smaller dims with --dim NAME=N or inputs with --inputs")
    if tt.elem_type == onnx.TensorProto.STRING:
        alphabet = np.array(list("abcxyz"))
        return np.array(["".join(rng.choice(alphabet, rng.integers(0, 4))) for _ in range(size)], dtype=object).reshape(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0, int_high, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    # floats, including bfloat16/float8 (ml_dtypes), and the narrow integer types
    values = rng.integers(0, int_high, size=shape) if dtype.kind in "iuV" or "int" in dtype.name else rng.standard_normal(shape)
    return np.asarray(values).astype(np.float32).astype(dtype)


def _declared_elem(tp: onnx.TypeProto) -> int | None:
    while tp.WhichOneof("value") in ("sequence_type", "optional_type"):
        tp = getattr(tp, tp.WhichOneof("value")).elem_type
    return tp.tensor_type.elem_type or None if tp.WhichOneof("value") == "tensor_type" else None


# -- saving ---------------------------------------------------------------------------


def save_values(folder: str | Path, prefix: str, ports: list[Port], values: list[Any]) -> list[Path]:
    """Write ``{prefix}_{j}.pb`` files, the ONNX backend test-data layout."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for j, (port, value) in enumerate(zip(ports, values)):
        proto = _to_proto(port, value)
        path = folder / f"{prefix}_{j}.pb"
        path.write_bytes(proto.SerializeToString())
        written.append(path)
    return written


def _to_proto(port: Port, value: Any):
    kind = port.kind
    if kind == "optional_type":
        elem = port.type.optional_type.elem_type.WhichOneof("value")
        etype = onnx.OptionalProto.SEQUENCE if elem == "sequence_type" else onnx.OptionalProto.TENSOR
        if value is None:  # an empty optional is UNDEFINED, the backend test-data convention
            return numpy_helper.from_optional(None, name=port.name)
        return numpy_helper.from_optional(list(value) if isinstance(value, list) else value, name=port.name, dtype=etype)
    if isinstance(value, list):
        return numpy_helper.from_list(list(value), name=port.name, dtype=onnx.SequenceProto.TENSOR)
    return numpy_helper.from_array(np.asarray(value), name=port.name)
