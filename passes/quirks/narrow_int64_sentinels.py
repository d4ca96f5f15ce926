"""INT64_MAX and INT64_MIN constants written as INT32_MAX and INT32_MIN, for tract
(quirk "int64-narrowed").

tract keeps a value it can read as a dim (a Concat of a constant with a Shape's dims,
a Slice end) as a 32-bit one: INT64_MAX becomes -1, 2^32 becomes 0 (bisected by
seqlower reduce (then tools/bisect_runtime.py) from fuzz seed 4220 to ``Concat([INT64_MAX], Unsqueeze(Gather(
Shape(x), 0)))``, TorchScript's trip count ``min(INT64_MAX, len)`` of an ``enumerate``:
-1 iterations, then a fact with a negative dim, and tract aborts the process). Exporters
write these two numbers as "no bound": a Slice to the end, a Loop without a trip count,
a clamp. No dim tract plans for reaches 2^31, so the int32 bounds say the same there.
Only a constant read as a bound is narrowed: each use, through Casts, Reshapes,
Concats and the like, is a Slice's starts or ends, a Loop's trip count, a shape
(Expand, Reshape, ConstantOfShape, Tile), a Range, a Min, Max, Clip, ReduceMin or
ReduceMax (whose results are bounds too) or a comparison, never a model output or
another op's data. Other numbers past int32 stay as they are; ``check --target`` names
a Slice whose end is computed from one (quirk "slice-end-max").
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.ir.helpers import graphs_of

__all__ = ["NarrowInt64SentinelsPass"]

_I64 = np.iinfo(np.int64)
_I32 = np.iinfo(np.int32)


def _narrowed(array: np.ndarray) -> np.ndarray | None:
    """``array`` with its sentinels narrowed, or None when it holds none."""
    hit = (array == _I64.max) | (array == _I64.min)
    if not hit.any():
        return None
    return np.where(array == _I64.max, _I32.max, np.where(array == _I64.min, _I32.min, array)).astype(np.int64)


# Ops whose every input is a bound, or the named inputs of ops that take one.
_BOUNDS = {"Slice": {1, 2}, "Loop": {0}, "Range": {0, 1, 2}, "Min": None, "Max": None, "ReduceMin": {0},
           "ReduceMax": {0}, "Clip": {1, 2}, "Greater": None, "Less": None, "GreaterOrEqual": None,
           "LessOrEqual": None, "Equal": None, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1}}
# Ops that pass their first input's numbers on (a bound stays a bound).
_CARRIERS = frozenset({"Cast", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Concat", "Flatten"})


def _read_as_bound(value: ir.Value, depth: int = 0) -> bool:
    """Whether every use of ``value`` reads it as a bound (see the module's doc)."""
    if value.is_graph_output() or depth > 8 or not value.uses():
        return False
    for use in value.uses():
        node, idx = use.node, use.idx
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in _BOUNDS:
            inputs = _BOUNDS[node.op_type]
            if inputs is not None and idx not in inputs:
                return False
            if node.op_type in ("Min", "Max", "ReduceMin", "ReduceMax") and not all(_read_as_bound(o, depth + 1) for o in node.outputs):
                return False
        elif node.op_type == "Reshape" and idx == 1:
            continue  # a shape
        elif node.op_type in _CARRIERS and (node.op_type == "Concat" or idx == 0):
            if not all(_read_as_bound(o, depth + 1) for o in node.outputs):
                return False
        else:
            return False
    return True


class NarrowInt64SentinelsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        inputs = set(model.graph.inputs)
        graphs: list[ir.Graph | ir.Function] = [*graphs_of(model), *model.functions.values()]
        for graph in graphs:
            if isinstance(graph, ir.Graph):
                for value in graph.initializers.values():
                    # An initializer that is an input is the caller's default: not ours to change.
                    if value in inputs or value.const_value is None or value.const_value.dtype != ir.DataType.INT64:
                        continue
                    if not _read_as_bound(value):
                        continue
                    if (new := _narrowed(value.const_value.numpy())) is not None:
                        value.const_value = ir.tensor(new, name=value.name)
                        modified = True
            for node in graph:
                if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or not _read_as_bound(node.outputs[0]):
                    continue
                modified |= _narrow_constant(node)
        return ir.passes.PassResult(model, modified)


def _narrow_constant(node: ir.Node) -> bool:
    attr = node.attributes.get("value")
    if attr is not None and attr.type == ir.AttributeType.TENSOR:
        tensor = attr.value
        if tensor.dtype == ir.DataType.INT64 and (new := _narrowed(tensor.numpy())) is not None:
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(new, name=tensor.name))
            return True
        return False
    for key in ("value_int", "value_ints"):
        attr = node.attributes.get(key)
        if attr is None:
            continue
        array = np.asarray(attr.value, np.int64)
        if (new := _narrowed(array)) is not None:
            node.attributes[key] = ir.AttrInt64(key, int(new)) if key == "value_int" else ir.AttrInt64s(key, [int(v) for v in new])
            return True
    return False
