"""seqlower.ir.helpers: the IR helpers every pass shares."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from seqlower import load_model
from seqlower.ir.helpers import graphs_of
from tests.helpers import FLOAT, model, t

DATA = Path(__file__).parent.parent / "data"


def _nested() -> onnx.ModelProto:
    """An If whose then-branch holds a Loop, and an If after it: subgraphs at two depths."""
    leaf = helper.make_graph([helper.make_node("Not", ["c"], ["c_out"]), helper.make_node("Identity", ["v"], ["v_out"])], "leaf",
                             [t("i", TensorProto.INT64, []), t("c", TensorProto.BOOL, []), t("v", FLOAT, [2])],
                             [t("c_out", TensorProto.BOOL, []), t("v_out", FLOAT, [2])])
    then = helper.make_graph([helper.make_node("Loop", ["", "cond", "x"], ["a"], body=leaf)], "then", [], [t("a", FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [], [t("b", FLOAT, [2])])
    second = helper.make_graph([helper.make_node("Abs", ["x"], ["d"])], "second", [], [t("d", FLOAT, [2])])
    return model([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
                  helper.make_node("If", ["cond"], ["z"], then_branch=second, else_branch=other)],
                 [t("cond", TensorProto.BOOL, []), t("x", FLOAT, [2])], [t("y", FLOAT, [2]), t("z", FLOAT, [2])])


def test_graphs_of_lists_what_onnx_ir_lists_in_its_order():
    models = [_nested(), *(onnx.load(str(p), load_external_data=False) for p in sorted(DATA.glob("*/*.onnx")))]
    for proto in models:
        m = load_model(proto)
        assert [id(g) for g in graphs_of(m)] == [id(g) for g in m.graphs()]
    names = [g.name for g in graphs_of(load_model(_nested()))]
    # Depth first, each node's graph attributes in their order (make_node sorts them by name).
    assert names == ["g", "else", "then", "leaf", "else", "second"]
