"""Models whose weights live in external files: every layout exporters write, lowered
through the CLI and the API from any working directory, and run by every subcommand."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import seqlower
from seqlower.cli import main
from seqlower.executor import Executor
from tests.conftest import requires_ort
from tests.helpers import FLOAT, t

LAYOUTS = {
    "one-file": dict(all_tensors_to_one_file=True, location="model.onnx.data"),
    "subfolder": dict(all_tensors_to_one_file=True, location="data/weights.bin"),
    "per-tensor": dict(all_tensors_to_one_file=False),
}


def _weighted_model() -> onnx.ModelProto:
    """MatMul by a weight, split by external split sizes, a bias added per chunk
    (SequenceMap reading an outer external tensor), concatenated."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "B")
    sizes = numpy_helper.from_array(np.array([2, 3, 3], np.int64), "S")
    add_bias = helper.make_graph([helper.make_node("Add", ["e", "B"], ["o"])], "bias",
                                 [t("e", FLOAT, None)], [t("o", FLOAT, None)])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("SplitToSequence", ["xw", "S"], ["s"], axis=0),
        helper.make_node("SequenceMap", ["s"], ["s2"], body=add_bias),
        helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0),
    ]
    g = helper.make_graph(nodes, "g", [t("x", FLOAT, [8, 64])], [t("y", FLOAT, [8, 16])], initializer=[w, b, sizes])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _save(folder: Path, layout: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "subfolder":
        (folder / "data").mkdir()
    path = folder / "model.onnx"
    onnx.save(_weighted_model(), path, save_as_external_data=True, size_threshold=0, **LAYOUTS[layout])
    return path


def _fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("where", ["same-folder", "other-folder"])
@pytest.mark.parametrize("cwd", ["model-folder", "elsewhere"])
def test_lower_external_data_any_layout_folder_and_cwd(tmp_path, monkeypatch, capsys, layout, where, cwd):
    src = _save(tmp_path / "m", layout)
    before = _fingerprint(tmp_path / "m")
    out_dir = tmp_path / "m" if where == "same-folder" else tmp_path / "out" / "deep"
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / "lowered.onnx"
    monkeypatch.chdir(tmp_path / "m" if cwd == "model-folder" else tmp_path)
    code = main(["lower", os.path.relpath(src), "-o", os.path.relpath(dst), "--verify"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "EQUIVALENT" in out
    # The weights went next to the output; the input's files are untouched, no temp left.
    assert (out_dir / "lowered.onnx.data").stat().st_size >= 64 * 16 * 4
    after = _fingerprint(tmp_path / "m")
    assert {k: after[k] for k in before} == before
    assert sorted(p.name for p in out_dir.iterdir() if p.name.startswith(".")) == []
    # The output is valid where it lies, from a third folder, and computes the same.
    monkeypatch.chdir("/")
    onnx.checker.check_model(str(dst), full_check=True)
    proto = onnx.load(str(dst), load_external_data=False)
    assert {i.name for i in proto.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL} == {"W"}
    assert all(e.value == "lowered.onnx.data" for i in proto.graph.initializer for e in i.external_data
               if e.key == "location")
    want = Executor(src).run({"x": _x()}).outputs["y"]
    got = Executor(dst, backend="reference").run({"x": _x()}).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@requires_ort
def test_every_subcommand_reads_external_data_from_elsewhere(tmp_path, monkeypatch, capsys):
    src = _save(tmp_path / "m", "subfolder")
    dst = tmp_path / "out" / "l.onnx"
    dst.parent.mkdir()
    monkeypatch.chdir("/")
    assert main(["lower", str(src), "-o", str(dst)]) == 0
    np.savez(tmp_path / "x.npz", x=_x())
    for argv, want in [
        (["verify", src, dst, "--inputs", tmp_path / "x.npz", "--backend", "onnxruntime"], 0),
        (["run", dst, "--backend", "onnxruntime"], 0),
        (["run", src], 0),
        (["inspect", src], 0),
        (["check", dst], 0),
        (["check", src], 1),
    ]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert code == want, (argv, out, err)
        assert "error" not in err


def test_api_lowers_a_proto_loaded_without_its_external_data(tmp_path, monkeypatch):
    src = _save(tmp_path / "m", "subfolder")
    proto = onnx.load(str(src), load_external_data=False)
    monkeypatch.chdir("/")  # the weights cannot be found from here: none are needed
    blind = seqlower.lower(proto)
    assert {i.name for i in blind.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL} >= {"W", "B"}
    # Given the folder, the external split sizes are read and the split is static.
    seen = seqlower.lower(proto, base_dir=str(src.parent))
    assert "Loop" not in {n.op_type for n in seen.graph.node}
    for lowered, name in [(blind, "blind.onnx"), (seen, "seen.onnx")]:
        # The external locations are the input's: saved beside it, it runs.
        onnx.save(lowered, src.parent / name)
        want = Executor(src).run({"x": _x()}).outputs["y"]
        np.testing.assert_allclose(Executor(src.parent / name).run({"x": _x()}).outputs["y"], want, rtol=1e-6)


def test_saved_files_follow_the_umask(tmp_path, capsys):
    src = _save(tmp_path / "m", "one-file")
    old = os.umask(0o022)
    try:
        assert main(["lower", str(src), "-o", str(tmp_path / "l.onnx"), "--report", str(tmp_path / "r.json")]) == 0
    finally:
        os.umask(old)
    for name in ("l.onnx", "l.onnx.data", "r.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name
