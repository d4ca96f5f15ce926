"""TVM quirk "shape-expr": TVM's ONNX frontend keeps what Shape gives as a shape
expression (a dim gathered from one as a prim), which most ops refuse. Lowered for TVM,
each such value is made a tensor before an op that takes none (passes/quirks/shapes_as_tensors.py),
and check --target names what no rewrite can help. TVM is not installed by the suite:
what it does was measured with tools/runtimes.py (graph programs 20156, 20333, 20339,
20391 ran right after this rewrite and failed before it); here the rewrite's form, its
numbers and the naming are held."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import load_model
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.quirks.shapes_as_tensors import ShapesAsTensorsPass
from seqlower.targets import load_target, target_gaps
from tests.helpers import BOOL, FLOAT, INT64, const, lowered_for, model, seq, t


def _shape_ops() -> onnx.ModelProto:
    """What the lowerings write on a list's shapes, here of the dims of NonZero's
    positions (run-time dims TVM holds as a shape expression): an Unsqueeze and a CumSum
    of dims, a Tile repeating a row of them as often as a Slice of them has dims, a
    Slice of them at a run-time bound, and the position ``Reshape(n - 1, [1])`` of a dim
    gathered from them."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["dims"]),
        helper.make_node("Unsqueeze", ["dims", "zero1"], ["row"]),
        helper.make_node("CumSum", ["dims", "zero"], ["ends"]),
        helper.make_node("Slice", ["dims", "one1", "big1"], ["rest"]),
        helper.make_node("Shape", ["rest"], ["n1"]),
        helper.make_node("Concat", ["n1", "one1"], ["reps"], axis=0),
        helper.make_node("Tile", ["row", "reps"], ["rows"]),
        helper.make_node("Gather", ["dims", "one"], ["n"], axis=0),
        helper.make_node("Sub", ["n", "one"], ["last"]),
        helper.make_node("Reshape", ["last", "one1"], ["pos"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Cast", ["total"], ["k"], to=onnx.TensorProto.INT64),
        helper.make_node("Reshape", ["k", "one1"], ["k1"]),
        helper.make_node("Slice", ["dims", "zero1", "k1"], ["head"]),
    ]
    return model(nodes, [t("x", FLOAT, ["N", "M"])],
                 [t("row", INT64, [1, 2]), t("ends", INT64, [2]), t("rows", INT64, [None, 2]), t("pos", INT64, [1]),
                  t("head", INT64, [None])], opset=17,
                 initializer=[const("zero", np.int64(0)), const("one", np.int64(1)), const("zero1", np.array([0], np.int64)),
                              const("one1", np.array([1], np.int64)), const("big1", np.array([2**62], np.int64))])


# The nodes TVM's frontend fails in _shape_ops, and the input of each that it fails on.
_REFUSED = {"row": 0, "ends": 0, "n1": 0, "rows": 1, "pos": 0, "head": 0}


def _rewritten(m: onnx.ModelProto) -> onnx.ModelProto:
    # (typed as the lowering's inference leaves every value before the pass runs)
    return to_proto(ShapesAsTensorsPass()(load_model(onnx.shape_inference.infer_shapes(m))).model)


def _shape_gaps(m: onnx.ModelProto) -> list[str]:
    return sorted(g.where for g in target_gaps(m, load_target("tvm")) if "quirk shape-expr" in g.why)


def _producer(m: onnx.ModelProto, value: str) -> onnx.NodeProto | None:
    return next((n for n in m.graph.node if value in n.output), None)


def test_tvm_refuses_these_reads_of_shapes_and_check_names_each():
    # (not the Tile: its repeats are the shape of a shape, which fails first)
    m = _shape_ops()
    assert _shape_gaps(m) == sorted(f"{_producer(m, o).op_type} node (output '{o}')" for o in _REFUSED if o != "rows")


@pytest.mark.parametrize("x", [[[1.0, 0.0], [2.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]], np.ones((1, 0)).tolist()])
def test_each_becomes_a_tensor_first_and_gives_the_same_numbers(x):
    m = _shape_ops()
    low = _rewritten(m)
    onnx.checker.check_model(low, full_check=True)
    for out, k in _REFUSED.items():
        fed = _producer(low, _producer(low, out).input[k])
        assert fed.op_type in ("Cast", "Reshape"), out  # (a Reshape ends a prim's conversion)
    assert _shape_gaps(low) == []
    feeds = {"x": np.array(x, np.float32).reshape(len(x), -1)}
    want = Executor(m, backend="onnxruntime").run(feeds).outputs
    got = Executor(low, backend="onnxruntime").run(feeds).outputs
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v)


def test_shapes_the_frontend_keeps_stay_shapes():
    # Reshape's and Expand's shape inputs want a shape expression: no Cast goes there.
    m = model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
               helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]), helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
               helper.make_node("Reshape", ["x", "target"], ["y"]), helper.make_node("Expand", ["x", "dims"], ["z"])],
              [t("x", FLOAT, ["N", "M"])], [t("y", FLOAT, [None, None]), t("z", FLOAT, ["N", "M"])], opset=17,
              initializer=[const("zero", np.int64(0)), const("zero1", np.array([0], np.int64)), const("minus1", np.array([-1], np.int64))])
    low = _rewritten(m)
    assert [n.op_type for n in low.graph.node] == [n.op_type for n in m.graph.node]


def test_a_subgraph_reading_an_outer_shape_reads_one_tensor_made_where_the_shape_is():
    then = helper.make_graph([helper.make_node("CumSum", ["dims", "zero"], ["c"])], "then", [], [t("c", INT64, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["dims"], ["d"])], "other", [], [t("d", INT64, [2])])
    m = model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=other)],
              [t("x", FLOAT, ["N", "M"]), t("b", BOOL, [])], [t("y", INT64, [2])], opset=17,
              initializer=[const("zero", np.int64(0))])
    low = _rewritten(m)
    assert [n.op_type for n in low.graph.node] == ["Shape", "Cast", "If"]
    cast = low.graph.node[1].output[0]
    branches = {a.name: a.g for a in low.graph.node[-1].attribute}
    assert [(n.op_type, n.input[0]) for n in branches["then_branch"].node] == [("CumSum", cast)]
    assert [(n.op_type, n.input[0]) for n in branches["else_branch"].node] == [("Identity", cast)]
    x = np.ones((3, 2), np.float32)
    for b in (True, False):
        got = Executor(low, backend="onnxruntime").run({"x": x, "b": np.array(b)}).outputs["y"]
        assert got.tolist() == ([3, 5] if b else [3, 2])


def test_a_lowered_list_output_leaves_tvm_no_shape_it_refuses():
    # Graph program 20156's pattern: a list returned through the ABI, its shape rows an
    # Unsqueeze of lengths and a Tile of a row of dims read off Shape.
    # The rows a mask keeps: dims no input shape fixes.
    nodes = [helper.make_node("Compress", ["x", "keep"], ["kept"], axis=0),
             helper.make_node("SplitToSequence", ["kept", "sizes"], ["s"], axis=1)]
    m = model(nodes, [t("x", FLOAT, ["N", "M"]), t("keep", BOOL, ["N"]), t("sizes", INT64, ["K"])],
              [seq("s", FLOAT, [None, None])], opset=17)
    generic = lowered_for(m, "generic")
    assert _shape_gaps(generic)  # (check --target tvm of the model lowered for another)
    low = lowered_for(m, "tvm")
    assert _shape_gaps(low) == []
    unsqueezed = {getattr(_producer(low, n.input[0]), "op_type", "input") for n in low.graph.node if n.op_type == "Unsqueeze"}
    assert "Shape" not in unsqueezed and "Slice" not in unsqueezed and "Cast" in unsqueezed
    feeds = {"x": np.arange(10, dtype=np.float32).reshape(2, 5), "keep": np.array([True, False]), "sizes": np.array([2, 0, 3])}
    want = Executor(m, backend="onnxruntime").run(feeds).outputs["s"]
    got = Executor(low, backend="onnxruntime").run(feeds).outputs["s"]
    assert [e.shape for e in got] == [e.shape for e in want] == [(1, 2), (1, 0), (1, 3)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_stacked_dims_pinned_to_their_length_are_read_before_the_pin():
    # Graph program 20387's pattern: ConcatFromSequence(new_axis=1) of [x, x[:, :1]],
    # the list returned as well, lowered Flat reshapes the buffer to a Concat of dims (a Cast of Shape, a Gather of
    # the shape rows) that Ops.reshape_exact pins to its length with a Reshape. TVM folds
    # that Concat of constants to a shape expression and the pin makes it a tensor, which
    # no Reshape takes ("Reshape requires the input new shape to be Shape").
    nodes = [helper.make_node("Slice", ["x", "zero1", "one1", "one1"], ["part"]),
             helper.make_node("SequenceConstruct", ["x", "part"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)]
    m = model(nodes, [t("x", BOOL, ["N", "M"])], [t("y", BOOL, [None, None, None]), seq("s", BOOL, None)], opset=17,
              initializer=[const("zero1", np.array([0], np.int64)), const("one1", np.array([1], np.int64))])
    low = lowered_for(m, "tvm")  # (Flat: the list is returned too)
    pins = [n for n in low.graph.node if n.op_type == "Reshape" and _producer(low, n.input[0]) is not None
            and _producer(low, n.input[0]).op_type == "Concat" and any(r.op_type == "Reshape" and r.input[1] == n.output[0]
                                                                     for r in low.graph.node)]
    assert pins == []
    assert _shape_gaps(low) == []
    feeds = {"x": np.array([[True], [False], [True]])}
    np.testing.assert_array_equal(Executor(low, backend="onnxruntime").run(feeds).outputs["y"],
                                  Executor(m, backend="reference").run(feeds).outputs["y"])


def test_check_names_a_reshape_to_a_pinned_concat_of_constants():
    # What TVM's frontend does with them: a Concat of 1-D int64 constants is a shape
    # expression, a Reshape of one to [2] an int64 tensor, which a Reshape's shape refuses.
    nodes = [helper.make_node("Concat", ["a", "b"], ["dims"], axis=0),
             helper.make_node("Reshape", ["dims", "two"], ["pinned"]),
             helper.make_node("Reshape", ["x", "pinned"], ["y"]),
             helper.make_node("Reshape", ["x", "dims"], ["z"])]
    m = model(nodes, [t("x", FLOAT, [6])], [t("y", FLOAT, [2, 3]), t("z", FLOAT, [2, 3])], opset=17,
              initializer=[const("a", np.array([2], np.int64)), const("b", np.array([3], np.int64)),
                           const("two", np.array([2], np.int64))])
    assert _shape_gaps(m) == ["Reshape node (output 'y')"]


def test_a_row_gathered_from_a_table_of_shapes_keeps_its_pin():
    # A map over a static list whose body builds lists, then carried through a Loop whose
    # If maps it (a Flat list of run-time ranks), lowered for TVM: each element is a
    # Reshape of the Flat values to a row Gathered out of the shape table, pinned to its
    # length. Unpinned, onnxruntime's inference propagated that Gather as one element and
    # the Reshape as rank 1, and refused the lowered model ("Can't merge shape info":
    # guided program 222 of seed 13 and four more).
    from tests.helpers import body, lower_checked

    split_join = body([helper.make_node("SplitToSequence", ["e"], ["parts"], axis=0),
                       helper.make_node("SequenceInsert", ["parts", "e"], ["grown"]),
                       helper.make_node("ConcatFromSequence", ["grown"], ["j"], axis=0)],
                      [t("e", FLOAT, [None, None])], [t("j", FLOAT, [None, None])])
    same = body([helper.make_node("Identity", ["f"], ["g"])], [t("f", FLOAT, None)], [t("g", FLOAT, None)])
    step = body([helper.make_node("Identity", ["c"], ["c_out"]),
                 helper.make_node("If", ["cond"], ["acc_out"],
                                  then_branch=body([helper.make_node("SequenceMap", ["acc"], ["m"], body=same)], [],
                                                   [seq("m", FLOAT)]),
                                  else_branch=body([helper.make_node("SequenceInsert", ["acc", "x"], ["a"])], [],
                                                   [seq("a", FLOAT)]))],
                [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT)], [t("c_out", BOOL, []), seq("acc_out", FLOAT)])
    m = model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
               helper.make_node("SequenceMap", ["s"], ["mapped"], body=split_join),
               helper.make_node("Loop", ["p", "", "mapped"], ["carried"], body=step),
               helper.make_node("ConcatFromSequence", ["carried"], ["y"], axis=0)],
              [t("x", FLOAT, [2, 2]), t("p", INT64, []), t("cond", BOOL, [])], [t("y", FLOAT, [None, 2])], opset=18)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    lower_checked(m, inputs=[{"x": x, "p": np.array(k, np.int64), "cond": np.array(c)} for k in (0, 2) for c in (True, False)],
                  target="tvm")
