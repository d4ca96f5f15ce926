"""Hostile and broken models, through the CLI and the Python API: one line naming the
file or the node, exit 2, no traceback, nothing written, the input untouched; the API
raises SeqlowerError with the same message."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf.internal.encoder import _VarintBytes
from onnx import TensorProto, helper, numpy_helper

from seqlower import LowerOptions, SeqlowerError, load_model, lower_with_report
from seqlower.cli import main
from tests.helpers import BOOL, FLOAT, INT64, const, model, seq, t


def _good() -> onnx.ModelProto:
    return model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                  helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                 [t("x", FLOAT, [4, 2])], [t("y", FLOAT, [4, 2])])


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, so nesting can be written past the depth
    protobuf's own serializer accepts."""
    return _VarintBytes((number << 3) | 2) + _VarintBytes(len(payload)) + payload


def _nested_ifs(depth: int) -> bytes:
    """A model whose If nests ``depth`` then-branches deep (GraphProto.node = 1,
    NodeProto.attribute = 5, AttributeProto.g = 6, ModelProto.graph = 7)."""
    def leaf(name: str) -> bytes:
        return helper.make_attribute(name.split(":")[0], helper.make_graph(
            [helper.make_node("Identity", ["v0"], [name.split(":")[1]])], "leaf", [], [t(name.split(":")[1], FLOAT, [2])])
        ).SerializeToString()

    g = helper.make_graph([helper.make_node("Identity", ["v0"], ["r0"])], "leaf", [], [t("r0", FLOAT, [2])]).SerializeToString()
    for d in range(depth):
        then = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH).SerializeToString() + _field(6, g)
        node = helper.make_node("If", ["c"], [f"r{d + 1}"]).SerializeToString() + _field(5, then) + _field(5, leaf(f"else_branch:e{d}"))
        g = helper.make_graph([], f"g{d}", [], [t(f"r{d + 1}", FLOAT, [2])]).SerializeToString() + _field(1, node)
    then = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH).SerializeToString() + _field(6, g)
    node = helper.make_node("If", ["c"], ["y"]).SerializeToString() + _field(5, then) + _field(5, leaf("else_branch:top"))
    top = model([helper.make_node("Identity", ["x"], ["v0"])], [t("x", FLOAT, [2]), t("c", BOOL, [])], [t("y", FLOAT, [2])])
    graph = top.graph.SerializeToString() + _field(1, node)
    top.ClearField("graph")
    return top.SerializeToString() + _field(7, graph)


def _external(location: str) -> onnx.ModelProto:
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [t("x", FLOAT, [1000])], [t("y", FLOAT, [1000])],
              initializer=[const("w", np.ones(1000, np.float32))])
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    return m


def _m(nodes, inputs, outputs, **kw) -> bytes:
    return model(nodes, inputs, outputs, **kw).SerializeToString()


# name -> (bytes of the model file, what the one line says)
HOSTILE = {
    "not_protobuf": (b"this is not a model\n" * 10, "not an ONNX model"),
    "empty": (b"", "empty file"),
    "truncated": (_good().SerializeToString()[:40], "not an ONNX model"),
    "a_graph_not_a_model": (_good().graph.SerializeToString(), "not an ONNX model"),
    "a_tensor_not_a_model": (numpy_helper.from_array(np.ones(3, np.float32), "t").SerializeToString(), "not an ONNX model"),
    "cycle": (_m([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Add", ["a", "x"], ["b"])],
                 [t("x", FLOAT, [2])], [t("a", FLOAT, [2])]), "topologically sorted"),
    "wrong_input_count": (_m([helper.make_node("SequenceAt", ["x"], ["y"])], [seq("x", FLOAT, [2])], [t("y", FLOAT, [2])]),
                          "SequenceAt"),
    "unknown_op": (_m([helper.make_node("FrobnicateSequence", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]),
                   "No Op registered for FrobnicateSequence"),
    "unknown_domain": (_m([helper.make_node("Foo", ["x"], ["y"], domain="com.nowhere")], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]),
                       "com.nowhere"),
    "missing_subgraph": (_m([helper.make_node("SequenceMap", ["s"], ["o"])], [seq("s", FLOAT, [2])], [seq("o", FLOAT, [2])]),
                         "'body' is missing"),
    "nested_3000_deep": (_nested_ifs(3000), "nested too deeply to read"),
    "position_out_of_range": (_m([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0), helper.make_node("SequenceAt", ["s", "p"], ["y"])],
                                 [t("x", FLOAT, [4, 2])], [t("y", FLOAT, [1, 2])], initializer=[const("p", 7, np.int64)]),
                              "SequenceAt node (output 'y'): position 7 is out of range"),
    "split_of_zero": (_m([helper.make_node("SplitToSequence", ["x", "k"], ["s"], axis=0), helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                         [t("x", FLOAT, [4, 2])], [t("y", FLOAT, [4, 2])], initializer=[const("k", 0, np.int64)]),
                      "SplitToSequence node (output 's'): scalar split must be positive"),
    "insert_of_another_dtype": (_m([helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT), helper.make_node("SequenceInsert", ["e", "i"], ["s"]),
                                    helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], [t("i", INT64, [2])], [t("y", FLOAT, [2])]),
                                "SequenceInsert node (output 's'): inserts a INT64 tensor into a sequence of FLOAT"),
    "name_not_utf8": (_m([helper.make_node("Identity", ["x"], ["y"], name="ok")], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])])
                      .replace(b"\x02ok", b"\x02\xef\x28"), "is not UTF-8 text"),
    "element_type_that_does_not_exist": (_m([helper.make_node("Identity", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", 39, [2])]),
                                         "element type 39, which does not exist"),
    "raw_data_of_the_wrong_length": (_m([helper.make_node("Add", ["x", "w"], ["y"])], [t("x", INT64, [])], [t("y", INT64, [])],
                                        initializer=[onnx.TensorProto(name="w", data_type=INT64, raw_data=b"\x01" * 13)]),
                                     "tensor 'w' holds 13 bytes of data; its shape [] needs 8"),
    "constant_without_value": (_m([onnx.NodeProto(op_type="Constant", output=["c"], name="k"), helper.make_node("Add", ["x", "c"], ["y"])],
                                  [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]), "Constant node 'k' has 0 attributes"),
    "sequence_fed_where_a_tensor_goes": (_m([helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                                            [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]), "invalid model"),
    "flag_of_two": (_m([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=2),
                        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], [t("x", FLOAT, [4, 2])], [t("y", FLOAT, [4, 2])]),
                    "keepdims=2; it must be 0 or 1"),
    "cast_to_no_type": (_m([helper.make_node("Cast", ["x"], ["y"], to=99, name="cast")], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]),
                        "Cast node 'cast': to=99 is not an element type"),
    "external_data_missing": (_external("nowhere.bin").SerializeToString(), "external data file 'nowhere.bin' is missing"),
    "external_data_absolute": (_external("/etc/hostname").SerializeToString(), "is absolute; refused"),
    "external_data_dotdot": (_external("../../etc/hostname").SerializeToString(), "outside the model's folder; refused"),
    "external_data_symlink_out": (_external("link.bin").SerializeToString(), "outside the model's folder; refused"),
    "external_data_truncated": (_external("short.bin").SerializeToString(), "'short.bin' is truncated"),
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    os.symlink("/etc/hostname", tmp_path / "link.bin")
    (tmp_path / "short.bin").write_bytes(b"\0" * 100)
    return tmp_path


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_model_gives_one_line_exit_2_and_writes_nothing(name, folder, capsys):
    data, says = HOSTILE[name]
    src = folder / f"{name}.onnx"
    src.write_bytes(data)
    before = _digest(src)
    files = set(folder.iterdir())
    for argv in (["lower", src, "-o", folder / "out.onnx", "--report", folder / "r.json"], ["inspect", src]):
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert code == 2, (argv[0], err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("seqlower: error: ") and says in lines[0], (argv[0], err)
        assert "Traceback" not in err and "internal error" not in err
        # It names the file, or the node.
        assert str(src) in lines[0] or " node " in lines[0], lines[0]
    assert set(folder.iterdir()) == files, "something was written"
    assert _digest(src) == before, "the input was modified"
    # The API raises the one documented type, with the line's message.
    with pytest.raises(SeqlowerError) as e:
        lower_with_report(load_model(src), LowerOptions())
    assert f"seqlower: error: {e.value}" == lines[0]


def test_nesting_as_deep_as_protobuf_parses_lowers_without_recursion_trouble(tmp_path, capsys):
    # protobuf stops at 100 message levels (3 per subgraph): 30 subgraphs deep parses.
    src = tmp_path / "deep.onnx"
    src.write_bytes(_nested_ifs(30))
    assert main(["lower", str(src), "-o", str(tmp_path / "out.onnx")]) == 0
    assert (tmp_path / "out.onnx").exists()


def test_a_huge_declared_dim_lowers_and_sampling_it_is_refused(tmp_path, capsys):
    m = model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0), helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
              [t("x", FLOAT, [2 ** 62, 2])], [t("y", FLOAT, [None, 2])])
    src = tmp_path / "huge.onnx"
    onnx.save(m, src)
    assert main(["lower", str(src), "-o", str(tmp_path / "out.onnx")]) == 0  # no per-element list of 2**62
    capsys.readouterr()
    assert main(["run", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqlower: error: input 'x' declares shape [4611686018427387904, 2]") and "too large" in err


@pytest.mark.parametrize("where", ["/proc/seqlower-out.onnx", "missing-folder/out.onnx", "a-file/out.onnx", "."])
def test_an_unwritable_output_gives_one_line_and_leaves_nothing(where, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    src = tmp_path / "good.onnx"
    onnx.save(_good(), src)
    before = set(tmp_path.iterdir())
    assert main(["lower", str(src), "-o", where, "--report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    # "." is a folder: the model would keep its name there, which is the input itself.
    assert err.startswith("seqlower: error: ") and len(err.splitlines()) == 1 and (
        "cannot write" in err or "does not exist" in err or "is the input model" in err)
    assert set(tmp_path.iterdir()) == before  # no report without its model, no temp files


def test_an_unwritable_report_leaves_no_model(tmp_path, capsys):
    src = tmp_path / "good.onnx"
    onnx.save(_good(), src)
    assert main(["lower", str(src), "-o", str(tmp_path / "out.onnx"), "--report", "/proc/seqlower-r.json"]) == 2
    assert "cannot write the report" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.onnx"]


def test_the_output_path_may_not_be_the_input(tmp_path, capsys):
    src = tmp_path / "good.onnx"
    onnx.save(_good(), src)
    before = _digest(src)
    assert main(["lower", str(src), "-o", str(src)]) == 2
    assert "the output path is the input model" in capsys.readouterr().err
    assert _digest(src) == before


def test_a_write_interrupted_midway_leaves_no_output(tmp_path, capsys, monkeypatch):
    src = tmp_path / "good.onnx"
    onnx.save(_good(), src)
    real_fsync = os.fsync

    def interrupted(fd):
        real_fsync(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    assert main(["lower", str(src), "-o", str(tmp_path / "out.onnx")]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.onnx"]


def _nested_ir(depth: int):
    """An onnx_ir model ``depth`` If levels deep, built without protobuf (so deeper
    than any file can be)."""
    import onnx_ir as ir

    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    c = ir.Value(name="c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))

    def identity(name: str) -> ir.Graph:
        n = ir.Node("", "Identity", [x], num_outputs=1)
        n.outputs[0].name = name
        return ir.Graph([], [n.outputs[0]], nodes=[n], name=f"{name}_graph")

    g = identity("r0")
    for d in range(depth):
        n = ir.Node("", "If", [c], [ir.AttrGraph("then_branch", g), ir.AttrGraph("else_branch", identity(f"e{d}"))], num_outputs=1)
        n.outputs[0].name = f"r{d + 1}"
        g = ir.Graph([], [n.outputs[0]], nodes=[n], name=f"g{d}")
    top = ir.Node("", "If", [c], [ir.AttrGraph("then_branch", g), ir.AttrGraph("else_branch", identity("top"))], num_outputs=1, name="top")
    top.outputs[0].name = "y"
    return ir.Model(ir.Graph([x, c], [top.outputs[0]], nodes=[top], name="main", opset_imports={"": 17}), ir_version=8)


def test_an_api_model_nested_past_what_a_file_holds_is_refused_without_recursion():
    from seqlower.lowering import MAX_SUBGRAPH_DEPTH

    lower_with_report(_nested_ir(MAX_SUBGRAPH_DEPTH - 1), LowerOptions())  # as deep as a file can be
    for depth in (MAX_SUBGRAPH_DEPTH, 5000):
        with pytest.raises(SeqlowerError, match=f"If node 'top': subgraphs nested more than {MAX_SUBGRAPH_DEPTH} levels deep"):
            lower_with_report(_nested_ir(depth), LowerOptions())


def test_mutated_model_files_are_lowered_right_or_refused_in_one_line():
    """A short run of tools/fuzz_files.py (the long one: ``python tools/fuzz_files.py
    5000``): every mutant is a correct lowering or a clean exit 2."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import fuzz_files

    assert fuzz_files.main(["150", "777"]) == 0
