"""A Concat operand that is empty along the Concat's axis by construction is dropped.

The Flat and Packed lowerings start a list's buffer as ``Expand(0, [0])`` and append by
Concat, so a list unrolled from its start reads ``Concat(Expand(0, [0]), first, ...)``:
one node and one operand that add nothing. OpenVINO 2026.4 also computes the wrong
numbers from it: the Shape of a Slice of such a Concat, read as another Slice's bound
(a Flat element's length read back as the next list's bounds), comes out as the whole
buffer's length, with no error (fuzz seed 10323: ``[2.]`` for ``[]``). Without the empty
operand it is right. Dropped for every target, since the Concat is the same without it.

An operand counts as empty when it is a constant with no elements along the axis, or
when it is an Expand of a constant to a constant target with 0 at that axis (the lowerings' own empty buffers; OpenVINO's rewrites keep them
Expands, since it misreads empty constants). At least one operand is kept, so the
result keeps its other dims and dtype. Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, replace_output, visit_each_node

__all__ = ["DropEmptyConcatOperandsPass"]


class DropEmptyConcatOperandsPass(ir.passes.InPlacePass):
    """A clean-up, not a rewrite for a target: nothing goes into the report."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, visit_each_node(model, _drop))


def _drop(node: ir.Node, scope: Scope, names: NameAuthority) -> bool:
    if node.op_type != "Concat" or not is_default_domain(node) or len(node.inputs) < 2 or None in node.inputs:
        return False
    axis = node.attributes.get_int("axis")
    if axis is None:
        return False
    kept = [v for v in node.inputs if not _empty_along(v, axis)]
    if len(kept) == len(node.inputs):
        return False
    if not kept:
        kept = [node.inputs[0]]  # all empty: one keeps the other dims
    if len(kept) > 1:
        b = scope.builder(node, names)
        out = node.outputs[0]
        made = b.op("Concat", kept, out.name or "concat", dtype=out.dtype, shape=out.shape, axis=axis)
        replace_output(out, made, scope, names, node, owned=True)
    else:
        if kept[0].type is None:
            kept[0].type = node.outputs[0].type
        replace_output(node.outputs[0], kept[0], scope, names, node, owned=False)
    scope.graph.remove(node, safe=True)
    return True


def _empty_along(v: ir.Value, axis: int) -> bool:
    # (Not by an inferred shape: a lowering of the lowered model, inferring more, would
    # drop more, and the lowered model would not be its own lowering.)
    array = const_array(v)
    if array is not None:
        return -array.ndim <= axis < array.ndim and array.shape[axis] == 0
    p = v.producer()
    if p is None or p.op_type != "Expand" or not is_default_domain(p) or len(p.inputs) != 2 or None in p.inputs:
        return False
    x, target = const_array(p.inputs[0]), const_array(p.inputs[1])
    if x is None or target is None:
        return False
    try:
        dims = np.broadcast_shapes(x.shape, tuple(int(d) for d in target.reshape(-1)))
    except ValueError:
        return False
    return -len(dims) <= axis < len(dims) and dims[axis] == 0
