"""Ops written on the element types a target's profile lists for them (TensorRT, quirk
trt-op-types): an integer CumSum counted by a masked ReduceSum, a NonZero of an int64,
bool or double input reading a float mask; float CumSums and NonZeros stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t


# (onnxruntime 1.31 has no double NonZero: the reference checks that one alone)
@pytest.mark.parametrize("dtype, np_type", [(INT64, np.int64), (TensorProto.INT32, np.int32), (TensorProto.BOOL, np.bool_)])
def test_nonzero_of_a_type_tensorrt_lacks_reads_a_float_mask(dtype, np_type):
    m = model([helper.make_node("NonZero", ["x"], ["y"])], [t("x", dtype, [None, 3])], [t("y", INT64, [2, None])])
    values = np.array([[0, 2, 0], [1e-300 if np_type is np.float64 else 1, 0, 3]]).astype(np_type)
    low, _ = lower_checked(m, inputs=[{"x": values}, {"x": np.zeros((0, 3), np_type)}], target="tensorrt")
    nonzero = next(n for n in low.graph.node if n.op_type == "NonZero")
    cast = next(n for n in low.graph.node if nonzero.input[0] in n.output)
    assert cast.op_type == "Cast" and cast.attribute[0].i == TensorProto.FLOAT


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_an_integer_cumsum_is_counted_by_reduce_sum_and_a_float_one_stays(exclusive, reverse):
    m = model([helper.make_node("CumSum", ["k", "ax"], ["c"], exclusive=exclusive, reverse=reverse),
               helper.make_node("CumSum", ["x", "ax"], ["cx"], exclusive=exclusive, reverse=reverse)],
              [t("k", INT64, ["n"]), t("x", FLOAT, ["n"])], [t("c", INT64, ["n"]), t("cx", FLOAT, ["n"])],
              initializer=[const("ax", np.array(0, np.int64))])
    feeds = [{"k": np.array([2**40, -3, 7], np.int64), "x": np.array([0.5, 1, 2], np.float32)},
             {"k": np.zeros(0, np.int64), "x": np.zeros(0, np.float32)}]
    low, _ = lower_checked(m, inputs=feeds, target="tensorrt")
    assert ops_of(low).count("CumSum") == 1 and "ReduceSum" in ops_of(low)
    kept, _ = lower_checked(m, inputs=feeds, target="generic")
    assert ops_of(kept).count("CumSum") == 2


def test_a_double_nonzero_keeps_a_tiny_nonzero_entry():
    """A double cast to float first would make 1e-300 a zero; the mask keeps it (onnxruntime
    has no double NonZero: the reference runs both models)."""
    from seqlower import lower
    from tests.helpers import run

    m = model([helper.make_node("NonZero", ["x"], ["y"])], [t("x", TensorProto.DOUBLE, [None, 3])], [t("y", INT64, [2, None])])
    low = lower(m, target="tensorrt")
    x = np.array([[0, 2, 0], [1e-300, 0, 3]])
    assert run(low, x=x)["y"].tolist() == run(m, x=x)["y"].tolist() == [[0, 1, 1], [1, 0, 2]]
