"""TorchScript exports of the list idioms of decoding and post-processing code
(tools/export_idioms.py made the fixtures: greedy decoding with an EOS break, Viterbi
backpointers walked back with insert(0, ...), a per-row loop of a data-dependent length,
a filtered list, pop/del/setitem at run-time positions, per-class NMS). Each lowers
tensor-only and gives PyTorch's own outputs on both backends and on OpenVINO."""

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


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_idiom_lowered_for_openvino_runs_there_compiled_once(path, tmp_path, capsys):
    """Every case in turn on one compiled model, as users run it. Viterbi at one step gave
    the previous run's path, no error (a Loop that ran no iteration kept its last scans:
    quirk stale-zero-trip-scans, now rewritten). Greedy decoding at opset 13 gives 1 token
    of 7 (a Loop state [n, 0] comes back [0, 0]: quirk zero-element-loop-state), which
    check --target names and lower's validation on OpenVINO reports before writing."""
    pytest.importorskip("openvino")
    dst = tmp_path / "o.onnx"
    # (at opset 17 the same state runs right there: the detector names it all the same)
    named = path.stem.startswith("ts_idiom_greedy_decode_eos")
    assert main(["lower", str(path), "-o", str(dst), "--target", "openvino", "-q", "--no-validate"]) == 0
    capsys.readouterr()
    code = main(["check", str(dst), "--target", "openvino"])
    out = capsys.readouterr().out
    if named:
        assert code == 1 and "quirk zero-element-loop-state" in out
        report = Job.read(str(path)).lower(LowerOptions(target="openvino"))
        assert any("validation on openvino" in g.why for g in report.gaps) == path.stem.endswith("13")
        return
    assert code == 0, out
    ex = Executor(str(dst), backend="openvino")
    for x, want in _cases(path):
        got = np.asarray(ex.run({"x": x}).outputs["y0"])
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6), x.shape
    onnx.checker.check_model(onnx.load(str(dst)), full_check=True)
