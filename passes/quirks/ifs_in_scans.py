"""Every If past the first of its graph, alone in a Scan of one iteration, for tract
(quirk "one-if-per-graph").

tract 0.23.9 translates each ONNX If into its typed model under the op's name, "If",
not the node's (tract-onnx ``ops/logic.rs``: ``target.wire_node(self.name(), ...)``),
so the second If of one graph fails to load: "Duplicate node name: If". Its own
lowering makes many (a zero-trip guard around every Scan a Loop becomes; fuzz seeds
4085, 2013, 2592). Each graph is a model of its own there, and a Scan body reads outer
values (its closure inputs), so an If moved into a Scan's body is that graph's only If:

    Scan(once = [true]) with body (d) { c' = And(cond, d); ys = If(c') {...} }
    -> ys stacked [1, ...] -> Squeeze(0)

The body reads its scan input (``And``): tract drops a scan input the body does not
read and then fails the Scan (quirk "empty-scan"). An If whose outputs are not typed
tensors of a known rank stays (``check --target`` names it): onnxruntime's Scan sizes
its stacked outputs from the body's declared output shapes and fails one without
("Subgraph must have the shape set for all outputs", graph program 47704's If over a
string input of unknown rank).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes._rewrite import REPORT_KEY, Scope, replace_output, rewrite_record, subgraph_scopes, walk_scopes

__all__ = ["IfsInScansPass"]


class IfsInScansPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        names = NameAuthority(model)
        records: list[dict[str, str]] = []
        for scope in walk_scopes(model):
            self._graph(scope, names, records)
        model.meta.setdefault(REPORT_KEY, []).extend(records)
        return ir.passes.PassResult(model, bool(records))

    def _graph(self, scope: Scope, names: NameAuthority, records: list[dict[str, str]]) -> None:
        ifs = []
        for node in list(scope.graph):
            for sub in subgraph_scopes(node, scope):
                self._graph(sub, names, records)
            if node.op_type == "If" and is_default_domain(node) and node.inputs and node.inputs[0] is not None:
                ifs.append(node)
        # One If stays in the graph: one that cannot move, else the first.
        movable = [n for n in ifs if _movable(n)]
        for node in movable[1:] if len(movable) == len(ifs) else movable:
            records.append(rewrite_record(node, scope, "Scan", "an If past its graph's first, alone in a Scan of one iteration"))
            _wrap(node, scope, names)


def _movable(node: ir.Node) -> bool:
    return all(isinstance(v.type, ir.TensorType) and v.shape is not None for v in node.outputs)


def _wrap(node: ir.Node, scope: Scope, names: NameAuthority) -> None:
    base = node.name or "if"
    b = scope.builder(node, names)
    once = b.constant(np.array([True]), f"{base}_once")
    step = ir.Value(name=names.fresh(f"{base}_step"), type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    body = ir.Graph([step], [], nodes=[], name=names.fresh(f"{base}_alone_body"), opset_imports={"": scope.opset})
    cond = Builder(body, None, scope.opset, names, main_graph=False).op(
        "And", [node.inputs[0], step], f"{base}_cond", dtype=ir.DataType.BOOL)
    olds = list(node.outputs)
    scan = ir.Node("", "Scan", [once], [ir.AttrGraph("body", body), ir.AttrInt64("num_scan_inputs", 1)],
                   num_outputs=len(olds), name=names.fresh(f"{base}_alone"))
    scope.graph.insert_before(node, scan)
    for stacked, old in zip(scan.outputs, olds):
        stacked.name, stacked.type = names.fresh(f"{old.name or base}_stacked"), old.type
        stacked.shape = None if old.shape is None else ir.Shape([1, *old.shape.dims])
        alone = b.squeeze(stacked, [0], f"{old.name or base}_alone")
        alone.shape = old.shape
        replace_output(old, alone, scope, names, node, owned=True)
        if old.name is None:
            old.name = names.fresh(f"{base}_out")
    scope.graph.remove(node)
    node.replace_input_with(0, cond)
    body.append(node)
    body.outputs.extend(olds)
