"""Each defect of onnx's reference evaluator listed in issue 2, and the validation the
spec implies: our kernels follow the spec."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.errors import ExecutionError
from seqlower.executor import Executor
from tests.conftest import requires_ort
from tests.helpers import BOOL, FLOAT, INT32, INT64, STRING, body, const, model, opt, run, seq, single, t

A, B, C = (np.full((2,), v, np.float32) for v in (1, 2, 3))


def insert_model(with_pos=True, pos_type=INT64, pos_shape=()):
    ins = [seq("S"), t("T", FLOAT, None)] + ([t("p", pos_type, list(pos_shape))] if with_pos else [])
    return single("SequenceInsert", ins, [seq("out")])


# -- SequenceInsert -------------------------------------------------------------------


@pytest.mark.parametrize("pos, expected", [(2, [A, B, C]), (0, [C, A, B]), (-1, [A, C, B]), (-2, [C, A, B]), (1, [A, C, B])])
def test_insert_positions_follow_spec(pos, expected):
    out = run(insert_model(), S=[A, B], T=C, p=np.array(pos))["out"]
    assert [x.tolist() for x in out] == [x.tolist() for x in expected]


def test_insert_at_length_appends():  # onnx's evaluator inserts at the front
    out = run(insert_model(), S=[A, B], T=C, p=np.array(2, np.int64))["out"]
    assert np.array_equal(out[-1], C) and len(out) == 3


@pytest.mark.parametrize("pos", [3, -3, 100])
def test_insert_out_of_range_is_an_error(pos):  # onnx's evaluator wraps silently
    with pytest.raises(ExecutionError, match=r"SequenceInsert node .*position .* out of range \[-2, 2\]"):
        run(insert_model(), S=[A, B], T=C, p=np.array(pos))


def test_insert_into_empty_sequence():  # onnx's evaluator divides by zero
    assert [x.tolist() for x in run(insert_model(), S=[], T=C, p=np.array(0))["out"]] == [C.tolist()]
    assert len(run(insert_model(with_pos=False), S=[], T=C)["out"]) == 1
    with pytest.raises(ExecutionError, match="out of range"):
        run(insert_model(), S=[], T=C, p=np.array(1))


def test_insert_int32_and_shape_1_positions():
    out = run(insert_model(pos_type=INT32, pos_shape=(1,)), S=[A, B], T=C, p=np.array([0], np.int32))["out"]
    assert np.array_equal(out[0], C)


def test_insert_type_mismatch_is_an_error():
    m = single("SequenceInsert", [seq("S", INT64), t("T", INT64, None)], [seq("out", INT64)])
    with pytest.raises(ExecutionError, match="type float but the sequence holds int64"):
        Executor(m).run({"S": [np.zeros(2, np.int64)], "T": np.zeros(2, np.float32)})


def test_insert_into_typed_empty_sequence_checks_type():
    nodes = [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=INT64),
        helper.make_node("SequenceInsert", ["e", "x"], ["s"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
    ]
    m = model(nodes, [t("x", FLOAT, [2])], [t("n", INT64, [])])
    with pytest.raises(ExecutionError, match="holds int64"):
        run(m, x=A)


def test_insert_elements_may_differ_in_shape_and_rank():
    out = run(insert_model(), S=[A], T=np.zeros((3, 4), np.float32), p=np.array(0))["out"]
    assert [x.shape for x in out] == [(3, 4), (2,)]


# -- SequenceErase / SequenceAt / SequenceLength --------------------------------------


def test_erase_positions_and_default():
    m = single("SequenceErase", [seq("S"), t("p", INT64, [])], [seq("out")])
    assert [x[0] for x in run(m, S=[A, B, C], p=np.array(-3))["out"]] == [2, 3]
    m2 = single("SequenceErase", [seq("S")], [seq("out")])
    assert [x[0] for x in run(m2, S=[A, B, C])["out"]] == [1, 2]
    with pytest.raises(ExecutionError, match=r"out of range \[-3, 2\]"):
        run(m, S=[A, B, C], p=np.array(3))
    with pytest.raises(ExecutionError, match="empty sequence"):
        run(m2, S=[])


def test_erase_and_at_accept_shape_1_positions():  # onnx's evaluator raises TypeError
    m = single("SequenceErase", [seq("S"), t("p", INT64, [1])], [seq("out")])
    assert len(run(m, S=[A, B], p=np.array([1]))["out"]) == 1
    m = single("SequenceAt", [seq("S"), t("p", INT64, [1])], [t("out", FLOAT, None)])
    assert np.array_equal(run(m, S=[A, B], p=np.array([-1]))["out"], B)


def test_at_out_of_range_and_bad_position_types():
    m = single("SequenceAt", [seq("S"), t("p", INT64, None)], [t("out", FLOAT, None)])
    with pytest.raises(ExecutionError, match=r"out of range \[-2, 1\]"):
        run(m, S=[A, B], p=np.array(2))
    with pytest.raises(ExecutionError, match="scalar"):
        run(m, S=[A, B], p=np.array([0, 1]))


def test_length_of_optional_sequence_is_the_sequence_length():  # onnx's evaluator says 1
    nodes = [
        helper.make_node("Optional", ["S"], ["o"]),
        helper.make_node("OptionalGetElement", ["o"], ["s2"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
    ]
    m = model(nodes, [seq("S")], [t("n", INT64, []), t("has", BOOL, [])])
    out = run(m, S=[A, B, C])
    assert out["n"] == 3 and out["has"]
    assert run(m, S=[])["n"] == 0


def test_empty_optional_and_get_element_error():
    tp = helper.make_tensor_type_proto(FLOAT, [2])
    nodes = [helper.make_node("Optional", [], ["o"], type=tp), helper.make_node("OptionalHasElement", ["o"], ["has"])]
    assert not run(model(nodes, [], [t("has", BOOL, [])]))["has"]
    m = single("OptionalGetElement", [opt("o", tp)], [t("x", FLOAT, [2])])
    with pytest.raises(ExecutionError, match="optional is empty"):
        run(m, o=None)


# -- SequenceConstruct / SequenceEmpty / ConcatFromSequence -----------------------------


def test_construct_mixed_types_is_an_error():
    m = single("SequenceConstruct", [t("a", FLOAT, None), t("b", INT64, None)], [seq("s")])
    with pytest.raises(ExecutionError, match="different types"):
        run(m, a=A, b=np.zeros(1, np.int64))


def test_sequence_empty_default_type_is_float():
    nodes = [helper.make_node("SequenceEmpty", [], ["e"]), helper.make_node("SequenceInsert", ["e", "x"], ["s"])]
    out = run(model(nodes, [t("x", FLOAT, [2])], [seq("s")]), x=A)["s"]
    assert len(out) == 1 and out[0].dtype == np.float32


@pytest.mark.parametrize(
    "axis, new_axis, shape",
    [(0, 0, (6, 3)), (-1, 0, (2, 9)), (1, 0, (2, 9)), (0, 1, (3, 2, 3)), (2, 1, (2, 3, 3)), (-1, 1, (2, 3, 3)), (-3, 1, (3, 2, 3))],
)
def test_concat_axes(axis, new_axis, shape):
    m = single("ConcatFromSequence", [seq("S")], [t("y", FLOAT, None)], axis=axis, new_axis=new_axis)
    xs = [np.random.default_rng(i).standard_normal((2, 3)).astype(np.float32) for i in range(3)]
    y = run(m, S=xs)["y"]
    ref = np.stack(xs, axis=axis) if new_axis else np.concatenate(xs, axis=axis)
    assert y.shape == shape and np.array_equal(y, ref)


@pytest.mark.parametrize("axis, new_axis", [(2, 0), (-3, 0), (3, 1), (-4, 1)])
def test_concat_axis_out_of_range(axis, new_axis):
    m = single("ConcatFromSequence", [seq("S")], [t("y", FLOAT, None)], axis=axis, new_axis=new_axis)
    with pytest.raises(ExecutionError, match="out of range"):
        run(m, S=[np.zeros((2, 3), np.float32)])


def test_concat_empty_and_mismatched():
    m = single("ConcatFromSequence", [seq("S")], [t("y", FLOAT, None)], axis=0)
    with pytest.raises(ExecutionError, match="empty sequence"):
        run(m, S=[])
    with pytest.raises(ExecutionError, match="incompatible"):
        run(m, S=[np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)])
    assert run(m, S=[np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32)])["y"].shape == (2, 3)


def test_concat_strings():
    m = single("ConcatFromSequence", [seq("S", STRING)], [t("y", STRING, None)], axis=0)
    y = run(m, S=[np.array(["a"], object), np.array(["b", "c"], object)])["y"]
    assert y.tolist() == ["a", "b", "c"]


# -- SplitToSequence ---------------------------------------------------------------------


def split_model(split_shape=None, split_type=INT64, **attrs):
    ins = [t("x", FLOAT, None)] + ([t("split", split_type, split_shape)] if split_shape is not None else [])
    return single("SplitToSequence", ins, [seq("s")], **attrs)


X = np.arange(20, dtype=np.float32).reshape(5, 4)


@pytest.mark.parametrize(
    "split, attrs, shapes",
    [
        (None, {}, [(1, 4)] * 5),
        (None, {"keepdims": 0}, [(4,)] * 5),
        (None, {"axis": -1, "keepdims": 0}, [(5,)] * 4),
        (np.array(2), {}, [(2, 4), (2, 4), (1, 4)]),
        (np.array(5), {}, [(5, 4)]),
        (np.array(7), {}, [(5, 4)]),
        (np.array([0, 2, 0, 3]), {}, [(0, 4), (2, 4), (0, 4), (3, 4)]),
        (np.array([1, 3], np.int32), {"axis": 1}, [(5, 1), (5, 3)]),
        (np.array(2), {"keepdims": 0}, [(2, 4), (2, 4), (1, 4)]),  # keepdims ignored for split > 1
        (np.array([1, 1, 1, 1, 1]), {"keepdims": 0}, [(1, 4)] * 5),  # ignored for a 1-D split
    ],
)
def test_split_shapes(split, attrs, shapes):
    m = split_model(None if split is None else list(split.shape), INT32 if split is not None and split.dtype == np.int32 else INT64, **attrs)
    feeds = {"x": X} | ({"split": split} if split is not None else {})
    out = run(m, **feeds)["s"]
    assert [c.shape for c in out] == shapes
    axis = attrs.get("axis", 0)
    joined = np.concatenate([c.reshape([s if i != axis % 2 else -1 for i, s in enumerate(X.shape)]) if c.ndim < 2 else c for c in out], axis=axis)
    assert np.array_equal(joined, X)


def test_split_of_zero_size_dim_is_empty():
    m = split_model([])
    out = run(m, x=np.zeros((0, 3), np.float32), split=np.array(2))["s"]
    assert out == [] and Executor(m).run({"x": np.zeros((0, 3), np.float32), "split": np.array(2)}).outputs["s"].elem_type == FLOAT


@pytest.mark.parametrize(
    "split, message",
    [(np.array(0), "must be positive"), (np.array(-2), "must be positive"), (np.array([2, 2]), "sums to 4"),
     (np.array([6, -1]), ">= 0"), (np.zeros((1, 1), np.int64), "scalar or 1-D")],
)
def test_split_validation(split, message):
    with pytest.raises(ExecutionError, match=message):
        run(split_model(list(split.shape)), x=X, split=split)


def test_split_rejects_scalars_and_bad_axis():
    with pytest.raises(ExecutionError, match="rank >= 1"):
        run(split_model(), x=np.array(1.0, np.float32))
    with pytest.raises(ExecutionError, match="out of range"):
        run(split_model(axis=2), x=X)


@pytest.mark.parametrize(
    "policy, k, shapes",
    [("auto", 1, [(4,)] * 5), ("onnxruntime", 1, [(4,)] * 5), ("spec", 1, [(1, 4)] * 5),
     ("auto", 2, [(2, 4), (2, 4), (1, 4)]), ("spec", 2, [(2, 4), (2, 4), (1, 4)])],
)
def test_keepdims_policy(policy, k, shapes):
    m = split_model([], keepdims=0)
    result = Executor(m, keepdims_policy=policy).run({"x": X, "split": np.array(k)})
    assert [c.shape for c in result.outputs["s"]] == shapes
    assert any("keepdims=0 with scalar split" in n and policy in n for n in result.notes)


def test_keepdims_policy_onnxruntime_rejects_split_above_one():
    with pytest.raises(ExecutionError, match="fails on onnxruntime"):
        run(split_model([], keepdims=0), policy="onnxruntime", x=X, split=np.array(2))


def test_keepdims_policy_is_silent_where_it_does_not_matter():
    result = Executor(split_model([], keepdims=1)).run({"x": X, "split": np.array(1)})
    assert result.notes == []


# -- ReverseSequence -----------------------------------------------------------------------


def rev_model(**attrs):
    return single("ReverseSequence", [t("x", FLOAT, None), t("lens", INT64, None)], [t("y", FLOAT, None)], **attrs)


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_both_orders(batch_axis, time_axis):
    x = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    if batch_axis == 0:
        x = x.reshape(3, 4, 2)
    lens = np.array([0, 1, 4] if batch_axis == 1 else [0, 1, 4], dtype=np.int64)
    y = run(rev_model(batch_axis=batch_axis, time_axis=time_axis), x=x, lens=lens)["y"]
    for b, n in enumerate(lens):
        xb, yb = np.take(x, b, axis=batch_axis), np.take(y, b, axis=batch_axis)
        assert np.array_equal(yb[:n], xb[:n][::-1]) and np.array_equal(yb[n:], xb[n:])


def test_reverse_sequence_strings():
    m = single("ReverseSequence", [t("x", STRING, None), t("lens", INT64, None)], [t("y", STRING, None)],
               batch_axis=0, time_axis=1)
    y = run(m, x=np.array([["a", "b", "c"], ["d", "e", "f"]], object), lens=np.array([3, 2]))["y"]
    assert y.tolist() == [["c", "b", "a"], ["e", "d", "f"]]


@pytest.mark.parametrize(
    "x, lens, attrs, message",
    [
        (np.zeros((3, 2), np.float32), np.array([4, 1]), {}, r"outside \[0, 3\]"),
        (np.zeros((3, 2), np.float32), np.array([-1, 1]), {}, r"outside \[0, 3\]"),
        (np.zeros((3, 2), np.float32), np.array([1, 1, 1]), {}, "shape \\[2\\]"),
        (np.zeros((3, 2), np.float32), np.array([1, 1], np.int32), {}, "int64"),
        (np.zeros((3,), np.float32), np.array([1]), {}, "rank >= 2"),
        (np.zeros((3, 2), np.float32), np.array([1, 1]), {"batch_axis": 0, "time_axis": 0}, "0 and 1"),
    ],
)
def test_reverse_sequence_validation(x, lens, attrs, message):
    with pytest.raises(ExecutionError, match=message):
        run(rev_model(**attrs), x=x, lens=lens)


# -- Loop ----------------------------------------------------------------------------------


def scan_loop_model(elem_shape, declared=None, cond_input=""):
    """Loop(M, cond) whose body emits a constant of ``elem_shape`` as a scan output."""
    value = np.arange(int(np.prod(elem_shape)), dtype=np.float32).reshape(elem_shape)
    b = body(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Constant", [], ["v"], value=const("v", value))],
        [t("i", INT64, []), t("c", BOOL, [])],
        [t("c_out", BOOL, []), t("v", FLOAT, declared)],
    )
    node = helper.make_node("Loop", ["M", cond_input], ["scan"], body=b)
    return model([node], [t("M", INT64, [])], [t("scan", FLOAT, None)], opset=13), value


def test_loop_scan_outputs_are_stacked_not_vstacked():
    m, v = scan_loop_model((2, 3))
    scan = run(m, M=np.array(2))["scan"]
    assert scan.shape == (2, 2, 3) and np.array_equal(scan[1], v)
    m, _ = scan_loop_model(())
    assert run(m, M=np.array(4))["scan"].shape == (4,)


def test_loop_with_omitted_cond_runs_m_times():
    m, _ = scan_loop_model((1,))
    assert run(m, M=np.array(5))["scan"].shape == (5, 1)


@pytest.mark.parametrize("declared, shape", [([2, 3], (0, 2, 3)), (["n", 3], (0, 0, 3)), (None, (0,))])
def test_zero_iteration_loop(declared, shape):
    m, _ = scan_loop_model((2, 3), declared)
    assert run(m, M=np.array(0))["scan"].shape == shape


def test_loop_carried_sequence_and_condition():
    """Append i to a carried sequence until i == 2 (cond from the body), M = 10."""
    b = body(
        [
            helper.make_node("Constant", [], ["two"], value=const("two", 2, np.int64)),
            helper.make_node("Less", ["i", "two"], ["c_out"]),
            helper.make_node("SequenceInsert", ["s", "i"], ["s_out"]),
        ],
        [t("i", INT64, []), t("c", BOOL, []), seq("s", INT64)],
        [t("c_out", BOOL, []), seq("s_out", INT64)],
    )
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=INT64),
             helper.make_node("Loop", ["M", "cond", "e"], ["s"], body=b)]
    m = model(nodes, [t("M", INT64, []), t("cond", BOOL, [])], [seq("s", INT64)], opset=13)
    assert [int(x) for x in run(m, M=np.array(10), cond=np.array(True))["s"]] == [0, 1, 2]
    assert run(m, M=np.array(10), cond=np.array(False))["s"] == []


def test_loop_body_reads_outer_scope_and_functions_use_our_kernels():
    """A model-local function holding a Loop whose body reads the function's input."""
    b = body(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("SequenceInsert", ["s", "x"], ["s_out"])],
        [t("i", INT64, []), t("c", BOOL, []), seq("s")],
        [t("c_out", BOOL, []), seq("s_out")],
    )
    fn = helper.make_function(
        "local", "repeat", ["x", "M"], ["n"],
        [helper.make_node("SequenceEmpty", [], ["e"]), helper.make_node("Loop", ["M", "", "e"], ["s"], body=b),
         helper.make_node("SequenceLength", ["s"], ["n"])],
        opset_imports=[helper.make_opsetid("", 13)],
    )
    node = helper.make_node("repeat", ["x", "M"], ["n"], domain="local")
    m = model([node], [t("x", FLOAT, [2]), t("M", INT64, [])], [t("n", INT64, [])], opset=13, functions=[fn])
    assert run(m, x=A, M=np.array(0))["n"] == 0  # onnx's evaluator raises on zero iterations
    assert run(m, x=A, M=np.array(3))["n"] == 3


# -- SequenceMap -----------------------------------------------------------------------------


def map_model(extra_inputs, body_graph, n_outputs=1):
    node = helper.make_node("SequenceMap", ["S", *[e.name for e in extra_inputs]], [f"out{i}" for i in range(n_outputs)], body=body_graph)
    return model([node], [seq("S"), *extra_inputs], [seq(f"out{i}") for i in range(n_outputs)])


def test_sequence_map_two_extra_inputs_one_a_sequence():  # onnx's evaluator fails
    b = body([helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Mul", ["ab", "w"], ["y"])],
             [t("a", FLOAT, None), t("b", FLOAT, None), t("w", FLOAT, None)], [t("y", FLOAT, None)])
    m = map_model([seq("T"), t("W", FLOAT, [])], b)
    out = run(m, S=[A, B], T=[C, C, C], W=np.array(2, np.float32))["out0"]  # T longer: truncated
    assert [x.tolist() for x in out] == [[8, 8], [10, 10]]
    with pytest.raises(ExecutionError, match="shorter than input_sequence"):
        run(m, S=[A, B], T=[C], W=np.array(2, np.float32))


def test_sequence_map_empty_sequence_gives_empty_outputs():  # onnx's evaluator fails
    b = body([helper.make_node("Shape", ["a"], ["s"]), helper.make_node("Identity", ["a"], ["y"])],
             [t("a", FLOAT, None)], [t("s", INT64, [None]), t("y", FLOAT, None)])
    node = helper.make_node("SequenceMap", ["S"], ["shapes", "ys"], body=b)
    m = model([node], [seq("S")], [seq("shapes", INT64), seq("ys")])
    ex = Executor(m)
    out = ex.run({"S": []}).outputs
    assert out["shapes"] == [] and out["shapes"].elem_type == INT64 and out["ys"] == []


def test_sequence_map_body_reads_outer_scope_and_changes_dtype():  # onnx's evaluator fails
    b = body([helper.make_node("Add", ["a", "bias"], ["ab"]), helper.make_node("Cast", ["ab"], ["y"], to=INT64)],
             [t("a", FLOAT, None)], [t("y", INT64, None)])
    nodes = [helper.make_node("SequenceMap", ["S"], ["out"], body=b)]
    m = model(nodes, [seq("S")], [seq("out", INT64)], initializer=[const("bias", 10.0, np.float32)])
    out = run(m, S=[A, np.zeros((2, 2), np.float32)])["out"]
    assert out[0].dtype == np.int64 and out[0].tolist() == [11, 11] and out[1].shape == (2, 2)


# -- If --------------------------------------------------------------------------------------


def test_if_with_sequences_of_different_lengths_and_cond_checks():
    then_b = body([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], [], [seq("s")])
    else_b = body([helper.make_node("SequenceConstruct", ["x"], ["s"])], [], [seq("s")])
    m = model([helper.make_node("If", ["c"], ["s"], then_branch=then_b, else_branch=else_b)],
              [t("c", BOOL, None), t("x", FLOAT, [2])], [seq("s")])
    assert len(run(m, c=np.array(True), x=A)["s"]) == 2
    assert len(run(m, c=np.array([False]), x=A)["s"]) == 1
    with pytest.raises(ExecutionError, match="exactly one element"):
        run(m, c=np.array([True, False]), x=A)


@pytest.mark.parametrize("policy, shape", [("auto", ()), ("onnxruntime", ()), ("spec", (1,))])
def test_keepdims_policy_split_above_one_on_a_dim_of_one(policy, shape):
    """onnxruntime squeezes whenever every chunk has size 1, so split=2 over a dim of 1 squeezes too."""
    out = run(split_model([], keepdims=0), policy=policy, x=np.ones(1, np.float32), split=np.array(2))["s"]
    assert [c.shape for c in out] == [shape]


# -- LinearClassifier (ai.onnx.ml) ------------------------------------------------------
# The spec leaves the binary case, the labels and the transforms' details to the runtime;
# the kernel follows onnxruntime, where onnx's reference mirrors a binary score as
# [-s, s], transforms it, and infers the class count from X's width.


def _linear_classifier(classes: int, columns: int, post: str, strings: bool, x_type: int = FLOAT):
    rng = np.random.default_rng(classes * 10 + columns)
    features = 4
    labels = ({"classlabels_strings": [f"c{i}" for i in range(classes)]} if strings
              else {"classlabels_ints": list(range(10, 10 + classes))})
    node = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                            coefficients=rng.normal(size=columns * features).tolist(),
                            intercepts=rng.normal(size=columns).tolist(), post_transform=post, **labels)
    g = helper.make_graph([node], "g", [t("X", x_type, [None, features])],
                          [t("label", STRING if strings else INT64, [None]), t("scores", FLOAT, [None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 7), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=3)


@requires_ort
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("classes,columns", [(2, 1), (2, 2), (3, 3), (6, 6)], ids=["binary-1", "binary-2", "3", "6"])
@pytest.mark.parametrize("strings", [False, True], ids=["ints", "strings"])
def test_linear_classifier_gives_onnxruntimes_numbers(post, classes, columns, strings):
    m = _linear_classifier(classes, columns, post, strings)
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    if columns == 1 and post == "PROBIT":
        # (onnxruntime writes the N probits into the first N of its 2N entries: no layout)
        with pytest.raises(ExecutionError, match="PROBIT of a one-column"):
            Executor(m, backend="reference").run({"X": x})
        return
    ours = Executor(m, backend="reference").run({"X": x}).outputs
    theirs = Executor(m, backend="onnxruntime").run({"X": x}).outputs
    assert np.asarray(ours["label"]).tolist() == np.asarray(theirs["label"]).tolist()
    np.testing.assert_allclose(ours["scores"], theirs["scores"], rtol=1e-5, atol=1e-5, equal_nan=True)


@requires_ort
def test_linear_classifier_takes_integer_and_one_row_inputs():
    m = _linear_classifier(3, 3, "SOFTMAX", False, x_type=INT64)
    for x in (np.arange(8, dtype=np.int64).reshape(2, 4) - 3, np.arange(4, dtype=np.int64)):
        m.graph.input[0].CopyFrom(t("X", INT64, list(x.shape)))
        ours = Executor(m, backend="reference").run({"X": x}).outputs
        theirs = Executor(m, backend="onnxruntime").run({"X": x}).outputs
        assert np.asarray(ours["label"]).tolist() == np.asarray(theirs["label"]).tolist()
        np.testing.assert_allclose(ours["scores"], theirs["scores"], rtol=1e-5, atol=1e-6)


def test_linear_classifier_refuses_an_input_of_another_width():
    m = _linear_classifier(3, 3, "NONE", False)
    m.graph.input[0].CopyFrom(t("X", FLOAT, [None, None]))
    with pytest.raises(ExecutionError, match="12 coefficients do not make 3 class"):
        Executor(m, backend="reference").run({"X": np.ones((3, 2), np.float32)})


# -- SVMClassifier (ai.onnx.ml) -----------------------------------------------------------
# onnx's kernel refused binary SVCs and gave multiclass SVCs other probabilities: 48 of 96
# scikit-learn SVC exports (skl2onnx and onnxmltools; 2 to 4 classes; 4 kernels; with and
# without probabilities) differed from onnxruntime; the kernel follows onnxruntime.


def _svm(classes: int, kernel: str, proba: bool, strings: bool, linear: bool = False):
    rng = np.random.default_rng(classes * 7 + len(kernel) + proba)
    features, per_class = 3, [2, 3, 1, 2][:classes]
    pairs = classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0], post_transform="NONE")
    if linear:
        attrs |= dict(coefficients=rng.normal(size=classes * features).tolist(), rho=[0.1])
    else:
        attrs |= dict(vectors_per_class=per_class, support_vectors=rng.normal(size=sum(per_class) * features).tolist(),
                      coefficients=rng.normal(size=(classes - 1) * sum(per_class)).tolist(),
                      rho=rng.normal(size=pairs).tolist())
        if proba:
            attrs |= dict(prob_a=(-rng.uniform(0.5, 2, pairs)).tolist(), prob_b=rng.normal(0, 0.1, pairs).tolist())
    attrs |= ({"classlabels_strings": [f"c{i}" for i in range(classes)]} if strings
              else {"classlabels_ints": list(range(classes))})
    node = helper.make_node("SVMClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", [t("X", FLOAT, [None, features])],
                          [t("label", STRING if strings else INT64, [None]), t("scores", FLOAT, [None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=7)


@requires_ort
@pytest.mark.parametrize("kernel", ["LINEAR", "RBF", "POLY", "SIGMOID"])
@pytest.mark.parametrize("classes,proba", [(2, False), (2, True), (3, False), (3, True), (4, True)])
@pytest.mark.parametrize("strings", [False, True], ids=["ints", "strings"])
def test_svm_classifier_gives_onnxruntimes_numbers(kernel, classes, proba, strings):
    x = np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32)
    for m in (_svm(classes, kernel, proba, strings), _svm(classes, kernel, False, strings, linear=True)):
        ours = Executor(m, backend="reference").run({"X": x}).outputs
        theirs = Executor(m, backend="onnxruntime").run({"X": x}).outputs
        assert np.asarray(ours["label"]).tolist() == np.asarray(theirs["label"]).tolist()
        np.testing.assert_allclose(ours["scores"], theirs["scores"], rtol=1e-4, atol=1e-5)
