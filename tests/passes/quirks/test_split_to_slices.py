"""Split-18 as one Slice per output for onnx2torch (quirk no-split-18): num_outputs that
divide the dim or not, constant and run-time sizes, negative axes, zero-size dims; Splits
of earlier opsets stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t


def _x(n, w):
    return np.arange(n * w, dtype=np.float32).reshape(n, w)


@pytest.mark.parametrize("axis", [0, -2, 1])
@pytest.mark.parametrize("outputs", [1, 2, 3])
def test_num_outputs(axis, outputs):
    names = [f"y{k}" for k in range(outputs)]
    m = model([helper.make_node("Split", ["x"], names, axis=axis, num_outputs=outputs)],
              [t("x", FLOAT, ["n", "w"])], [t(y, FLOAT, [None, None]) for y in names], opset=18)
    feeds = [{"x": _x(7, 7)}, {"x": _x(6, 6)}, {"x": _x(outputs, outputs)}]
    low, report = lower_checked(m, inputs=feeds, target="onnx2torch")
    assert "Split" not in ops_of(low) and ops_of(low).count("Slice") == outputs


def test_constant_and_run_time_sizes():
    for sizes_input, inputs, feeds in (
        ([const("sizes", np.array([1, 0, 3], np.int64))], [t("x", FLOAT, [4, "w"])], [{"x": _x(4, 2)}, {"x": _x(4, 0)}]),
        ([], [t("x", FLOAT, ["n", "w"]), t("sizes", INT64, [3])],
         [{"x": _x(5, 2), "sizes": np.array([2, 0, 3])}, {"x": _x(0, 2), "sizes": np.array([0, 0, 0])}]),
    ):
        m = model([helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=0)], inputs,
                  [t(y, FLOAT, [None, None]) for y in "abc"], initializer=sizes_input, opset=18)
        low, _ = lower_checked(m, inputs=feeds, target="onnx2torch")
        assert "Split" not in ops_of(low)
        if not sizes_input:  # the run-time bounds' CumSum says its direction (cumsum-reverse-default)
            assert "CumSum" in ops_of(low)


def test_earlier_opsets_and_other_targets_keep_split():
    m = model([helper.make_node("Split", ["x"], ["a", "b"], axis=0)], [t("x", FLOAT, [4])],
              [t("a", FLOAT, [2]), t("b", FLOAT, [2])], opset=17)
    assert "Split" in ops_of(to_proto(lower_with_report(load_model(m), LowerOptions(target="onnx2torch"))[0]))
    m18 = model([helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2)], [t("x", FLOAT, [4])],
                [t("a", FLOAT, [2]), t("b", FLOAT, [2])], opset=18)
    assert "Split" in ops_of(to_proto(lower_with_report(load_model(m18), LowerOptions(target="generic"))[0]))
