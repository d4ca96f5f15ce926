"""ReverseSequence lowered to an index grid and GatherElements for targets that lack it:
both axis orders, ranks 2 to 4, every dtype family, lengths 0..T, zero-size dims, inside
a Loop body; equal to the original on both backends (onnxruntime optimizer on and off)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower import LowerOptions, load_model, lower_with_report
from tests.helpers import BOOL, FLOAT, INT64, STRING, body, lower_checked, model, ops_of, t
from tests.passes.patterns import IR_FOR_OPSET

F16, INT8, DOUBLE = TensorProto.FLOAT16, TensorProto.INT8, TensorProto.DOUBLE
NP = {FLOAT: np.float32, F16: np.float16, INT64: np.int64, INT8: np.int8, DOUBLE: np.float64, BOOL: np.bool_}


def _data(shape, dtype):
    n = int(np.prod(shape))
    if dtype == STRING:
        return np.array([f"s{i}" for i in range(n)], dtype=object).reshape(shape)
    if dtype == BOOL:
        return (np.arange(n) % 3 == 0).reshape(shape)
    return np.arange(n).astype(NP[dtype]).reshape(shape)


def _model(shape, dtype, batch_axis, time_axis, opset=17):
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis, name="rev")
    dims = ["D0", "D1"] + list(shape[2:])
    return model([node], [t("x", dtype, dims), t("lens", INT64, ["B"])], [t("y", dtype, dims)], opset=opset,
                 ir_version=IR_FOR_OPSET.get(opset, 8))


CASES = [
    # (shape, batch_axis, time_axis, lens per sample)
    ((4, 3), 1, 0, [4, 0, 2]),
    ((3, 4), 0, 1, [1, 4, 3]),
    ((5, 2, 3), 1, 0, [5, 1]),
    ((2, 5, 2, 2), 0, 1, [0, 5]),
]


@pytest.mark.parametrize("shape, batch_axis, time_axis, lens", CASES)
@pytest.mark.parametrize("dtype", [FLOAT, F16, INT64, INT8, DOUBLE, BOOL, STRING], ids=lambda d: TensorProto.DataType.Name(d))
def test_reverse_sequence_lowers_for_tract(shape, batch_axis, time_axis, lens, dtype):
    m = _model(shape, dtype, batch_axis, time_axis)
    t_len = shape[time_axis]
    zero_t = list(shape)
    zero_t[time_axis] = 0
    feeds = [
        {"x": _data(shape, dtype), "lens": np.array(lens, np.int64)},
        {"x": _data(shape, dtype), "lens": np.full(len(lens), t_len, np.int64)},  # all reversed
        {"x": _data(tuple(zero_t), dtype), "lens": np.zeros(len(lens), np.int64)},  # no steps
    ]
    low, report = lower_checked(m, inputs=feeds, target="tract")
    assert "ReverseSequence" not in ops_of(low) and "GatherElements" in ops_of(low)
    # (tract's duplicate-computations may read a Slice of every dim as the dims)
    assert [r["how"] for r in report.rewrites if not r["how"].endswith("read instead (tract)")] == \
        ["index grid + GatherElements"]


def test_only_targets_that_lack_it_lower_it_and_constants_fold():
    m = _model((4, 3), FLOAT, 1, 0)
    for target, kept in (("generic", True), ("openvino", True), ("tract", False), ("onnx2torch", False), ("tvm", False)):
        low, _ = lower_with_report(load_model(m), LowerOptions(target=target))
        assert any(n.op_type == "ReverseSequence" for n in low.graph) == kept, target
    const = model(
        [helper.make_node("Constant", [], ["x"], value=onnx.numpy_helper.from_array(_data((3, 2), FLOAT))),
         helper.make_node("Constant", [], ["lens"], value=onnx.numpy_helper.from_array(np.array([2, 3], np.int64))),
         helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)],
        [], [t("y", FLOAT, [3, 2])])
    low, report = lower_checked(const, inputs=[{}], target="tract")
    assert not {"ReverseSequence", "GatherElements"} & set(ops_of(low))
    assert not any(r["how"] == "index grid + GatherElements" for r in report.rewrites)


def test_reverse_sequence_in_a_loop_body_at_opset_11():
    b = body(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("ReverseSequence", ["acc", "lens"], ["acc_out"], batch_axis=0, time_axis=1)],
        [t("i", INT64, []), t("c", BOOL, []), t("acc", FLOAT, ["B", "T"])], [t("c_out", BOOL, []), t("acc_out", FLOAT, ["B", "T"])],
    )
    m = model([helper.make_node("Loop", ["n", "", "x"], ["y"], body=b)],
              [t("n", INT64, []), t("x", FLOAT, ["B", "T"]), t("lens", INT64, ["B"])], [t("y", FLOAT, ["B", "T"])],
              opset=11, ir_version=IR_FOR_OPSET[11])
    feeds = [{"n": np.array(3), "x": _data((2, 4), FLOAT), "lens": np.array([3, 4])}]
    low, _ = lower_checked(m, inputs=feeds, target="tinygrad")
    assert "ReverseSequence" not in ops_of(low)


def test_invalid_axes_are_one_line_naming_the_node():
    from seqlower.errors import SeqlowerError

    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=1, name="rev")
    m = model([node], [t("x", FLOAT, [2, 2]), t("lens", INT64, [2])], [t("y", FLOAT, [2, 2])])
    with pytest.raises(SeqlowerError, match="ReverseSequence node 'rev': batch_axis and time_axis must be 0 and 1"):
        lower_with_report(load_model(m), LowerOptions(target="tract"))


def test_bfloat16_reverse_sequence_lowers():
    # onnxruntime has no bfloat16 ReverseSequence kernel, and its Python API takes no
    # bfloat16 arrays: checked on the reference backend.
    import ml_dtypes

    from seqlower.executor import Executor

    m = _model((4, 2), TensorProto.BFLOAT16, 1, 0)
    feeds = [{"x": np.arange(8, dtype=np.float32).reshape(4, 2).astype(ml_dtypes.bfloat16), "lens": np.array([3, 1], np.int64)}]
    low, _ = lower_checked(m, inputs=feeds, backends=("reference",), target="tract")
    assert "ReverseSequence" not in ops_of(low)
    got = Executor(low).run(feeds[0]).outputs["y"].astype(np.float32)
    assert got.T.tolist() == [[4, 2, 0, 6], [1, 3, 5, 7]]
