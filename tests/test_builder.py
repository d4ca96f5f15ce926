"""The opset-aware builder: the same request gives the node each opset requires."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest

from seqlower.builder import Builder, NameAuthority, merge_shapes
from tests.helpers import FLOAT, model, t
from tests.passes.patterns import IR_FOR_OPSET, OPSETS


def _graph_text(opset: int, emit) -> str:
    m = model([], [t("x", FLOAT, [4, 3])], [t("x", FLOAT, [4, 3])], opset=opset, ir_version=IR_FOR_OPSET[opset])
    irm = ir.serde.deserialize_model(m)
    b = Builder(irm.graph, None, opset, NameAuthority(irm), main_graph=True)
    outs = emit(b, irm.graph.inputs[0])
    irm.graph.outputs.clear()
    irm.graph.outputs.extend(outs)
    proto = ir.serde.serialize_model(irm)
    onnx.checker.check_model(proto, full_check=True)
    return onnx.printer.to_text(proto.graph)


@pytest.mark.parametrize("opset", OPSETS)
def test_split_always_has_explicit_sizes(opset):
    text = _graph_text(opset, lambda b, x: b.split(x, [1, 2], 1, ["a", "b"], "sp"))
    if opset <= 12:
        assert "Split <axis: int = 1, split: ints = [1, 2]> (x)" in text
    else:
        assert "Split <axis: int = 1> (x, sp_sizes)" in text and "sp_sizes =  {1,2}" in text
    assert "num_outputs" not in text


@pytest.mark.parametrize("opset", OPSETS)
def test_squeeze_and_unsqueeze_axes_follow_the_opset(opset):
    def emit(b, x):
        parts = b.split(x, [1, 2], 1, ["a", "b"], "sp")
        sq = b.squeeze(parts[0], [1], "sq")
        return [b.unsqueeze(sq, [0], "unsq")]

    text = _graph_text(opset, emit)
    if opset <= 12:
        assert "Squeeze <axes: ints = [1]> (a)" in text and "Unsqueeze <axes: ints = [0]> (sq)" in text
    else:
        assert "Squeeze (a, sq_axes)" in text and "Unsqueeze (sq, unsq_axes)" in text
    assert "float[1,4] unsq" in text


def test_builder_shapes_and_constant_pool():
    m = model([], [t("x", FLOAT, ["N", 6])], [t("x", FLOAT, ["N", 6])], opset=18)
    irm = ir.serde.deserialize_model(m)
    names = NameAuthority(irm)
    b = Builder(irm.graph, None, 18, names, main_graph=True)
    a, c = b.split(irm.graph.inputs[0], [2, 4], 1, ["x", "x"], "x")
    assert a.name != c.name and "x" not in (a.name, c.name)  # never reuse a taken name
    assert a.shape == ir.Shape(["N", 2]) and c.shape == ir.Shape(["N", 4])
    s1, s2 = b.squeeze(a, [0], "s1"), b.squeeze(c, [0], "s2")
    assert s1.shape == ir.Shape([2]) and s2.shape == ir.Shape([4])
    axes = [n.inputs[1] for n in b.nodes if n.op_type == "Squeeze"]
    assert axes[0] is axes[1], "the same small constant is emitted once per graph"
    cat = b.concat([a, c], 1, "cat", ir.Shape(["N", 6]))
    assert cat.dtype == ir.DataType.FLOAT


def test_merge_shapes_keeps_what_all_agree_on():
    assert merge_shapes([ir.Shape(["N", 2]), ir.Shape(["N", 3])]) == ir.Shape(["N", None])
    assert merge_shapes([ir.Shape([1]), ir.Shape([1, 2])]) is None
    assert merge_shapes([ir.Shape([1, 2]), None]) is None
