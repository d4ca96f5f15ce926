"""Before/Expected: what each representation makes of a small model, in ONNX text, in the
manner of TVM's structural tests. ``tests/golden/NAME.before.txt`` is the model,
``NAME.after.txt`` what ``seqlower.lower`` gives, printed by ``onnx.printer``; a change
to what the lowering emits shows here as a diff a reviewer can read. The numbers are
checked too (the executor, both backends). After a deliberate change:
``SEQLOWER_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`` rewrites the
Expected files (read the diff before committing them)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnx.printer
import pytest

import seqlower
from seqlower.executor.verify import verify

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name.removesuffix(".before.txt") for p in GOLDEN.glob("*.before.txt"))
_R = np.random.default_rng(0)
# Valid inputs for each case (positions in range, sizes that add up), edges included.
FEEDS = {
    "unrolled_split_map_concat": [{"x": _R.standard_normal((4, 6)).astype(np.float32),
                                   "w": _R.standard_normal((3, 3)).astype(np.float32)}],
    "stacked_rows_edited_at_run_time": [{"x": _R.standard_normal((n, 3)).astype(np.float32), "p": np.array(p)}
                                        for n, p in [(2, 0), (2, -1), (4, 2), (4, -4)]],
    "ragged_split_by_run_time_sizes": [{"x": _R.standard_normal((5, 3)).astype(np.float32),
                                        "sizes": np.array(sizes), "p": np.array(p)}
                                       for sizes, p in [([2, 3], 0), ([4, 1], -1), ([0, 4, 1], 1), ([1, 1, 3], -3)]],
    "flat_elements_of_two_ranks": [{"x": _R.standard_normal(n).astype(np.float32),
                                    "z": _R.standard_normal((2, 3)).astype(np.float32), "p": np.array(p)}
                                   for n, p in [(0, 0), (3, 1), (3, -1), (4, -2)]],
}


def test_every_representation_has_a_golden_case():
    assert {c.split("_")[0] for c in CASES} >= {"unrolled", "stacked", "ragged", "flat"}


@pytest.mark.parametrize("name", CASES)
def test_the_lowering_is_the_expected_text_and_the_same_numbers(name):
    before = onnx.parser.parse_model((GOLDEN / f"{name}.before.txt").read_text())
    onnx.checker.check_model(before, full_check=True)
    lowered = seqlower.lower(before)
    text = onnx.printer.to_text(lowered)
    expected = GOLDEN / f"{name}.after.txt"
    if os.environ.get("SEQLOWER_UPDATE_GOLDEN"):
        expected.write_text(text)
    assert text == expected.read_text(), f"{name}: the lowering differs from {expected.name}"
    for backend in ("reference", "onnxruntime"):
        report = verify(before, lowered, inputs=FEEDS[name], backend=backend)
        assert report.equivalent and report.to_json()["compared"] == len(FEEDS[name]), (name, backend, report.to_json())
