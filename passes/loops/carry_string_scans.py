"""Carry a Loop's string scan outputs as a growing tensor instead.

onnxruntime 1.31 stacks a string scan output wrong: every iteration after the first
comes out as empty strings (measured: a Loop scanning ``[["a", "b"], ["c", "d"]]`` twice
gave ``[[a, b], [c, d]], [["", ""], ["", ""]]``), while a carried string tensor that
grows by a Concat each iteration is right. The append-once and SequenceMap lowerings
make scan outputs, so for string elements every Loop's string scan output becomes a
carried tensor: the first iteration starts it from its step, the next ones Concat onto
it (an If on the iteration number, since the step's dims are known only inside the
body). It starts as an empty ``[0, 0, ...]`` of the step's rank plus one, which is also
what it gives after no iteration, as onnxruntime's Loop does for dims it does not know.
O(n^2) copies instead of O(n): strings only.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node, take_places
from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import Builder, NameAuthority

__all__ = ["CarryStringScansPass"]


class CarryStringScansPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _carry)


def _carry(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or "body" not in node.attributes:
        return None
    body = node.attributes["body"].as_graph()
    n_carried = len(node.inputs) - 2
    steps = list(body.outputs[1 + n_carried :])
    strings = [k for k, s in enumerate(steps) if s.dtype == ir.DataType.STRING and s.shape is not None]
    if not strings:
        return None
    b = Builder(body, None, scope.opset, names, main_graph=False)
    outer = scope.builder(node, names)
    zero = b.constant(np.array(0, np.int64), "iteration_zero")
    first = b.op("Equal", [body.inputs[0], zero], names.fresh("first_iteration"), dtype=ir.DataType.BOOL, shape=[])
    new_inits, new_ins, new_outs = [], [], []
    for k in strings:
        step = steps[k]
        assert step.shape is not None
        rank = step.shape.rank() + 1
        base = step.name or "scan"
        acc_in = ir.Value(name=names.fresh(f"{base}_so_far"), type=ir.TensorType(ir.DataType.STRING), shape=ir.Shape([None] * rank))
        row = b.unsqueeze(step, [0], f"{base}_row")
        started = _branch(names, scope.opset, f"{base}_started", lambda g: g.identity(row, f"{base}_first"))
        grown = _branch(names, scope.opset, f"{base}_grown", lambda g: g.concat([acc_in, row], 0, f"{base}_more", None))
        choose = ir.Node("", "If", [first], [ir.AttrGraph("then_branch", started), ir.AttrGraph("else_branch", grown)],
                         num_outputs=1, name=names.fresh(f"{base}_carry"))
        body.append(choose)
        acc_out = choose.outputs[0]
        acc_out.name, acc_out.type = names.fresh(f"{base}_carried"), ir.TensorType(ir.DataType.STRING)
        new_ins.append(acc_in)
        new_outs.append(acc_out)
        new_inits.append(outer.constant(np.zeros((0,) * rank, dtype=object), f"{base}_none"))
    # The Loop with the string scans moved to the carried values (their order kept).
    keep = [k for k in range(len(steps)) if k not in strings]
    body_outputs = list(body.outputs)
    body.outputs.clear()
    body.outputs.extend([body_outputs[0], *body_outputs[1 : 1 + n_carried], *new_outs, *[steps[k] for k in keep]])
    body.inputs.extend(new_ins)
    loop = ir.Node("", "Loop", [*node.inputs, *new_inits], [ir.AttrGraph("body", body)],
                   num_outputs=n_carried + len(strings) + len(keep), name=node.name)
    node.name = None
    node.attributes.pop("body")
    scope.graph.insert_before(node, loop)
    # The new Loop's outputs: carried, the string scans now carried, the other scans.
    order = [*range(n_carried), *[n_carried + k for k in strings], *[n_carried + k for k in keep]]
    take_places([node.outputs[i] for i in order], list(loop.outputs), scope.graph)
    scope.graph.remove(node, safe=True)
    return "tensor ops", "string scan outputs carried (onnxruntime stacks strings wrong)"


def _branch(names: NameAuthority, opset: int, name: str, fill) -> ir.Graph:
    g = ir.Graph([], [], nodes=[], name=names.fresh(name), opset_imports={"": opset})
    out = fill(Builder(g, None, opset, names, main_graph=False))
    g.outputs.append(out)
    return g
