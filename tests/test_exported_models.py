"""Models as PyTorch's exporters emit them (tools/export_models.py made the fixtures):
each lowers to a tensor-only model equal to the original on both backends and to
PyTorch's own outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.executor import Executor
from tests.conftest import HAS_ORT
from tests.helpers import lower_checked, ops_of

DATA = Path(__file__).parent / "data" / "exported"
MODELS = sorted(DATA.glob("*.onnx"))
BACKENDS = ("reference", "onnxruntime") if HAS_ORT else ("reference",)
SEQUENCE_OPS = {"SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceConstruct",
                "SequenceLength", "ConcatFromSequence", "SequenceEmpty", "SequenceMap"}


def test_fixtures_cover_both_exporters():
    names = [p.stem for p in MODELS]
    assert len(names) >= 7 and any(n.startswith("ts_") for n in names) and any(n.startswith("dynamo_") for n in names)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_exported_model_lowers_and_matches_pytorch(path):
    m = onnx.load(path)
    assert set(ops_of(m)) & SEQUENCE_OPS, "a fixture without sequences tests nothing"
    stem = str(path)[: -len(".onnx")]
    feeds = dict(np.load(f"{stem}.inputs.npz"))
    expected = dict(np.load(f"{stem}.expected.npz"))
    low, report = lower_checked(m, backends=BACKENDS, inputs=[feeds])
    assert not set(ops_of(low)) & SEQUENCE_OPS
    result = Executor(low).run(feeds).outputs
    for name, want in expected.items():
        np.testing.assert_allclose(result[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{path.stem}/{name}")
