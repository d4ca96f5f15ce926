"""CumSum as a masked ReduceSum for targets that lack it: every exclusive/reverse mode,
ranks 1 to 3, any axis (negative too), int64 and float, zero steps; and the dynamic
lowerings' element bounds for tract."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t


MERGED = "the same rows as an earlier Slice or Split output, or all of its input: that value read instead (tract)"


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("shape, axis", [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1)])
@pytest.mark.parametrize("dtype", [FLOAT, INT64])
@pytest.mark.parametrize("opset", [11, 17])  # 11: no LessOrEqual / GreaterOrEqual yet
def test_cumsum_lowered_for_tract(exclusive, reverse, shape, axis, dtype, opset):
    dims = [f"d{i}" for i in range(len(shape))]
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
              [t("x", dtype, dims)], [t("y", dtype, dims)], initializer=[const("axis", axis, np.int64)], opset=opset)
    np_type = np.float32 if dtype == FLOAT else np.int64
    zero = list(shape)
    zero[axis] = 0
    feeds = [{"x": (np.arange(int(np.prod(shape))) - 4).astype(np_type).reshape(shape)}, {"x": np.zeros(zero, np_type)}]
    low, report = lower_checked(m, inputs=feeds, target="tract")
    hows = [r["how"] for r in report.rewrites]
    # (then tract's quirk reduce-empty-axis pads the sum's axis where it may be empty)
    assert "CumSum" not in ops_of(low) and hows[0] == "masked ReduceSum"
    # (and tract's duplicate-computations reads a Slice of every dim as the dims)
    assert set(hows[1:]) <= {"one neutral element along each axis that may be empty", MERGED}


def test_a_runtime_axis_stays_and_other_targets_keep_cumsum():
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [t("x", FLOAT, ["N"]), t("axis", INT64, [])], [t("y", FLOAT, ["N"])])
    assert "CumSum" in ops_of(to_proto(lower_with_report(load_model(m), LowerOptions(target="tract"))[0]))
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [t("x", FLOAT, ["N"])], [t("y", FLOAT, ["N"])],
              initializer=[const("axis", 0, np.int64)])
    assert "CumSum" in ops_of(to_proto(lower_with_report(load_model(m), LowerOptions(target="openvino"))[0]))


def test_ragged_bounds_without_cumsum():
    m = model([helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=0),
               helper.make_node("SequenceAt", ["s", "p"], ["e"])],
              [t("x", FLOAT, ["N", 2]), t("sizes", INT64, ["K"]), t("p", INT64, [])], [t("e", FLOAT, [None, 2])])
    feeds = [{"x": np.arange(12, dtype=np.float32).reshape(6, 2), "sizes": np.array([1, 0, 5]), "p": np.array(-1)}]
    low, report = lower_checked(m, inputs=feeds, target="tract")
    assert "CumSum" not in ops_of(low) and "ragged" in {r["into"] for r in report.rewrites}
