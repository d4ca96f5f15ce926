"""Reading and writing models safely (checking is in ``model_check``, map types in
``map_types``; their public names are re-exported here).

Reading refuses anything that is not a well-formed ONNX model and any external-data
location that would leave the model's folder (absolute paths, ``..``, symlinks that
point out): the class of onnx's CVE-2022-25882 and CVE-2024-27318. Writing is atomic: a
temporary file in the destination folder is renamed over the destination only once it
is complete, so a failed or interrupted write never leaves half a model behind.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import tempfile
import warnings
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import onnx
from seqlower._deferred import onnx_ir as ir
from google.protobuf.message import DecodeError

from seqlower.errors import ModelError, ModelWarning
from seqlower.ir.helpers import graphs_of
from seqlower.io.map_types import MAP_TYPES_KEY, from_proto, restore_map_types
from seqlower.io.check import (
    PROTOBUF_LIMIT,
    InferredTypes,
    check_model,
    check_proto,
    check_structure,
    check_types,
    check_weight,
    skeleton,
    sort_nodes,
    weightless_proto,
)
from seqlower.io.protos import data_bytes, innermost_type, iter_tensor_protos
from seqlower.io.weights import Held, Weights, hold_weights, is_stub

__all__ = [
    "ModelSource",
    "read_model_proto",
    "read_model_held",
    "load_model",
    "save_model",
    "stage_model",
    "StagedModel",
    "check_model",
    "weightless_proto",
    "to_proto",
    "with_weights",
    "from_proto",
    "innermost_type",
    "iter_tensor_protos",
    "MAP_TYPES_KEY",
    "PROTOBUF_LIMIT",
]

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike | bytes | onnx.ModelProto

def _label(source: ModelSource) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return "<model bytes>" if isinstance(source, bytes) else "<model>"


# Files at least this big are mapped, not read, when their weights are held.
_MAP_BYTES = 1 << 24


def _mapped(path: Path) -> bytes | mmap.mmap:
    """The file's bytes, mapped read-only when it is big (see ``Weights.unmapped``)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < max(_MAP_BYTES, 1):  # (an empty file cannot be mapped)
            return f.read()
        if hasattr(mmap, "MAP_POPULATE"):  # (read ahead in one call: every page is read to parse)
            return mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _check_external_data(proto: onnx.ModelProto, base_dir: str | None, label: str, *,
                         main_initializers: bool = True, main_nodes: list[int] | None = None,
                         unplaced: bool = False) -> list[onnx.TensorProto]:
    """Refuse external data that is missing, truncated or outside the model's folder.
    Returns the external tensors but the main graph's initializers (``_load_node_tensors``).
    ``unplaced``: a model with no folder (``base_dir`` None) may keep external data it
    never reads: none is returned, and none is checked."""
    if base_dir is None and unplaced:
        return []
    base_real = os.path.realpath(base_dir) if base_dir is not None else None
    others = [t for t in iter_tensor_protos(proto, main_initializers=False, main_nodes=main_nodes)
              if t.data_location == onnx.TensorProto.EXTERNAL and not is_stub(t)]
    main = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
            and not is_stub(t)] if main_initializers else []
    for tensor in (*main, *others):
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
        need = data_bytes(tensor)
        if need is not None and length is not None and length != need:
            raise ModelError(f"{where}: external data length {length} does not fit its shape {list(tensor.dims)} ({need} bytes)")
        if need is not None and offset + need > size:
            raise ModelError(
                f"{where}: external data file {location!r} is truncated "
                f"(the tensor needs bytes {offset}..{offset + need}, file has {size})"
            )
    return others


def read_model_proto(
    source: ModelSource, *, load_external_data: bool = True, check: bool = True,
    types: dict[str, onnx.TypeProto] | None = None,
) -> onnx.ModelProto:
    """Parse and validate a model from a path, bytes or a ModelProto (which is copied).
    ``types``, when given, gets the type inference found for each main-graph value.

    Raises:
        ModelError: one line naming the file, for anything unreadable or invalid.
    """
    return _read(source, load_external_data=load_external_data, check=check, types=types, hold=False)[0]


def read_model_held(source: ModelSource, *, types: MutableMapping[str, onnx.TypeProto] | InferredTypes | None = None,
                    base_dir: str | None = None, unplaced: bool = False) -> tuple[onnx.ModelProto, Weights | None]:
    """``read_model_proto`` (checked, external data not loaded) with the main graph's
    weights held out of the proto (``seqlower.io.weights``): each stands in it as a stub.
    For rewriting the graph and writing it back with ``stage_model(..., weights)``; a
    pass that converts the whole model restores them first (``Weights.restore``).
    ``base_dir``: the folder of the model's external data, for ``bytes`` (a path's own
    folder otherwise). ``unplaced``: without a folder, external data stays where it
    is, unread and unchecked (a proto loaded without it, handed to the API)."""
    return _read(source, load_external_data=False, check=True, types=types, hold=True, base_dir=base_dir,
                 unplaced=unplaced)


# Main-graph nodes from which the type check (onnx's inference on the whole model) waits
# until a type is asked for (``InferredTypes``): a stack of equal blocks is typed by its
# templates' lowerings, and each sub-model lowered is checked as a model is. (Every model
# read with its weights held: the outputs of 78 fixtures on 3 targets and of 20 family
# members are byte for byte those of the check at once, and it ran on the other core
# only while the checks ran in a forked child.)
DEFER_NODES = 0


def _read(source: ModelSource, *, load_external_data: bool, check: bool, types: Any,
          hold: bool, base_dir: str | None = None, unplaced: bool = False) -> tuple[onnx.ModelProto, Weights | None]:
    label = _label(source)
    held = None
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
    else:
        data, folder = _source_bytes(source, label, hold)
        base_dir = folder if folder is not None else base_dir
        proto, held = _parse(data, label, hold)
    if not proto.HasField("graph"):
        raise ModelError(f"{label}: not an ONNX model (no graph)")
    if proto.ir_version <= 0:
        raise ModelError(f"{label}: not an ONNX model (no IR version)")
    # Held weights were read inline from the file (none of the main graph's initializers
    # is external there, or nothing is held).
    external = _check_external_data(proto, base_dir, label, main_initializers=held is None,
                                    main_nodes=held.external if held is not None else None, unplaced=unplaced)
    if external and not load_external_data:
        _load_node_tensors(external, base_dir, label)
    if check:
        _check_read(proto, held, label, base_dir, types)
    if load_external_data and base_dir is not None:
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
        except (OSError, ValueError) as e:
            raise ModelError(f"{label}: cannot load external data ({e})") from None
    return proto, held.weights if held is not None else None


def _source_bytes(source: bytes | str | os.PathLike, label: str, hold: bool) -> tuple[bytes | mmap.mmap, str | None]:
    """A model's bytes (a file mapped where its weights are to be held), and the file's
    folder (None for bytes)."""
    if isinstance(source, bytes):
        data, folder = source, None
    else:
        path = Path(source)
        if not path.exists():
            raise ModelError(f"{label}: no such file")
        if path.is_dir():
            raise ModelError(f"{label}: is a folder, not a model file")
        try:
            data = _mapped(path) if hold else path.read_bytes()
        except OSError as e:
            raise ModelError(f"{label}: cannot read ({e.strerror})") from None
        folder = str(path.parent)
    if not data:
        raise ModelError(f"{label}: empty file, not an ONNX model")
    return data, folder


def _parse(data: bytes | mmap.mmap, label: str, hold: bool) -> tuple[onnx.ModelProto, Held | None]:
    """The model parsed, with its big weights held where it can be (``hold``)."""
    held = None
    if hold:
        try:
            held = hold_weights(data, lambda t: check_weight(t, label))
        except (DecodeError, RuntimeError, ValueError):
            held = None  # parsed whole below, for the reader's own message
    if held is not None:
        held.weights.unmapped()
        return held.proto, held
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data[:] if isinstance(data, mmap.mmap) else data)
    except (DecodeError, RuntimeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "MaxDepth" in first:
            raise ModelError(f"{label}: nested too deeply to read (protobuf reads 100 message levels: about 30"
                             " levels of subgraphs)") from None
        raise ModelError(f"{label}: not an ONNX model (protobuf parse failed: {first})") from None
    return proto, None


def _check_read(proto: onnx.ModelProto, held: Held | None, label: str, base_dir: str | None, types: Any) -> None:
    """The model's checks, on its skeleton (big weights as typed inputs): they read no weights."""
    skel = held.skeleton if held is not None else skeleton(proto)
    for warning in check_proto(skel, label, base_dir, main_nodes=held.external if held is not None else None):
        warnings.warn(ModelWarning(warning), stacklevel=4)
        if skel is not proto and "topological" in warning:
            sort_nodes(proto)  # the checker sorted the skeleton's copy of the nodes
            if held is not None:
                held.nodes_moved()
    check_structure(proto, label, held)
    check_types(skel, label, types, dims_from=proto if held is not None else None,
                main_nodes=held.attributed if held is not None else None,
                defer=held is not None and len(proto.graph.node) >= DEFER_NODES)


def _load_node_tensors(tensors: list[onnx.TensorProto], base_dir: str | None, label: str) -> None:
    """Read in the external data of ``tensors``, every external one but the main graph's
    initializers (a Constant's value, a subgraph's initializer, which exporters keep inline
    and onnx externalizes when asked to): the writers externalize initializers only, and
    a reference left in the output would name a file beside the input. (Before the checks
    run, which may sort the nodes and so copy them.)"""
    try:
        for tensor in tensors:
            onnx.external_data_helper.load_external_data_for_tensor(tensor, base_dir)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
    except (OSError, ValueError) as e:
        raise ModelError(f"{label}: cannot load external data ({e})") from None


def load_model(source: ModelSource | ir.Model, *, check: bool = True) -> ir.Model:
    """Load into onnx_ir. External data stays lazy (memory-mapped on first use)."""
    if isinstance(source, ir.Model):
        return source
    proto = read_model_proto(source, load_external_data=False, check=check)
    model = from_proto(proto, _label(source))
    if isinstance(source, (str, os.PathLike)):
        ir.external_data.set_base_dir(model.graph, os.path.dirname(os.path.abspath(source)))
    return model


def to_proto(model: ir.Model | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    return restore_map_types(model, ir.serde.serialize_model(model))


def _has_external(model: ir.Model) -> bool:
    return any(
        isinstance(v.const_value, ir.ExternalTensor)
        for g in graphs_of(model)
        for v in g.initializers.values()
    )


def _initializer_bytes(model: ir.Model) -> int:
    total = 0
    for g in graphs_of(model):
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


def stage_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike,
                weights: Weights | None = None) -> StagedModel:
    """Write ``model`` for ``path`` into a temporary folder beside it (see StagedModel).
    Models whose weights do not fit protobuf's 2 GiB, or whose weights were external on
    input, get their weights in ``<name>.data``; the input's files are only read.
    ``weights``: what ``read_model_held`` held out of a ModelProto ``model``, written back
    in place of the stubs."""
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
        # (a ModelProto first: an unlowered model is written without loading onnx_ir)
        if not isinstance(model, onnx.ModelProto) and (_has_external(model) or _initializer_bytes(model) > PROTOBUF_LIMIT):
            data_name = path.name + ".data"
            # Tensors under 1 KiB stay inline, as onnx.save does: shapes and axes stay readable.
            ir.save(model, staged.path, external_data=data_name, size_threshold_bytes=1024)
            if model.meta.get(MAP_TYPES_KEY):
                written = onnx.load(str(staged.path), load_external_data=False)
                staged.path.write_bytes(restore_map_types(model, written).SerializeToString(deterministic=True))
            if (tmp / data_name).exists() and (tmp / data_name).stat().st_size:
                staged.files.insert(0, data_name)
            else:
                _unlink_quietly(tmp / data_name)
        else:
            pieces = weights.serialized(model) if weights is not None and isinstance(model, onnx.ModelProto) \
                else [to_proto(model).SerializeToString(deterministic=True)]
            with open(staged.path, "wb") as f:
                f.writelines(pieces)
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


def with_weights(model: ir.Model | onnx.ModelProto, weights: Weights | None) -> onnx.ModelProto:
    """A lowered model as one ModelProto, the weights ``read_model_held`` held out put back
    from their bytes: what ``stage_model(model, path, weights)`` writes, parsed."""
    if isinstance(model, onnx.ModelProto) and weights is not None:
        out = onnx.ModelProto()
        out.ParseFromString(b"".join(bytes(p) for p in weights.serialized(model)))
        return out
    return to_proto(model)


def save_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write atomically (see ``stage_model``)."""
    stage_model(model, path).commit()


def _unlink_quietly(p: str | os.PathLike) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass
