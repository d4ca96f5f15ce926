"""Nothing written that the target refuses: the rules every builder asks before it writes an
op (Stage 13, item 1), in the manner of TVM's ``legalize_ops``.

``lower_with_report`` puts ``for_target(target)`` in the model's meta (``LEGALIZE_KEY``);
each pass's builders read it from their scope (``passes/_rewrite.Scope``). Before an op
is written, the target's profile (``Target.refuses``: the ops it lacks, the element types
its documentation lists, the versions onnx2torch has converters for) is asked; where it refuses
the op, a rule writes another form of it:

- a reduction (ReduceProd, ReduceSum, ReduceMax, ReduceMin) over axes of static sizes: a
  ``Gather`` per index along each axis, combined by ``Mul``/``Add``/``Max``/``Min`` (the
  product of a dims vector onnx2torch cannot reduce at opset 18);
- ``CumSum`` along a constant axis: the masked ``ReduceSum`` (tract has no CumSum;
  TensorRT runs it on floats only);
- ``Identity``: an ``Expand`` to no new dims (onnx2torch has no Identity-19);
- ``Reshape`` to a constant shape that only drops and inserts dims of 1 (a position
  made a [1] vector), or flattens to one dim: ``Squeeze``/``Unsqueeze``, ``Flatten``
  (onnx2torch has no Reshape-19).

What no rule can write (a reduction over a dim known only at run time) is written as it
is, and ``check --target`` names it. ``LegalizeNodesPass`` runs the same rules over the
nodes already in the model, the user's own and those written before their shapes were
known (onnx2torch: TorchScript's ReduceMin of a [2] vector at opset 19).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from seqlower.ir.builder import Builder, NameAuthority
from seqlower.ir.helpers import const_array, is_default_domain
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.quirks.lower_cumsum import masked_cumsum
from seqlower.options import LowerOptions
from seqlower.targets import Target, load_target

__all__ = ["LegalizeNodesPass", "Legalizer", "for_target"]

# Reductions written as elementwise combinations of their slices: the op combining two.
_COMBINE = {"ReduceProd": "Mul", "ReduceSum": "Add", "ReduceMax": "Max", "ReduceMin": "Min"}
# The identity of each over nothing (a dim of 0): max and min have none.
_EMPTY = {"ReduceProd": 1, "ReduceSum": 0}
# The ops a rule can write in another form.
_RULED = frozenset({*_COMBINE, "CumSum", "Identity", "Reshape"})
# Past this many slices along the reduced axes, the reduction stays (and is named).
_MAX_SLICES = 64


class Legalizer:
    """The emitter rules of one target: a ``seqlower.ir.builder.Legalize``."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def __call__(self, b: Builder, op: str, inputs: Sequence[ir.Value | None], name: str,
                 dtype: ir.DataType | None, shape: Any, attrs: dict[str, Any]) -> ir.Value | None:
        x = inputs[0] if inputs else None
        if x is None or not self.refuses(op, b.opset, x):
            return None
        elem = x.dtype.name if x.dtype is not None else None
        if op in _COMBINE:
            return _reduce_by_slices(b, op, x, inputs, name, attrs)
        if op == "CumSum":
            return _cumsum(b, x, inputs, name, attrs)
        if op == "Reshape":
            return _reshape_by_squeezes(b, x, inputs, name, self.target)
        if op == "Identity" and not self.target.refuses("Expand", b.opset, elem):
            # x broadcast to no new dims: itself (onnx2torch has no Identity-19 or -21).
            return b.op("Expand", [x, b.constant(np.zeros(0, np.int64), f"{name}_no_dims")], name, dtype=dtype, shape=shape)
        return None

    def refuses(self, op: str, opset: int, x: ir.Value) -> bool:
        """Whether the target refuses ``op`` reading ``x`` first (a rule may then write it)."""
        return op in _RULED and self.target.refuses(op, opset, x.dtype.name if x.dtype is not None else None)


class LegalizeNodesPass(ir.passes.InPlacePass):
    """Every node ``target`` refuses that a rule can write in another form, so written."""

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.legalizer = Legalizer(target)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if not is_default_domain(node) or len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None \
                or not self.legalizer.refuses(node.op_type, scope.opset, node.inputs[0]):
            return None  # (asked before a name is taken: most nodes need none)
        out = node.outputs[0]
        attrs = {k: a.value for k, a in node.attributes.items()}
        b = scope.builder(node, names)
        made = self.legalizer(b, node.op_type, list(node.inputs), names.fresh(f"{out.name or node.op_type}_legal"),
                              out.dtype, out.shape, attrs)
        if made is None:
            return None
        replace_output(out, made, scope, names, node, owned=True)
        scope.graph.remove(node, safe=True)
        return "tensor ops", f"{node.op_type} that {self.legalizer.target.name} refuses, in a form it runs"


def legalize_nodes(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk no-converter's rewrite (seqlower.targets.registry), and a clean-up of what the
    nodes it rewrote read (after the fold too: a lowered model lowered again is the same)."""
    from seqlower.passes.folds.clean_up_graph import CleanUpGraphPass

    return [LegalizeNodesPass(target), CleanUpGraphPass()]


def for_target(name: str) -> Legalizer | None:
    """The rules for target ``name``; None where it refuses nothing seqlower writes."""
    target = load_target(name)
    refuses_any = target.lacks or target.types or target.converters
    return Legalizer(target) if refuses_any else None


def _reduce_by_slices(b: Builder, op: str, x: ir.Value, inputs: Sequence[ir.Value | None], name: str,
                      attrs: dict[str, Any]) -> ir.Value | None:
    if x.shape is None:
        return None
    rank = x.shape.rank()
    axes_c = const_array(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if len(inputs) > 1 and inputs[1] is not None and axes_c is None:
        return None  # axes computed at run time
    given = axes_c.reshape(-1).tolist() if axes_c is not None else list(attrs.get("axes", []))
    if not given and attrs.get("noop_with_empty_axes"):
        return None
    axes = sorted({int(a) % rank for a in given}) if given else list(range(rank))
    dims = [x.shape.dims[a] for a in axes]
    if not all(isinstance(d, int) for d in dims) or sum(dims) > _MAX_SLICES:
        return None
    if 0 in dims and op not in _EMPTY:
        return None
    o = Ops(b)
    value = x
    current = list(x.shape.dims)
    for a, d in zip(axes, dims):
        current[a] = 1
        if d == 0:
            # Nothing to combine: the identity, in the shape the reduction keeps.
            if not all(isinstance(n, int) for n in current):
                return None
            value = b.constant(np.full(current, _EMPTY[op], dtype=x.dtype.numpy()), f"{name}_empty{a}")
            continue
        # (shapes stated: the rules run after the final inference too)
        dims_now = [dd if isinstance(dd, int) else getattr(dd, "value", None) for dd in current]
        parts = [o.op("Gather", [value, o.ints([k])], f"{name}_at{a}_{k}", dtype=x.dtype, shape=dims_now, axis=a)
                 for k in range(d)]
        value = parts[0]
        for k, part in enumerate(parts[1:], 1):
            value = b.op(_COMBINE[op], [value, part], f"{name}_{a}_{k}", dtype=x.dtype, shape=dims_now)
    keepdims = attrs.get("keepdims", 1)
    if keepdims or not axes:
        return b.op("Identity", [value], name) if value is x else value
    if b.opset >= 13:
        return o.op("Squeeze", [value, o.ints(axes)], name)
    return o.op("Squeeze", [value], name, axes=axes)


def _reshape_by_squeezes(b: Builder, x: ir.Value, inputs: Sequence[ir.Value | None], name: str,
                         target: Target) -> ir.Value | None:
    shape_c = const_array(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if x.shape is None or shape_c is None or any(not isinstance(d, int) for d in x.shape.dims) or b.opset < 13:
        return None
    dims, want = [int(d) for d in x.shape.dims], [int(d) for d in shape_c.reshape(-1)]
    size = int(np.prod(dims))
    if -1 in want:
        rest = int(np.prod([d for d in want if d != -1]))
        want = [size // rest if d == -1 and rest else d for d in want]
    if 0 in want or int(np.prod(want)) != size:
        return None  # (a 0 copies x's dim unless allowzero: not worth a rule)
    o = Ops(b)
    if [d for d in dims if d != 1] == [d for d in want if d != 1]:
        if any(target.refuses(op, b.opset, None) for op in ("Squeeze", "Unsqueeze")):
            return None
        ones = [a for a, d in enumerate(dims) if d == 1]
        flat = o.op("Squeeze", [x, o.ints(ones)], f"{name}_squeezed") if ones else x
        new = [a for a, d in enumerate(want) if d == 1]
        return o.op("Unsqueeze", [flat, o.ints(new)], name) if new else b.op("Identity", [flat], name)
    if len(want) == 1 and not target.refuses("Flatten", b.opset, None) and not target.refuses("Squeeze", b.opset, None):
        return o.op("Squeeze", [o.op("Flatten", [x], f"{name}_flat", axis=0), o.ints([0])], name)
    return None


def _cumsum(b: Builder, x: ir.Value, inputs: Sequence[ir.Value | None], name: str,
            attrs: dict[str, Any]) -> ir.Value | None:
    axis_c = const_array(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if x.shape is None or x.shape.rank() == 0 or axis_c is None or axis_c.size != 1:
        return None
    axis = int(axis_c.reshape(())) % x.shape.rank()
    return masked_cumsum(Ops(b), x, axis, int(attrs.get("exclusive", 0)), int(attrs.get("reverse", 0)), name, b.opset)
