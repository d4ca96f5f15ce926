"""Map-typed values beside onnx_ir, which has no map type.

scikit-learn's ZipMap makes ``seq(map(label, float))`` values. ``from_proto`` leaves
them typeless in the IR and keeps their types in ``model.meta[MAP_TYPES_KEY]``;
``restore_map_types`` writes them back into a serialized proto.
"""

from __future__ import annotations

import onnx
from seqlower._deferred import onnx_ir as ir

from seqlower.errors import ModelError
from seqlower.io.protos import innermost_type, value_infos

__all__ = ["MAP_TYPES_KEY", "from_proto", "restore_map_types"]


# onnx_ir has no map type. Values typed seq(map(...)) (scikit-learn's ZipMap output) are
# typeless in the IR, and get their type back from this side table when serialized.
MAP_TYPES_KEY = "seqlower.map_types"


def _holds_map(tp: onnx.TypeProto) -> bool:
    return innermost_type(tp).WhichOneof("value") == "map_type"


def from_proto(proto: onnx.ModelProto, label: str = "<model>") -> ir.Model:
    """``ir.serde.deserialize_model``, for models with map types too (see MAP_TYPES_KEY)."""
    maps = {vi.name: vi.type.SerializeToString() for vi in value_infos(proto) if _holds_map(vi.type)}
    if maps:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        for vi in value_infos(copy):
            if vi.name in maps:
                vi.ClearField("type")
        proto = copy
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # onnx_ir raises assorted types on malformed graphs
        raise ModelError(f"{label}: cannot load model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if maps:
        model.meta[MAP_TYPES_KEY] = maps
    return model


def restore_map_types(model: ir.Model, proto: onnx.ModelProto) -> onnx.ModelProto:
    maps = model.meta.get(MAP_TYPES_KEY)
    if maps:
        for vi in value_infos(proto):
            if vi.name in maps and not vi.HasField("type"):
                vi.type.ParseFromString(maps[vi.name])
    return proto
