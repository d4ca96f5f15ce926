"""Models as tf2onnx converts TensorFlow functions (tools/export_tensorflow.py made the
fixtures with a dynamic batch, 0 and 1 included): each lowers tensor-only through the CLI,
`--verify` on TensorFlow's own inputs passes on both backends, and the lowered model gives
TensorFlow's own outputs. tf2onnx writes sequences where a loop builds a ragged result
(map_fn over a ragged tensor) and leaves outputs of unknown rank without a shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.cli import main
from seqlower.errors import SeqlowerError
from seqlower.executor import Executor, compare_values
from tests.conftest import requires_ort
from tests.helpers import ops_of
from tests.test_exported_models import SEQUENCE_OPS, load_cases

DATA = Path(__file__).parent / "data" / "tensorflow"
MODELS = sorted(DATA.glob("*.onnx"))
# Cases the export itself cannot run, by model and backend (the same at opsets 13 and 17):
# tf2onnx's ragged loop concatenates an empty sequence when there is no row (case 0);
# its to_tensor Expands to a negative dim when there are no rows; on onnxruntime an
# integer Div of nothing by zero for rows of length 0, and a count over axis -1 of an
# empty batch left unreduced (two onnxruntime quirks; lowered with --target onnxruntime
# these cases run: the last test). No promise is made where the original fails.
EXPORT_FAILS = {
    ("tf_ragged_map_elementwise", "reference"): {0}, ("tf_ragged_map_elementwise", "onnxruntime"): {0},
    ("tf_ragged_map_scaled_rows", "reference"): {0}, ("tf_ragged_map_scaled_rows", "onnxruntime"): {0, 1, 5},
    ("tf_ragged_mask_to_tensor", "reference"): {0}, ("tf_ragged_mask_to_tensor", "onnxruntime"): {0, 4},
    ("tf_ragged_range_to_tensor", "reference"): {0}, ("tf_ragged_range_to_tensor", "onnxruntime"): {0, 1},
}


def test_the_fixtures_hold_tf2onnx_sequences_and_shapeless_outputs():
    with_seqs = [p.stem for p in MODELS if set(ops_of(onnx.load(str(p)))) & SEQUENCE_OPS]
    assert {s.rsplit("_opset", 1)[0] for s in with_seqs} == {"tf_ragged_map_elementwise", "tf_ragged_map_scaled_rows"}
    shapeless = [p for p in MODELS if any(not o.type.tensor_type.HasField("shape") for o in onnx.load(str(p)).graph.output)]
    assert shapeless
    # Every case set has a dynamic dim at 0 or 1 somewhere.
    for p in MODELS:
        dims = {d for inputs, _ in load_cases(p) for a in inputs.values() for d in a.shape}
        assert dims & {0, 1}, p.stem


@requires_ort
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_lowers_tensor_only_and_gives_tensorflows_outputs(capsys, tmp_path, path):
    cases = load_cases(path)
    argv = ["lower", str(path), "-o", str(tmp_path / "l.onnx"), "--verify"]
    for k, (inputs, _) in enumerate(cases):
        np.savez(tmp_path / f"in{k}.npz", **inputs)
        argv += ["--inputs", str(tmp_path / f"in{k}.npz")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    name = path.stem.rsplit("_opset", 1)[0]
    counts = [len(cases) - len(EXPORT_FAILS.get((name, b), ())) for b in ("reference", "onnxruntime")]
    assert (f"EQUIVALENT on reference ({counts[0]} of {len(cases)} samples compared) and onnxruntime "
            f"({counts[1]} of {len(cases)} samples compared)") in out
    assert main(["check", str(tmp_path / "l.onnx")]) == 0
    capsys.readouterr()
    for backend in ("reference", "onnxruntime"):
        original = Executor(path, backend=backend)
        ex = Executor(tmp_path / "l.onnx", backend=backend)
        for k, (inputs, expected) in enumerate(cases):
            if k in EXPORT_FAILS.get((name, backend), ()):
                with pytest.raises(SeqlowerError):
                    original.run(inputs)
                continue
            got = ex.run(inputs).outputs
            for output, want in expected.items():
                report = compare_values(output, want, got[output])
                assert report.ok, (backend, {k: v.shape for k, v in inputs.items()}, report.detail)


@requires_ort
@pytest.mark.parametrize("name", sorted({n for n, b in EXPORT_FAILS}))
@pytest.mark.parametrize("opset", [13, 17])
def test_lowered_for_onnxruntime_every_case_the_reference_runs_runs_on_onnxruntime(tmp_path, name, opset):
    """The onnxruntime profile's rewrites (integer division by a zero divisor, negative
    reduction axes over empty inputs) make the cases with empty rows run on onnxruntime
    with TensorFlow's numbers, where the export itself fails there."""
    path = DATA / f"{name}_opset{opset}.onnx"
    out = tmp_path / "l.onnx"
    assert main(["lower", str(path), "-o", str(out), "--target", "onnxruntime"]) == 0
    original, lowered = Executor(path, backend="onnxruntime"), Executor(out, backend="onnxruntime")
    gained = EXPORT_FAILS[(name, "onnxruntime")] - EXPORT_FAILS[(name, "reference")]
    for k, (inputs, expected) in enumerate(load_cases(path)):
        if k in EXPORT_FAILS[(name, "reference")]:
            continue
        if k in gained:
            with pytest.raises(SeqlowerError):
                original.run(inputs)
        got = lowered.run(inputs).outputs
        for output, want in expected.items():
            report = compare_values(output, want, got[output])
            assert report.ok, ({k: v.shape for k, v in inputs.items()}, report.detail)
