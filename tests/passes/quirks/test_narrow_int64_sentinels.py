"""tract quirk "int64-narrowed": tract keeps an int64 it reads as a dim in 32 bits, so
TorchScript's trip count ``min(INT64_MAX, len)`` is -1 there (fuzz seed 4220: the
process aborted). Lowered for tract, INT64_MAX and INT64_MIN constants are INT32_MAX and
INT32_MIN (passes/quirks/narrow_int64_sentinels.py), and other int64 numbers stay."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from seqlower.executor import Executor
from seqlower.targets import load_target
from tests.helpers import BOOL, FLOAT, INT64, body, const, lowered_for, model, t

_MAX = 2**63 - 1


def _bound(big: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["big", "n1"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["n"])], [t("y", INT64, [2])],
                 initializer=[const("zero", np.array(0, np.int64)), const("axes", np.array([0], np.int64)),
                              const("big", np.array([big], np.int64))])


def test_tract_keeps_an_int64_read_with_dims_in_32_bits():
    # The quirk itself: when tract keeps 64 bits, this fails and the rewrite can go.
    assert "int64-narrowed" in dict(load_target("tract").quirks)
    x = {"x": np.zeros(3, np.float32)}
    assert Executor(_bound(_MAX), backend="tract").run(x).outputs["y"].tolist() == [-1, 3]
    assert Executor(_bound(2**32), backend="tract").run(x).outputs["y"].tolist() == [0, 3]


def _enumerate_loop() -> onnx.ModelProto:
    """TorchScript's ``for i, r in enumerate(x)``: a Loop of min(INT64_MAX, len) trips,
    with a Slice to INT64_MAX (to the end) in its body and a value constant."""
    b = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
              helper.make_node("Slice", ["row", "zero1", "end", "zero1"], ["all"]),
              helper.make_node("ReduceSum", ["all"], ["s"], keepdims=0),
              helper.make_node("Add", ["acc", "s"], ["acc_out"]),
              helper.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("acc", FLOAT, [])],
             [t("c_out", BOOL, []), t("acc_out", FLOAT, [])])
    nodes = [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["big", "n1"], ["both"], axis=0),
             helper.make_node("ReduceMin", ["both"], ["trips"], keepdims=0),
             helper.make_node("Loop", ["trips", "", "acc0"], ["total"], body=b),
             helper.make_node("Constant", [], ["sentinel"], value=numpy_helper.from_array(np.array([_MAX, 5, -_MAX - 1], np.int64))),
             helper.make_node("Identity", ["data"], ["kept"])]
    return model(nodes, [t("x", FLOAT, ["n", 4])],
                 [t("total", FLOAT, []), t("sentinel", INT64, [3]), t("kept", INT64, [2])],
                 initializer=[const("zero", np.array(0, np.int64)), const("zero1", np.array([0], np.int64)),
                              const("big", np.array([_MAX], np.int64)), const("end", np.array([_MAX], np.int64)),
                              const("acc0", np.array(0, np.float32)), const("data", np.array([2**40, -(2**40)], np.int64))])


def test_lowered_for_tract_a_loop_of_min_int64_max_trips_runs_there():
    m = _enumerate_loop()
    low = lowered_for(m, "tract")
    consts = {i.name: numpy_helper.to_array(i).tolist() for i in low.graph.initializer}
    assert consts["data"] == [2**40, -(2**40)]  # data, not a bound
    assert consts["big"] == [2**31 - 1]  # the trip count's
    for n in (3, 1, 0):
        x = {"x": np.arange(4 * n, dtype=np.float32).reshape(n, 4)}
        want = Executor(m, backend="onnxruntime").run(x).outputs
        got = Executor(low, backend="tract").run(x).outputs
        np.testing.assert_allclose(got["total"], want["total"])
        np.testing.assert_array_equal(got["kept"], want["kept"])
        # A value the model gives is data: not narrowed.
        np.testing.assert_array_equal(got["sentinel"], want["sentinel"])


def test_other_targets_keep_int64_max():
    low = lowered_for(_enumerate_loop(), "generic")
    assert any(numpy_helper.to_array(i).tolist() == [_MAX] for i in low.graph.initializer)
