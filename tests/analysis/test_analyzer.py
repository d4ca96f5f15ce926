"""The sequence lattice: lengths, shapes, constants, joins, loops, webs and decisions."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.analysis.analyzer import analyze
from seqlower.errors import ModelError
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, seq, t


def _analyze(m, **kw):
    irm = ir.serde.deserialize_model(m)
    from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass

    InferSequenceShapesPass(kw.get("keepdims_policy", "auto"))(irm)
    a = analyze(irm, **kw)
    by_name = {v.name: info for v, info in a.info.items()}
    return irm, a, by_name


def test_split_lengths_shapes_and_symbolic_dims():
    m = model(
        [
            helper.make_node("SplitToSequence", ["x", "k"], ["s"], axis=1),
            helper.make_node("SplitToSequence", ["x"], ["u"], axis=0, keepdims=0),
            helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1),
        ],
        [t("x", FLOAT, ["N", 5])],
        [t("y", FLOAT, ["N", 5])],
        initializer=[const("k", 2, np.int64)],
    )
    _, a, info = _analyze(m)
    s = info["s"]
    assert s.length == 3 and [list(sh.dims) for sh in s.shapes] == [[ir.SymbolicDim("N"), 2]] * 2 + [[ir.SymbolicDim("N"), 1]]
    assert not s.uniform and s.elem_shape == ir.Shape(["N", None])
    u = info["u"]  # N chunks: length unknown, but every chunk has shape [5]
    assert u.length is None and u.uniform and u.elem_shape == ir.Shape([5])
    decisions = {w.values[0].name: w.reason for w in a.webs}
    assert decisions["s"] is None
    assert "only known at run time" in decisions["u"]


@pytest.mark.parametrize("policy, squeezed", [("auto", True), ("onnxruntime", True), ("spec", False)])
def test_unbind_over_a_dynamic_dim_squeezes_by_policy(policy, squeezed):
    # TorchScript's unbind: SplitToSequence(x, 1, keepdims=0) over a dim known only at run time.
    m = model(
        [helper.make_node("SplitToSequence", ["x", "one"], ["u"], axis=0, keepdims=0),
         helper.make_node("ConcatFromSequence", ["u"], ["y"], axis=0, new_axis=1)],
        [t("x", FLOAT, ["N", 5])],
        [t("y", FLOAT, None)],
        initializer=[const("one", 1, np.int64)],
    )
    _, a, info = _analyze(m, keepdims_policy=policy)
    u = info["u"]
    assert u.length is None and u.uniform
    assert u.elem_shape == (ir.Shape([5]) if squeezed else ir.Shape([1, 5]))
    assert a.webs[0].packed and a.stacked_shape[a.webs[0].values[0]] == u.elem_shape


def test_insert_into_empty_keeps_exact_shapes_and_constants():
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
            helper.make_node("SequenceInsert", ["e", "a"], ["s1"]),
            helper.make_node("SequenceInsert", ["s1", "x", "zero"], ["s2"]),
            helper.make_node("SequenceErase", ["s2", "minus1"], ["s3"]),
            helper.make_node("SequenceLength", ["s3"], ["n"]),
        ],
        [t("x", FLOAT, [2, 7])],
        [t("n", INT64, [])],
        initializer=[const("a", np.ones((3,), np.float32)), const("zero", 0, np.int64), const("minus1", -1, np.int32)],
    )
    _, _, info = _analyze(m)
    assert info["s2"].length == 2 and info["s2"].shapes == (ir.Shape([2, 7]), ir.Shape([3]))
    assert info["s2"].consts[0] is None and np.array_equal(info["s2"].consts[1], np.ones(3, np.float32))
    assert info["s3"].length == 1 and info["s3"].shapes == (ir.Shape([2, 7]),) and info["s3"].uniform


def test_if_joins_branches():
    then_g = body([helper.make_node("SequenceConstruct", ["x", "x"], ["a"])], [], [seq("a", FLOAT)])
    else_g = body([helper.make_node("SequenceConstruct", ["x", "y"], ["b"])], [], [seq("b", FLOAT)])
    other = body([helper.make_node("SequenceConstruct", ["x"], ["c"])], [], [seq("c", FLOAT)])
    else_g2 = body([helper.make_node("SequenceConstruct", ["x", "y"], ["d"])], [], [seq("d", FLOAT)])
    m = model(
        [
            helper.make_node("If", ["f"], ["s"], then_branch=then_g, else_branch=else_g),
            helper.make_node("If", ["f"], ["r"], then_branch=other, else_branch=else_g2),
            helper.make_node("SequenceLength", ["s"], ["n"]),
            helper.make_node("SequenceLength", ["r"], ["k"]),
        ],
        [t("x", FLOAT, [2]), t("y", FLOAT, [3]), t("f", BOOL, [])],
        [t("n", INT64, []), t("k", INT64, [])],
    )
    _, _, info = _analyze(m)
    assert info["s"].length == 2 and info["s"].shapes == (ir.Shape([2]), ir.Shape([None]))
    assert info["r"].length is None and info["r"].elem_shape == ir.Shape([None])


def _append_loop(trips, cond_const=None):
    b = body(
        [
            helper.make_node("SequenceInsert", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]) if cond_const is None else helper.make_node("Identity", ["stop"], ["c_out"]),
        ],
        [t("i", INT64, []), t("c_in", BOOL, []), seq("acc_in", FLOAT)],
        [t("c_out", BOOL, []), seq("acc_out", FLOAT)],
    )
    return model(
        [
            helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
            helper.make_node("SequenceInsert", ["e", "x"], ["start"]),
            helper.make_node("Loop", ["trips", "", "start"], ["acc"], body=b),
            helper.make_node("ConcatFromSequence", ["acc"], ["y"], axis=0),
        ],
        [t("x", FLOAT, [2])],
        [t("y", FLOAT, [None])],
        initializer=[const("trips", trips, np.int64)] + ([const("stop", cond_const)] if cond_const is not None else []),
    )


def test_loop_append_once_has_length_initial_plus_trips():
    _, a, info = _analyze(_append_loop(4))
    assert info["acc"].length == 5 and info["acc"].elem_shape == ir.Shape([2]) and info["acc"].uniform
    assert info["acc_in"].length is None  # widened inside the body
    web = a.web_of[next(v for v in a.info if v.name == "acc")]
    assert "carried by Loop" in web.reason


def test_loop_that_may_stop_early_has_unknown_length():
    _, _, info = _analyze(_append_loop(4, cond_const=np.array(False)))
    assert info["acc"].length is None and info["acc"].elem_shape == ir.Shape([2])


@pytest.mark.parametrize("nodes, inits, message", [
    ([helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")], [const("p", 2, np.int64)],
     "SequenceAt node 'pick': position 2 is out of range [-2, 1]"),
    ([helper.make_node("SequenceInsert", ["s", "x", "p"], ["y"], name="ins")], [const("p", -3, np.int32)],
     "SequenceInsert node 'ins': position -3 is out of range [-2, 2]"),
    ([helper.make_node("SequenceErase", ["s", "p"], ["y"], name="del")], [const("p", [2], np.int64)],
     "SequenceErase node 'del': position 2 is out of range [-2, 1]"),
    ([helper.make_node("SplitToSequence", ["x", "p"], ["y"], name="sp")], [const("p", [1, 2], np.int64)],
     "SplitToSequence node 'sp': split [1, 2] sums to 3 but the dimension is 2"),
    ([helper.make_node("SplitToSequence", ["x", "p"], ["y"], name="sp")], [const("p", 0, np.int64)],
     "SplitToSequence node 'sp': scalar split must be positive, got 0"),
    ([helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")], [const("p", 0.0, np.float32)],
     "SequenceAt node 'pick': position must be int32 or int64"),
])
def test_invalid_constants_name_the_node(nodes, inits, message):
    m = model(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]), *nodes],
        [t("x", FLOAT, [2])],
        [t("y", FLOAT, None) if nodes[0].op_type == "SequenceAt" else seq("y", FLOAT)],
        initializer=inits,
    )
    with pytest.raises(ModelError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        _analyze(m)


def test_webs_are_blocked_by_boundaries_runtime_positions_and_max_unroll():
    m = model(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
            helper.make_node("SequenceAt", ["s", "p"], ["y"]),
            helper.make_node("SplitToSequence", ["x"], ["out"], axis=1),
        ],
        [t("x", FLOAT, [3, 70]), t("p", INT64, [])],
        [t("y", FLOAT, [1, 70]), seq("out", FLOAT)],
    )
    _, a, _ = _analyze(m)
    reasons = {w.values[0].name: w.reason for w in a.webs}
    assert "position of SequenceAt" in reasons["s"]
    assert "model output" in reasons["out"]
    # Joined along another axis than the cut, each element would be a node of its own.
    _, a, _ = _analyze(model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1), helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                             [t("x", FLOAT, [3, 70])], [t("y", FLOAT, [210, 1])]), max_unroll=64)
    assert "more than --max-unroll 64" in a.webs[0].reason
    # Joined along the cut: one node whatever the length, so --max-unroll does not apply.
    _, a, _ = _analyze(model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=1), helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1)],
                             [t("x", FLOAT, [3, 70])], [t("y", FLOAT, [3, 70])]), max_unroll=64)
    assert a.webs[0].unrolled, a.webs[0].reason


def test_a_huge_constant_trip_count_leaves_the_length_unknown():
    """An append-once Loop over 2**40 trips (a mutated file) must not make the analysis
    list 2**40 element shapes."""
    import onnx_ir as ir
    from onnx import helper

    from seqlower.analysis.analyzer import analyze
    from tests.helpers import BOOL, FLOAT, INT64, body, const, model, seq, t

    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]),
                      helper.make_node("SequenceInsert", ["acc", "x"], ["acc_out"])],
                     [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT, [2])],
                     [t("c_out", BOOL, []), seq("acc_out", FLOAT, [2])])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"]),
             helper.make_node("Loop", ["trips", "", "empty"], ["all"], body=loop_body),
             helper.make_node("SequenceLength", ["all"], ["n"])]
    m = model(nodes, [t("x", FLOAT, [2])], [t("n", INT64, [])], initializer=[const("trips", 2**40, np.int64)])
    model_ir = ir.serde.deserialize_model(m)
    out = next(n for n in model_ir.graph if n.op_type == "Loop").outputs[0]
    info = analyze(model_ir).info[out]
    assert info.length is None and info.elem_shape == ir.Shape([2])


def test_a_tensor_of_unknown_rank_entering_a_web_makes_its_width_a_run_time_one():
    # x has no rank at all; the list built from it and a rank-1 tensor is Flat with its
    # width left to run time and ranks carried, or, while the rounds may still find the
    # rank (runtime_ranks=False), kept with the reason.
    m = model(
        [
            helper.make_node("SequenceConstruct", ["x", "v"], ["s"]),
            helper.make_node("SequenceAt", ["s", "p"], ["y"]),
        ],
        [t("x", FLOAT, ["A"]), t("v", FLOAT, ["V"]), t("p", INT64, [])],
        [t("y", FLOAT, ["A"])],
    )
    m.graph.input[0].type.tensor_type.ClearField("shape")
    m.graph.output[0].type.tensor_type.ClearField("shape")
    irm, a, _ = _analyze(m)
    s = next(v for v in a.info if v.name == "s")
    assert a.web_of[s].flat
    layout = a.layout_of[s]
    assert layout.width is None and layout.ranked
    _, waiting, _ = _analyze(m, runtime_ranks=False)
    s = next(v for v in waiting.info if v.name == "s")
    assert waiting.web_of[s].repr == "kept"
    assert waiting.web_of[s].reason == "the rank of 'x', an element of 's', is unknown"


def test_a_split_into_the_rows_of_a_model_input_has_that_dim_as_its_length():
    # x is [N, 3]: one element per row, whatever N is. Inserts and erases shift it, a map
    # keeps it, an If joins it, and a split into pairs has no such length.
    then_b = body([helper.make_node("Identity", ["s"], ["same"])], [], [seq("same", FLOAT, [3])])
    else_b = body([helper.make_node("SequenceInsert", ["s", "r"], ["more"])], [], [seq("more", FLOAT, [3])])
    relu = body([helper.make_node("Relu", ["e"], ["out"])], [t("e", FLOAT, [3])], [t("out", FLOAT, [3])])
    m = model(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
            helper.make_node("SequenceInsert", ["s", "r"], ["s1"]),
            helper.make_node("SequenceErase", ["s1", "p"], ["s2"]),
            helper.make_node("SequenceMap", ["s2"], ["mapped"], body=relu),
            helper.make_node("If", ["c"], ["either"], then_branch=then_b, else_branch=else_b),
            helper.make_node("If", ["c"], ["same_twice"], then_branch=then_b, else_branch=then_b),
            helper.make_node("SplitToSequence", ["x", "two"], ["pairs"], axis=0),
            helper.make_node("SequenceLength", ["mapped"], ["n"]),
        ],
        [t("x", FLOAT, ["N", 3]), t("r", FLOAT, [3]), t("p", INT64, []), t("c", BOOL, [])],
        [t("n", INT64, [])],
        initializer=[const("two", 2, np.int64)],
        opset=18,
    )
    _, _, info = _analyze(m)
    assert info["s"].length is None and info["s"].length_sym == ("N", 0)
    assert info["s1"].length_sym == ("N", 1) and info["s1"].to_json()["symbolic_length"] == "N+1"
    assert info["s2"].length_sym == ("N", 0) and info["mapped"].length_sym == ("N", 0)
    assert info["same_twice"].length_sym == ("N", 0) and info["either"].length_sym is None
    assert info["pairs"].length_sym is None


def test_a_stacked_list_of_a_model_input_dims_length_declares_that_dim():
    from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass
    from seqlower.passes.lowering.lower_packed_sequences import LowerPackedSequencesPass

    # CumSum keeps the map a Loop (no batched body): its scan output, reshaped, is the
    # stacked data, declared [N, 3] rather than [?, 3].
    cumsum = body([helper.make_node("CumSum", ["e", "zero"], ["out"])], [t("e", FLOAT, [3])], [t("out", FLOAT, [3])],
                  [const("zero", 0, np.int64)])
    m = model(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
            helper.make_node("SequenceMap", ["s"], ["mapped"], body=cumsum),
            helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=1, new_axis=1),
        ],
        [t("x", FLOAT, ["N", 3])],
        [t("y", FLOAT, [3, "N"])],
        opset=18,
    )
    irm = ir.serde.deserialize_model(m)
    InferSequenceShapesPass()(irm)
    assert LowerPackedSequencesPass()(irm).modified
    transpose = next(n for n in irm.graph if n.op_type == "Transpose")
    assert transpose.inputs[0].shape == ir.Shape(["N", 3])
