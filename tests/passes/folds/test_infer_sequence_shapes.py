"""Shape inference that keeps sequence types and adds lengths' consequences."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass, refine_shape
from seqlower.io.models import to_proto
import pytest

from tests.helpers import FLOAT, const, lower_checked, model, seq, t


def test_sequences_stay_sequences_and_reads_get_exact_shapes():
    # The sequence is a model output, so it stays; onnx alone would say [?, 4] for the
    # SequenceAt and ? for the concat axis.
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
            helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
            helper.make_node("SequenceInsert", ["s1", "y"], ["s"]),
            helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
            helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
            helper.make_node("ConcatFromSequence", ["s"], ["stack_pair"], axis=-1, new_axis=1),
            helper.make_node("Concat", ["first", "cat"], ["both"], axis=0),
        ],
        [t("x", FLOAT, [2, 4]), t("y", FLOAT, [3, 4])],
        [seq("s", FLOAT), t("both", FLOAT, [None, 4])],
        initializer=[const("zero", 0, np.int64)],
    )
    irm = ir.serde.deserialize_model(m)
    assert InferSequenceShapesPass()(irm).modified
    values = {v.name: v for n in irm.graph for v in n.outputs}
    assert isinstance(values["s"].type, ir.SequenceType) and values["s"].shape == ir.Shape([None, 4])
    assert values["first"].shape == ir.Shape([2, 4])
    assert values["cat"].shape == ir.Shape([5, 4])
    assert values["stack_pair"].shape == ir.Shape([None, 4, 2])  # the count of elements is the new axis
    assert values["both"].shape == ir.Shape([7, 4])
    onnx.checker.check_model(to_proto(irm), full_check=True)
    assert not InferSequenceShapesPass()(irm).modified, "a second run finds nothing new"


def test_refine_never_forgets_a_known_dim():
    assert refine_shape(ir.Shape([2, None]), ir.Shape([None, 3])) == ir.Shape([2, 3])
    assert refine_shape(ir.Shape(["N"]), ir.Shape([None])) == ir.Shape(["N"])
    assert refine_shape(ir.Shape([2]), ir.Shape([2, 3])) == ir.Shape([2])
    assert refine_shape(None, ir.Shape([1])) == ir.Shape([1])


def _edit_loop(grow: bool) -> onnx.ModelProto:
    """A list carried by a Loop whose body declares its elements' shape unknown (as
    TorchScript does): each step reads the first element, adds the step's row (or, with
    ``grow``, appends it doubled in length) and appends the result."""
    from tests.helpers import BOOL, INT64, body

    nodes = [
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("SequenceAt", ["s_in", "zero"], ["first"]),
        helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
        helper.make_node("Add", ["first", "row"], ["sum"]),
    ]
    if grow:
        nodes.append(helper.make_node("Concat", ["sum", "sum"], ["new"], axis=0))
    else:
        nodes.append(helper.make_node("Identity", ["sum"], ["new"]))
    nodes.append(helper.make_node("SequenceInsert", ["s_in", "new"], ["s_out"]))
    b = body(nodes, [t("i", INT64, []), t("c", BOOL, []), seq("s_in", FLOAT, [None])],
             [t("c_out", BOOL, []), seq("s_out", FLOAT, [None])])
    return model(
        [
            helper.make_node("SequenceConstruct", ["x0"], ["init"]),
            helper.make_node("Loop", ["trips", "", "init"], ["s"], body=b),
            helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
        ],
        [t("x", FLOAT, ["N", "M"]), t("x0", FLOAT, ["M"]), t("trips", INT64, [])],
        [t("y", FLOAT, [None])],
        initializer=[const("zero", 0, np.int64)],
    )


def test_a_carried_list_keeps_its_element_shape_by_induction():
    from seqlower.analysis.analyzer import analyze
    from tests.helpers import lower_checked

    feeds = [{"x": np.arange(6, dtype=np.float32).reshape(3, 2), "x0": np.ones(2, np.float32), "trips": np.array(3)},
             {"x": np.zeros((1, 2), np.float32), "x0": np.ones(2, np.float32), "trips": np.array(0)}]
    # Growing elements still differ along one axis only: Ragged.
    for grow, carried_shape, lowering in ((False, ir.Shape(["M"]), "stacked"), (True, ir.Shape([None]), "ragged")):
        m = _edit_loop(grow)
        irm = ir.serde.deserialize_model(m)
        InferSequenceShapesPass()(irm)
        loop = next(n for n in irm.graph if n.op_type == "Loop")
        s_in = loop.attributes["body"].as_graph().inputs[2]
        # The body gives back [M] elements for [M] elements: proven. Growing ones: the
        # assumption fails, and every shape it touched is restored.
        assert s_in.shape == carried_shape
        assert analyze(irm).webs[0].packed
        _, report = lower_checked(m, inputs=feeds)
        assert lowering in {r["into"] for r in report.rewrites}


def test_a_subgraph_reading_outer_constant_axes_gets_element_ranks():
    # x[i] as Slice + Squeeze whose axes are a main-graph initializer: onnx's inference
    # does not see outer values, so the element's rank was unknown and the list stayed a
    # sequence; the copy handed to inference gets the constants inside the body.
    from tests.helpers import BOOL, INT64, body, lower_checked

    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]),
                      helper.make_node("Unsqueeze", ["i", "axis0"], ["i1"]),
                      helper.make_node("Add", ["i1", "one"], ["i2"]),
                      helper.make_node("Slice", ["x", "i1", "i2", "axis0"], ["row1"]),
                      helper.make_node("Squeeze", ["row1", "axis0"], ["row"]),
                      helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"])],
                     [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT, ["w"])],
                     [t("c_out", BOOL, []), seq("acc_out", FLOAT, ["w"])])
    m = model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
               helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
               helper.make_node("Loop", ["n", "", "empty"], ["rows"], body=loop_body),
               helper.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0, new_axis=1)],
              [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "w"])],
              initializer=[const("zero", 0, np.int64), const("one", np.array([1], np.int64)), const("axis0", np.array([0], np.int64))])
    low, report = lower_checked(m, inputs=[{"x": np.arange(6, dtype=np.float32).reshape(3, 2)}, {"x": np.zeros((0, 2), np.float32)}])
    assert report.tensor_only
    # The model as given is untouched: the constants were copied for inference only.
    assert [n.op_type for n in m.graph.node[3].attribute[0].g.node].count("Constant") == 0


def test_a_second_onnx_inference_runs_only_downstream_of_what_the_analysis_wrote(monkeypatch):
    """Two split/map/concat blocks: the analysis gives each concat its shape, which the
    next block's SplitToSequence (followed by the analysis) and the maps (their bodies
    declare the element shape already) cannot learn from; only the Identity at the end
    is inferred again, and the outcome is the one a whole-model inference gives."""
    import seqlower.passes.folds.infer_sequence_shapes as mod

    body = helper.make_graph([helper.make_node("Relu", ["e"], ["o"])], "b", [t("e", FLOAT, [2, 3])], [t("o", FLOAT, [2, 3])])
    nodes = []
    prev = "x"
    for k in range(2):
        nodes += [helper.make_node("SplitToSequence", [prev, "two"], [f"s{k}"], axis=0),
                  helper.make_node("SequenceMap", [f"s{k}"], [f"m{k}"], body=body),
                  helper.make_node("ConcatFromSequence", [f"m{k}"], [f"y{k}"], axis=0)]
        prev = f"y{k}"
    nodes.append(helper.make_node("Identity", [prev], ["out"]))
    m = model(nodes, [t("x", FLOAT, [4, 3])], [t("out", FLOAT, [None, 3])], initializer=[const("two", 2, np.int64)])
    seen: list[list[str]] = []
    real = mod.infer_shapes

    def spy(proto, **kwargs):
        seen.append([n.op_type for n in proto.graph.node])
        return real(proto, **kwargs)

    monkeypatch.setattr(mod, "infer_shapes", spy)
    irm = ir.serde.deserialize_model(m)
    InferSequenceShapesPass()(irm)
    assert len(seen) == 2 and len(seen[0]) == len(nodes) and seen[1] == ["Identity"]
    assert irm.graph.outputs[0].shape == ir.Shape([4, 3])
    assert {v.name: v.shape for n in irm.graph for v in n.outputs}["y1"] == ir.Shape([4, 3])
    monkeypatch.setattr(mod, "_cone_proto", lambda model, news: None)  # the whole model, every time
    whole = ir.serde.deserialize_model(m)
    InferSequenceShapesPass()(whole)
    assert to_proto(whole).SerializeToString() == to_proto(irm).SerializeToString()


def _edits(position_input: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("SplitToSequence", ["x", "one"], ["s0"], axis=0, keepdims=0),
             helper.make_node("SequenceInsert", ["s0", "row", "zero"], ["s1"]),
             helper.make_node("SequenceErase", ["s1", "minus_one"], ["s2"]),
             helper.make_node("SequenceAt", ["s2", "p" if position_input else "zero"], ["first"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=0, new_axis=1)]
    inits = [const("one", 1, np.int64), const("zero", 0, np.int64), const("minus_one", -1, np.int64),
             const("row", np.ones(3, np.float32))]
    inputs = [t("x", FLOAT, [4, 3])] + ([t("p", onnx.TensorProto.INT64, [])] if position_input else [])
    return model(nodes, inputs, [t("first", FLOAT, [None]), t("cat", FLOAT, [None, None])], initializer=inits)


def test_list_edits_alone_are_typed_by_the_analysis_without_onnx(monkeypatch):
    """SplitToSequence, inserts, erases, reads at constant positions and a concat on typed
    inputs: the analysis types every value, exactly as with onnx's inference; a read at a
    run-time position leaves a value it cannot type, and onnx's inference runs then."""
    import seqlower.passes.folds.infer_sequence_shapes as mod

    runs: list[int] = []
    real = mod.infer_shapes
    monkeypatch.setattr(mod, "infer_shapes", lambda proto, **kw: runs.append(len(proto.graph.node)) or real(proto, **kw))
    fast = ir.serde.deserialize_model(_edits(False))
    InferSequenceShapesPass()(fast)
    assert runs == []
    shapes = {v.name: v.shape for n in fast.graph for v in n.outputs}
    assert shapes["first"] == ir.Shape([3]) and shapes["cat"] == ir.Shape([4, 3])
    monkeypatch.setattr(mod, "_list_edits_only", lambda model: False)
    whole = ir.serde.deserialize_model(_edits(False))
    InferSequenceShapesPass()(whole)
    assert to_proto(whole).SerializeToString() == to_proto(fast).SerializeToString()
    monkeypatch.undo()
    monkeypatch.setattr(mod, "infer_shapes", lambda proto, **kw: runs.append(len(proto.graph.node)) or real(proto, **kw))
    InferSequenceShapesPass()(ir.serde.deserialize_model(_edits(True)))
    assert runs and runs[0] == 5


def test_a_chain_of_maps_whose_bodies_declare_no_rows_settles_static():
    """Each block splits the last one's rows into a map whose body declares [None, 6]:
    only the analysis knows the joined rows (onnx cannot sum a concat of a sequence), and
    only onnx infers the next body from them, so every block takes one alternation. A
    chain of 20 settles in one run of the pass and lowers with no Loop."""
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.executor.verify import verify
    from seqlower.io.models import to_proto
    from seqlower.passes.folds import infer_sequence_shapes
    from tests.fastpath.test_repeats import _chain

    m = _chain(20)
    assert infer_sequence_shapes._SETTLE_ROUNDS >= 20
    low, report = lower_with_report(load_model(m), LowerOptions())
    assert {r["into"] for r in report.rewrites} == {"unrolled"}
    proto = to_proto(low)
    assert "Loop" not in {n.op_type for n in proto.graph.node}
    assert verify(m, proto, backend="onnxruntime").equivalent


# onnx types a Loop's carried list by its initial value and never reads what the body
# gives back; a list whose elements change shape across iterations came out with the
# first element's dims, and what was computed from it (an element read, a map's body, a
# concat's Reshape) with dims the data does not have: the lowered model failed on
# onnxruntime where the original ran (regression programs 00609, 00614, 02280).
def _growing_list(read: str, where: str, axis: int):
    """A list that starts with a [3, 4] constant and gets x's first it+1 rows (or
    columns) per iteration; then ``read`` uses it."""
    slice_axis = np.array([axis], np.int64)
    body_nodes = [
        helper.make_node("Identity", ["cond"], ["cond_out"]),
        helper.make_node("Add", ["it", "one"], ["stop0"]),
        helper.make_node("Unsqueeze", ["stop0", "axes0"], ["stop"]),
        helper.make_node("Slice", ["x", "zero1", "stop", "slice_axis"], ["part"]),
        helper.make_node("SequenceInsert", ["acc", "part"], ["acc_out"]),
    ]
    loop_body = helper.make_graph(body_nodes, "body", [t("it", onnx.TensorProto.INT64, []), t("cond", onnx.TensorProto.BOOL, []),
                                                      seq("acc", FLOAT)],
                                  [t("cond_out", onnx.TensorProto.BOOL, []), seq("acc_out", FLOAT)])
    reads = {
        # the element before the last, inserted again, all joined along the grown axis
        "at": [helper.make_node("SequenceAt", ["grown", "minus_two"], ["e"]),
               helper.make_node("SequenceInsert", ["grown", "e"], ["g2"]),
               helper.make_node("ConcatFromSequence", ["g2"], ["y"], axis=axis)],
        # a map whose body onnx infers from the first element's shape
        "map": [helper.make_node("SequenceMap", ["grown"], ["m"], body=helper.make_graph(
                    [helper.make_node("Add", ["el", "half"], ["a"]), helper.make_node("Shape", ["a"], ["d"]),
                     helper.make_node("Cast", ["d"], ["df"], to=FLOAT),
                     helper.make_node("ReduceSum", ["df"], ["s"], keepdims=1),
                     helper.make_node("Mul", ["a", "s"], ["r"])],
                    "mb", [t("el", FLOAT, None)], [t("r", FLOAT, None)])),
                helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=axis)],
    }[read]
    nodes = [helper.make_node("SequenceConstruct", ["first"], ["s0"]),
             helper.make_node("Loop", ["trips", "", "s0"], ["grown"], body=loop_body), *reads]
    if where == "if":
        branch = helper.make_graph(nodes, "then", [], [t("y", FLOAT, None)])
        other = helper.make_graph([helper.make_node("Identity", ["first"], ["y2"])], "else", [], [t("y2", FLOAT, None)])
        nodes = [helper.make_node("Greater", ["trips", "zero"], ["c"]),
                 helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
    first = np.arange(12, dtype=np.float32).reshape(3, 4) if axis == 0 else np.arange(15, dtype=np.float32).reshape(5, 3)
    inits = [const("first", first), const("one", 1, np.int64), const("axes0", [0], np.int64),
             const("zero1", [0], np.int64), const("slice_axis", slice_axis), const("minus_two", -2, np.int64),
             const("half", 0.5, np.float32), const("zero", 0, np.int64)]
    x_shape = [5, 4] if axis == 0 else [5, 6]
    m = model(nodes, [t("x", FLOAT, x_shape), t("trips", onnx.TensorProto.INT64, [])], [t("y", FLOAT, [None, None])],
              initializer=inits)
    feeds = [{"x": np.random.default_rng(s).standard_normal(x_shape).astype(np.float32), "trips": np.array(n)}
             for s, n in enumerate((2, 3, 1))]
    return m, feeds


@pytest.mark.parametrize("read", ["at", "map"])
@pytest.mark.parametrize("where", ["main", "if"])
@pytest.mark.parametrize("axis", [0, 1])
def test_a_list_whose_elements_change_shape_in_a_loop_is_not_typed_by_its_first(read, where, axis):
    m, feeds = _growing_list(read, where, axis)
    lower_checked(m, inputs=feeds)
