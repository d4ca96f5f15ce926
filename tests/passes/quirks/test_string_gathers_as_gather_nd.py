"""onnxruntime's Gather of string rows (quirk string-gather-rows), written as GatherND."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor, compare_values
from seqlower.io.models import to_proto
from seqlower.passes.quirks.string_gathers_as_gather_nd import StringGathersAsGatherNDPass
from seqlower.targets import load_target, target_gaps
from tests.helpers import INT64, STRING, model, t

X = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)


def _gather(index: np.ndarray, axis: int, x_shape=(2, 3)):
    out = np.take(np.zeros(x_shape), index, axis=axis).shape
    return model([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
                 [t("x", STRING, list(x_shape)), t("i", INT64, list(index.shape))], [t("y", STRING, list(out))])


@pytest.mark.parametrize("index, axis", [
    (np.array(1, np.int64), 0),
    (np.array([1, -2, 1], np.int64), 0),
    (np.array([[2, 0], [-1, 1]], np.int64), 1),
    (np.array(-1, np.int64), -1),
])
def test_string_rows_come_out_whole_on_onnxruntime(index, axis):
    m = _gather(index, axis)
    feeds = {"x": X, "i": index}
    want = Executor(m, backend="reference").run(feeds).outputs["y"]
    if index.ndim and axis == 0:
        # The quirk itself, as the runtime has it: one string per row, the rest empty.
        assert not compare_values("y", want, Executor(m, backend="onnxruntime").run(feeds).outputs["y"]).ok
    lowered, _ = lower_with_report(load_model(m), LowerOptions(target="onnxruntime"))
    low = to_proto(lowered)
    assert [n.op_type for n in low.graph.node if n.op_type == "Gather"] == []
    assert compare_values("y", want, Executor(low, backend="onnxruntime").run(feeds).outputs["y"]).ok
    assert not target_gaps(low, load_target("onnxruntime"))


def test_a_string_gather_of_unknown_rank_stays_and_is_named():
    # x's rank is the length of a shape given at run time.
    m = model([helper.make_node("Reshape", ["s", "dims"], ["x"]), helper.make_node("Gather", ["x", "i"], ["y"])],
              [t("s", STRING, [6]), t("dims", INT64, ["k"]), t("i", INT64, [1])], [t("y", STRING, None)])
    ir_model = load_model(m)
    assert not StringGathersAsGatherNDPass()(ir_model).modified
    gaps = target_gaps(m, load_target("onnxruntime"))
    assert len(gaps) == 1 and "quirk string-gather-rows" in gaps[0].why
    assert not target_gaps(_gather(np.array([0], np.int64), 0, x_shape=(3,)), load_target("onnxruntime"))
