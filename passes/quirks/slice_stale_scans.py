"""Read a Loop's scan outputs as empty when it ran no iteration, for OpenVINO (quirk
"stale-zero-trip-scans").

OpenVINO 2026.4's compiled model gives a Loop that runs no iteration the scan outputs of
its previous run (a model compiled once and run with a trip count of 3, then 0, returns
the 3 rows again): wrong numbers, no error, as users run a model compiled once (Viterbi
backtracking at one step of input: the backpointers Loop runs none). Each scan output
that something reads becomes

    Slice(scan, [0], Gather(Where(ran, Shape(scan), [0]), [0]), [0])

with ``ran`` whether the trip count (and the condition) let the Loop run: the whole scan
when it ran, no row when it did not. Loops whose trip count and condition are constants
are left alone, and so is a scan read already through this Slice (lowering a lowered
model changes nothing).
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.passes.quirks.guard_zero_trip_loops import may_run_none, runs_at_all, sizing_shape

__all__ = ["SliceStaleScansPass"]


class SliceStaleScansPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _slice_scans)


def _slice_scans(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    carried = max(0, len(node.inputs) - 2)
    scans = [v for v in node.outputs[carried:] if (v.uses() or v.is_graph_output()) and not _sliced(v)]
    if not scans or not may_run_none(node):
        return None
    a = Ops(scope.builder(node, names))
    base = node.name or "loop"
    ran = runs_at_all(node, a, f"{base}_scan")
    for scan in scans:
        readers = list(scan.uses())
        name = scan.name or base
        # (the zero-trip guard's form, Slice(out, 0, Gather(Where(ran, Shape(out), 0), [0])),
        # which the other OpenVINO rewrites know as a no-op when the Loop ran)
        dims = a.op("Where", [ran, a.shape(scan, f"{name}_scan_dims"), a.ints([0])], f"{name}_scan_end_dims", dtype=INT64)
        end = a.op("Gather", [dims, a.ints([0])], f"{name}_scan_end", dtype=INT64, shape=[1])
        sized = a.slice(scan, a.ints([0]), end, [0], f"{name}_scan_ran")
        sized.type, sized.shape = scan.type, scan.shape
        for use in readers:
            use.node.replace_input_with(use.idx, sized)
        if scan.is_graph_output():
            # (the graph's output keeps its name, now on what the Slice gives)
            outputs = scope.graph.outputs
            at = list(outputs).index(scan)
            kept, scan.name = scan.name, names.fresh(f"{name}_stale")
            sized.name = kept
            outputs[at] = sized
    # Built before the Loop, then moved right after it; constants stay where they are made.
    made = [n for n in a.b.nodes if n.op_type != "Constant"]
    for n in made:
        scope.graph.remove(n)
    scope.graph.insert_after(node, made)
    return "tensor ops", f"{len(scans)} scan output(s) read as empty when the Loop ran no iteration (OpenVINO)"


def _sliced(scan: ir.Value) -> bool:
    """``scan`` is read only through the Slice this pass writes (and its Shape)."""
    if scan.is_graph_output():
        return False
    slices = [u.node for u in scan.uses() if u.idx == 0 and sizing_shape(u.node) is not None]
    return bool(slices) and all(u.node in slices or u.node.op_type == "Shape" for u in scan.uses())
