from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from seqlower.errors import ModelError
from seqlower.io.models import load_model, read_model_proto, save_model, to_proto
from tests.helpers import FLOAT, model, t


def weights_model(opset=13, ir=7):
    w = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "w")
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [t("x", FLOAT, [1024])], [t("y", FLOAT, [1024])],
                 initializer=[w], opset=opset, ir_version=ir)


def save_external(m, folder, location="w.bin"):
    onnx.save_model(m, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return folder / "m.onnx"


def test_round_trip_keeps_ir_version_and_opsets(tmp_path):
    m = weights_model(opset=11, ir=6)
    save_model(load_model(m.SerializeToString()), tmp_path / "o.onnx")
    back = onnx.load(tmp_path / "o.onnx")
    assert back.ir_version == 6 and back.opset_import[0].version == 11
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_external_data_inside_folder_loads(tmp_path):
    path = save_external(weights_model(), tmp_path)
    proto = read_model_proto(path)
    assert numpy_helper.to_array(proto.graph.initializer[0])[5] == 5
    ir_model = load_model(path)
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    save_model(ir_model, out)  # external weights are written beside the output
    assert (out.parent / "o.onnx.data").exists()
    assert numpy_helper.to_array(read_model_proto(out).graph.initializer[0])[7] == 7


@pytest.mark.parametrize("location, message", [
    ("/etc/passwd", "absolute"),
    ("../outside.bin", "outside the model's folder"),
])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location, message):
    (tmp_path / "sub").mkdir()
    path = save_external(weights_model(), tmp_path / "sub")
    m = onnx.load(path, load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ModelError, match=message):
        read_model_proto(path)


def test_external_data_symlink_out_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    path = save_external(weights_model(), tmp_path / "sub")
    (tmp_path / "secret.bin").write_bytes((tmp_path / "sub" / "w.bin").read_bytes())
    (tmp_path / "sub" / "w.bin").unlink()
    os.symlink(tmp_path / "secret.bin", tmp_path / "sub" / "w.bin")
    with pytest.raises(ModelError, match="outside the model's folder"):
        read_model_proto(path)


def test_external_data_missing_or_truncated(tmp_path):
    path = save_external(weights_model(), tmp_path)
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").write_bytes(data[:100])
    with pytest.raises(ModelError, match="truncated"):
        read_model_proto(path)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelError, match="missing"):
        read_model_proto(path)
    with pytest.raises(ModelError, match="load the model from its file path"):
        read_model_proto(path.read_bytes())


@pytest.mark.parametrize("data, message", [
    (b"", "empty file"),
    (b"\x00\xff\xfe garbage", "not an ONNX model"),
    (onnx.TensorProto(name="t").SerializeToString(), "not an ONNX model"),
])
def test_unreadable_models(tmp_path, data, message):
    p = tmp_path / "bad.onnx"
    p.write_bytes(data)
    with pytest.raises(ModelError, match=message) as info:
        read_model_proto(p)
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_truncated_and_invalid_models(tmp_path):
    full = weights_model().SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(full[: len(full) // 2])
    with pytest.raises(ModelError, match="cut.onnx"):
        read_model_proto(p)
    bad = weights_model()
    bad.graph.node[0].input.append("nowhere")  # Add with three inputs
    with pytest.raises(ModelError, match="invalid model"):
        read_model_proto(bad)
    with pytest.raises(ModelError, match="no such file"):
        read_model_proto(tmp_path / "missing.onnx")
    with pytest.raises(ModelError, match="is a folder"):
        read_model_proto(tmp_path)


def test_save_is_atomic_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "o.onnx"
    target.write_bytes(b"previous")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(ModelError, match="No space left"):
        save_model(weights_model(), target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["o.onnx"]
    with pytest.raises(ModelError, match="does not exist"):
        save_model(weights_model(), tmp_path / "nope" / "o.onnx")


def test_large_models_get_external_data(tmp_path, monkeypatch):
    import seqlower.io.models as mio

    monkeypatch.setattr(mio, "PROTOBUF_LIMIT", 1000)
    save_model(load_model(weights_model()), tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").stat().st_size == 4096
    assert to_proto(load_model(tmp_path / "big.onnx")).graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL


def test_inferred_types_from_value_infos_or_a_mapping():
    """InferredTypes reads one run's value infos by name when asked, or windows' types as
    they come; a value inference left untyped is not in it either way."""
    from seqlower.io.check import InferredTypes

    typed = onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2])
    untyped = onnx.ValueInfoProto(name="b")
    for found in ([typed, untyped], {"a": typed.type, "b": untyped.type}):
        types = InferredTypes()
        types.found(found)
        assert "a" in types and "b" not in types and "c" not in types
        assert types["a"] == typed.type and list(types) == ["a"] and len(types) == 1
        with pytest.raises(KeyError):
            types["b"]
        types.release()
        assert "a" not in types


# -- the type check of a big model, deferred (DEFER_NODES) -------------------------------
# (Stage 12: the checks no longer run in a forked child; it gained 11% at best on the
# families' worst members, under the 20% that would keep it. The type check of a big model
# still waits for a type to be asked: each sub-model lowered is checked as a model is.)


def _with_held_weight(data: bytes) -> bytes:
    """The model with an unused 4 KB initializer: big enough to be held (the way a big
    model is read)."""
    m = onnx.ModelProto.FromString(data)
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(1024, np.float32), "spare"))
    return m.SerializeToString()


def _lower_cli(src, dst, capsys) -> tuple[int, str]:
    from seqlower.cli import main

    code = main(["lower", str(src), "-o", str(dst), "-q"])
    return code, capsys.readouterr().err


@pytest.fixture
def deferring(monkeypatch) -> list[bool]:
    """Every model counts as big: its type check is deferred (the list says, per check,
    whether it was)."""
    from seqlower.io import check as model_check, models as model_io

    deferred: list[bool] = []
    real = model_check.InferredTypes.defer

    def counted(self, run):
        deferred.append(True)
        return real(self, run)

    monkeypatch.setattr(model_io, "DEFER_NODES", 1)
    monkeypatch.setattr(model_check.InferredTypes, "defer", counted)
    return deferred


def _at_once(monkeypatch) -> None:
    from seqlower.io import models as model_io

    monkeypatch.setattr(model_io, "DEFER_NODES", 10**9)


HOSTILE_CHECKED = ["cycle", "unknown_op", "missing_subgraph", "name_not_utf8", "element_type_that_does_not_exist",
                   "constant_without_value", "flag_of_two", "cast_to_no_type", "sequence_fed_where_a_tensor_goes",
                   "position_out_of_range"]


@pytest.mark.parametrize("name", HOSTILE_CHECKED)
def test_a_deferred_type_check_refuses_what_the_reader_refuses(name, tmp_path, capsys, monkeypatch, deferring):
    from tests.test_hostile_inputs import HOSTILE

    data, says = HOSTILE[name]
    src = tmp_path / "m.onnx"
    src.write_bytes(_with_held_weight(data))
    code, err = _lower_cli(src, tmp_path / "out.onnx", capsys)
    _at_once(monkeypatch)
    alone, alone_err = _lower_cli(src, tmp_path / "out.onnx", capsys)
    assert code == alone == 2 and err == alone_err and says in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_deferred_type_check_lowers_the_same(tmp_path, capsys, monkeypatch, deferring):
    from tests.fastpath.test_repeats import _chain

    src = tmp_path / "chain.onnx"
    onnx.save(_chain(6, dim=24), src)
    code, err = _lower_cli(src, tmp_path / "deferred.onnx", capsys)
    assert code == 0 and deferring == [True], err
    _at_once(monkeypatch)
    alone, _ = _lower_cli(src, tmp_path / "alone.onnx", capsys)
    assert alone == 0 and deferring == [True]  # (not deferred the second time)
    assert (tmp_path / "deferred.onnx").read_bytes() == (tmp_path / "alone.onnx").read_bytes()
