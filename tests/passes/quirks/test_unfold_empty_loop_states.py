"""OpenVINO fails to convert a Loop whose initial state is an empty constant: for it,
the empty state is built with a run-time shape (from the trip count, or from the
condition of a while loop), and the Loop converts and runs."""

from __future__ import annotations

import numpy as np
import pytest

from seqlower.executor import Executor
from seqlower.executor.verify import verify
from seqlower.targets import load_target
from tests.helpers import growing_loop_model, lower_checked


def _feeds(sizes):
    return [{"x": np.arange(n * w, dtype=np.float32).reshape(n, w)} for n, w in sizes]


def test_openvino_rejects_an_empty_constant_state_as_its_profile_says():
    assert "empty-constant-loop-state" in dict(load_target("openvino").quirks)
    with pytest.raises(Exception, match="out-of-range dimension"):
        Executor(growing_loop_model(), backend="openvino").run(_feeds([(2, 3)])[0])


@pytest.mark.parametrize("while_loop", [False, True], ids=["for", "while"])
def test_the_empty_state_gets_a_run_time_shape_and_openvino_runs_the_loop(while_loop):
    m = growing_loop_model(while_loop)
    feeds = _feeds([(3, 2), (1, 4), (2, 0), (0, 3)])
    low, report = lower_checked(m, inputs=feeds, target="openvino", tensor_only=True)
    assert any("empty initial states given a run-time shape" in r["how"] for r in report.rewrites)
    loop = next(n for n in low.graph.node if n.op_type == "Loop" or n.op_type == "If")
    inits = {i.name for i in low.graph.initializer}
    if loop.op_type == "Loop":
        assert not set(loop.input[2:]) & inits
    for f in feeds:
        rep = verify(m, low, inputs=[f], backend="reference", lowered_backend="openvino")
        assert rep.equivalent, (f["x"].shape, rep.to_json())


def test_other_targets_keep_the_constant():
    low, report = lower_checked(growing_loop_model(), inputs=_feeds([(2, 3)]), target="onnxruntime")
    assert not any("run-time shape" in r["how"] for r in report.rewrites)
