"""Classifiers as onnxmltools converts them at target opset 7 (IR 3; tools/export_sklearn.py
--onnxmltools made the fixtures): the older ai.onnx.ml forms (LinearClassifier, Normalizer,
SVMClassifier, each + ZipMap) run on the executor's reference backend as onnxruntime runs
them, lower, and verify. A backend that cannot run the original proves nothing either
way: verify calls it *not run* and decides on the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.cli import main
from seqlower.executor import Executor
from tests.conftest import requires_ort

DATA = Path(__file__).parent / "data" / "onnxmltools"
MODELS = sorted(DATA.glob("*.onnx"))


def _cases(path: Path) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
    with np.load(path.with_suffix(".cases.npz")) as z:
        n = len([k for k in z.files if k.endswith("/in/X")])
        return ([z[f"{k}/in/X"] for k in range(n)],
                [{"output_label": z[f"{k}/out/output_label"], "probabilities": z[f"{k}/out/probabilities"]}
                 for k in range(n)])


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_fixtures_are_ir_3_in_the_older_ml_forms():
    ops = set()
    for path in MODELS:
        m = onnx.load(str(path))
        assert m.ir_version == 3
        ops |= {n.op_type for n in m.graph.node}
    assert {"LinearClassifier", "SVMClassifier", "Normalizer", "ZipMap"} <= ops


@requires_ort
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_lowered_verifies_and_gives_scikit_learns_outputs_on_both_backends(capsys, tmp_path, path):
    xs, expected = _cases(path)
    dst = tmp_path / "lowered.onnx"
    code, out, err = _cli(capsys, "lower", path, "-o", dst)
    assert code == 0, out + err
    code, out, err = _cli(capsys, "verify", path, dst)
    assert code == 0 and "EQUIVALENT on reference (3 of 3 samples compared) and onnxruntime" in out, out + err
    for backend in ("reference", "onnxruntime"):
        original, lowered = Executor(path, backend=backend), Executor(dst, backend=backend)
        for x, want in zip(xs, expected):
            for ex in (original, lowered):
                got = ex.run({"X": x}).outputs
                assert [str(v) for v in np.asarray(got["output_label"]).reshape(-1)] == \
                    [str(v) for v in want["output_label"]]
                probs = np.array([[float(v) for v in row.values()] for row in got["output_probability"]], np.float32)
                np.testing.assert_allclose(probs, want["probabilities"], rtol=1e-4, atol=1e-5)


@requires_ort
def test_a_backend_that_cannot_run_the_original_is_not_run_and_proves_nothing(capsys, tmp_path):
    # The input's feature dim made symbolic and drawn at 2 where the coefficients are for
    # 5: the reference refuses (onnx's kernel broadcast it into an error, and verify
    # said NOT EQUIVALENT, exit 1); onnxruntime runs both models and they agree.
    m = onnx.load(str(DATA / "linear_multiclass_str.onnx"))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "F"
    src, dst = tmp_path / "m.onnx", tmp_path / "lowered.onnx"
    onnx.save(m, src)
    assert _cli(capsys, "lower", src, "-o", dst)[0] == 0
    code, out, _ = _cli(capsys, "verify", src, dst, "--dim", "F=2")
    assert code == 0, out
    assert "EQUIVALENT on onnxruntime (3 of 3 samples compared); not run on reference (the original failed:" in out
    assert "coefficients do not make 3 class(es) x 2 feature(s)" in out
    code, out, _ = _cli(capsys, "lower", src, "-o", tmp_path / "again.onnx", "--verify", "--dim", "F=2")
    assert code == 0 and (tmp_path / "again.onnx").exists(), out
