"""Reductions and ArgMax/ArgMin name their axes by positive numbers, for onnxruntime
(quirk "reduce-negative-axis-empty").

onnxruntime 1.31 returns the input itself, unreduced, from every Reduce* op and from
ArgMax/ArgMin when the input is empty and an axis is negative: ReduceSum(x[3, 0],
axes=[-1]) gives a [3, 0] tensor where ONNX gives [3] zeros (or [3, 1] with
keepdims). No error: the wrong shape flows on. Positive axes are reduced right, and
exporters write -1 (tf2onnx's count_nonzero of a RaggedTensor's rows, a batch of empty
rows). So each negative axis becomes ``axis + rank``: in the attribute or the constant
axes input when the input's rank is known, and at run time (``Where(axes < 0, axes +
rank, axes)``) when the axes are an input that is not constant. An axes attribute on an
input of unknown rank cannot be rewritten; ``check --target onnxruntime`` names it.
Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes.lowering._batched_map import AXES_INPUT_SINCE
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ops import REDUCE_OPS
from seqlower.ir.builder import NameAuthority

__all__ = ["PositiveReductionAxesPass", "REDUCING_OPS"]

REDUCING_OPS = REDUCE_OPS | {"ArgMax", "ArgMin"}


class PositiveReductionAxesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _make_positive)


def _rank(x: ir.Value) -> int | None:
    return None if x.shape is None else x.shape.rank()


def _make_positive(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type not in REDUCING_OPS or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    rank = _rank(x)
    if node.op_type in ("ArgMax", "ArgMin"):
        attr = node.attributes.get("axis")
        if attr is None or attr.as_int() >= 0 or rank is None:
            return None
        node.attributes["axis"] = ir.AttrInt64("axis", attr.as_int() + rank)
        return node.op_type, "its negative axis counted from the front (onnxruntime)"
    if scope.opset < AXES_INPUT_SINCE.get(node.op_type, 18):
        attr = node.attributes.get("axes")
        if attr is None or rank is None or all(a >= 0 for a in attr.as_ints()):
            return None
        node.attributes["axes"] = ir.AttrInt64s("axes", [a % rank if a < 0 else a for a in attr.as_ints()])
        return node.op_type, "its negative axes counted from the front (onnxruntime)"
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None or _made_positive(axes):
        return None
    known = const_array(axes)
    if known is not None and not (known < 0).any():
        return None
    if known is None or rank is None:
        return _at_run_time(node, axes, x, scope, names)
    fixed = np.where(known < 0, known + rank, known).astype(np.int64)
    node.replace_input_with(1, scope.builder(node, names).constant(fixed, f"{node.name or node.op_type}_axes"))
    return node.op_type, "its negative axes counted from the front (onnxruntime)"


def _at_run_time(node: ir.Node, axes: ir.Value, x: ir.Value, scope: Scope, names: NameAuthority) -> tuple[str, str]:
    o = Ops(scope.builder(node, names))
    base = node.name or node.op_type
    rank = o.op("Size", [o.shape(x, f"{base}_dims")], f"{base}_rank", dtype=INT64, shape=[])
    shifted = o.op("Add", [axes, rank], f"{base}_axes_from_front", dtype=INT64, shape=axes.shape)
    negative = o.op("Less", [axes, o.scalar(0)], f"{base}_axes_negative", dtype=ir.DataType.BOOL, shape=axes.shape)
    positive = o.op("Where", [negative, shifted, axes], f"{base}_positive_axes", dtype=INT64, shape=axes.shape)
    node.replace_input_with(1, positive)
    return node.op_type, "its axes counted from the front at run time (onnxruntime)"


def _made_positive(axes: ir.Value) -> bool:
    """``axes`` is this pass's ``Where(axes < 0, axes + rank, axes)``."""
    p = axes.producer()
    if p is None or p.op_type != "Where" or len(p.inputs) != 3 or p.inputs[0] is None:
        return False
    less = p.inputs[0].producer()
    return less is not None and less.op_type == "Less" and len(less.inputs) == 2 and less.inputs[1] is not None \
        and (zero := const_array(less.inputs[1])) is not None and zero.size == 1 and not zero.any()
