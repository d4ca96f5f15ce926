"""seqlower.io.weights: the main graph's weights held out of the parsed model and written back
from the file's bytes, through ``seqlower lower`` end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from seqlower.cli import main
from seqlower.errors import ModelError
from seqlower.io.check import check_weight
from seqlower.io.models import read_model_held, read_model_proto
from seqlower.io.weights import hold_weights, is_stub
from tests.helpers import FLOAT, model, seq, t


def _weight(name: str, rows: int = 16, seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal((rows, 16)).astype(np.float32), name)


def mlp_with_split(blocks: int = 4, *, boundary_sequence: bool = False) -> onnx.ModelProto:
    """MatMul blocks with big weights, a SplitToSequence -> ConcatFromSequence pair in the
    middle, small constants between the weights (kept parsed), a doc string on a weight."""
    nodes, inits, prev = [], [], "x"
    for b in range(blocks):
        w = _weight(f"w{b}", seed=b)
        if b == 1:
            w.doc_string = "a weight with a doc string"
        inits += [w, numpy_helper.from_array(np.array([b], np.int64), f"small{b}")]
        nodes.append(helper.make_node("MatMul", [prev, f"w{b}"], [f"h{b}"], name=f"mm{b}"))
        prev = f"h{b}"
        if b == blocks // 2:
            inits.append(numpy_helper.from_array(np.array([6, 10], np.int64), "halves"))
            nodes += [helper.make_node("SplitToSequence", [prev, "halves"], ["parts"], axis=1),
                      helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1)]
            prev = "joined"
    outputs = [t("y", FLOAT, ["batch", 16])]
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    if boundary_sequence:  # a sequence-typed graph output: the region way does not apply
        nodes.append(helper.make_node("SplitToSequence", ["y"], ["rows"], axis=0))
        outputs.append(seq("rows", FLOAT, [1, 16]))
    return model(nodes, [t("x", FLOAT, ["batch", 16])], outputs, initializer=inits)


def _held(m: onnx.ModelProto):
    held = hold_weights(m.SerializeToString(), lambda t: check_weight(t, "m"))
    assert held is not None
    return held


def test_weights_are_stubs_and_write_back_to_the_same_bytes():
    m = mlp_with_split()
    data = m.SerializeToString(deterministic=True)
    held = _held(m)
    stubs = [i for i in held.proto.graph.initializer if is_stub(i)]
    assert sorted(s.name for s in stubs) == ["w0", "w1", "w2", "w3"]
    # A stub has the weight's name, type and shape, and no data.
    assert all(s.data_type == TensorProto.FLOAT and list(s.dims) == [16, 16] and not s.raw_data for s in stubs)
    # Small constants stay parsed, with their values.
    assert numpy_helper.to_array(next(i for i in held.proto.graph.initializer if i.name == "halves")).tolist() == [6, 10]
    # The skeleton types the weights as graph inputs and holds no stub.
    assert {v.name for v in held.skeleton.graph.input} >= {"w0", "w1", "w2", "w3"}
    assert not any(is_stub(i) for i in held.skeleton.graph.initializer)
    assert b"".join(held.weights.serialized(held.proto)) == data
    held.weights.restore(held.proto)
    assert held.proto.SerializeToString(deterministic=True) == data


def test_small_models_are_not_held():
    small = model([helper.make_node("Add", ["x", "b"], ["y"])], [t("x", FLOAT, [4])], [t("y", FLOAT, [4])],
                  initializer=[numpy_helper.from_array(np.ones(4, np.float32), "b")])
    assert hold_weights(small.SerializeToString(), lambda t: None) is None


def test_a_lost_stub_is_an_internal_error_not_a_broken_file():
    held = _held(mlp_with_split())
    held.proto.graph.initializer[0].name = "renamed"
    with pytest.raises(AssertionError, match="held weight"):
        held.weights.serialized(held.proto)


def _lower(tmp_path, m: onnx.ModelProto, *extra: str) -> tuple[int, bytes]:
    src, dst = tmp_path / "m.onnx", tmp_path / "out.onnx"
    src.write_bytes(m.SerializeToString())
    code = main(["lower", str(src), "-o", str(dst), "--verify", "-q", *extra])
    return code, dst.read_bytes() if dst.exists() else b""


def test_region_way_keeps_the_weights_bytes_and_the_numbers(tmp_path):
    m = mlp_with_split()
    code, out = _lower(tmp_path, m)
    assert code == 0  # --verify: the executor found the same numbers
    lowered = onnx.load_from_string(out)
    assert not {"SplitToSequence", "ConcatFromSequence"} & {n.op_type for n in lowered.graph.node}
    # Every weight is there, byte for byte (doc string included), none of them a stub.
    by_name = {i.name: i for i in lowered.graph.initializer}
    for w in m.graph.initializer:
        if w.name.startswith("w"):
            assert by_name[w.name].SerializeToString() == w.SerializeToString()
    assert not any(is_stub(i) for i in lowered.graph.initializer)
    # Lowering the output again changes nothing.
    code, again = _lower(tmp_path, lowered)
    assert code == 0 and again == out


def test_whole_model_way_restores_the_weights(tmp_path):
    m = mlp_with_split(boundary_sequence=True)
    code, out = _lower(tmp_path, m)
    assert code == 0
    lowered = onnx.load_from_string(out)
    by_name = {i.name: i for i in lowered.graph.initializer}
    for w in m.graph.initializer:
        if w.name.startswith("w"):
            np.testing.assert_array_equal(numpy_helper.to_array(by_name[w.name]), numpy_helper.to_array(w))
    assert not any(is_stub(i) for i in lowered.graph.initializer)


def test_held_model_reads_as_the_whole_one(tmp_path):
    m = mlp_with_split()
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    types_held: dict = {}
    types_whole: dict = {}
    proto, weights = read_model_held(path, types=types_held)
    whole = read_model_proto(path, load_external_data=False, types=types_whole)
    assert weights is not None
    assert types_held.keys() == types_whole.keys()
    weights.restore(proto)
    assert proto.SerializeToString(deterministic=True) == whole.SerializeToString(deterministic=True)


def _with(m: onnx.ModelProto, change) -> onnx.ModelProto:
    change(m)
    return m


@pytest.mark.parametrize("change, says", [
    (lambda m: setattr(m.graph.initializer[0], "raw_data", b"\0" * 1030), "tensor 'w0' holds 1030 bytes of data"),
    (lambda m: m.graph.initializer[2].dims.__setitem__(0, 15), "tensor 'w1' holds 1024 bytes of data; its shape [15, 16]"),
    (lambda m: setattr(m.graph.initializer[2], "data_type", 99), "element type 99"),
])
def test_a_bad_weight_is_named_one_line_exit_2(tmp_path, capsys, change, says):
    code, out = _lower(tmp_path, _with(mlp_with_split(), change))
    assert code == 2 and out == b""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_text_that_is_not_utf8_is_found_among_held_weights(tmp_path, capsys):
    # A node's name (field 3), a held weight's name (field 8).
    for old, new in ((b"\x1a\x03mm2", b"\x1a\x03m\xef\x28"), (b"\x42\x02w3", b"\x42\x02\xef\x28")):
        data = mlp_with_split().SerializeToString()
        assert data.count(old) == 1
        src = tmp_path / "m.onnx"
        src.write_bytes(data.replace(old, new))
        code = main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "-q"])
        assert code == 2 and "is not UTF-8 text" in capsys.readouterr().err
        with pytest.raises(ModelError, match="not UTF-8"):
            read_model_held(src)


def test_to_stdout_and_without_sequences(tmp_path, capfdbinary):
    m = mlp_with_split()
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString())
    assert main(["lower", str(src), "-o", "-", "-q"]) == 0
    piped = capfdbinary.readouterr().out
    assert main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "-q"]) == 0
    assert piped == (tmp_path / "o.onnx").read_bytes()
    # A model without sequences, held, for targets whose checks read initializers: written as it was.
    plain = model([helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Reshape", ["h", "s"], ["y"])],
                  [t("x", FLOAT, [4, 16])], [t("y", FLOAT, [8, 8])],
                  initializer=[_weight("w0"), numpy_helper.from_array(np.array([8, 8], np.int64), "s")])
    src.write_bytes(plain.SerializeToString(deterministic=True))
    for target in ("tvm", "openvino", "onnxruntime"):
        assert main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "-q", "--target", target]) == 0
        assert (tmp_path / "o.onnx").read_bytes() == src.read_bytes()


def test_node_bytes_tell_text_and_attributes():
    """Held.plain_nodes and Held.attributed, read off the nodes' bytes, agree with the
    nodes: a node with an attribute, a Constant, a node whose name has a '*' (marked, a
    harmless false alarm), a long name."""
    m = mlp_with_split()
    g = m.graph
    g.node[0].name = "x" * 300
    g.node.insert(1, helper.make_node("Constant", [], ["c"], value_float=1.0, name="k"))
    g.node.insert(2, helper.make_node("Add", ["c", "c"], ["c2"], name="a*b"))
    g.node.insert(3, helper.make_node("Transpose", ["c2"], ["c3"], perm=[0], name="tr"))
    held = _held(m)
    by_name = {n.name: i for i, n in enumerate(held.proto.graph.node)}
    marked = {n for n, i in by_name.items() if i in set(held.attributed)}
    assert {"k", "a*b", "tr"} <= marked
    assert not {"mm1", "mm3"} & marked
    # Every node is text, read as one strict parse of their bytes (one block in the file):
    # all are plain, the long name (a two-byte length) and the attributes' too.
    assert held.plain_nodes == set(range(len(g.node)))


def test_an_attribute_name_cut_short_is_not_read_as_plain(tmp_path, capsys):
    """An attribute's name that ends in half a character, followed by its type field's tag
    (0xA0 0x01): the node's bytes decode as UTF-8 (0xC2 0xA0 is a character), its name
    does not. Such a node is checked field by field (onnx's checker refuses it first)."""
    m = mlp_with_split()
    node = helper.make_node("Relu", ["h0"], ["r"], name="attr")
    attr = node.attribute.add()
    attr.name, attr.type = "zz", onnx.AttributeProto.INTS  # no values: the type follows the name
    m.graph.node.insert(1, node)
    data = m.SerializeToString().replace(b"\x0a\x02zz", b"\x0a\x02z\xc2")
    str(data[data.index(b"\x0a\x02z\xc2"):][:6], "utf-8")  # the bytes alone pass as text
    held = hold_weights(data, lambda t: None)
    assert 1 in held.attributed and 1 not in held.plain_nodes
    src = tmp_path / "m.onnx"
    src.write_bytes(data)
    assert main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "-q"]) == 2
    assert "utf-8" in capsys.readouterr().err.lower()


def test_a_model_that_names_the_placeholder_is_read_whole(tmp_path):
    m = mlp_with_split()
    m.doc_string = "seqlower.placeholder"
    assert hold_weights(m.SerializeToString(), lambda t: None) is None
    code, out = _lower(tmp_path, m)
    assert code == 0 and not any(is_stub(i) for i in onnx.load_from_string(out).graph.initializer)


def test_the_region_reads_held_integers_as_constants_and_held_floats_as_inputs(tmp_path):
    """A split of 200 parts (1,600 bytes of int64: held) stays a constant in the region, so
    the lowering stays static; a float weight the region reads is a typed input, never
    parsed into it."""
    from seqlower.fastpath.submodel import cut

    split = numpy_helper.from_array(np.ones(200, np.int64), "split")
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((200, 16)).astype(np.float32), "w")
    m = model([helper.make_node("SplitToSequence", ["w", "split"], ["rows"], axis=0),
               helper.make_node("SequenceAt", ["rows", "at"], ["r"]),
               helper.make_node("Add", ["x", "r"], ["y"])],
              [t("x", FLOAT, [1, 16])], [t("y", FLOAT, [1, 16])],
              initializer=[split, w, numpy_helper.from_array(np.array(-3, np.int64), "at")])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    proto, weights = read_model_held(path)
    assert weights is not None and set(weights.spans) == {"split", "w"}
    region = cut(proto, inferred=None, weights=weights)
    sub = region.model.graph
    assert [numpy_helper.to_array(i).tolist() for i in sub.initializer if i.name == "split"] == [[1] * 200]
    assert "w" not in {i.name for i in sub.initializer}
    assert [list(d.dim_value for d in v.type.tensor_type.shape.dim) for v in sub.input if v.name == "w"] == [[200, 16]]
    code, out = _lower(tmp_path, m)
    assert code == 0
    assert {n.op_type for n in onnx.load_from_string(out).graph.node} <= {"Add", "Slice", "Gather", "Identity"}


def test_a_mapped_file_lowers_to_the_same_bytes(tmp_path, monkeypatch, capsys):
    """Big files are mapped (seqlower.io.models._MAP_BYTES): here every file is."""
    import mmap

    import seqlower.io.models

    for m in (mlp_with_split(), mlp_with_split(boundary_sequence=True)):
        outs = []
        for size in (1 << 24, 0):
            monkeypatch.setattr(seqlower.io.models, "_MAP_BYTES", size)
            code, out = _lower(tmp_path, m)
            assert code == 0
            outs.append(out)
        assert outs[0] == outs[1]
    _, weights = read_model_held(tmp_path / "m.onnx")
    assert isinstance(weights.data, mmap.mmap)
    # Not held (it names the placeholder): parsed whole from the mapping.
    m = mlp_with_split()
    m.doc_string = "seqlower.placeholder"
    assert _lower(tmp_path, m)[0] == 0
    # An empty file is not mapped, and is refused in one line.
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert main(["lower", str(tmp_path / "empty.onnx"), "-o", str(tmp_path / "o.onnx"), "-q"]) == 2
    assert "empty file" in capsys.readouterr().err


def test_plain_tensor_headers_read_as_the_message_does():
    from seqlower.io.weights import _plain_tensor

    cases = [np.zeros((0, 3), np.float32), np.ones((), np.float64), np.arange(6, dtype=np.int8).reshape(2, 3),
             np.ones((2, 2), np.float16), np.array([True, False]), np.arange(300, dtype=np.int64)]
    for k, a in enumerate(cases):
        tensor = numpy_helper.from_array(a, f"t{k}é")
        data = tensor.SerializeToString()
        assert _plain_tensor(data, 0, len(data)) == (tensor.name, tensor.data_type, list(tensor.dims))
    bf16 = helper.make_tensor("b", TensorProto.BFLOAT16, [2], np.array([1, 2], np.uint16).tobytes(), raw=True)
    data = bf16.SerializeToString()
    assert _plain_tensor(data, 0, len(data)) == ("b", TensorProto.BFLOAT16, [2])
    # Anything else is left to the message reader: typed fields, a doc string, a wrong
    # length, a name that is not text, a type whose size is not fixed.
    odd = [helper.make_tensor("f", TensorProto.FLOAT, [2], [1.0, 2.0]), numpy_helper.from_array(np.ones(2, np.float32), "d")]
    odd[1].doc_string = "doc"
    short = numpy_helper.from_array(np.ones(2, np.float32), "s")
    short.raw_data = b"\0" * 7
    strings = helper.make_tensor("s", TensorProto.STRING, [1], [b"x"])
    for tensor in (*odd, short, strings):
        data = tensor.SerializeToString()
        assert _plain_tensor(data, 0, len(data)) is None
    data = numpy_helper.from_array(np.ones(2, np.float32), "ok").SerializeToString().replace(b"ok", b"\xef\x28")
    assert _plain_tensor(data, 0, len(data)) is None


def _with_external_constant(folder) -> str:
    """``mlp_with_split`` (held weights) with a Constant node whose value is external data:
    added to the output of the last block."""
    m = mlp_with_split()
    value = numpy_helper.from_array(np.arange(16, dtype=np.float32), "c")
    (folder / "c.bin").write_bytes(value.raw_data)
    value.ClearField("raw_data")
    value.data_location = TensorProto.EXTERNAL
    value.external_data.add(key="location", value="c.bin")
    relu = m.graph.node[-1]
    relu.output[0] = "r"
    m.graph.node.extend([helper.make_node("Constant", [], ["c"], value=value),
                         helper.make_node("Add", ["r", "c"], ["y"])])
    path = folder / "m.onnx"
    onnx.save(m, path)
    return str(path)


def test_a_held_model_reads_a_constants_external_data(tmp_path, capsys):
    """The nodes' bytes say which of them can hold external data (data_location = EXTERNAL):
    the reader looks into those, and finds a Constant's external file there or its absence."""
    path = _with_external_constant(tmp_path)
    proto, weights = read_model_held(path)
    assert weights is not None  # the weights were held
    assert main(["lower", path, "-o", str(tmp_path / "low.onnx"), "--verify", "-q"]) == 0
    (tmp_path / "c.bin").unlink()
    with pytest.raises(ModelError, match="external data file 'c.bin' is missing"):
        read_model_held(path)
    assert main(["lower", path, "-o", str(tmp_path / "low2.onnx"), "-q"]) == 2
    assert "'c.bin' is missing" in capsys.readouterr().err
    assert not (tmp_path / "low2.onnx").exists()


def test_constants_externalized_with_the_weights_are_read_in(tmp_path):
    """onnx.save's convert_attribute=True: the weights and a Constant's value external in one
    file. The Constant comes back inline; the weights go to the output's own data file."""
    m = onnx.load(_with_external_constant(tmp_path))
    m.graph.node[-2].attribute[0].t.CopyFrom(numpy_helper.from_array(np.arange(16, dtype=np.float32), "c"))
    src = tmp_path / "all_external"
    src.mkdir()
    onnx.save_model(m, src / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="m.bin",
                    size_threshold=0, convert_attribute=True)
    assert any(a.t.data_location == TensorProto.EXTERNAL for n in onnx.load(src / "m.onnx", load_external_data=False)
               .graph.node for a in n.attribute if a.name == "value")
    out = tmp_path / "elsewhere"
    out.mkdir()
    assert main(["lower", str(src / "m.onnx"), "-o", str(out / "low.onnx"), "--verify", "-q"]) == 0
    low = onnx.load(out / "low.onnx", load_external_data=False)
    constant = next(n for n in low.graph.node if n.op_type == "Constant" and n.output[0] == "c")
    assert constant.attribute[0].t.data_location == TensorProto.DEFAULT
    assert numpy_helper.to_array(constant.attribute[0].t).tolist() == list(range(16))
