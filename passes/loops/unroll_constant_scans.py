"""Unroll a Scan that carries nothing and scans constants, for targets that run Loops as
Scans (tract).

``LoopsToScansPass`` makes a Loop whose trip count is known only then a Scan over
``Range(0, M)``; folding may then make ``M`` a constant (TorchScript's ``for t in l``
over a list whose length only the lowering finds: fuzz seeds 4603, 9042). tract's
analysis, given an input of no rows, folds such a body to constants, discards the scan
input as unused, and then fails ("Scan: No scan input"). Unrolled like UnrollLoopsPass
unrolls a Loop of a constant trip count, the body is inlined once per step with its
scan inputs' elements as constants, and each scan output is the Concat of the steps'.

Only Scans with every scan input an integer constant (or a Range of constants), no state, the
default axes and directions, and at most ``max_unroll`` steps (at least one: the shape of
an output of no step is not always known). Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, discard_subgraphs, inline_map_body, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops

__all__ = ["UnrollConstantScansPass"]

_ORIENTATION = ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions")


class UnrollConstantScansPass(ir.passes.InPlacePass):
    def __init__(self, max_unroll: int = 64) -> None:
        super().__init__()
        self.max_unroll = max_unroll

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, self._rewrite)

    def _rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if node.op_type != "Scan" or not is_default_domain(node) or "body" not in node.attributes:
            return None
        count = node.attributes["num_scan_inputs"].as_int() if "num_scan_inputs" in node.attributes else None
        if count is None or count != len(node.inputs) or count == 0:
            return None  # (a state, or no scan input)
        if any(a in node.attributes and any(int(v) != 0 for v in node.attributes[a].as_ints()) for a in _ORIENTATION):
            return None
        steps = [_steps(v) for v in node.inputs]
        if any(s is None for s in steps):
            return None
        trips = {len(s) for s in steps}  # type: ignore[arg-type]
        if len(trips) != 1 or not 0 < (n := trips.pop()) <= self.max_unroll:
            return None
        body = node.attributes["body"].as_graph()
        o = Ops(scope.builder(node, names))
        outs: list[list[ir.Value]] = [[] for _ in body.outputs]
        for i in range(n):
            value_map: dict[ir.Value, ir.Value | None] = {
                bi: o.b.constant(np.asarray(s[i]), f"{bi.name or 'step'}_{i}") for bi, s in zip(body.inputs, steps)}
            mapped = inline_map_body(body, value_map, o.b, names)
            for k, bo in enumerate(body.outputs):
                outs[k].append(o.unsqueeze(mapped.get(bo, bo), [0], f"{bo.name or 'scan'}_{i}"))
        for out, parts in zip(node.outputs, outs):
            name = f"{out.name or 'scan'}_stacked"
            stacked = o.concat(parts, 0, name) if len(parts) > 1 else o.identity(parts[0], name)
            replace_output(out, stacked, scope, names, node, owned=True)
        discard_subgraphs(node)
        scope.graph.remove(node, safe=True)
        return "tensor ops", f"Scan of constants unrolled ({n} steps)"


def _steps(v: ir.Value | None) -> np.ndarray | None:
    """The elements a scan input gives its steps, when known: a constant, or a Range of
    constants."""
    if v is None:
        return None
    while (p := v.producer()) is not None and p.op_type == "Identity" and p.inputs and p.inputs[0] is not None:
        v = p.inputs[0]
    c = const_array(v)
    if c is None:
        p = v.producer()
        if p is None or p.op_type != "Range" or not is_default_domain(p) or len(p.inputs) != 3:
            return None
        bounds = [const_array(i) for i in p.inputs]
        if any(b is None or b.size != 1 for b in bounds):
            return None
        start, limit, delta = (b.reshape(()) for b in bounds)  # type: ignore[union-attr]
        if delta == 0:
            return None
        c = np.arange(start, limit, delta, dtype=bounds[0].dtype)  # type: ignore[union-attr]
    # (Integers only: IfsInScansPass's one-iteration Scan over [true] must stay a Scan.)
    return c if c.ndim > 0 and np.issubdtype(c.dtype, np.integer) else None
