"""An If run as both branches and a select, for targets without If (onnx2torch), and
for OpenVINO where an output's shape is known only at run time (quirk
"if-run-time-shape": its CPU plugin reads garbage from such an output two ops further on).

Both branches are inlined before the If, and each output is the taken branch's value:
``Where(cond, then, else)`` where both give one shape, or where they may differ in the
first dim only (TorchScript's list built under an ``if``: three rows on one side, one on
the other), the Slice of the taken one out of their Concat. The branch not taken still
runs, so each of its Gathers reads a filler row where its side is not taken (a branch
that reads ``x[0]`` only when ``x`` has rows). Nothing in ONNX has side effects, so
running both changes no number; it costs the untaken branch.

An If stays when an output is not a tensor, when the branches' ranks differ or are not
known, or when a dim other than the first may differ (no select keeps both): the target
report names it. Not for tract's If of branches of two shapes (quirk if-branch-facts):
it fails the Slice such a select takes ("invalid SymbolScope"), as it fails the If.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from seqlower.passes.loops._predicated import guard_gathers, same_shape, select
from seqlower.passes._rewrite import Scope, discard_subgraphs, inline_map_body, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.loops._zero_trips import is_zero_trip_guard
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.options import LowerOptions
from seqlower.targets import Target

__all__ = ["IfsToSelectsPass", "run_time_shaped", "for_run_time_shapes"]


def run_time_shaped(node: ir.Node) -> bool:
    """An If with a tensor output with a dim known only at run time (lengths, sizes,
    positions read wrong; a [?, 5] list of rows, unrolled from a loop, failed to compile:
    "dynamic rank"; a [2, n, 1] list of columns, Gathered and scaled, read as garbage:
    torch fuzz seed 20561), other than a zero-trip guard (``passes/_zero_trips``): what
    OpenVINO gets wrong once two ops in a row read it (quirk "if-run-time-shape"; the
    readers may be outside the region being lowered, so every such If is taken)."""
    if is_zero_trip_guard(node):
        return False
    return any(isinstance(v.type, ir.TensorType) and v.shape is not None
               and any(not isinstance(d, int) for d in v.shape.dims) for v in node.outputs)


class IfsToSelectsPass(ir.passes.InPlacePass):
    """``only``: the Ifs to run as selects (default: every one that can be)."""

    def __init__(self, only: Callable[[ir.Node], bool] | None = None, gathered: bool = False) -> None:
        """``gathered``: a select of two lengths Gathers its rows (``select``'s doc)."""
        super().__init__()
        self.only = only
        self.gathered = gathered

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if node.op_type != "If" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
            return None
        if self.only is not None and not self.only(node):
            return None
        then_attr, else_attr = node.attributes.get("then_branch"), node.attributes.get("else_branch")
        if then_attr is None or else_attr is None:
            return None
        then, other = then_attr.as_graph(), else_attr.as_graph()
        plan = _plan(then, other)
        if plan is None:
            return None
        o = Ops(scope.builder(node, names))
        base = node.name or "if"
        cond = node.inputs[0]
        if cond.shape is None or cond.shape.rank() != 0:
            cond = o.reshape(cond, o.ints([]), f"{base}_cond")
        not_cond = o.op("Not", [cond], f"{base}_not", dtype=ir.DataType.BOOL, shape=[])
        taken = []
        for branch, side, when in ((then, "then", cond), (other, "else", not_cond)):
            mapped = inline_map_body(branch, {}, o.b, names)
            guard_gathers(branch, mapped, when, o, f"{base}_{side}")
            taken.append([mapped.get(v, v) for v in branch.outputs])
        for k, (out, a, b, same) in enumerate(zip(node.outputs, taken[0], taken[1], plan)):
            y = select(cond, a, b, o, f"{out.name or base}_selected", same, self.gathered)
            replace_output(out, y, scope, names, node, owned=True)
        discard_subgraphs(node)
        scope.graph.remove(node, safe=True)
        return "tensor ops", "If run as both branches and a select"


def _plan(then: ir.Graph, other: ir.Graph) -> list[bool] | None:
    """Per output, whether both branches give it one shape (a Where) or may differ in the
    first dim only (Concat and Slice); None when some output can be neither."""
    plan = []
    for a, b in zip(then.outputs, other.outputs):
        if not isinstance(a.type, ir.TensorType) or not isinstance(b.type, ir.TensorType) or a.dtype != b.dtype:
            return None
        if a.shape is None or b.shape is None or a.shape.rank() != b.shape.rank():
            return None
        if same_shape(a.shape, b.shape):
            plan.append(True)
        elif a.shape.rank() > 0 and same_shape(ir.Shape(a.shape.dims[1:]), ir.Shape(b.shape.dims[1:])):
            plan.append(False)
        else:
            return None
    return plan


def for_run_time_shapes(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk if-run-time-shape's rewrite (seqlower.targets.registry): the Ifs giving an
    output with a dim known only at run time, the taken rows Gathered."""
    from seqlower.passes.quirks.hide_if_output_shapes import HideIfOutputShapesPass

    # What no select can stand in for (branches differing past the first dim) is read
    # through a no-op Slice instead.
    return [IfsToSelectsPass(only=run_time_shaped, gathered=True), HideIfOutputShapesPass()]
