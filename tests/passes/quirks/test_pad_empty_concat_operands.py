"""OpenVINO quirk "concat-after-run-time-empty" (passes/quirks/pad_empty_concat_operands.py): a
Concat operand that may be empty at run time with two or more operands after it is
joined padded by a row, sliced off again. (OpenVINO's misplaced rows, and the lowering
running right there: tests/test_quirks.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.executor import Executor
from tests.helpers import FLOAT, const, lowered_for, model, ops_of, t


def _joined(order: list[str], axis: int = 0):
    """Concat of x's first rows (``n``: as many as x has, maybe none), a [2, 3] constant
    ``c`` and x itself (``x``), in ``order``."""
    nodes = [helper.make_node("Slice", ["x", "zero", "k", "zero"], ["n"]),
             helper.make_node("Concat", order, ["y"], axis=axis)]
    return model(nodes, [t("x", FLOAT, ["rows", 3]), t("k", 7, [1])], [t("y", FLOAT, [None, 3])],
                 initializer=[const("zero", np.array([0], np.int64)), const("c", np.ones((2, 3), np.float32))])


@pytest.mark.parametrize("order, padded", [
    (["n", "c", "x"], 1), (["c", "n", "c", "x"], 1), (["n", "c", "n", "x", "c"], 2),
    (["c", "c", "n"], 0), (["c", "n", "x"], 0), (["x", "c", "c"], 1),  # (x may have no rows too)
])
def test_operands_that_may_be_empty_with_two_after_them_are_padded(order, padded):
    m = _joined(order)
    low = lowered_for(m, "openvino")
    assert ops_of(low).count("Pad") == padded
    assert "Pad" not in ops_of(lowered_for(m, "generic"))
    for rows, k in ((0, 0), (3, 0), (3, 2), (1, 5)):
        feeds = {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "k": np.array([k], np.int64)}
        want = Executor(m, backend="reference").run(feeds).outputs["y"]
        for backend in ("onnxruntime", "openvino"):
            np.testing.assert_array_equal(Executor(low, backend=backend).run(feeds).outputs["y"], want)
