"""Each output of a Split as one Slice, for onnx2torch (quirk "no-split-18").

onnx2torch 1.5.15 has no converter for Split-18 (``num_outputs``), which every Split of
an opset-18 model is, dynamo's chunk and unbind included. Output ``k`` is
``Slice(x, start_k, end_k, [axis])``:

- with sizes (the ``split`` input, or the attribute before opset 13): the ends are their
  running sum and the starts the ends less the sizes (constants when the sizes are);
- without (``num_outputs``, or an even split): chunks of ``ceil(d / n)``, where Slice's
  clamping gives the last one what is left, as Split-18 does (and, for an even split,
  exactly ``d / n`` each).

A Split whose output count is not its number of outputs (a missing size input with an
empty output name) is left alone.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["SplitToSlicesPass"]


class SplitToSlicesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _lower)


def _lower(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Split" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    if scope.opset < 18:
        return None  # Split-13 and before convert
    x = node.inputs[0]
    n = len(node.outputs)
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    o = Ops(scope.builder(node, names))
    name = node.outputs[0].name or "split"
    sizes_v = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] is not None else None
    sizes_attr = list(node.attributes["split"].as_ints()) if "split" in node.attributes else None
    sizes = np.array(sizes_attr, np.int64) if sizes_attr is not None else (
        const_array(sizes_v) if sizes_v is not None else None)
    if sizes is not None:
        ends_c = np.cumsum(sizes.astype(np.int64))
        bounds = [(o.ints([int(e - s)]), o.ints([int(e)])) for s, e in zip(sizes, ends_c)]
    elif sizes_v is not None:
        # Run-time sizes: written with reverse=0, which onnx2torch needs (cumsum-reverse-default).
        ends = o.op("CumSum", [sizes_v, o.scalar(0)], f"{name}_ends", dtype=INT64, reverse=0)
        starts = o.op("Sub", [ends, sizes_v], f"{name}_starts", dtype=INT64)
        bounds = [(o.op("Gather", [starts, o.ints([k])], f"{name}_start{k}", dtype=INT64),
                   o.op("Gather", [ends, o.ints([k])], f"{name}_end{k}", dtype=INT64)) for k in range(n)]
    else:
        d = o.op("Gather", [o.shape(x, f"{name}_dims"), o.ints([axis])], f"{name}_d", dtype=INT64)
        chunk = o.op("Div", [o.op("Add", [d, o.ints([n - 1])], f"{name}_up", dtype=INT64), o.ints([n])],
                     f"{name}_chunk", dtype=INT64)
        bounds = [(o.op("Mul", [chunk, o.ints([k])], f"{name}_start{k}", dtype=INT64),
                   o.op("Mul", [chunk, o.ints([k + 1])], f"{name}_end{k}", dtype=INT64)) for k in range(n)]
    for k, out in enumerate(node.outputs):
        part = o.slice(x, bounds[k][0], bounds[k][1], [axis], f"{out.name or name}_part")
        replace_output(out, part, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "Slice per output"
