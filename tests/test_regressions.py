"""Failing cases found outside the project, kept as found (tests/data/regressions/): random
graph programs that a generator we had never run drew. Each lowers tensor-only through
``seqlower.lower``, the full checker accepts it, and onnxruntime and the executor give the
outputs the original gives (``expected.npz``: onnxruntime and onnx's reference agree on
them). The class behind each case has its own tests, built from our own programs, beside
the module that was wrong (named in each case's comment)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import seqlower
from seqlower.executor import Executor
from seqlower.io.check import check_proto
from seqlower.io.inventory import take_inventory
from tests.conftest import HAS_ORT

CASES = sorted((Path(__file__).parent / "data" / "regressions" / "graph-programs").iterdir())

# What was wrong, per case (the tests of each class are in the module named):
#   not-tensor-only: a run-time scalar split with keepdims=0 squeezes or not by its
#     values (tests/passes/lowering/test_lower_flat_sequences.py, run-time squeeze), or a
#     constant one whose decision the input's static shape gives (00183, 01580).
#   crashed: a static Concat of split rows and a loose element of another shape
#     (tests/passes/lowering/test_static_rows.py).
#   run-error: onnx types a Loop's carried list by its first value, and the lowering
#     trusted what that typed downstream (tests/passes/folds/test_infer_sequence_shapes.py).


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(np.array_equal(a, b))


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_regression_lowers_tensor_only_and_gives_the_expected_outputs(case: Path):
    original = onnx.load(case / "original.onnx")
    inputs = dict(np.load(case / "inputs.npz"))
    expected = dict(np.load(case / "expected.npz"))
    low = seqlower.lower(original)
    # The full checker, but for outputs of a rank only the run decides (01580: an If whose
    # branches give ranks 3 and 4 under the keepdims policy), which declare none.
    accepted = check_proto(low, "lowered", None, full=True)
    assert all("declare no shape" in w for w in accepted), accepted
    assert take_inventory(low).clean
    backends = ("reference", "onnxruntime") if HAS_ORT else ("reference",)
    for backend in backends:
        got = Executor(low, backend=backend).run(inputs).outputs
        for name, want in expected.items():
            assert _close(got[name], want), (backend, name, got[name], want)
