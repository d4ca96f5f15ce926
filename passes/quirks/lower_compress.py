"""Lower ``Compress`` to ``NonZero`` -> ``Reshape`` -> ``Gather``, for targets that lack it.

OpenVINO 2026.4's ONNX frontend translates Compress through a Squeeze whose rank it
cannot infer, which its CPU plugin refuses ("doesn't support Squeeze operation with
dynamic rank"); tract 0.23.9 cannot type it. tf2onnx writes Compress for every
``tf.boolean_mask`` (and the ragged ops built on it). Here the selected positions are
``NonZero(condition)`` (``[1, K]``: the condition is 1-D), flattened by a Reshape to a
constant ``[-1]`` (rank 1 for every runtime's inference, where a Squeeze of axis 0 is
not for OpenVINO's), and gathered along the axis; without an axis, from the flattened
input. A condition shorter than the axis selects among its first entries only, and a
true entry past the axis fails, as Compress does.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["LowerCompressPass"]


class LowerCompressPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _lower)


def _lower(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Compress" or not is_default_domain(node) or len(node.inputs) < 2:
        return None
    x, condition = node.inputs[0], node.inputs[1]
    if x is None or condition is None:
        return None
    o = Ops(scope.builder(node, names))
    out = node.outputs[0]
    name = out.name or "compress"
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else None
    rank = x.shape.rank() if x.shape is not None else None
    if axis is not None and rank is not None:
        axis %= rank
    rows = x.dtype == ir.DataType.STRING and axis is not None and axis != (rank or 0) - 1
    if rows and axis != 0 and rank is None:
        return None  # string slices along an axis of unknown place: stays (the target check names it)
    where = o.op("NonZero", [condition], f"{name}_where", dtype=INT64)
    if rows:
        # onnxruntime's Gather copies one string per gathered slice (quirk
        # string-gather-rows); GatherND takes whole slices along the first axis.
        assert axis is not None
        perm = [axis, *(i for i in range(rank or 0) if i != axis)]
        moved = o.op("Transpose", [x], f"{name}_moved", perm=perm) if axis else x
        picked = o.op("GatherND", [moved, o.op("Transpose", [where], f"{name}_indices", perm=[1, 0])],
                      f"{name}_picked", dtype=x.dtype)
        back = [perm.index(i) for i in range(len(perm))]
        result = o.op("Transpose", [picked], f"{name}_gathered", perm=back) if axis else picked
    else:
        positions = o.reshape(where, o.ints([-1]), f"{name}_positions")
        source = x if axis is not None else o.reshape(x, o.ints([-1]), f"{name}_flat")
        result = o.op("Gather", [source, positions], f"{name}_gathered", dtype=x.dtype, axis=axis or 0)
    replace_output(out, result, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "NonZero, GatherND" if rows else "NonZero, Gather"
