"""A Concat operand that may be empty at run time, with two or more operands after it, is
joined padded by one row and the row sliced off again, for OpenVINO (quirk
"concat-after-run-time-empty").

OpenVINO 2026.4's CPU plugin misplaces what a Concat joins after an operand that is
empty at run time when two or more operands follow it: ``Concat(E, a, b)`` with E of
shape [0, 1] gave ``[a, garbage]``, no error (torch fuzz seed 21758). Nesting does not
help: it merges nested Concats into one first. An operand followed by one operand, and
one that is never empty, are joined right. So, at the first operand E that may be empty
with two or more after it::

    Concat(head..., E, rest...)  ->  Concat(head..., Slice(Concat(Pad(E, 1 row), R), 1:))

where R is the same rewrite of ``rest`` as one value: the padded E is never empty and has
one operand after it, and the Slice between keeps OpenVINO from merging the Concats. The
operands before E are never empty (E is the first that may be, with two after it, so
any before it that may be is followed by more). "May be empty": its dim along the axis is
not a known positive number. Functions and If branches included; not Loop bodies, where
OpenVINO then bounds the carried values wrong (such a Concat there stays, and is not named).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority, unsupported

__all__ = ["PadEmptyConcatOperandsPass"]


class PadEmptyConcatOperandsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _may_be_empty(v: ir.Value, axis: int) -> bool:
    c = const_array(v)
    if c is not None:
        return c.ndim > axis and c.shape[axis] == 0
    if v.shape is None or not -v.shape.rank() <= axis < v.shape.rank():
        return True
    d = v.shape[axis]
    return not (isinstance(d, int) and d > 0)


def _first_padded(values: list[ir.Value], axis: int) -> int | None:
    return next((i for i, v in enumerate(values[:-2]) if _may_be_empty(v, axis)), None)


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Concat" or not is_default_domain(node) or "axis" not in node.attributes or None in node.inputs:
        return None
    if ".body" in scope.label:
        # Not in a Loop's body: OpenVINO bounds a carried value padded and sliced so that
        # a Loop of one iteration fails ("Can not clone with new dims ... {2 - ?, 2}",
        # graph program 20010).
        return None
    out = node.outputs[0]
    if out.dtype is None or out.dtype == ir.DataType.STRING:
        return None  # (OpenVINO has no strings; a type is needed to pad)
    types = ("tensor(uint8)",) if out.dtype == ir.DataType.BOOL else (f"tensor({out.dtype.name.lower()})",)
    if unsupported("Pad", scope.opset, types) is not None:
        return None  # (float16 before Pad-11, ...: left as it is)
    rank = out.shape.rank() if out.shape is not None else None
    rank = rank if rank is not None else next((v.shape.rank() for v in node.inputs if v.shape is not None), None)
    axis = node.attributes["axis"].as_int()
    if rank is None or not -rank <= axis < rank:
        return None  # (a rank to pad at is needed)
    axis %= rank
    values = list(node.inputs)
    if _first_padded(values, axis) is None:
        return None
    o = Ops(scope.builder(node, names))
    base = out.name or "concat"
    made = _joined(values, axis, rank, o, base, scope.opset)
    replace_output(out, made, scope, names, node, owned=made.producer() is not None and not made.uses())
    scope.graph.remove(node, safe=True)
    return "Concat", "operands after one empty at run time joined behind a padded row (OpenVINO)"


def _joined(values: list[ir.Value], axis: int, rank: int, o: Ops, base: str, opset: int) -> ir.Value:
    i = _first_padded(values, axis)
    if i is None:
        return values[0] if len(values) == 1 else o.op("Concat", values, base, axis=axis)
    rest = _joined(values[i + 1:], axis, rank, o, f"{base}_rest", opset)
    pads = np.zeros(2 * rank, np.int64)
    pads[axis] = 1
    e = values[i]
    p = e.producer()
    if p is not None and p.op_type == "If" and is_default_domain(p):
        # OpenVINO read garbage from a Pad of an If output whose shape the branches
        # decide (torch fuzz seed 22352, x [1, 1]): its shape hidden from it first.
        e = o.shape_hidden(e, f"{base}_shape")
    # Pad takes bool from opset 13: before, the row is padded to its bytes.
    as_bytes = e.dtype == ir.DataType.BOOL and unsupported("Pad", opset, ("tensor(bool)",)) is not None
    if as_bytes:
        e = o.op("Cast", [e], f"{base}_bytes", dtype=ir.DataType.UINT8, to=ir.DataType.UINT8.value)
    if opset >= 11:
        padded = o.op("Pad", [e, o.ints(pads.tolist())], f"{base}_padded")
    else:
        padded = o.op("Pad", [e], f"{base}_padded", pads=pads.tolist())
    if as_bytes:
        padded = o.op("Cast", [padded], f"{base}_padded_bool", dtype=ir.DataType.BOOL, to=ir.DataType.BOOL.value)
    joined = o.op("Concat", [padded, rest], f"{base}_joined", axis=axis)
    tail = o.slice(joined, o.ints([1]), o.ints([2**63 - 1]), [axis], f"{base}_tail")
    return tail if i == 0 else o.op("Concat", [*values[:i], tail], base, axis=axis)
