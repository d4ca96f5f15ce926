"""TorchScript exports of the list idioms of decoding and post-processing code
(tools/export_idioms.py made the fixtures: greedy decoding with an EOS break, Viterbi
backpointers walked back with insert(0, ...), a per-row loop of a data-dependent length,
a filtered list, pop/del/setitem at run-time positions, per-class NMS). Each lowers
tensor-only and gives PyTorch's own outputs on both backends; for OpenVINO, what it gets
wrong is named before anything is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.cli import main
from seqlower.executor import Executor
from seqlower.fastpath.job import Job
from seqlower.io.inventory import take_inventory
from seqlower.options import LowerOptions

DATA = Path(__file__).parent / "data" / "idioms"
MODELS = sorted(DATA.glob("*.onnx"))


def _cases(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    with np.load(path.with_suffix("").with_suffix(".cases.npz")) as z:
        n = len([k for k in z.files if k.endswith("/in/x")])
        return [(z[f"{k}/in/x"], z[f"{k}/out/y0"]) for k in range(n)]


def test_every_idiom_is_there_at_two_opsets():
    assert len(MODELS) == 12 and {p.stem.rsplit("_opset", 1)[1] for p in MODELS} == {"13", "17"}


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_idiom_lowers_tensor_only_and_gives_pytorchs_outputs(path):
    job = Job.read(str(path))
    report = job.lower(LowerOptions())
    low = job.model()
    assert report.tensor_only and take_inventory(low).clean and "kept" not in report.validation
    for backend in ("reference", "onnxruntime"):
        ex = Executor(low, backend=backend)
        for x, want in _cases(path):
            got = np.asarray(ex.run({"x": x}).outputs["y0"])
            assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6), (backend, x.shape)


def test_openvinos_lost_count_is_named_before_it_is_written(tmp_path, capsys):
    # Greedy decoding at opset 13: the token list's shapes rows ([n, 0], scalars) are a
    # Loop state OpenVINO returns as [0, 0]: 1 token instead of 7, no error.
    path = DATA / "ts_idiom_greedy_decode_eos_opset13.onnx"
    dst = tmp_path / "o.onnx"
    assert main(["lower", str(path), "-o", str(dst), "--target", "openvino", "--no-validate", "-q"]) == 0
    capsys.readouterr()
    assert main(["check", str(dst), "--target", "openvino"]) == 1
    assert "quirk zero-element-loop-state" in capsys.readouterr().out
    pytest.importorskip("openvino")
    report = Job.read(str(path)).lower(LowerOptions(target="openvino"))
    assert any("validation on openvino" in g.why for g in report.gaps)
    onnx.checker.check_model(onnx.load(str(dst)), full_check=True)
