"""The Flat lowering: sequences whose length, positions or shapes are known only at run
time, and sequence-typed model inputs/outputs (the ABI). Every program is lowered at
every opset it exists in, must come out tensor-only, and is run against the original on
both backends over inputs that include empty sequences, zero-size dims and negative
positions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower.errors import SeqlowerError
from seqlower.executor import Executor, read_abi
from seqlower.executor.verify import verify
from tests.helpers import BOOL, FLOAT, INT32, INT64, STRING, body, const, model, seq, t, lower_checked, ops_of
from tests.passes.patterns import IR_FOR_OPSET, OPSETS

F16 = TensorProto.FLOAT16


def n(op: str, ins: list[str], outs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=f"{op}_{outs[0]}", **attrs)


@dataclass
class Program:
    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]
    feeds: list[dict]
    inits: list[onnx.TensorProto] = field(default_factory=list)
    min_opset: int = 11
    unranked: tuple[str, ...] = ()  # model inputs/outputs declared with no shape at all


def _x(*shape, dtype=np.float32):
    return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) + 1).astype(dtype)


def split_dynamic_dim() -> Program:
    """unbind / chunks over a dynamic dim, read at a run-time (negative) position,
    counted, stacked and concatenated back along an inner axis."""
    return Program(
        [
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            n("SequenceAt", ["rows", "p"], ["row"]),
            n("SequenceLength", ["rows"], ["count"]),
            n("ConcatFromSequence", ["rows"], ["stacked"], axis=1, new_axis=1),
            n("SplitToSequence", ["x"], ["cols"], axis=1),
            n("ConcatFromSequence", ["cols"], ["flat_cols"], axis=0),
        ],
        [t("x", FLOAT, ["N", "M"]), t("p", INT64, [])],
        [t("row", FLOAT, ["M"]), t("count", INT64, []), t("stacked", FLOAT, ["M", "N"]), t("flat_cols", FLOAT, [None, 1])],
        [{"x": _x(4, 3), "p": np.array(-1)}, {"x": _x(1, 5), "p": np.array(0)}, {"x": _x(3, 0), "p": np.array(2)}],
    )


def split_runtime_scalar() -> Program:
    """A run-time scalar split along axis 1: uneven last chunk, concat along 1 and 0."""
    return Program(
        [
            n("SplitToSequence", ["x", "k"], ["s"], axis=1),
            n("SequenceAt", ["s", "p"], ["chunk"]),
            n("ConcatFromSequence", ["s"], ["back"], axis=1),
            n("SequenceLength", ["s"], ["count"]),
        ],
        [t("x", FLOAT, [2, "M"]), t("k", INT32, []), t("p", INT32, [])],
        [t("chunk", FLOAT, [2, None]), t("back", FLOAT, [2, "M"]), t("count", INT64, [])],
        [
            {"x": _x(2, 7), "k": np.array(3, np.int32), "p": np.array(-1, np.int32)},
            {"x": _x(2, 2), "k": np.array(5, np.int32), "p": np.array(0, np.int32)},
            {"x": _x(2, 6), "k": np.array(2, np.int32), "p": np.array(1, np.int32)},
        ],
    )


def split_runtime_sizes() -> Program:
    """A run-time 1-D split (zero entries included) along an inner axis; the pieces are
    inserted back at run-time positions and the sequence is a model output."""
    return Program(
        [
            n("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
            n("SequenceErase", ["s", "p"], ["s1"]),
            n("SequenceInsert", ["s1", "x", "q"], ["s2"]),
            n("SequenceAt", ["s2", "q"], ["same"]),
        ],
        [t("x", FLOAT, [2, "M", 2]), t("sizes", INT64, ["K"]), t("p", INT64, []), t("q", INT64, [])],
        [seq("s2", FLOAT, [2, None, 2]), t("same", FLOAT, [2, "M", 2])],
        [
            {"x": _x(2, 5, 2), "sizes": np.array([2, 0, 3]), "p": np.array(1), "q": np.array(-2)},
            {"x": _x(2, 3, 2), "sizes": np.array([3]), "p": np.array(-1), "q": np.array(0)},
        ],
    )


def construct_insert_erase_mixed_shapes() -> Program:
    """Elements of different shapes: construct, insert at the front and at run-time
    positions, erase the default (last), concat along axis 0."""
    return Program(
        [
            n("SequenceConstruct", ["a", "b"], ["s"]),
            n("SequenceInsert", ["s", "c", "zero"], ["s1"]),
            n("SequenceInsert", ["s1", "a", "p"], ["s2"]),
            n("SequenceErase", ["s2"], ["s3"]),
            n("ConcatFromSequence", ["s3"], ["y"], axis=0),
            n("SequenceAt", ["s2", "p"], ["at"]),
        ],
        [t("a", FLOAT, ["A", 2]), t("b", FLOAT, ["B", 2]), t("c", FLOAT, ["C", 2]), t("p", INT64, [])],
        [t("y", FLOAT, [None, 2]), t("at", FLOAT, [None, 2])],
        [
            {"a": _x(1, 2), "b": _x(3, 2), "c": _x(0, 2), "p": np.array(-1)},
            {"a": _x(2, 2), "b": _x(0, 2), "c": _x(4, 2), "p": np.array(1)},
        ],
        [const("zero", 0, np.int64)],
    )


def sequence_io() -> Program:
    """Sequences in and out through the ABI: read, insert, erase at run-time positions."""
    return Program(
        [
            n("SequenceInsert", ["xs", "t", "p"], ["ys"]),
            n("SequenceErase", ["ys", "zero"], ["zs"]),
            n("SequenceLength", ["zs"], ["count"]),
        ],
        [seq("xs", FLOAT, ["H", 3]), t("t", FLOAT, ["T", 3]), t("p", INT64, [])],
        [seq("zs", FLOAT, [None, 3]), t("count", INT64, [])],
        [
            {"xs": [_x(2, 3), _x(0, 3), _x(1, 3)], "t": _x(4, 3), "p": np.array(-3)},
            {"xs": [_x(1, 3)], "t": _x(0, 3), "p": np.array(1)},
        ],
        [const("zero", 0, np.int64)],
    )


def strings() -> Program:
    """String elements: split along a dynamic dim, inserted, read back."""
    return Program(
        [
            n("SplitToSequence", ["x"], ["s"], axis=0),
            n("SequenceInsert", ["s", "x", "p"], ["s1"]),
            n("SequenceAt", ["s1", "p"], ["y"]),
            n("SequenceAt", ["s1", "minus1"], ["last"]),
        ],
        [t("x", STRING, ["N"]), t("p", INT64, [])],
        [t("y", STRING, ["N"]), t("last", STRING, [1])],
        [{"x": np.array(["a", "bc", ""], dtype=object), "p": np.array(1)}, {"x": np.array(["z"], dtype=object), "p": np.array(0)}],
        [const("minus1", -1, np.int64)],
    )


def float16_stack() -> Program:
    """float16 elements, new_axis concat at a negative axis, mixed with a run-time split."""
    return Program(
        [
            n("SplitToSequence", ["x", "k"], ["s"], axis=-1),
            n("ConcatFromSequence", ["s"], ["y"], axis=-1),
            n("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
            n("ConcatFromSequence", ["cols"], ["z"], axis=0, new_axis=1),
        ],
        [t("x", F16, ["N", "M"]), t("k", INT64, [])],
        [t("y", F16, ["N", "M"]), t("z", F16, ["M", "N"])],
        [{"x": _x(3, 4, dtype=np.float16), "k": np.array(3)}, {"x": _x(0, 2, dtype=np.float16), "k": np.array(1)}],
    )


def mixed_ranks() -> Program:
    """Elements of ranks 0 and 1 (the ``ranks`` tensor), in and out through the ABI."""
    return Program(
        [
            n("SequenceConstruct", ["s0", "v"], ["s"]),
            n("SequenceInsert", ["s", "s0", "p"], ["s1"]),
            n("SequenceAt", ["s1", "p"], ["back"]),
        ],
        [t("s0", FLOAT, []), t("v", FLOAT, ["V"]), t("p", INT64, [])],
        [seq("s1", FLOAT), t("back", FLOAT, [])],
        [{"s0": np.array(7.0, np.float32), "v": _x(3), "p": np.array(1)}, {"s0": np.array(1.0, np.float32), "v": _x(0), "p": np.array(-1)}],
    )


def loop_appends() -> Program:
    """A scripted loop: append each step's slice when a condition holds (conditional
    append), then stack; the count of steps is a model input."""
    b = body(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("Gather", ["x", "i"], ["row"], axis=0),
            n("ReduceSum", ["row"], ["total"], keepdims=0),
            n("Greater", ["total", "limit"], ["big"]),
            helper.make_node(
                "If", ["big"], ["acc_out"], name="maybe_append",
                then_branch=body([n("SequenceInsert", ["acc_in", "row"], ["appended"])], [], [seq("appended", FLOAT, ["M"])]),
                else_branch=body([n("Identity", ["acc_in"], ["same"])], [], [seq("same", FLOAT, ["M"])]),
            ),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("acc_in", FLOAT, ["M"])],
        [t("cond_out", BOOL, []), seq("acc_out", FLOAT, ["M"])],
    )
    return Program(
        [
            n("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            n("Shape", ["x"], ["xs"]),
            n("Gather", ["xs", "zero"], ["trips"], axis=0),
            helper.make_node("Loop", ["trips", "", "empty"], ["kept"], name="collect", body=b),
            n("SequenceLength", ["kept"], ["count"]),
            n("SequenceInsert", ["kept", "pad"], ["kept2"]),
            n("ConcatFromSequence", ["kept2"], ["y"], axis=0, new_axis=1),
        ],
        [t("x", FLOAT, ["N", "M"]), t("limit", FLOAT, []), t("pad", FLOAT, ["M"])],
        [t("y", FLOAT, [None, "M"]), t("count", INT64, [])],
        [
            {"x": _x(5, 2), "limit": np.array(8.0, np.float32), "pad": _x(2)},
            {"x": _x(0, 2), "limit": np.array(0.0, np.float32), "pad": _x(2)},
        ],
        [const("zero", 0, np.int64)],
        min_opset=14,  # Identity of a sequence (the else branch) is opset 14
    )


def loop_append_once() -> Program:
    """TorchScript's `xs.append(t)` once per step, twice: rows scaled by the step (one
    shape every step: a scan output) into a non-empty initial list, and growing prefixes
    (a shape per step: carried Concat) into an empty one; the loop may stop early."""
    b = body(
        [
            n("Gather", ["x", "i"], ["row"], axis=0),
            n("Cast", ["i"], ["i_f"], to=FLOAT),
            n("Mul", ["row", "i_f"], ["scaled"]),
            n("SequenceInsert", ["rows_in", "scaled"], ["rows_out"]),
            n("Add", ["i", "one"], ["i1"]),
            n("Reshape", ["i1", "one1"], ["stop1"]),
            n("Slice", ["flat", "zero1", "stop1"], ["prefix"]),
            n("SequenceInsert", ["prefixes_in", "prefix"], ["prefixes_out"]),
            n("Less", ["i1", "limit"], ["cond_out"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("rows_in", FLOAT, ["M"]), seq("prefixes_in", FLOAT, [None])],
        [t("cond_out", BOOL, []), seq("rows_out", FLOAT, ["M"]), seq("prefixes_out", FLOAT, [None])],
    )
    return Program(
        [
            n("SequenceConstruct", ["first"], ["init"]),
            n("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            n("Reshape", ["x", "minus1"], ["flat"]),
            n("Shape", ["x"], ["xs"]),
            n("Gather", ["xs", "zero"], ["trips"], axis=0),
            helper.make_node("Loop", ["trips", "", "init", "empty"], ["rows", "prefixes"], name="collect", body=b),
            n("ConcatFromSequence", ["rows"], ["stacked"], axis=0, new_axis=1),
            n("ConcatFromSequence", ["prefixes"], ["joined"], axis=0),
            n("SequenceLength", ["prefixes"], ["count"]),
        ],
        [t("x", FLOAT, ["N", "M"]), t("first", FLOAT, ["M"]), t("limit", INT64, [])],
        [t("stacked", FLOAT, [None, "M"]), t("joined", FLOAT, [None]), t("count", INT64, [])],
        [
            {"x": _x(4, 3), "first": _x(3), "limit": np.array(10)},
            {"x": _x(5, 2), "first": _x(2), "limit": np.array(3)},  # stops after 3 steps
            {"x": _x(0, 2), "first": _x(2), "limit": np.array(10)},  # no step: the initial list
            {"x": _x(2, 0), "first": _x(0), "limit": np.array(10)},
        ],
        [const("zero", 0, np.int64), const("one", 1, np.int64), const("one1", [1], np.int64),
         const("zero1", [0], np.int64), const("minus1", [-1], np.int64)],
        min_opset=13,
    )


def loop_append_growing_state() -> Program:
    """The appended tensor is a carried tensor that grows each step, though the body
    declares it with the fixed shape [M]: no scan output (its shapes would differ)."""
    b = body(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("Concat", ["h_in", "h_in"], ["h_out"], axis=0),
            n("SequenceInsert", ["acc_in", "h_in"], ["acc_out"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), t("h_in", FLOAT, ["M"]), seq("acc_in", FLOAT, ["M"])],
        [t("cond_out", BOOL, []), t("h_out", FLOAT, [None]), seq("acc_out", FLOAT, [None])],
    )
    return Program(
        [
            n("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            helper.make_node("Loop", ["trips", "", "h", "empty"], ["h_last", "acc"], name="grow", body=b),
            n("ConcatFromSequence", ["acc"], ["joined"], axis=0),
        ],
        [t("trips", INT64, []), t("h", FLOAT, ["M"])],
        [t("joined", FLOAT, [None]), t("h_last", FLOAT, [None])],
        [{"trips": np.array(3), "h": _x(2)}, {"trips": np.array(1), "h": _x(3)}],
        min_opset=13,
    )


def loop_reads_outer_sequence() -> Program:
    """A loop body reads an outer sequence at the iteration and at a run-time position,
    and carries a sequence it erases from."""
    b = body(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("SequenceAt", ["outer", "i"], ["e"]),
            n("SequenceErase", ["carried_in", "zero"], ["carried_out"]),
            n("Mul", ["e", "two"], ["scan"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("carried_in", FLOAT, ["M"])],
        [t("cond_out", BOOL, []), seq("carried_out", FLOAT, ["M"]), t("scan", FLOAT, ["M"])],
        [const("two", 2.0, np.float32)],
    )
    return Program(
        [
            n("SplitToSequence", ["x"], ["outer"], axis=0, keepdims=0),
            n("SequenceLength", ["outer"], ["len"]),
            n("Sub", ["len", "one"], ["trips"]),
            helper.make_node("Loop", ["trips", "", "outer"], ["rest", "doubled"], name="walk", body=b),
            n("SequenceAt", ["rest", "zero"], ["last"]),
        ],
        [t("x", FLOAT, ["N", "M"])],
        [t("doubled", FLOAT, [None, "M"]), t("last", FLOAT, ["M"])],
        [{"x": _x(4, 3)}, {"x": _x(1, 0)}],
        [const("zero", 0, np.int64), const("one", 1, np.int64)],
        min_opset=13,
    )


def if_lengths_differ() -> Program:
    """If whose branches return sequences of different lengths."""
    return Program(
        [
            helper.make_node(
                "If", ["c"], ["s"], name="pick",
                then_branch=body([n("SplitToSequence", ["x"], ["a"], axis=0)], [], [seq("a", FLOAT, [1, "M"])]),
                else_branch=body([n("SequenceConstruct", ["x", "x"], ["b"])], [], [seq("b", FLOAT, [None, "M"])]),
            ),
            n("SequenceLength", ["s"], ["count"]),
            n("ConcatFromSequence", ["s"], ["y"], axis=0),
        ],
        [t("c", BOOL, []), t("x", FLOAT, ["N", "M"])],
        [t("count", INT64, []), t("y", FLOAT, [None, "M"])],
        [{"c": np.array(True), "x": _x(3, 2)}, {"c": np.array(False), "x": _x(3, 2)}, {"c": np.array(True), "x": _x(0, 2)}],
        min_opset=13,
    )


def sequence_map_loop() -> Program:
    """SequenceMap over a dynamic split: one output of static shape (a scan output), one
    whose shape depends on the element and changes dtype (carried), and a captured tensor."""
    b = body(
        [
            n("Add", ["e", "bias"], ["shifted"]),
            n("ReduceSum", ["e", "ax1"], ["total"], keepdims=1),
            n("Cast", ["shifted"], ["as_int"], to=INT64),
        ],
        [t("e", FLOAT, [None, 2]), t("bias", FLOAT, [2])],
        [t("total", FLOAT, [None, 1]), t("as_int", INT64, [None, 2])],
        [const("ax1", [1], np.int64)],
    )
    b2 = body([n("Shape", ["e"], ["dims"])], [t("e", FLOAT, [None, 2])], [t("dims", INT64, [2])])
    return Program(
        [
            n("SplitToSequence", ["x", "sizes"], ["s"], axis=0),
            helper.make_node("SequenceMap", ["s", "bias"], ["totals", "ints"], name="map", body=b),
            helper.make_node("SequenceMap", ["s"], ["shapes"], name="shapes", body=b2),
            n("ConcatFromSequence", ["totals"], ["y"], axis=0),
            n("ConcatFromSequence", ["shapes"], ["dims"], axis=0, new_axis=1),
        ],
        [t("x", FLOAT, ["N", 2]), t("sizes", INT64, ["K"]), t("bias", FLOAT, [2])],
        [t("y", FLOAT, [None, 1]), seq("ints", INT64, [None, 2]), t("dims", INT64, [None, 2])],
        [
            {"x": _x(5, 2), "sizes": np.array([1, 0, 4]), "bias": _x(2)},
            {"x": _x(2, 2), "sizes": np.array([2]), "bias": _x(2)},
        ],
        min_opset=17,
    )


def unknown_rank_split_concat() -> Program:
    """A model input of unknown rank (fed at ranks 1, 2 and 3, zero-size dims included)
    split along its last axis and along axis 0 with keepdims=0, then read, counted,
    stacked at the first and the last axis and concatenated back along the last one."""
    return Program(
        [
            n("SplitToSequence", ["x"], ["cols"], axis=-1),
            n("SequenceErase", ["cols", "zero"], ["rest"]),
            n("ConcatFromSequence", ["rest"], ["back"], axis=-1),
            n("ConcatFromSequence", ["cols"], ["stacked"], axis=0, new_axis=1),
            n("ConcatFromSequence", ["cols"], ["stacked_last"], axis=-1, new_axis=1),
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            n("SequenceAt", ["rows", "p"], ["row"]),
            n("SequenceLength", ["rows"], ["count"]),
        ],
        [t("x", FLOAT), t("p", INT64, [])],
        [t("back", FLOAT), t("stacked", FLOAT), t("stacked_last", FLOAT), t("row", FLOAT), t("count", INT64, [])],
        [
            {"x": _x(3), "p": np.array(-1)},
            {"x": _x(2, 3), "p": np.array(0)},
            {"x": _x(2, 1, 4), "p": np.array(1)},
            {"x": _x(1, 0, 2), "p": np.array(-1)},
        ],
        [const("zero", 0, np.int64)],
        unranked=("x", "back", "stacked", "stacked_last", "row"),
    )


def unknown_rank_mixed() -> Program:
    """Elements of an unknown rank and of rank 1 in one list, through the ABI, read at a
    run-time position; a map whose output's rank differs per element."""
    add_one = body([n("Add", ["e", "one"], ["y"])], [t("e", FLOAT)], [t("y", FLOAT)], [const("one", 1.0, np.float32)])
    return Program(
        [
            n("SequenceConstruct", ["x", "v"], ["s"]),
            n("SequenceInsert", ["s", "x", "p"], ["s1"]),
            n("SequenceAt", ["s1", "p"], ["at"]),
            helper.make_node("SequenceMap", ["s1"], ["mapped"], name="add_one", body=add_one),
            n("SequenceAt", ["mapped", "q"], ["mapped_at"]),
        ],
        [t("x", FLOAT), t("v", FLOAT, ["V"]), t("p", INT64, []), t("q", INT64, [])],
        [seq("s1", FLOAT), t("at", FLOAT), seq("mapped", FLOAT), t("mapped_at", FLOAT)],
        [
            {"x": _x(2, 3), "v": _x(3), "p": np.array(1), "q": np.array(-1)},
            {"x": np.array(5.0, np.float32), "v": _x(0), "p": np.array(-1), "q": np.array(0)},
            {"x": _x(1, 0, 2), "v": _x(2), "p": np.array(0), "q": np.array(2)},
        ],
        min_opset=17,  # SequenceMap
        unranked=("x", "at", "mapped_at"),
    )


def unknown_rank_loop() -> Program:
    """A Loop that carries a list and inserts a tensor of unknown rank at the front in
    every step; the list is then concatenated along its last axis."""
    b = body(
        [n("Identity", ["cond_in"], ["cond_out"]), n("SequenceInsert", ["acc_in", "x", "zero"], ["acc_out"])],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("acc_in", FLOAT)],
        [t("cond_out", BOOL, []), seq("acc_out", FLOAT)],
    )
    return Program(
        [
            n("SequenceConstruct", ["x"], ["start"]),
            helper.make_node("Loop", ["trips", "", "start"], ["acc"], name="grow", body=b),
            n("ConcatFromSequence", ["acc"], ["y"], axis=-1),
            n("SequenceLength", ["acc"], ["count"]),
        ],
        [t("x", FLOAT), t("trips", INT64, [])],
        [t("y", FLOAT), t("count", INT64, [])],
        [
            {"x": _x(2, 3), "trips": np.array(2)},
            {"x": _x(4), "trips": np.array(0)},
            {"x": _x(2, 0, 1), "trips": np.array(3)},
        ],
        [const("zero", 0, np.int64)],
        min_opset=13,  # a sequence carried by Loop is opset 13
        unranked=("x", "y"),
    )


PROGRAMS: dict[str, Callable[[], Program]] = {
    f.__name__: f
    for f in (
        split_dynamic_dim, split_runtime_scalar, split_runtime_sizes, construct_insert_erase_mixed_shapes,
        sequence_io, strings, float16_stack, mixed_ranks, loop_appends, loop_append_once, loop_append_growing_state,
        loop_reads_outer_sequence,
        if_lengths_differ, sequence_map_loop, unknown_rank_split_concat, unknown_rank_mixed, unknown_rank_loop,
    )
}
CASES = [(name, opset) for name, f in PROGRAMS.items() for opset in OPSETS if opset >= f().min_opset]


def build(p: Program, opset: int) -> onnx.ModelProto:
    m = model(p.nodes, p.inputs, p.outputs, opset=opset, initializer=p.inits, ir_version=IR_FOR_OPSET[opset])
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name in p.unranked:
            vi.type.tensor_type.ClearField("shape")
    return m


@pytest.mark.parametrize(("name", "opset"), CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_flat_program_lowers_and_matches(name, opset):
    p = PROGRAMS[name]()
    m = build(p, opset)
    # The universal representation on its own (the packed fast paths off): the default
    # lowering of these programs is tested in test_lower_packed_sequences.
    low, report = lower_checked(m, inputs=p.feeds, packed=False)
    intos = {r["into"] for r in report.rewrites}
    assert "flat" in intos and not intos & {"stacked", "ragged"}
    assert not {"Split", "SplitToSequence"} & set(ops_of(low))


def test_append_once_per_step_becomes_a_scan_output_only_where_the_shape_is_fixed():
    p = loop_append_once()
    _, report = lower_checked(build(p, 18), inputs=p.feeds)
    hows = sorted(r["how"] for r in report.rewrites if r["op"] == "SequenceInsert")
    assert hows == ["Concat (append)", "append as a Loop scan output"]
    p = loop_append_growing_state()
    _, report = lower_checked(build(p, 18), inputs=p.feeds)
    assert [r["how"] for r in report.rewrites if r["op"] == "SequenceInsert"] == ["Concat (append)"]


def test_abi_metadata_names_the_tensors_of_each_sequence_port():
    p = mixed_ranks()
    low, _ = lower_checked(build(p, 17), inputs=p.feeds)
    abi = read_abi(low)
    assert abi is not None and list(abi.outputs) == ["s1"]
    entry = abi.outputs["s1"]
    assert entry.kind == "sequence" and entry.width == 1 and set(entry.tensors) == {"values", "shapes", "ranks"}
    assert [o.name for o in low.graph.output] == ["s1_values", "s1_shapes", "s1_ranks", "back"]
    p = sequence_io()
    low, _ = lower_checked(build(p, 17), inputs=p.feeds)
    abi = read_abi(low)
    assert abi.inputs["xs"].tensors == {"values": "xs_values", "shapes": "xs_shapes"}
    assert abi.inputs["xs"].elem_shape == ["H", 3]
    assert [i.name for i in low.graph.input] == ["xs_values", "xs_shapes", "t", "p"]


def test_out_of_range_runtime_position_fails_in_both_models():
    p = sequence_io()
    m = build(p, 17)
    low, _ = lower_checked(m, inputs=p.feeds)
    bad = {"xs": [_x(1, 3)], "t": _x(1, 3), "p": np.array(5)}
    for backend in ("reference", "onnxruntime"):
        for which in (m, low):
            with pytest.raises(SeqlowerError):
                Executor(which, backend=backend).run(bad)
    rep = verify(m, low, inputs=[bad], backend="reference")
    assert not rep.equivalent and rep.compared == 0  # nothing the original accepts: nothing proven


@pytest.mark.parametrize("operand, batched", [(np.array(2.0, np.float32), True), (np.array([2.0], np.float32), False),
                                               (np.array([1.0, 2.0], np.float32), False)])
def test_an_elementwise_map_over_a_flat_list_runs_once_on_its_values(operand, batched):
    # Elements of different ranks and sizes: Flat. Scaling by a scalar runs on the values
    # (no Loop); an operand of rank 1 broadcasts the elements to other shapes: a Loop.
    map_body = body([helper.make_node("Mul", ["e", "k"], ["m"]), helper.make_node("Cast", ["m"], ["o"], to=INT64),
                     helper.make_node("Neg", ["o"], ["y"])],
                    [t("e", FLOAT, None)], [t("y", INT64, None)], initializer=[const("k", operand)])
    m = model([helper.make_node("SequenceMap", ["s"], ["out"], body=map_body)], [seq("s", FLOAT, None)],
              [seq("out", INT64, None)], opset=17)
    rng = np.random.default_rng(3)
    elems = [rng.standard_normal(s).astype(np.float32) * 4 for s in [(2,), (2, 2), (), (0, 2)]]
    feeds = [{"s": elems}, {"s": elems[:1]}, {"s": []}] if batched else [{"s": elems[:2]}, {"s": []}]
    low, _ = lower_checked(m, inputs=feeds)
    assert ("Loop" in ops_of(low)) != batched


@pytest.mark.parametrize("target", ["generic", "tvm", "openvino"])
def test_run_time_counts_repeat_by_tile_not_by_an_expand_of_one_element(target):
    # Graph program 20413: the chunks of 1 of a dim that is 0 at run time were an Expand
    # of [1] to [0], which TVM's frontend refuses ('Invalid target dimension 0').
    then = body([helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0)], [], [seq("rows", BOOL, None)])
    other = body([helper.make_node("SequenceConstruct", ["x", "x"], ["pair"])], [], [seq("pair", BOOL, [None])])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    m = model(nodes, [t("x", BOOL, ["N", "M"]), t("c", BOOL, [])], [t("n", INT64, [])], opset=17)
    feeds = [{"x": np.ones((k, 2), bool), "c": np.array(c)} for k in (0, 1, 3) for c in (True, False)]
    low, _ = lower_checked(m, inputs=feeds, target=target)
    ones = {i.name for i in low.graph.initializer if list(i.dims) == [1]}
    graphs, expands = [low.graph], []
    while graphs:
        g = graphs.pop()
        ones |= {o for nd in g.node if nd.op_type == "Constant" for a in nd.attribute if a.t.dims == [1] for o in nd.output}
        expands += [nd for nd in g.node if nd.op_type == "Expand"]
        graphs += [a.g for nd in g.node for a in nd.attribute if a.HasField("g")]
    assert not [nd.name for nd in expands if nd.input[0] in ones]


# A run-time scalar split with keepdims=0: whether the chunks lose the axis is the
# policy's (onnxruntime squeezes when every chunk has size 1 along it or none has an
# element; else the spec keeps it), decided by the values. Flat carries the ranks.
SQUEEZE_FEEDS = [
    {"x": _x(2, 4, 2), "k": np.array(1)},  # chunks of 1: squeezed
    {"x": _x(2, 4, 2), "k": np.array(2)},  # kept (onnxruntime fails on the original)
    {"x": _x(0, 4, 2), "k": np.array(2)},  # no element in any chunk: squeezed
    {"x": _x(2, 1, 2), "k": np.array(3)},  # one chunk of size 1: squeezed
]


def _runtime_squeeze_model(where: str, ranked: bool) -> onnx.ModelProto:
    nodes = [n("SplitToSequence", ["x", "k"], ["s"], axis=1, keepdims=0),
             n("SequenceLength", ["s"], ["count"]),
             n("Identity", ["s"], ["s2"]),
             n("ConcatFromSequence", ["s2"], ["cat"], axis=0),
             n("SequenceMap", ["s"], ["shapes"], body=body([n("Shape", ["e"], ["d"])], [t("e", FLOAT)], [t("d", INT64, [None])])),
             n("ConcatFromSequence", ["shapes"], ["dims"], axis=0)]
    outputs = [t("count", INT64, []), t("cat", FLOAT), t("dims", INT64, [None])]
    inputs = [t("x", FLOAT, [None, "M", 2] if ranked else None), t("k", INT64, [])]
    if where == "if":
        branch = body(nodes, [], outputs)
        other = body([n("Constant", [], [o.name], value=helper.make_tensor(o.name, o.type.tensor_type.elem_type, [0], []))
                      for o in outputs if o.name != "count"] + [n("Constant", [], ["count"], value=helper.make_tensor("c", INT64, [], [0]))],
                     [], outputs)
        nodes = [n("Greater", ["k", "zero"], ["c"]), n("If", ["c"], [o.name for o in outputs], then_branch=branch, else_branch=other)]
    m = model(nodes, inputs, outputs, initializer=[const("zero", 0, np.int64)], opset=17)
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name in ("cat",) or (vi.name == "x" and not ranked):
            vi.type.tensor_type.ClearField("shape")
    return m


@pytest.mark.parametrize("where", ["main", "if"])
@pytest.mark.parametrize("ranked", [True, False], ids=["rank-known", "rank-unknown"])
def test_a_run_time_scalar_split_with_keepdims_0_squeezes_as_its_values_say(where, ranked):
    m = _runtime_squeeze_model(where, ranked)
    low, report = lower_checked(m, backends=(), inputs=SQUEEZE_FEEDS)
    assert report.tensor_only
    # The original runs on the reference (the policy's kernel); the lowered model on both.
    for lowered_backend in ("reference", "onnxruntime"):
        rep = verify(m, low, inputs=SQUEEZE_FEEDS, backend="reference", lowered_backend=lowered_backend)
        assert rep.equivalent, (lowered_backend, rep.to_json())
