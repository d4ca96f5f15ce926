"""OpenVINO quirk "static-empty-input" (passes/quirks/empty_inputs_as_symbolic.py): a model
input declared with a dim of 0 has that dim named in the model lowered for OpenVINO. The
bisected reproducer of torch fuzz seed 16273 is below; OpenVINO died on it (SIGFPE,
which would take the test process with it: the suite does not run it there) and ran it
once the dim was named (tools/runtimes.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from seqlower.executor import Executor
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, const, lowered_for, model, t


def _reproducer(dims: list) -> onnx.ModelProto:
    """``x[0:][:, 0]`` of an x declared ``dims``, as the bisection left it."""
    nodes = [helper.make_node("Mul", ["x", "scale"], ["x1"]),
             helper.make_node("Slice", ["x1", "zero1", "end1", "zero1", "one1"], ["rows"]),
             helper.make_node("Gather", ["rows", "zero"], ["y"], axis=1, name="column")]
    return model(nodes, [t("x", FLOAT, dims)], [t("y", FLOAT, [None])], opset=17,
                 initializer=[const("scale", np.array([1.5], np.float32)), const("zero", np.int64(0)),
                              const("zero1", np.array([0], np.int64)), const("one1", np.array([1], np.int64)),
                              const("end1", np.array([2**63 - 1], np.int64))])


def _dims(m: onnx.ModelProto) -> list:
    return [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]


def test_an_input_declared_empty_gets_its_zero_dims_named_for_openvino_only():
    m = _reproducer([0, 3])
    assert [g.where for g in target_gaps(m, load_target("openvino"))] == ["input 'x'"]
    low = lowered_for(m, "openvino")
    assert _dims(low) == ["x_dim0", 3]
    assert target_gaps(low, load_target("openvino")) == []
    for backend in ("onnxruntime", "openvino"):  # (named, it runs on OpenVINO too)
        got = Executor(low, backend=backend).run({"x": np.zeros((0, 3), np.float32)}).outputs["y"]
        assert got.shape == (0,)
    assert _dims(lowered_for(m, "generic")) == [0, 3]


def test_inputs_of_positive_or_named_dims_stay_as_declared():
    for dims in ([2, 3], ["n", 3]):
        m = _reproducer(dims)
        assert target_gaps(m, load_target("openvino")) == []
        assert _dims(lowered_for(m, "openvino")) == dims
