"""Edges of the Unrolled lowering: the keepdims policy, dtypes (strings, float16,
bfloat16), zero-size and symbolic dims, --max-unroll, outputs that are elements."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.errors import ModelError
from tests.conftest import HAS_ORT
from tests.helpers import FLOAT, INT64, STRING, const, lower_checked, model, ops_of, t

BACKENDS = ("reference", "onnxruntime") if HAS_ORT else ("reference",)


def _scalar_split(k, keepdims, shape):
    return model(
        [helper.make_node("SplitToSequence", ["x", "k"], ["s"], axis=0, keepdims=keepdims),
         helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
         helper.make_node("SequenceLength", ["s"], ["n"])],
        [t("x", FLOAT, shape)],
        [t("first", FLOAT, None), t("n", INT64, [])],
        initializer=[const("k", k, np.int64), const("zero", 0, np.int64)],
    )


def _declared(m, name, shape):
    for o in m.graph.output:
        if o.name == name:
            o.CopyFrom(helper.make_tensor_value_info(name, o.type.tensor_type.elem_type, shape))
    return m


def test_keepdims_policy_auto_squeezes_where_onnxruntime_does():
    # split == 1, keepdims=0: TorchScript's unbind; onnxruntime squeezes, so does auto.
    m = _declared(_scalar_split(1, 0, [3, 2]), "first", [2])
    low, _ = lower_checked(m, backends=BACKENDS)
    assert "Squeeze" in ops_of(low)


def test_keepdims_policy_auto_keeps_the_axis_where_onnxruntime_fails():
    m = _declared(_scalar_split(2, 0, [3, 2]), "first", [2, 2])
    low, _ = lower_checked(m, backends=("reference",))  # onnxruntime fails on the original
    assert "Squeeze" not in ops_of(low)


def test_keepdims_policy_spec_never_squeezes_a_given_split():
    m = _declared(_scalar_split(1, 0, [3, 2]), "first", [1, 2])
    low, _ = lower_checked(m, backends=("reference",), policy="spec")
    assert "Squeeze" not in ops_of(low)


def test_keepdims_policy_onnxruntime_refuses_what_onnxruntime_cannot_run():
    with pytest.raises(ModelError, match="SplitToSequence node .*fails on onnxruntime"):
        lower_with_report(load_model(_scalar_split(2, 0, [3, 2])), LowerOptions(keepdims_policy="onnxruntime"))


def test_keepdims_zero_over_a_symbolic_dim_is_decided_at_run_time():
    # Squeezed (onnxruntime's behaviour, policy auto) only if W == 0: the chunks' rank is
    # computed in the graph (Flat, ranks carried), and both runs give the original's.
    m = _scalar_split(2, 0, [3, "W"])
    feeds = [{"x": np.arange(3 * w, dtype=np.float32).reshape(3, w)} for w in (4, 0, 1)]
    low, report = lower_checked(m, backends=BACKENDS, inputs=feeds)
    assert report.tensor_only and "Where" in ops_of(low)


def test_strings_float16_bfloat16_elements():
    strings = model(
        [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
         helper.make_node("SequenceInsert", ["s", "a", "zero"], ["s2"]),
         helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)],
        [t("a", STRING, [2]), t("b", STRING, [1])], [t("y", STRING, [5])],
        initializer=[const("zero", 0, np.int64)],
    )
    lower_checked(strings, backends=BACKENDS, inputs=[{"a": np.array(["x", "yy"], object), "b": np.array(["z"], object)}])
    for elem, np_dtype, backends in ((TensorProto.FLOAT16, np.float16, BACKENDS), (TensorProto.BFLOAT16, ml_dtypes.bfloat16, ("reference",))):
        m = model(
            [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
             helper.make_node("SequenceErase", ["s", "zero"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=1, new_axis=0)],
            [t("x", elem, [2, 5])], [t("y", elem, [2, 3])],
            initializer=[const("sizes", [2, 3], np.int64), const("zero", 0, np.int64)],
            opset=18,
        )
        lower_checked(m, backends=backends, inputs=[{"x": np.arange(10).reshape(2, 5).astype(np_dtype)}])
        # An all-constant bfloat16 chain folds to a bfloat16 initializer.
        folded = model(
            [helper.make_node("SplitToSequence", ["c", "sizes"], ["s"], axis=1),
             helper.make_node("SequenceAt", ["s", "zero"], ["p"]),
             helper.make_node("Add", ["p", "x"], ["y"])],
            [t("x", elem, [2, 2])], [t("y", elem, [2, 2])],
            initializer=[const("c", np.arange(10).reshape(2, 5).astype(np_dtype)), const("sizes", [2, 3], np.int64), const("zero", 0, np.int64)],
            opset=18,
        )
        low, _ = lower_checked(folded, backends=backends, inputs=[{"x": np.ones((2, 2), np_dtype)}])
        assert ops_of(low) == ["Add"]


def test_zero_size_dims():
    # Splitting a 0-length axis gives an empty sequence: its length is 0.
    m = model(
        [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
         helper.make_node("SequenceLength", ["s"], ["n"]),
         helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
         helper.make_node("ConcatFromSequence", ["cols"], ["y"], axis=1, new_axis=1)],
        [t("x", FLOAT, [0, 3])], [t("n", INT64, []), t("y", FLOAT, [0, 3])],
    )
    low, _ = lower_checked(m, backends=BACKENDS)
    # The columns stacked back are x itself (passes/lowering/_static_rows.py): no Split is left.
    assert "Split" not in ops_of(low)
    assert next(n for n in low.graph.node if n.output[0] == "y").input == ["x"]


def test_symbolic_dims_flow_through():
    m = model(
        [helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=-1),
         helper.make_node("SequenceAt", ["s", "one"], ["mid"]),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1)],
        [t("x", FLOAT, ["batch", 6])], [t("mid", FLOAT, ["batch", 4]), t("y", FLOAT, ["batch", 6])],
        initializer=[const("sizes", [1, 4, 1], np.int32), const("one", 1, np.int64)],
    )
    for n in (0, 1, 4):
        lower_checked(m, backends=BACKENDS, inputs=[{"x": np.random.default_rng(n).random((n, 6), np.float32)}])


def test_max_unroll_turns_a_static_web_dynamic():
    m = model(
        [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, name="split"),
         helper.make_node("SequenceAt", ["s", "three"], ["e"], name="at"),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, name="cat")],
        [t("x", FLOAT, [10, 2])], [t("y", FLOAT, [1, 20]), t("e", FLOAT, [1, 2])],
        initializer=[const("three", 3, np.int64)],
    )
    low, report = lower_checked(m, max_unroll=9)
    # Chunks of one shape: the dynamic lowering is the Stacked one.
    assert {r["into"] for r in report.rewrites if r["op"] != "SequenceLength"} == {"stacked"}
    assert "Split" not in ops_of(low)
    low, report = lower_checked(m, max_unroll=10)
    assert {r["into"] for r in report.rewrites} == {"unrolled"} and "Split" in ops_of(low)


def test_a_concat_that_undoes_its_split_is_the_split_input():
    for new_axis, keepdims in ((0, 1), (1, 0)):
        m = model(
            [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=keepdims),
             helper.make_node("Identity", ["s"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=-1 if not new_axis else 1, new_axis=new_axis)],
            [t("x", FLOAT, ["N", "M"])], [t("y", FLOAT, ["N", "M"])],
        )
        low, report = lower_checked(m, dims={"N": 3, "M": 4})
        assert ops_of(low) == ["Identity"], ops_of(low)


def test_an_element_that_is_a_model_input_can_be_an_output_twice():
    m = model(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
         helper.make_node("SequenceAt", ["s", "zero"], ["a"]),
         helper.make_node("SequenceAt", ["s", "one"], ["b"])],
        [t("x", FLOAT, [2])], [t("a", FLOAT, [2]), t("b", FLOAT, [2])],
        initializer=[const("zero", 0, np.int64), const("one", -1, np.int64)],
    )
    low, _ = lower_checked(m, backends=BACKENDS)
    assert [o.name for o in low.graph.output] == ["a", "b"] and ops_of(low) == ["Identity", "Identity"]


def test_concat_of_an_empty_static_sequence_is_an_error_naming_the_node():
    m = model(
        [helper.make_node("SequenceEmpty", [], ["s"], dtype=FLOAT),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="join")],
        [], [t("y", FLOAT, [0])],
    )
    with pytest.raises(ModelError, match="ConcatFromSequence node 'join': concatenates an empty sequence"):
        lower_with_report(load_model(m))


def test_negative_insert_position_counts_from_the_end_before_the_last_element():
    # -1 means n - 1: before the last element (a fuzzed program found the analysis
    # appending instead, which folded constants in the wrong order).
    m = model(
        [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
         helper.make_node("SequenceInsert", ["s", "d", "minus1"], ["s1"]),
         helper.make_node("ConcatFromSequence", ["s1"], ["y"], axis=0)],
        [], [t("y", FLOAT, [4])],
        initializer=[const("a", [1.0], np.float32), const("b", [2.0], np.float32), const("c", [3.0], np.float32),
                     const("d", [9.0], np.float32), const("minus1", -1, np.int64)],
    )
    low, _ = lower_checked(m)
    assert onnx.numpy_helper.to_array(low.graph.initializer[0]).tolist() == [1.0, 2.0, 9.0, 3.0]
