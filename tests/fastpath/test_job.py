"""One road for the API and the CLI (Stage 12): ``seqlower.lower(ModelProto)`` reads the
model as ``seqlower lower`` reads a file (checked, weights held as stubs, the region
lowered, the weights' bytes put back), so both give the same bytes. The exported
fixtures are held to it for four targets by tests/test_exported_models.py; here every
other fixture, and a model with weights the region does not read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import seqlower
from seqlower.cli import main
from seqlower.errors import ModelError

DATA = Path(__file__).parent.parent / "data"
OTHERS = sorted(p for d in ("tensorflow", "sklearn", "torch_fuzz") for p in (DATA / d).glob("*.onnx"))


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_api_and_the_cli_give_the_same_bytes(path, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert main(["lower", str(path), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert seqlower.lower(onnx.load(path)).SerializeToString() == out.read_bytes()


def _with_weights() -> onnx.ModelProto:
    # A 64x64 weight (held: over 1 KiB) beside a split the region lowers.
    w = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 100
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("SplitToSequence", ["h", "two"], ["s"], axis=0),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 128])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(2, np.int64), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_held_weights_come_back_whole_through_the_api(tmp_path, capsys):
    m = _with_weights()
    low = seqlower.lower(m)
    assert not any(n.op_type.endswith("Sequence") for n in low.graph.node)
    w = next(t for t in low.graph.initializer if t.name == "w")
    np.testing.assert_array_equal(numpy_helper.to_array(w), numpy_helper.to_array(m.graph.initializer[0]))
    onnx.save(m, tmp_path / "m.onnx")
    assert main(["lower", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q"]) == 0
    assert low.SerializeToString() == (tmp_path / "o.onnx").read_bytes()
    assert m.graph.node[1].op_type == "SplitToSequence", "the caller's model was changed"


def test_the_api_refuses_what_the_cli_refuses():
    m = _with_weights()
    m.graph.node[0].input[1] = "nowhere"
    with pytest.raises(ModelError, match="nowhere"):
        seqlower.lower(m)


def test_a_proto_past_protobufs_limit_is_read_as_it_is_and_lowers_the_same(monkeypatch):
    # (one past 2 GiB has no bytes to hold its weights in: it is read as a ModelProto,
    # weights in place; here every proto counts as that big)
    import seqlower.fastpath.job
    from seqlower.executor.verify import verify

    m = _with_weights()
    held = seqlower.lower(m).SerializeToString()
    monkeypatch.setattr(seqlower.fastpath.job, "PROTOBUF_LIMIT", 1)
    job = seqlower.fastpath.job.Job.read(m)
    assert job.weights is None and job.label == "<model>"
    job.lower()
    whole = job.model()
    assert whole.SerializeToString() == held
    assert m.graph.node[1].op_type == "SplitToSequence", "the caller's model was changed"
    for backend in ("reference", "onnxruntime"):
        assert verify(m, whole, samples=2, backend=backend).equivalent
