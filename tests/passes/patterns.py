"""Sequence patterns and the contexts they are tested in (top level, Loop body, If
branch, model-local function), for every opset the issue names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from tests.helpers import BOOL, FLOAT, INT64, const, seq, t

OPSETS = (11, 13, 17, 18, 26)
IR_FOR_OPSET = {11: 6, 13: 7, 17: 8, 18: 8, 26: 13}
CONTEXTS = ("top", "loop", "if", "function")
LOOP_TRIPS = 2


@dataclass
class Pattern:
    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]  # every output declares its shape
    inits: list[onnx.TensorProto] = field(default_factory=list)
    min_opset: int = 11


def n(op: str, ins: list[str], outs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=f"{op}_{outs[0]}", **attrs)


# -- patterns --------------------------------------------------------------------------


def unbind() -> Pattern:
    """TorchScript's unbind: keepdims=0 without split, read, stacked back, counted."""
    return Pattern(
        [
            n("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
            n("SequenceAt", ["s", "minus1"], ["last"]),
            n("ConcatFromSequence", ["s"], ["stacked"], axis=-1, new_axis=1),
            n("SequenceLength", ["s"], ["count"]),
        ],
        [t("x", FLOAT, [3, 4])],
        [t("last", FLOAT, [4]), t("stacked", FLOAT, [4, 3]), t("count", INT64, [])],
        [const("minus1", -1, np.int64)],
    )


def split_keepdims() -> Pattern:
    """No split, keepdims=1, negative axis."""
    return Pattern(
        [
            n("SplitToSequence", ["x"], ["s"], axis=-1),
            n("SequenceAt", ["s", "one"], ["second"]),
            n("ConcatFromSequence", ["s"], ["back"], axis=-1),
        ],
        [t("x", FLOAT, [2, 3])],
        [t("second", FLOAT, [2, 1]), t("back", FLOAT, [2, 3])],
        [const("one", 1, np.int64)],
    )


def scalar_split_uneven() -> Pattern:
    """A scalar split leaving an uneven last chunk, then erase and concat."""
    return Pattern(
        [
            n("SplitToSequence", ["x", "two"], ["s"], axis=0),
            n("SequenceAt", ["s", "two"], ["tail"]),
            n("SequenceErase", ["s", "zero"], ["rest"]),
            n("ConcatFromSequence", ["rest"], ["joined"], axis=0),
            n("SequenceLength", ["s"], ["count"]),
        ],
        [t("x", FLOAT, [5, 2])],
        [t("tail", FLOAT, [1, 2]), t("joined", FLOAT, [3, 2]), t("count", INT64, [])],
        [const("two", 2, np.int64), const("zero", 0, np.int32)],
    )


def list_split_with_empty_chunk() -> Pattern:
    """A 1-D int32 split with a zero-size chunk."""
    return Pattern(
        [
            n("SplitToSequence", ["x", "sizes"], ["s"], axis=0, keepdims=0),
            n("SequenceAt", ["s", "one"], ["empty"]),
            n("SequenceErase", ["s", "one"], ["kept"]),
            n("ConcatFromSequence", ["kept"], ["joined"], axis=-2),
        ],
        [t("x", FLOAT, [5, 3])],
        [t("empty", FLOAT, [0, 3]), t("joined", FLOAT, [5, 3])],
        [const("sizes", [2, 0, 3], np.int32), const("one", 1, np.int64)],
    )


def construct_insert_erase() -> Pattern:
    """List literal, insert at a negative [1]-shaped int32 position, erase, read."""
    return Pattern(
        [
            n("SequenceConstruct", ["a", "b"], ["s"]),
            n("SequenceInsert", ["s", "c", "neg1"], ["s2"]),
            n("SequenceErase", ["s2", "zero"], ["s3"]),
            n("SequenceAt", ["s3", "one1"], ["picked"]),
            n("ConcatFromSequence", ["s3"], ["joined"], axis=0),
        ],
        [t("a", FLOAT, [2]), t("b", FLOAT, [3]), t("c", FLOAT, [1])],
        [t("picked", FLOAT, [3]), t("joined", FLOAT, [4])],
        [const("neg1", [-1], np.int32), const("zero", 0, np.int64), const("one1", [1], np.int64)],
    )


def constant_chain() -> Pattern:
    """SequenceEmpty -> Insert -> Insert -> Concat, all constant: one initializer."""
    return Pattern(
        [
            n("SequenceEmpty", [], ["e"], dtype=FLOAT),
            n("SequenceInsert", ["e", "k1"], ["s1"]),
            n("SequenceInsert", ["s1", "k2", "zero"], ["s2"]),
            n("ConcatFromSequence", ["s2"], ["folded"], axis=0),
            n("Add", ["folded", "x"], ["y"]),
        ],
        [t("x", FLOAT, [5])],
        [t("y", FLOAT, [5])],
        [const("k1", [1.0, 2.0], np.float32), const("k2", [3.0, 4.0, 5.0], np.float32), const("zero", 0, np.int64)],
    )


def sequence_map() -> Pattern:
    """Two sequence inputs, an extra tensor, an outer capture, two outputs, a dtype change."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["ea", "eb_bias"], ["sum"], name="body_add"),
            helper.make_node("Mul", ["sum", "scale"], ["o1"], name="body_scale"),
            helper.make_node("Cast", ["eb"], ["o2"], name="body_cast", to=INT64),
        ],
        "map_body",
        [t("ea", FLOAT, [1, 3]), t("eb", FLOAT, [1, 2]), t("eb_bias", FLOAT, [3])],
        [t("o1", FLOAT, [1, 3]), t("o2", INT64, [1, 2])],
    )
    return Pattern(
        [
            n("SplitToSequence", ["x"], ["sa"], axis=0),
            n("SplitToSequence", ["w"], ["sb"], axis=0),
            n("SequenceMap", ["sa", "sb", "bias"], ["m1", "m2"], body=body),
            n("ConcatFromSequence", ["m1"], ["y1"], axis=0),
            n("ConcatFromSequence", ["m2"], ["y2"], axis=1),
        ],
        [t("x", FLOAT, [4, 3]), t("w", FLOAT, [4, 2]), t("bias", FLOAT, [3])],
        [t("y1", FLOAT, [4, 3]), t("y2", INT64, [1, 8])],
        [const("scale", 2.0, np.float32)],
        min_opset=17,
    )


def if_with_sequences() -> Pattern:
    """An If whose branches both give two-element sequences."""
    then_g = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["ts"], name="then_split", axis=0)],
        "then", [], [seq("ts", FLOAT, [1, 3])],
    )
    else_g = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["xn"], name="else_neg"),
            helper.make_node("SplitToSequence", ["xn", "sizes"], ["es"], name="else_split", axis=0),
        ],
        "else", [], [seq("es", FLOAT, [1, 3])],
        initializer=[],
    )
    return Pattern(
        [
            n("If", ["flag"], ["s"], then_branch=then_g, else_branch=else_g),
            n("ConcatFromSequence", ["s"], ["y"], axis=1),
        ],
        [t("x", FLOAT, [2, 3]), t("flag", BOOL, [])],
        [t("y", FLOAT, [1, 6])],
        [const("sizes", [1, 1], np.int64)],
        min_opset=13,  # If-11 outputs are tensors only
    )


def reverse_sequence_constant() -> Pattern:
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    return Pattern(
        [n("ReverseSequence", ["rs_x", "rs_lens"], ["r"], batch_axis=1, time_axis=0), n("Add", ["r", "x"], ["y"])],
        [t("x", FLOAT, [4, 3])],
        [t("y", FLOAT, [4, 3])],
        [const("rs_x", data), const("rs_lens", [4, 0, 2], np.int64)],
    )


PATTERNS: dict[str, Callable[[], Pattern]] = {
    f.__name__: f
    for f in (
        unbind,
        split_keepdims,
        scalar_split_uneven,
        list_split_with_empty_chunk,
        construct_insert_erase,
        constant_chain,
        sequence_map,
        if_with_sequences,
        reverse_sequence_constant,
    )
}


# -- contexts --------------------------------------------------------------------------


def build(p: Pattern, context: str, opset: int) -> onnx.ModelProto:
    imports = [helper.make_opsetid("", opset)]
    ir_version = IR_FOR_OPSET[opset]
    if context == "top":
        g = helper.make_graph(p.nodes, "g", p.inputs, p.outputs, initializer=p.inits)
    elif context == "loop":
        g = _in_loop(p)
    elif context == "if":
        g = _in_if(p)
    elif context == "function":
        g = _in_function(p)
        imports.append(helper.make_opsetid("local", 1))
        f = helper.make_function(
            "local", "F", [i.name for i in p.inputs], [o.name for o in p.outputs],
            [*_as_constants(p.inits), *p.nodes], [helper.make_opsetid("", opset)],
        )
        return helper.make_model(g, opset_imports=imports, ir_version=ir_version, functions=[f])
    else:
        raise ValueError(context)
    return helper.make_model(g, opset_imports=imports, ir_version=ir_version)


def _in_loop(p: Pattern) -> onnx.GraphProto:
    body = helper.make_graph(
        [*p.nodes, helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "loop_body",
        [t("iter", INT64, []), t("cond_in", BOOL, [])],
        [t("cond_out", BOOL, []), *[_renamed_vi(o, f"{o.name}") for o in p.outputs]],
    )
    outs = [_stacked(o, LOOP_TRIPS) for o in p.outputs]
    loop = helper.make_node("Loop", ["trips", ""], [o.name for o in outs], name="loop", body=body)
    return helper.make_graph(
        [loop], "g", p.inputs, outs, initializer=[*p.inits, const("trips", LOOP_TRIPS, np.int64)]
    )


def _in_if(p: Pattern) -> onnx.GraphProto:
    then_g = helper.make_graph(p.nodes, "then", [], p.outputs)
    else_nodes, renames = _rename(p.nodes, "_e")
    else_g = helper.make_graph(
        else_nodes, "else", [], [_renamed_vi(o, renames.get(o.name, o.name)) for o in p.outputs]
    )
    outs = [_renamed_vi(o, f"{o.name}_out") for o in p.outputs]
    node = helper.make_node("If", ["ctx_flag"], [o.name for o in outs], name="ctx_if", then_branch=then_g, else_branch=else_g)
    return helper.make_graph([node], "g", [*p.inputs, t("ctx_flag", BOOL, [])], outs, initializer=p.inits)


def _in_function(p: Pattern) -> onnx.GraphProto:
    outs = [_renamed_vi(o, f"{o.name}_out") for o in p.outputs]
    call = helper.make_node("F", [i.name for i in p.inputs], [o.name for o in outs], name="call_f", domain="local")
    return helper.make_graph([call], "g", p.inputs, outs)


def _as_constants(inits: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    return [helper.make_node("Constant", [], [c.name], name=f"const_{c.name}", value=c) for c in inits]


def _renamed_vi(vi: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    out.name = name
    return out


def _stacked(vi: onnx.ValueInfoProto, n: int) -> onnx.ValueInfoProto:
    tt = vi.type.tensor_type
    dims = [n, *[d.dim_value for d in tt.shape.dim]]
    return helper.make_tensor_value_info(vi.name, tt.elem_type, dims)


def _rename(nodes: list[onnx.NodeProto], suffix: str) -> tuple[list[onnx.NodeProto], dict[str, str]]:
    """Copies of ``nodes`` where every name they define (and every nested graph
    defines) gets ``suffix``, so a second copy can live in the same model."""
    defined: set[str] = set()

    def collect(ns):
        for nd in ns:
            defined.update(o for o in nd.output if o)
            for a in nd.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    defined.update(i.name for i in g.input)
                    collect(g.node)

    collect(nodes)
    mapping = {d: d + suffix for d in defined}

    def fix(ns):
        for nd in ns:
            nd.name = nd.name + suffix if nd.name else nd.name
            nd.input[:] = [mapping.get(i, i) for i in nd.input]
            nd.output[:] = [mapping.get(o, o) for o in nd.output]
            for a in nd.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    g.name = g.name + suffix
                    for vi in [*g.input, *g.output]:
                        vi.name = mapping.get(vi.name, vi.name)
                    fix(g.node)

    copies = []
    for nd in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(nd)
        copies.append(c)
    fix(copies)
    return copies, mapping
