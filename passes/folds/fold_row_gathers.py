"""``Gather(Unsqueeze(v, axes=[0]), k)`` with ``k`` a constant 0 or -1 is ``v``: fold it.

The lowerings write a one-element list's shapes table as the ``Unsqueeze`` of its one row
and read an element's shape by a ``Gather`` of its position; unrolled at a constant
position (a Loop unrolled, shapes fixed by ``--input-shape``), that reads back the row.
Besides being two nodes of nothing, the pair makes onnxruntime 1.31 compute wrong
numbers: its data propagation gives ``Gather(Unsqueeze(Shape(c), [0]), 0)`` of a [1, 3]
``c`` as [1], and its basic optimizations then fold the ``Shape`` of a ``Reshape`` to it
(through an elementwise op) into ``[1]``, not ``[1, 3]`` (ts_rows_popped_then_zipped_5447
lowered at x [1, 3]; ``seqlower reduce`` cut it to six nodes). Subgraphs and functions
included.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node

__all__ = ["FoldRowGathersPass"]


class FoldRowGathersPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _fold)


def _fold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Gather" or not is_default_domain(node) or len(node.inputs) != 2:
        return None
    data, index = node.inputs
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    if axis < 0 and data is not None and data.shape is not None:
        axis += data.shape.rank()
    if axis != 0:
        return None
    k = const_array(index) if index is not None else None
    if data is None or k is None or k.shape != () or int(k) not in (0, -1):
        return None
    p = data.producer()
    if p is None or p.op_type != "Unsqueeze" or not is_default_domain(p) or not p.inputs or p.inputs[0] is None:
        return None
    axes = const_array(p.inputs[1]) if len(p.inputs) > 1 and p.inputs[1] is not None else None
    if axes is None and "axes" in p.attributes:
        axes = p.attributes["axes"].as_ints()
    if axes is None or [int(a) for a in list(axes)] != [0]:
        return None
    replace_output(node.outputs[0], p.inputs[0], scope, names, node, owned=False)
    scope.graph.remove(node, safe=True)
    return "Gather", "the row of a one-row table read back as the row itself"

