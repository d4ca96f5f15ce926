"""Classifiers as skl2onnx converts them (tools/export_sklearn.py made the fixtures):
ZipMap's seq(map) output loads, is named by check and inspect, runs on both backends,
and lowers for targets without sequences to its input plus an ABI entry, through which
verify proves the numbers equal and which gives back scikit-learn's own outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.cli import main
from seqlower.executor import Executor
from tests.conftest import requires_ort

DATA = Path(__file__).parent / "data" / "sklearn"
MODELS = sorted(DATA.glob("*.onnx"))


def _cases(path: Path) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]], list[str]]:
    with np.load(path.with_suffix(".cases.npz")) as z:
        n = len([k for k in z.files if k.endswith("/in/X")])
        xs = [z[f"{k}/in/X"] for k in range(n)]
        outs = [{"output_label": z[f"{k}/out/output_label"], "probabilities": z[f"{k}/out/probabilities"]}
                for k in range(n)]
        return xs, outs, [str(c) for c in z["classes"]]


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_fixtures_cover_binary_multiclass_int_and_string_labels():
    kinds = set()
    for path in MODELS:
        [zm] = [n for n in onnx.load(str(path)).graph.node if n.op_type == "ZipMap"]
        kinds.add((len(_cases(path)[2]) > 2, zm.attribute[0].name))
    assert kinds == {(False, "classlabels_int64s"), (True, "classlabels_int64s"),
                     (False, "classlabels_strings"), (True, "classlabels_strings")}


@requires_ort
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_lowered_for_generic_equals_the_original_and_scikit_learn(capsys, tmp_path, path):
    xs, expected, classes = _cases(path)
    for k, x in enumerate(xs):
        np.savez(tmp_path / f"x{k}.npz", X=x)
    dst = tmp_path / "lowered.onnx"
    argv = ["lower", path, "-o", dst, "--verify", "--report", tmp_path / "r.json"]
    argv += [a for k in range(len(xs)) for a in ("--inputs", tmp_path / f"x{k}.npz")]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, out + err
    assert f"EQUIVALENT on reference ({len(xs)} of {len(xs)} samples compared) and onnxruntime" in out
    assert _cli(capsys, "check", dst)[0] == 0
    lowered = onnx.load(str(dst))
    assert "ZipMap" not in {n.op_type for n in lowered.graph.node}
    [entry] = json.loads(next(p.value for p in lowered.metadata_props if p.key == "seqlower.abi"))["outputs"]
    assert entry["kind"] == "zipmap" and [str(c) for c in entry["labels"]] == classes
    out_vi = next(o for o in lowered.graph.output if o.name == entry["tensors"]["values"])
    assert len(out_vi.type.tensor_type.shape.dim) == 2 and out_vi.type.tensor_type.shape.dim[1].dim_value == len(classes)
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["op"] for r in report["rewrites"] if r["op"] == "ZipMap"] == ["ZipMap"]
    # Through the ABI the lowered model gives scikit-learn's own answers, on both backends.
    for backend in ("reference", "onnxruntime"):
        ex = Executor(dst, backend=backend)
        for x, want in zip(xs, expected):
            got = ex.run({"X": x}).outputs
            assert [str(v) for v in np.asarray(got["output_label"]).reshape(-1)] == \
                [str(v) for v in want["output_label"]]
            maps = got["output_probability"]
            assert all([str(k) for k in row] == classes for row in maps)
            probs = np.array([[float(v) for v in row.values()] for row in maps], dtype=np.float32)
            np.testing.assert_allclose(probs, want["probabilities"], rtol=1e-4, atol=1e-5)


@requires_ort
@pytest.mark.parametrize("path", MODELS[:2], ids=lambda p: p.stem)
def test_onnxruntime_keeps_zipmap_and_says_why(capsys, tmp_path, path):
    code, out, _ = _cli(capsys, "lower", path, "-o", tmp_path / "o.onnx", "--target", "onnxruntime",
                        "--report", tmp_path / "r.json", "--verify")
    assert code == 0 and "EQUIVALENT" in out
    report = json.loads((tmp_path / "r.json").read_text())
    [kept] = [r for r in report["remaining"] if r.get("op") == "ZipMap"]
    assert "runs ZipMap and sequences" in kept["reason"]
    assert _cli(capsys, "check", tmp_path / "o.onnx", "--target", "onnxruntime")[0] == 0
    types = [o.type for o in onnx.load(str(tmp_path / "o.onnx")).graph.output]
    assert any(t.sequence_type.elem_type.HasField("map_type") for t in types)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_check_and_inspect_name_the_maps(capsys, path):
    code, out, _ = _cli(capsys, "check", path)
    key = "string" if "str" in path.stem else "int64"
    assert code == 1 and "op    ZipMap node 'ZipMap'  in main" in out
    assert f"value output_probability: seq(map({key},tensor(float)))  in main (output)" in out
    code, out, _ = _cli(capsys, "inspect", path)
    assert code == 0 and f"output_probability: seq(map({key},tensor(float,[])))  in main; from ZipMap node" in out


def test_every_target_without_sequences_lowers_zipmap(capsys, tmp_path):
    path = MODELS[0]
    for target in ("generic", "openvino", "tensorrt", "tract", "tvm"):
        assert _cli(capsys, "lower", path, "-o", tmp_path / f"{target}.onnx", "--target", target)[0] == 0
        lowered = onnx.load(str(tmp_path / f"{target}.onnx"))
        assert "ZipMap" not in {n.op_type for n in lowered.graph.node}, target
