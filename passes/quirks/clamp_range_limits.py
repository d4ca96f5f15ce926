"""A Range's limit clamped to its start where the step points away from it, for
onnx2torch (quirk "range-step-sign").

ONNX's ``Range(5, 3, 1)`` is empty; onnx2torch hands it to ``torch.arange``, which fails
("upper bound and lower bound inconsistent with step sign"). tf2onnx's ragged
``to_tensor`` ranges over run-time lengths that are often shorter than the start. With
the limit clamped (``max(limit, start)`` for a positive step, ``min`` for a negative
one, chosen at run time when the step is not a constant) the range is the same, and
empty where ONNX's is. Functions and subgraphs included.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["ClampRangeLimitsPass"]


class ClampRangeLimitsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _clamp)


def _clamped(limit: ir.Value, start: ir.Value) -> bool:
    """``limit`` is already ``max``/``min`` of some limit and ``start`` (or a Where of both)."""
    p = limit.producer()
    # (through the Identity it wrote before, or the Expand an Identity onnx2torch lacks became)
    if p is not None and p.op_type in ("Identity", "Expand") and p.inputs[0] is not None:
        p = p.inputs[0].producer()
    if _max_or_min(p, start):
        return True
    return p is not None and p.op_type == "Where" and p.inputs[1] is not None and _max_or_min(p.inputs[1].producer(), start)


def _max_or_min(p: ir.Node | None, start: ir.Value) -> bool:
    """``p`` is Max or Min with ``start``, or the Where the builder writes for them on
    integers below opset 12."""
    if p is None:
        return False
    if p.op_type in ("Max", "Min"):
        return start in p.inputs
    if p.op_type != "Where" or p.inputs[0] is None:
        return False
    c = p.inputs[0].producer()
    return c is not None and c.op_type in ("Greater", "Less") and start in c.inputs and start in p.inputs[1:]


def _clamp(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Range" or not is_default_domain(node) or len(node.inputs) != 3 or None in node.inputs:
        return None
    start, limit, delta = node.inputs
    cs, cl, cd = const_array(start), const_array(limit), const_array(delta)
    if cs is not None and cl is not None and cd is not None:
        return None  # a constant range: onnx2torch computes it as ONNX does or it folds
    if _clamped(limit, start):
        return None  # a model lowered before
    o = Ops(scope.builder(node, names))
    base = node.name or "range"
    dtype = limit.dtype
    if cd is not None and cd.size == 1:
        up = float(cd.reshape(())) > 0
        clamped = o.op("Max" if up else "Min", [limit, start], f"{base}_clamped_limit", dtype=dtype, shape=[])
    else:
        up = o.op("Max", [limit, start], f"{base}_up", dtype=dtype, shape=[])
        down = o.op("Min", [limit, start], f"{base}_down", dtype=dtype, shape=[])
        zero = o.op("Sub", [delta, delta], f"{base}_zero", dtype=delta.dtype, shape=[])
        rising = o.op("Greater", [delta, zero], f"{base}_rising", dtype=ir.DataType.BOOL, shape=[])
        clamped = o.op("Where", [rising, up, down], f"{base}_clamped_limit", dtype=dtype, shape=[])
    node.replace_input_with(1, clamped)
    return "Range", "limit clamped to the start where the step points away (onnx2torch)"
