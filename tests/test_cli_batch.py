"""Folders of models, as CI jobs gate them: lower DIR -o OUTDIR (-j), check DIR, JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.cli import main
from seqlower.demo import build_demo_model
from seqlower.executor import Executor
from tests.helpers import FLOAT, model, t
from tests.io.test_external_data import _weighted_model, _x


@pytest.fixture
def tree(tmp_path):
    """models/a.onnx (sequences), models/sub/b.onnx (external data), models/sub/c.onnx
    (tensor-only), models/bad.onnx (not a model), models/.hidden/d.onnx (skipped)."""
    root = tmp_path / "models"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    onnx.save(build_demo_model(), root / "a.onnx")
    onnx.save(_weighted_model(), root / "sub" / "b.onnx", save_as_external_data=True, location="b.weights",
              size_threshold=0)
    onnx.save(model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]),
              root / "sub" / "c.onnx")
    (root / "bad.onnx").write_bytes(b"not a model")
    onnx.save(build_demo_model(), root / ".hidden" / "d.onnx")
    return root


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_lower_a_folder_keeps_relative_paths_and_external_data(capsys, tmp_path, tree, jobs):
    out_dir = tmp_path / "out"
    code, out, _ = _cli(capsys, "lower", tree, "-o", out_dir, "-j", jobs, "--junit", tmp_path / "j.xml",
                        "--report", tmp_path / "reports")
    assert code == 2  # the worst model's: bad.onnx is unreadable
    lines = out.splitlines()
    assert sum(ln.startswith("ok ") for ln in lines) == 3 and sum(ln.startswith("ERROR") for ln in lines) == 1
    assert lines[-1] == "4 model(s): 3 lowered, 0 failed, 1 refused"
    assert sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file()) == [
        "a.onnx", "sub/b.onnx", "sub/b.onnx.data", "sub/c.onnx"]
    assert (tmp_path / "reports" / "sub" / "b.json").exists()
    x = {"x": np.ones((6, 4), np.float32), "y": np.zeros((2, 4), np.float32)}
    for name, feeds in (("a.onnx", x), ("sub/b.onnx", {"x": _x()})):
        want = Executor(tree / name).run(feeds).outputs
        got = Executor(out_dir / name).run(feeds).outputs
        assert all(np.allclose(got[k], want[k]) for k in want)
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("tests") == "4" and suite.get("errors") == "1" and suite.get("failures") == "0"
    [error] = [c for c in suite.iter("testcase") if c.find("error") is not None]
    assert error.get("name").endswith("bad.onnx") and "not an ONNX model" in error.find("error").get("message")


def test_lower_several_files_into_a_folder(capsys, tmp_path, tree):
    code, out, _ = _cli(capsys, "lower", tree / "a.onnx", tree / "sub" / "c.onnx", "-o", tmp_path / "o")
    assert code == 0 and sorted(p.name for p in (tmp_path / "o").iterdir()) == ["a.onnx", "c.onnx"]
    # One model into an existing folder keeps its name there.
    (tmp_path / "one").mkdir()
    code, out, _ = _cli(capsys, "lower", tree / "a.onnx", "-o", tmp_path / "one")
    assert code == 0 and [p.name for p in (tmp_path / "one").iterdir()] == ["a.onnx"]


def test_check_a_folder_with_junit(capsys, tmp_path, tree):
    code, out, _ = _cli(capsys, "check", tree, "--junit", tmp_path / "c.xml")
    assert code == 2 and out.splitlines()[-1] == "4 model(s): 1 pass, 2 fail, 1 unreadable"
    suite = ET.parse(tmp_path / "c.xml").getroot().find("testsuite")
    cases = {c.get("name").split("models/")[1]: c for c in suite.iter("testcase")}
    assert sorted(cases) == ["a.onnx", "bad.onnx", "sub/b.onnx", "sub/c.onnx"]
    assert cases["sub/c.onnx"].find("failure") is None and cases["sub/c.onnx"].find("error") is None
    message = cases["a.onnx"].find("failure").get("message")
    assert "generic cannot run, first SplitToSequence node 'split' in main" in message
    (tree / "bad.onnx").unlink()
    lowered = tmp_path / "lowered"
    assert _cli(capsys, "lower", tree, "-o", lowered)[0] == 0
    code, out, _ = _cli(capsys, "check", lowered, "--json")
    assert code == 0 and out.lstrip().startswith("{")


def test_progress_goes_to_a_terminal_only(capsys, tmp_path, tree, monkeypatch):
    (tree / "bad.onnx").unlink()
    code, _, err = _cli(capsys, "lower", tree, "-o", tmp_path / "a")
    assert code == 0 and "\r" not in err  # not a terminal: no progress line
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    code, _, err = _cli(capsys, "lower", tree, "-o", tmp_path / "b")
    assert code == 0 and "lowering: 1/3, 2 left" in err and "lowering: 3/3, 0 left" in err
    seq = tree / "a.onnx"
    code, _, err = _cli(capsys, "verify", seq, seq, "--samples", "2", "--backend", "reference")
    assert code == 0 and "verifying: 2/2, 0 left" in err and "reference sample 2 of 2" in err
