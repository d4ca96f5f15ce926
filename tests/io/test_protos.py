"""seqlower.io.protos: the walks and the byte-level checks several modules share."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from seqlower.io.protos import utf8_nodes
from tests.helpers import FLOAT, t


def _spoiled(node: onnx.NodeProto, good: bytes, bad: bytes) -> onnx.NodeProto:
    data = node.SerializeToString()
    assert data.count(good) == 1
    return onnx.NodeProto.FromString(data.replace(good, bad))  # proto2 keeps what it is given


def _loop(inner_name: str) -> onnx.NodeProto:
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"], name=inner_name)], "body",
                             [t("i", TensorProto.INT64, []), t("c", TensorProto.BOOL, [])],
                             [t("c_out", TensorProto.BOOL, [])])
    return helper.make_node("Loop", ["n", "cond"], [], body=body, name="loop")


def test_text_nodes_pass():
    nodes = [helper.make_node("Relu", ["a"], ["b"], name="r\u00e9lu"), _loop("inner"),
             helper.make_node("Transpose", ["b"], ["c"], perm=[1, 0], doc_string="\u2603")]
    assert utf8_nodes(nodes)
    assert utf8_nodes([])


def test_a_name_that_is_not_text_is_found():
    assert not utf8_nodes([helper.make_node("Relu", ["a"], ["b"]),
                           _spoiled(helper.make_node("Relu", ["x"], ["y"], name="ok"), b"\x02ok", b"\x02\xef\x28")])


def test_a_name_in_a_subgraph_is_found():
    assert not utf8_nodes([_spoiled(_loop("zz"), b"\x02zz", b"\x02z\xff")])


def test_an_attribute_name_cut_short_before_its_type_tag_is_found():
    # The attribute's type field follows its name: tag 0xA0 0x01. "z\xc2" then 0xA0 decodes
    # as text when the node's bytes are read whole; the name alone is not text.
    node = helper.make_node("Relu", ["a"], ["b"])
    attr = node.attribute.add()
    attr.name, attr.type = "zz", onnx.AttributeProto.INTS
    spoiled = _spoiled(node, b"\x0a\x02zz", b"\x0a\x02z\xc2")
    spoiled.SerializeToString().decode("utf-8")
    assert not utf8_nodes([spoiled])


def test_bytes_fields_are_not_text():
    # An attribute's s and a tensor's raw data are bytes: anything goes.
    value = helper.make_tensor("v", FLOAT, [1], b"\xff\xfe\x00\x01", raw=True)
    node = helper.make_node("Constant", [], ["c"], value=value)
    node.attribute.add(name="tag", type=onnx.AttributeProto.STRING, s=b"\xff\xfe")
    assert utf8_nodes([node])


def test_reads_and_names_is_outer_reads_and_own_names_in_one_walk():
    """On every node with subgraphs in the exported fixtures (Loops, Ifs, SequenceMaps,
    nested), and on a Loop whose body holds an If reading the Loop's outer names."""
    import glob
    import os

    from seqlower.io.protos import outer_reads, own_names, reads_and_names, subgraphs_of
    from tests.helpers import FLOAT, t

    then = onnx.helper.make_graph([onnx.helper.make_node("Add", ["a", "outer"], ["r"])], "then", [],
                                  [t("r", FLOAT, [2])])
    other = onnx.helper.make_graph([onnx.helper.make_node("Neg", ["a"], ["q"])], "else", [], [t("q", FLOAT, [2])])
    body = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["v"], ["a"]), onnx.helper.make_node("If", ["c"], ["o"], then_branch=then,
                                                                                else_branch=other)],
        "body", [t("i", onnx.TensorProto.INT64, []), t("c", onnx.TensorProto.BOOL, []), t("v", FLOAT, [2])],
        [t("c", onnx.TensorProto.BOOL, []), t("o", FLOAT, [2])])
    nodes = [onnx.helper.make_node("Loop", ["n", "cond", "v0"], ["vn"], body=body)]
    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "data", "**", "*.onnx"), recursive=True):
        nodes.extend(n for n in onnx.load(path, load_external_data=False).graph.node if subgraphs_of(n))
    assert len(nodes) > 20
    for n in nodes:
        reads, names = reads_and_names(n)
        assert reads == outer_reads(n)
        assert names == set(own_names(subgraphs_of(n))) - {""}
    assert reads_and_names(nodes[0]) == ({"n", "cond", "v0", "outer"}, {"i", "c", "v", "a", "o", "r", "q"})
