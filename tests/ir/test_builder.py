"""The opset-aware builder: the same request gives the node each opset requires."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from seqlower.ir.builder import Builder, NameAuthority
from seqlower.ir.helpers import merge_shapes
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


# Every op the lowerings and rewrites emit through Builder.op (read off the source, so a
# new one is covered as soon as it is written), and the element types they are emitted
# with: indices, lengths and masks (int64, int32, bool) and element values (every type a
# list may hold).
def _emitted_ops() -> set[str]:
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found: set[str] = set()
    for path in [*root.joinpath("passes").rglob("*.py"), *root.joinpath("seqlower").rglob("*.py")]:
        found.update(re.findall(r'\.op\(\s*"([A-Z][A-Za-z]+)"', path.read_text()))
    return found


EMITTED = sorted(_emitted_ops())
_UNARY = {"Neg", "Abs", "Not", "Relu", "Sign", "Floor", "Ceil", "Identity", "NonZero", "Shape", "Size", "Sqrt", "Exp",
          "Log", "Reciprocal", "IsNaN", "IsInf", "Erf", "Tanh", "Sigmoid"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
           "And", "Or", "Xor", "Pow", "BitShift", "Sum", "Mean"}
_TYPES = [onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT,
          onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.UINT8,
          onnx.TensorProto.INT8, onnx.TensorProto.STRING]


def test_the_emitted_ops_are_read_off_the_source():
    assert {"Max", "Min", "Concat", "Gather", "Slice", "Where", "Range", "CumSum"} <= set(EMITTED)


@pytest.mark.parametrize("op", sorted((_UNARY | _BINARY) & set(EMITTED)))
def test_the_schema_check_agrees_with_the_checker_at_every_opset_and_type(op):
    """``unsupported`` (held against every node the builder makes) says what onnx's full
    checker says of a one-node model, for opsets 11-26 and every element type."""
    from onnx import helper

    from seqlower.ir.builder import unsupported

    arity = 1 if op in _UNARY else 2
    for opset in range(11, 27):
        for elem in _TYPES:
            name = f"tensor({helper.tensor_dtype_to_string(elem).split('.')[-1].lower()})"
            node = helper.make_node(op, [f"x{k}" for k in range(arity)], ["y"])
            types = {f"x{k}": helper.make_tensor_type_proto(elem, [2]) for k in range(arity)}
            try:
                schema = onnx.defs.get_schema(op, opset, "")
                onnx.shape_inference.infer_node_outputs(schema, node, types, opset_imports=[helper.make_opsetid("", opset)])
                valid = not schema.deprecated
            except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
                valid = False
            assert (unsupported(op, opset, (name,) * arity) is None) == valid, (op, opset, name)


@pytest.mark.parametrize("opset", range(11, 27))
@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("elem", [onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.FLOAT])
def test_integer_max_and_min_below_their_opset_are_written_with_a_where(opset, op, elem):
    import numpy as np
    from onnx import helper

    from seqlower.executor import Executor

    m = helper.make_model(helper.make_graph([], "g", [t("x", elem, [5])], []),
                          opset_imports=[helper.make_opsetid("", opset)],
                          ir_version=helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    irm = ir.serde.deserialize_model(m)
    b = Builder(irm.graph, None, opset, NameAuthority(irm), main_graph=True)
    x = irm.graph.inputs[0]
    y = b.op(op, [x, b.op("Neg", [x], "nx")], "m")
    y.shape = ir.Shape([5])
    irm.graph.outputs.append(y)
    proto = ir.serde.serialize_model(irm)
    onnx.checker.check_model(proto, full_check=True)
    ops = [n.op_type for n in proto.graph.node]
    integer = elem != onnx.TensorProto.FLOAT
    assert (op in ops) == (not integer or opset >= 12) and ("Where" in ops) == (integer and opset < 12)
    feed = np.array([3, -2, 0, 7, -9]).astype(helper.tensor_dtype_to_np_dtype(elem))
    want = (np.maximum if op == "Max" else np.minimum)(feed, -feed)
    for backend in ("reference", "onnxruntime"):
        assert np.array_equal(Executor(proto, backend=backend).run({"x": feed}).outputs["m"], want)


def test_a_pooled_constant_of_a_subgraph_is_not_read_before_its_node():
    # In a subgraph a constant is a Constant node placed where the builder that made it
    # emits; a builder anchored earlier asking for the same value gets its own node, not
    # one defined after its use (a map body's Flat lists read one so: program 7300358).
    m = model([], [t("x", FLOAT, [4, 3])], [t("x", FLOAT, [4, 3])], opset=17, ir_version=IR_FOR_OPSET[17])
    irm = ir.serde.deserialize_model(m)
    names = NameAuthority(irm)
    g = ir.Graph([], [], nodes=[], name="sub")
    first = ir.Node("", "Identity", [irm.graph.inputs[0]], outputs=[ir.Value(name="a")])
    last = ir.Node("", "Identity", [first.outputs[0]], outputs=[ir.Value(name="b")])
    g.extend([first, last])
    late = Builder(g, last, 17, names, main_graph=False).constant(np.array(0, np.int64), "zero")
    early = Builder(g, first, 17, names, main_graph=False).constant(np.array(0, np.int64), "zero")
    order = list(g)
    assert early is not late and order.index(early.producer()) < order.index(first)
    again = Builder(g, None, 17, names, main_graph=False).constant(np.array(0, np.int64), "zero")
    assert again in (early, late)  # (appended at the end: either precedes it)
