from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.errors import SeqlowerError
from seqlower.executor import Executor, load_inputs, parse_dims, save_values, synthesize_inputs
from tests.helpers import FLOAT, INT64, STRING, BOOL, model, opt, seq, t


def io_model():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["s"], ["s2"]),
             helper.make_node("Identity", ["o"], ["o2"])]
    o_type = helper.make_tensor_type_proto(INT64, [2])
    return model(nodes, [t("x", FLOAT, ["batch", 2]), seq("s", INT64, ["batch"]), opt("o", o_type)],
                 [t("y", FLOAT, ["batch", 2]), seq("s2", INT64, ["batch"]), opt("o2", o_type)])


def test_synthesize_binds_symbolic_dims_consistently():
    ex = Executor(io_model())
    feeds = synthesize_inputs(ex.inputs, seed=1, dims={"batch": 5}, seq_len=4)
    assert feeds["x"].shape == (5, 2) and len(feeds["s"]) == 4 and all(e.shape == (5,) for e in feeds["s"])
    assert feeds["s"][0].dtype == np.int64 and feeds["s"][0].min() >= 0 and feeds["s"][0].max() < 4
    assert feeds["o"].shape == (2,)
    again = synthesize_inputs(ex.inputs, seed=1, dims={"batch": 5}, seq_len=4)
    assert np.array_equal(feeds["x"], again["x"])
    assert synthesize_inputs(ex.inputs, dims={"batch": 0}, seq_len=0)["s"] == []


def test_synthesize_other_dtypes():
    m = model([helper.make_node("Identity", ["a"], ["b"]), helper.make_node("Identity", ["c"], ["d"])],
              [t("a", STRING, [3]), t("c", BOOL, [2])], [t("b", STRING, [3]), t("d", BOOL, [2])])
    feeds = synthesize_inputs(Executor(m).inputs)
    assert feeds["a"].dtype == object and feeds["c"].dtype == np.bool_


def test_npz_round_trip(tmp_path):
    ex = Executor(io_model())
    path = tmp_path / "x.npz"
    np.savez(path, x=np.ones((2, 2), np.float32), **{"s[0]": np.arange(2), "s[1]": np.arange(2)})
    feeds = load_inputs(path, ex.inputs)
    assert len(feeds["s"]) == 2 and feeds["o"] is None
    out = ex.run(feeds).outputs
    assert out["o2"] is None and np.array_equal(out["y"], np.ones((2, 2)))
    np.savez(path, x=np.ones((2, 2), np.float32), **{"s[]": np.zeros(0)}, o=np.arange(2))
    feeds = load_inputs(path, ex.inputs)
    assert feeds["s"] == [] and feeds["o"].tolist() == [0, 1]


@pytest.mark.parametrize(
    "keys, message",
    [({"s[0]": np.arange(2)}, "no value for input 'x'"),
     ({"x": np.ones(2), "s[1]": np.arange(2)}, "not 0..n-1"),
     ({"x": np.ones(2), "s[]": np.arange(0), "zzz": np.ones(1)}, "match no model input")],
)
def test_npz_errors(tmp_path, keys, message):
    np.savez(tmp_path / "x.npz", **keys)
    with pytest.raises(SeqlowerError, match=message):
        load_inputs(tmp_path / "x.npz", Executor(io_model()).inputs)


def test_pb_folder_round_trip(tmp_path):
    ex = Executor(io_model())
    feeds = synthesize_inputs(ex.inputs, seed=3)
    save_values(tmp_path, "input", ex.inputs, [feeds[p.name] for p in ex.inputs])
    loaded = load_inputs(tmp_path, ex.inputs)
    assert np.array_equal(loaded["x"], feeds["x"]) and len(loaded["s"]) == len(feeds["s"])
    assert np.array_equal(loaded["o"], feeds["o"])
    save_values(tmp_path, "input", ex.inputs, [feeds["x"], [], None])
    loaded = load_inputs(tmp_path, ex.inputs)
    assert loaded["s"] == [] and loaded["o"] is None


def test_bad_files(tmp_path):
    ex = Executor(io_model())
    (tmp_path / "bad.npz").write_bytes(b"nope")
    with pytest.raises(SeqlowerError, match="not a readable .npz"):
        load_inputs(tmp_path / "bad.npz", ex.inputs)
    with pytest.raises(SeqlowerError, match="no such"):
        load_inputs(tmp_path / "missing.npz", ex.inputs)
    (tmp_path / "input_0.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(SeqlowerError, match="input_\\*.pb files"):
        load_inputs(tmp_path, ex.inputs)


def test_parse_dims():
    assert parse_dims(["batch=4", "seq = 0"]) == {"batch": 4, "seq": 0}
    for bad in ["batch", "=3", "b=-1", "b=x"]:
        with pytest.raises(SeqlowerError, match="NAME=VALUE"):
            parse_dims([bad])
