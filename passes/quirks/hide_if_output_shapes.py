"""An If output whose shape is known only at run time read through a no-op Slice, for
OpenVINO (quirk "if-run-time-shape"), where no select can stand in for the If.

OpenVINO 2026.4's CPU plugin reads garbage (uninitialised memory) from such an output once
two ops in a row read it; ``ifs_to_selects`` runs the If as both branches and a select
where its branches give one shape or differ in the first dim only. Where they differ
elsewhere (random program 240290: ``[N, 2M]`` and ``[N, M]`` bools, read by ``Or`` and
then ``Shape`` and ``Reshape``: garbage ``True``s in about half the first runs), every
reader reads the output through a Slice to a Where of its own shape
(``Ops.shape_hidden``), a no-op at run time after which OpenVINO knows none of its dims
and read it right in every run measured (as the Pad of torch fuzz 22352 reads its If
output). A Slice to a constant end was not enough: one to INT64_MAX is dropped as a
no-op, and one to 2**62 read 22352's output as zeros in a first run. A zero-trip guard's If is read right and left.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.keys import SHAPE_HIDDEN
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.loops.ifs_to_selects import run_time_shaped
from seqlower.passes.lowering._tensor_ops import Ops

__all__ = ["HideIfOutputShapesPass"]


class HideIfOutputShapesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _hide)


def _hide(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "If" or not is_default_domain(node) or not run_time_shaped(node):
        return None
    b = scope.builder(None, names, after=node)
    hidden = 0
    for v in node.outputs:
        if not _run_time(v) or _already_hidden(v):
            continue
        readers = list(v.uses())
        if not readers:
            continue
        sliced = Ops(b).shape_hidden(v, f"{v.name or 'if'}{SHAPE_HIDDEN}")
        for user, k in readers:
            user.replace_input_with(k, sliced)
        hidden += 1
    return ("Slice", f"{hidden} If output(s) of run-time shape read through a no-op Slice (OpenVINO)") if hidden else None


def _run_time(v: ir.Value) -> bool:
    return isinstance(v.type, ir.TensorType) and v.shape is not None and any(not isinstance(d, int) for d in v.shape.dims)


def _already_hidden(v: ir.Value) -> bool:
    """Read through the Slice this pass wrote (lowering a lowered model adds none)."""
    users = [user for user, _ in v.uses()]
    return any(user.op_type == "Slice" and (user.outputs[0].name or "").endswith(f"{SHAPE_HIDDEN}_in") for user in users)
