"""The signature conversion written once (passes/lowering/convert.py), on its own: a toy
representation that makes each owned value N copies of a tensor shows that an If's
outputs, a Loop's carried values (body inputs, node inputs, outputs) and the uses after
them become exactly the converter's tensors, declared with the converter's types; and
that an If left with no output goes away. The real representations run through it in
every lowering test."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from seqlower.ir.builder import Builder, NameAuthority
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes._rewrite import Scope
from seqlower.passes.lowering.convert import Converter, Proto
from seqlower.passes.lowering.convert_control import convert_if, convert_loop
from tests.helpers import BOOL, FLOAT, INT64, t


class Copies(Converter):
    """Values named ``s...`` become ``n`` tensors: the value itself, repeated (a stand-in
    for a sequence's tensors). Declared types say [7] so a test can see where they came
    from."""

    def __init__(self, model: ir.Model, n: int) -> None:
        self.names = NameAuthority(model)
        self.records = []
        self.n = n
        self.bound: dict[ir.Value, list[ir.Value]] = {}

    def owns(self, v: ir.Value | None) -> bool:
        return v is not None and (v.name or "").startswith("s")

    def into(self, v: ir.Value) -> str:
        return "copies"

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        return [(self.names.fresh(f"{base}_copy{i}"), ir.TensorType(ir.DataType.FLOAT), ir.Shape([7])) for i in range(self.n)]

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        return self.bound.get(v, [v] * self.n)

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        self.bound[v] = list(tensors)
        if tensors and not v.is_graph_output():  # what a real lowering does when it lowers the uses
            ir.convenience.replace_all_uses_with(v, tensors[0])

    def graph(self, scope: Scope) -> None:
        pass  # nothing inside to lower


def _if_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["s_then"])], "then", [], [t("s_then", FLOAT, [7])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["s_else"])], "else", [], [t("s_else", FLOAT, [7])])
    nodes = [
        helper.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other, name="pick"),
        helper.make_node("Identity", ["s"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [t("c", BOOL, []), t("x", FLOAT, [7])], [t("y", FLOAT, [7])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _convert_if(n: int) -> tuple[ir.Model, Copies, bool]:
    model = ir.from_proto(_if_model())
    cv = Copies(model, n)
    node = next(nd for nd in model.graph if nd.op_type == "If")
    kept = convert_if(cv, node, Scope(model.graph, "main", 17, True))
    return model, cv, kept


def test_an_if_returns_the_converters_tensors_typed_by_the_converter():
    model, cv, kept = _convert_if(2)
    assert kept
    new = next(nd for nd in model.graph if nd.op_type == "If" and nd.name == "pick")
    assert [v.name for v in new.outputs] == ["s_copy0", "s_copy1"]
    assert all(v.shape == ir.Shape([7]) and v.dtype == ir.DataType.FLOAT for v in new.outputs)
    for key in ("then_branch", "else_branch"):
        assert len(new.attributes[key].as_graph().outputs) == 2  # each branch returns both
    old_s = next(v for v in cv.bound if v.producer() is not new)
    assert cv.bound[old_s] == list(new.outputs)


def test_an_if_whose_outputs_all_become_nothing_is_left_with_none():
    model, cv, kept = _convert_if(0)
    assert not kept and all(v == [] for v in cv.bound.values())
    node = next(nd for nd in model.graph if nd.op_type == "If")
    assert all(len(node.attributes[k].as_graph().outputs) == 0 for k in ("then_branch", "else_branch"))


def _loop_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["s_in", "x"], ["s_out"])],
        "body",
        [t("i", INT64, []), t("cond_in", BOOL, []), t("s_in", FLOAT, [7])],
        [t("cond_out", BOOL, []), t("s_out", FLOAT, [7])],
    )
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["s_final"], body=body, name="grow")]
    g = helper.make_graph(nodes, "g", [t("trips", INT64, []), t("x", FLOAT, [7])], [t("s_final", FLOAT, [7])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loop_carries_the_converters_tensors_in_the_body_the_inputs_and_the_outputs():
    model = ir.from_proto(_loop_model())
    cv = Copies(model, 2)
    node = next(nd for nd in model.graph if nd.op_type == "Loop")
    how = convert_loop(cv, node, Scope(model.graph, "main", 17, True))
    assert how == "Loop carrying the tensors"
    new = next(nd for nd in model.graph if nd.op_type == "Loop" and nd is not node)
    body = new.attributes["body"].as_graph()
    assert [v.name for v in body.inputs[2:]] == ["s_in_copy0", "s_in_copy1"]
    assert all(v.shape == ir.Shape([7]) for v in [*body.inputs[2:], *new.outputs])
    assert len(new.inputs) == 4 and new.inputs[2] is new.inputs[3]  # x, twice
    assert [v.name for v in new.outputs] == ["s_final_copy0", "s_final_copy1"]
    # What uses the old output uses the converter's tensors: make the graph return one,
    # drop the old node and run it (x + trips * x).
    model.graph.outputs[0] = new.outputs[0]
    model.graph.remove(node, safe=False)
    x = np.arange(7, dtype=np.float32)
    out = Executor(to_proto(model), backend="reference").run({"trips": np.array(3), "x": x}).outputs
    np.testing.assert_array_equal(out["s_final_copy0"], 4 * x)
