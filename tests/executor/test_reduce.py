"""seqlower reduce: a model that goes wrong on a runtime, cut to the smallest that still does."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper

from seqlower import lower
from seqlower.cli import main
from seqlower.executor import Executor, compare_values
from seqlower.executor.reduce import reduce_failure
from tests.helpers import FLOAT, model, seq, t


def _logsumexp_model() -> onnx.ModelProto:
    """OpenVINO ignores ReduceLogSumExp's axes attribute at opset 13 (quirk
    reduce-axes-attribute-ignored): 'm' comes out a scalar; the rest is right."""
    return model([
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("ReduceLogSumExp", ["r"], ["m"], axes=[1], keepdims=0),
        helper.make_node("Neg", ["m"], ["y"]),
        helper.make_node("Mul", ["x", "x"], ["z"]),
    ], [t("x", FLOAT, [2, 3])], [t("y", FLOAT, [2]), t("z", FLOAT, [2, 3])], opset=13)


def test_a_wrong_number_on_openvino_is_cut_to_the_one_node_that_makes_it():
    m = _logsumexp_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    found = reduce_failure(m, "openvino", {"x": x})
    assert found.found and found.value == "m" and found.how.startswith("differs")
    assert [n.op_type for n in found.reproducer.graph.node] == ["ReduceLogSumExp"]
    # The reproducer still goes wrong there, and the reference gives what was saved.
    assert Executor(found.reproducer, backend="openvino").run(found.feeds).outputs["m"].shape == ()
    want = Executor(found.reproducer, backend="reference").run(found.feeds).outputs["m"]
    assert compare_values("m", want, found.expected).ok and want.shape == (2,)


def test_a_model_the_runtime_runs_right_has_nothing_to_reduce():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])])
    found = reduce_failure(m, "openvino", {"x": np.ones(2, np.float32)})
    assert not found.found and "nothing to reduce" in found.summary


def test_a_lowered_models_sequence_inputs_are_fed_as_their_tensors():
    original = model([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                     [seq("s", FLOAT, ["n", 2])], [t("y", FLOAT, [None, 2])])
    lowered = lower(original)
    rows = [np.ones((1, 2), np.float32), np.zeros((2, 2), np.float32)]
    found = reduce_failure(lowered, "onnxruntime", {"s": rows})
    assert not found.found and "nothing to reduce" in found.summary


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, *capsys.readouterr()


def test_the_cli_writes_the_reproducer_and_its_test_data(tmp_path, capsys):
    src, out = tmp_path / "m.onnx", tmp_path / "repro"
    onnx.save(_logsumexp_model(), src)
    code, stdout, err = _cli(capsys, "reduce", src, "--backend", "openvino", "-o", out)
    assert code == 0, err
    assert stdout.splitlines()[0] == (f"{src}: 'm' differs: shape [], expected [2] on openvino; reproducer of 1 node(s):"
                                      " ReduceLogSumExp")
    repro = onnx.load(out / "reproducer.onnx")
    # Relu was frozen into a constant: the reproducer reads no input, and the folder holds none.
    assert sorted(p.name for p in (out / "test_data_set_0").iterdir()) == ["output_0.pb"]
    ran = Executor(repro, backend="reference").run({}).outputs["m"]
    saved = onnx.numpy_helper.to_array(onnx.load_tensor(str(out / "test_data_set_0" / "output_0.pb")))
    np.testing.assert_allclose(ran, saved)
    code, stdout, _ = _cli(capsys, "reduce", src, "--backend", "openvino", "--json")
    doc = json.loads(stdout)
    assert code == 0 and doc["found"] and doc["ops"] == ["ReduceLogSumExp"] and doc["value"] == "m"


def test_the_cli_says_when_nothing_goes_wrong_and_refuses_what_it_cannot_do(tmp_path, capsys):
    ok = tmp_path / "ok.onnx"
    onnx.save(model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]), ok)
    code, stdout, _ = _cli(capsys, "reduce", ok, "--backend", "tract")
    assert code == 1 and "nothing to reduce" in stdout
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    code, _, err = _cli(capsys, "reduce", ok, "--backend", "tract", "-o", full)
    assert code == 2 and "exists and is not an empty folder" in err and (full / "keep.txt").read_text() == "mine"
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    code, _, err = _cli(capsys, "reduce", bad, "--backend", "tract")
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(bad) in err
