"""A Scan that carries nothing and scans constants is unrolled for tract
(passes/loops/unroll_constant_scans.py): LoopsToScans makes one of a Loop whose trip count
only folding finds (fuzz seeds 4603, 9042), and tract fails it on an input of no rows."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.loops.unroll_constant_scans import UnrollConstantScansPass
from tests.helpers import FLOAT, INT64, body, const, model, ops_of, t


def _scan(steps: str = "range", state: bool = False) -> onnx.ModelProto:
    """Each step reads a row of a [2, n] tensor the input sizes, doubles it, and gives
    the step's element; over Range(0, 2), a constant [0, 1], or a run-time Range."""
    sb = body([helper.make_node("Gather", ["data", "i"], ["elem"], axis=0),
               helper.make_node("Mul", ["elem", "two"], ["s"]),
               helper.make_node("Identity", ["i"], ["step"])],
              [t("i", INT64, [])], [t("s", FLOAT, [None]), t("step", INT64, [])])
    make_steps = {"range": [helper.make_node("Range", ["zero", "two_i", "one"], ["steps"])],
                  "constant": [helper.make_node("Identity", ["zero_one"], ["steps"])],
                  "run time": [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"]),
                               helper.make_node("Range", ["zero", "n", "one"], ["steps"])]}[steps]
    nodes = [helper.make_node("ReduceSum", ["x", "one1"], ["r"], keepdims=0),
             helper.make_node("Mul", ["r", "two"], ["r2"]),
             helper.make_node("Unsqueeze", ["r", "zero1"], ["a"]), helper.make_node("Unsqueeze", ["r2", "zero1"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["data"], axis=0), *make_steps,
             helper.make_node("Scan", ["steps"], ["y", "steps_seen"], body=sb, num_scan_inputs=1)]
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "n"]), t("steps_seen", INT64, [None])], opset=17,
                 initializer=[const("one1", np.array([1], np.int64)), const("zero1", np.array([0], np.int64)),
                              const("two", np.array(2.0, np.float32)), const("zero", np.array(0, np.int64)),
                              const("two_i", np.array(2, np.int64)), const("one", np.array(1, np.int64)),
                              const("zero_one", np.array([0, 1], np.int64))])


def _unrolled(m: onnx.ModelProto) -> onnx.ModelProto:
    low = ir.serde.deserialize_model(m)
    UnrollConstantScansPass()(low)
    return to_proto(low)


# (Not (3, 0) on tract: its ReduceSum of an empty axis aborts, quirk reduce-empty-axis.)
_SIZES = [(0, 3), (2, 3), (1, 1)]


def test_tract_fails_a_scan_of_constants_over_no_rows():
    # The failure the pass avoids: when tract is fixed, this fails and the pass can go.
    with pytest.raises(Exception, match="declutter"):
        Executor(_scan(), backend="tract").run({"x": np.zeros((0, 3), np.float32)})


@pytest.mark.parametrize("steps", ["range", "constant"])
def test_unrolled_it_runs_on_tract_as_onnx_says(steps):
    m = _scan(steps)
    low = _unrolled(m)
    assert "Scan" not in ops_of(low)
    onnx.checker.check_model(low, full_check=True)
    for shape in _SIZES:
        x = {"x": np.arange(np.prod(shape), dtype=np.float32).reshape(shape)}
        want = Executor(m, backend="onnxruntime").run(x).outputs
        for backend in ("reference", "tract"):
            got = Executor(low, backend=backend).run(x).outputs
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{backend} {shape} {name}")


def test_a_scan_of_run_time_steps_stays():
    assert "Scan" in ops_of(_unrolled(_scan("run time")))
