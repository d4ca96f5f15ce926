"""passes/lowering/_static_rows.py through the Unrolled lowering: a static web whose elements are
slices of a few tensors comes out as one Gather, one Slice or nothing, and a SequenceMap
over elements of one shape runs its body once (Reshape -> body -> Reshape), as a person
would write it; the executor confirms the numbers on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conftest import HAS_ORT
from tests.helpers import FLOAT, body, const, lower_checked, model, ops_of, t

BACKENDS = ("reference", "onnxruntime") if HAS_ORT else ("reference",)
STRING = TensorProto.STRING
F16 = TensorProto.FLOAT16


def _edits(rows: int, dtype: int = FLOAT, width: int = 3, opset: int = 17):
    """The rows of x[rows, width] as a list; constant rows inserted, rows erased and moved
    at constant positions (negative ones too), an input row inserted; stacked back."""
    np_type = {FLOAT: np.float32, F16: np.float16, STRING: object}[dtype]
    extra = np.arange(width).astype(np_type) if dtype != STRING else np.array([f"e{i}" for i in range(width)], object)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s0"], axis=0, keepdims=0),
             helper.make_node("SequenceInsert", ["s0", "extra", "p_mid"], ["s1"]),
             helper.make_node("SequenceErase", ["s1", "p_neg"], ["s2"]),
             helper.make_node("SequenceAt", ["s2", "p_zero"], ["moved"]),
             helper.make_node("SequenceErase", ["s2", "p_zero"], ["s3"]),
             helper.make_node("SequenceInsert", ["s3", "moved", "p_neg"], ["s4"]),
             helper.make_node("SequenceInsert", ["s4", "row"], ["s5"]),
             helper.make_node("SequenceErase", ["s5", "p_one"], ["s6"]),
             helper.make_node("ConcatFromSequence", ["s6"], ["y"], axis=0, new_axis=1)]
    inits = [const("extra", extra), const("p_mid", np.array(rows // 2, np.int64)),
             const("p_neg", np.array(-2, np.int64)), const("p_zero", np.array(0, np.int64)),
             const("p_one", np.array(1, np.int64))]
    return model(nodes, [t("x", dtype, [rows, width]), t("row", dtype, [width])], [t("y", dtype, [rows, width])],
                 initializer=inits, opset=opset)


@pytest.mark.parametrize("rows", [5, 100], ids=["short", "past-max-unroll"])
@pytest.mark.parametrize("dtype", [FLOAT, F16, STRING], ids=["float", "float16", "string"])
def test_static_edits_of_rows_are_one_gather(rows, dtype):
    m = _edits(rows, dtype)
    low, report = lower_checked(m, backends=BACKENDS)
    ops = sorted(ops_of(low))
    # The pool (x, the constant row, the input row unsqueezed) and one Gather; strings
    # by GatherND (onnxruntime's Gather copies one string a row: string-gather-rows).
    assert ops == ["Concat", "GatherND" if dtype == STRING else "Gather", "Unsqueeze"], ops
    assert len(ops) <= len(m.graph.node)
    assert {r["into"] for r in report.rewrites} == {"unrolled"}


def test_a_split_joined_back_in_order_is_no_node():
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, [t("x", FLOAT, ["batch", 6])], [t("y", FLOAT, ["batch", 6])],
              initializer=[const("sizes", np.array([1, 2, 3], np.int64))])
    low, _ = lower_checked(m, backends=BACKENDS, dims={"batch": 2})
    assert ops_of(low) == ["Relu"]
    assert low.graph.node[0].input[0] == "x"
    # The named dim survives.
    assert low.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_contiguous_chunks_are_one_slice():
    nodes = [helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=-1),
             helper.make_node("SequenceErase", ["s", "zero"], ["s1"]),
             helper.make_node("SequenceErase", ["s1", "minus1"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=-1)]
    m = model(nodes, [t("x", FLOAT, [3, 8])], [t("y", FLOAT, [3, 4])],
              initializer=[const("two", np.array(2, np.int64)), const("zero", np.array(0, np.int64)),
                           const("minus1", np.array(-1, np.int64))])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Slice"]


def test_chunks_reordered_along_an_inner_axis_are_one_gather():
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
             helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
             helper.make_node("SequenceErase", ["s", "zero"], ["rest"]),
             helper.make_node("SequenceInsert", ["rest", "first"], ["rotated"]),
             helper.make_node("ConcatFromSequence", ["rotated"], ["y"], axis=1)]
    m = model(nodes, [t("x", FLOAT, [2, 5, 3])], [t("y", FLOAT, [2, 5, 3])],
              initializer=[const("sizes", np.array([2, 3], np.int64)), const("zero", np.array(0, np.int64))])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Gather"]


def _chain_block(body_nodes, opset: int = 17):
    fn = body(body_nodes, [t("e", FLOAT, [4, 5])], [t("o", FLOAT, [4, 5])])
    nodes = [helper.make_node("SplitToSequence", ["x", "four"], ["s"], axis=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0)]
    rng = np.random.default_rng(0)
    return model(nodes, [t("x", FLOAT, [12, 5])], [t("y", FLOAT, [12, 5])], opset=opset,
                 initializer=[const("four", np.array(4, np.int64)),
                              const("w", rng.standard_normal((5, 5)).astype(np.float32))])


@pytest.mark.parametrize("opset", [17, 18, 21])
def test_a_map_over_row_chunks_of_a_row_wise_body_is_the_body_on_the_whole(opset):
    # MatMul by a matrix and Relu act on each row alone: the chunks' map is the body on x.
    m = _chain_block([helper.make_node("MatMul", ["e", "w"], ["h"]), helper.make_node("Relu", ["h"], ["o"])], opset)
    low, report = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["MatMul", "Relu"]
    assert any("pieces" in r["how"] for r in report.rewrites), report.rewrites


def _axis_chain(sizes: list[int], axis: int, body_nodes, elem: list, x_dims: list, opset: int = 18):
    fn = body(body_nodes, [t("e", FLOAT, elem)], [t("o", FLOAT, elem)])
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=axis),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["c"], axis=axis),
             helper.make_node("Add", ["x", "c"], ["y"])]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((elem[-1], elem[-1])).astype(np.float32) if isinstance(elem[-1], int) else None
    inits = [const("sizes", np.array(sizes, np.int64))] + ([const("w", w)] if w is not None else [])
    return model(nodes, [t("x", FLOAT, x_dims)], [t("y", FLOAT, x_dims)], opset=opset, initializer=inits)


@pytest.mark.parametrize("axis", [1, -1])
def test_a_chain_cut_along_the_last_axis_is_reshape_body_reshape(axis):
    # Stage 11's axis-1 chain: was Split, 4 Unsqueeze, Concat, MatMul, Relu, 4 Gather, Concat.
    m = _axis_chain([5, 5, 5, 5], axis, [helper.make_node("MatMul", ["e", "w"], ["h"]), helper.make_node("Relu", ["h"], ["o"])],
                    [3, 5], [3, 20])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Reshape", "MatMul", "Relu", "Reshape", "Add"]


def test_a_chain_cut_along_the_last_axis_with_a_run_time_batch_is_reshape_body_reshape():
    m = _axis_chain([5, 5, 5, 5], 1, [helper.make_node("MatMul", ["e", "w"], ["h"]), helper.make_node("Relu", ["h"], ["o"])],
                    ["batch", 5], ["batch", 20])
    low, _ = lower_checked(m, backends=BACKENDS, dims={"batch": 3})
    assert ops_of(low) == ["Reshape", "MatMul", "Relu", "Reshape", "Add"]


def test_unequal_pieces_of_an_elementwise_body_are_the_body_on_the_whole():
    m = _axis_chain([2, 7, 11], 1, [helper.make_node("Tanh", ["e"], ["h"]), helper.make_node("Neg", ["h"], ["o"])],
                    [3, None], [3, 20])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Tanh", "Neg", "Add"]


def test_unequal_row_pieces_of_a_softmax_over_columns_are_one_softmax():
    m = _axis_chain([1, 2], 0, [helper.make_node("Softmax", ["e"], ["o"], axis=-1)], [None, 4], [3, 4])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Softmax", "Add"]


def test_a_softmax_along_the_cut_axis_is_not_one_softmax():
    # Softmax over each piece's rows is not the softmax over all rows: per piece.
    m = _axis_chain([1, 2], 0, [helper.make_node("Softmax", ["e"], ["o"], axis=0)], [None, 4], [3, 4])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low).count("Softmax") == 2


def test_columns_unbound_and_stacked_back_run_the_body_between_two_transposes():
    # Each element is a column (keepdims=0 along the last axis): the body acts along x's
    # rows, so the columns go to the front once and come back once.
    fn = body([helper.make_node("MatMul", ["e", "w"], ["h"]), helper.make_node("Relu", ["h"], ["o"])],
              [t("e", FLOAT, [4])], [t("o", FLOAT, [4])])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=1, new_axis=1)]
    m = model(nodes, [t("x", FLOAT, [4, 6])], [t("y", FLOAT, [4, 6])],
              initializer=[const("w", np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32))])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low) == ["Transpose", "MatMul", "Relu", "Transpose"]


def test_a_static_map_whose_body_does_not_batch_is_inlined_per_element():
    # TopK along the element's rows has no batched form in _batched_map: inlined 3 times.
    m = _chain_block([helper.make_node("TopK", ["e", "k"], ["o", "idx"], axis=1)])
    m.graph.node[1].attribute[0].g.initializer.append(const("k", np.array([5], np.int64)))
    low, _ = lower_checked(m, backends=BACKENDS)
    assert ops_of(low).count("TopK") == 3


def test_rows_of_a_mapped_list_read_alone_are_gathered():
    fn = body([helper.make_node("Neg", ["e"], ["o"])], [t("e", FLOAT, [3])], [t("o", FLOAT, [3])])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("SequenceAt", ["m", "minus1"], ["last"]),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=1, new_axis=1)]
    m = model(nodes, [t("x", FLOAT, [4, 3])], [t("last", FLOAT, [3]), t("y", FLOAT, [3, 4])],
              initializer=[const("minus1", np.array(-1, np.int64))])
    low, _ = lower_checked(m, backends=BACKENDS)
    ops = ops_of(low)
    assert ops.count("Neg") == 1 and "Split" not in ops, ops


def test_max_unroll_still_bounds_webs_that_make_a_node_per_element():
    fn = body([helper.make_node("TopK", ["e", "k"], ["o", "idx"], axis=0)], [t("e", FLOAT, [2])], [t("o", FLOAT, [2])],
              initializer=[const("k", np.array([2], np.int64))])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0, new_axis=1)]
    m = model(nodes, [t("x", FLOAT, [70, 2])], [t("y", FLOAT, [70, 2])])
    low, report = lower_checked(m, backends=BACKENDS)
    assert {r["into"] for r in report.rewrites} != {"unrolled"}
    assert ops_of(low).count("TopK") < 70
    assert any("--max-unroll" in n for n in report.notes), report.notes



def test_a_string_list_of_run_time_shape_mapped_in_a_batch_runs_right_on_onnxruntime():
    # Graph fuzz seed 200168: elements of a run-time shape now batch, and the row taken back
    # out of the batched result was a Gather of strings, which onnxruntime 1.31 gets wrong
    # (one string a row, the rest empty); a Slice now.
    fn = body([helper.make_node("Concat", ["e", "e"], ["o"], axis=0)], [t("e", STRING, ["N", "M"])], [t("o", STRING, [None, "M"])])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=STRING),
             helper.make_node("SequenceInsert", ["s0", "x"], ["s1"]),
             helper.make_node("SequenceMap", ["s1"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0)]
    m = model(nodes, [t("x", STRING, ["N", "M"])], [t("y", STRING, [None, "M"])], opset=24)
    x = np.array([["s1"], ["s2"], ["s3"]], dtype=object)
    low, _ = lower_checked(m, backends=BACKENDS, inputs=[{"x": x}])
    assert "Gather" not in ops_of(low)


# A loose element (no source) of another shape than the rows it joins: the pool is one
# Concat along the rows' axis, so it may not take the element in (regression programs
# 00033, 02057, 02733 declared the pool with the rows' dims and failed the checker).
LOOSE = [
    # (x's shape, split axis, keepdims, the inserted constant's shape, concat axis, new_axis)
    ([3, 1, 2], 0, 0, [1, 1], -1, 0),   # rows [1, 2] and a [1, 1] joined along their last axis
    ([3, 1, 2], 0, 0, [1, 3], 1, 0),
    ([2, 4], 0, 0, [1], 0, 0),          # rows [4] and a [1]: one 1-D concat
    ([2, 3, 2], 1, 1, [2, 2, 2], 1, 0),  # chunks [2, 1, 2] and a [2, 2, 2] along the cut axis
    ([2, 3, 2], 1, 1, [2, 1, 3], 2, 0),  # ... and along another axis
]


@pytest.mark.parametrize("shape,axis,keepdims,extra,at,new_axis", LOOSE)
@pytest.mark.parametrize("where", ["main", "if"])
def test_rows_joined_with_an_element_of_another_shape(shape, axis, keepdims, extra, at, new_axis, where):
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=axis, keepdims=keepdims),
             helper.make_node("SequenceInsert", ["s", "extra"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=at, new_axis=new_axis)]
    inits = [const("extra", np.arange(np.prod(extra), dtype=np.float32).reshape(extra) - 1.5)]
    rows = [np.squeeze(r, axis) if not keepdims else r for r in np.split(np.zeros(shape), shape[axis], axis)]
    joined = list((np.stack if new_axis else np.concatenate)([*rows, np.zeros(extra)], axis=at).shape)
    if where == "if":
        branch = body(nodes, [], [t("y", FLOAT, joined)])
        other = body([helper.make_node("ConstantOfShape", ["dims"], ["y2"])], [], [t("y2", FLOAT, joined)])
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
        inits.append(const("dims", np.array(joined, np.int64)))
        m = model(nodes, [t("x", FLOAT, shape), t("c", TensorProto.BOOL, [])], [t("y", FLOAT, joined)], initializer=inits)
        feeds = [{"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32), "c": np.array(v)}
                 for v in (True, False)]
    else:
        m = model(nodes, [t("x", FLOAT, shape)], [t("y", FLOAT, joined)], initializer=inits)
        feeds = None
    lower_checked(m, backends=BACKENDS, inputs=feeds)
