"""The packed lowerings: webs whose elements provably share one shape (numbers and
model-input dims) become one ``[n, *elem]`` tensor (Stacked); webs whose elements differ
along one axis become that axis' concatenation and the lengths (Ragged). Every program
runs at every opset it exists in, must come out tensor-only with its sequence ops lowered
the packed way it is meant to (not Flat), and equal the original on both backends
(onnxruntime with its optimizer on and off) over inputs with empty sequences, zero-size
dims and negative positions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.helpers import BOOL, FLOAT, INT32, INT64, STRING, body, const, lower_checked, model, seq, t
from tests.passes.patterns import IR_FOR_OPSET, OPSETS
from tests.passes.lowering.test_lower_flat_sequences import PROGRAMS as FLAT_PROGRAMS
from tests.passes.lowering.test_lower_flat_sequences import build as build_flat
from tests.passes.lowering.test_lower_flat_sequences import Program, _x, n

F16 = TensorProto.FLOAT16


def _typed(k: int, m: int, dtype: int, np_dtype) -> np.ndarray:
    """A [k, m] input of the element type (strings "s<i><j>")."""
    if dtype != STRING:
        return _x(k, m).astype(np_dtype)
    a = np.empty((k, m), dtype=object)
    for i, j in np.ndindex(k, m):
        a[i, j] = f"s{i}{j}"
    return a


def unbind_read_stack() -> Program:
    """unbind over a run-time dim, read at a run-time negative position, counted,
    stacked at axis 1 and -1, concatenated along axis 0 and 1."""
    return Program(
        [
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            n("SequenceAt", ["rows", "p"], ["row"]),
            n("SequenceLength", ["rows"], ["count"]),
            n("ConcatFromSequence", ["rows"], ["stacked1"], axis=1, new_axis=1),
            n("ConcatFromSequence", ["rows"], ["stacked_last"], axis=-1, new_axis=1),
            n("SplitToSequence", ["x"], ["cols"], axis=1),
            n("ConcatFromSequence", ["cols"], ["cols0"], axis=0),
            n("ConcatFromSequence", ["cols"], ["cols1"], axis=-1),
        ],
        [t("x", FLOAT, ["N", "M"]), t("p", INT32, [])],
        [t("row", FLOAT, ["M"]), t("count", INT64, []), t("stacked1", FLOAT, ["M", "N"]), t("stacked_last", FLOAT, ["M", "N"]),
         t("cols0", FLOAT, [None, 1]), t("cols1", FLOAT, ["N", "M"])],
        [{"x": _x(4, 3), "p": np.array(-1, np.int32)}, {"x": _x(1, 5), "p": np.array(0, np.int32)},
         {"x": _x(3, 0), "p": np.array(-3, np.int32)}],
    )


def equal_chunks() -> Program:
    """Chunks of 2 of a static dim (keepdims), a 1-D split of equal entries, read, erased
    and inserted at run-time positions, joined back along the split axis."""
    return Program(
        [
            n("SplitToSequence", ["x", "two"], ["pairs"], axis=1),
            n("SequenceErase", ["pairs", "p"], ["fewer"]),
            n("SequenceInsert", ["fewer", "extra", "q"], ["more"]),
            n("ConcatFromSequence", ["more"], ["joined"], axis=1),
            n("SplitToSequence", ["x", "threes"], ["halves"], axis=1),
            n("SequenceAt", ["halves", "p"], ["half"]),
        ],
        [t("x", FLOAT, ["N", 6]), t("extra", FLOAT, ["N", 2]), t("p", INT64, []), t("q", INT64, [])],
        [t("joined", FLOAT, ["N", 6]), t("half", FLOAT, ["N", 3])],
        [{"x": _x(2, 6), "extra": -_x(2, 2), "p": np.array(-2), "q": np.array(0)},
         {"x": _x(0, 6), "extra": _x(0, 2), "p": np.array(1), "q": np.array(-1)}],
        [const("two", 2, np.int64), const("threes", [3, 3], np.int64)],
    )


def construct_insert_erase(dtype=FLOAT, np_dtype=np.float32, min_opset=11) -> Program:
    """A list built from tensors of one shape, grown and shrunk at run-time positions
    (negatives), then stacked."""
    def data(k, m):
        return _typed(k, m, dtype, np_dtype)
    return Program(
        [
            n("SequenceConstruct", ["a", "b"], ["s0"]),
            n("SequenceInsert", ["s0", "c", "p"], ["s1"]),
            n("SequenceInsert", ["s1", "a"], ["s2"]),
            n("SequenceErase", ["s2", "q"], ["s3"]),
            n("SequenceErase", ["s3"], ["s4"]),
            n("ConcatFromSequence", ["s4"], ["y"], axis=0, new_axis=1),
            n("SequenceLength", ["s4"], ["count"]),
        ],
        [t("a", dtype, ["K", "M"]), t("b", dtype, ["K", "M"]), t("c", dtype, ["K", "M"]), t("p", INT64, []), t("q", INT32, [])],
        [t("y", dtype, ["K", None, "M"]), t("count", INT64, [])],
        [{"a": data(2, 3), "b": data(2, 3), "c": data(2, 3), "p": np.array(-1), "q": np.array(-2, np.int32)},
         {"a": data(0, 2), "b": data(0, 2), "c": data(0, 2), "p": np.array(2), "q": np.array(0, np.int32)}],
        min_opset=min_opset,
    )


def strings() -> Program:
    return construct_insert_erase(STRING, object)


def float16() -> Program:
    return construct_insert_erase(F16, np.float16)


def loop_append_once() -> Program:
    """`out.append(row * i)` every step from an empty list, then stacked; the loop may run
    no step. A carried tensor of fixed shape rides along."""
    b = body(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("Gather", ["x", "i"], ["row"], axis=0),
            n("Cast", ["i"], ["i_f"], to=FLOAT),
            n("Mul", ["row", "i_f"], ["scaled"]),
            n("Add", ["h_in", "scaled"], ["h_out"]),
            n("SequenceInsert", ["acc_in", "scaled"], ["acc_out"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), t("h_in", FLOAT, ["M"]), seq("acc_in", FLOAT, ["M"])],
        [t("cond_out", BOOL, []), t("h_out", FLOAT, ["M"]), seq("acc_out", FLOAT, ["M"])],
    )
    return Program(
        [
            n("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            n("Shape", ["x"], ["xs"]),
            n("Gather", ["xs", "zero"], ["trips"], axis=0),
            helper.make_node("Loop", ["trips", "", "h0", "empty"], ["h", "acc"], name="collect", body=b),
            n("SequenceInsert", ["acc", "h"], ["acc2"]),
            n("ConcatFromSequence", ["acc2"], ["y"], axis=0, new_axis=1),
        ],
        [t("x", FLOAT, ["N", "M"]), t("h0", FLOAT, ["M"])],
        [t("y", FLOAT, [None, "M"]), t("h", FLOAT, ["M"])],
        [{"x": _x(4, 3), "h0": _x(3)}, {"x": _x(0, 3), "h0": _x(3)}, {"x": _x(2, 0), "h0": _x(0)}],
        [const("zero", 0, np.int64)],
        min_opset=13,
    )


def loop_carried_edits() -> Program:
    """A carried list the body reads (SequenceAt, SequenceLength) and edits (erase the
    first, append the sum): carried as its [n, *elem] tensor."""
    b = body(
        [
            n("SequenceAt", ["s_in", "zero"], ["first"]),
            n("SequenceErase", ["s_in", "zero"], ["rest"]),
            n("Add", ["first", "first"], ["twice"]),
            n("SequenceInsert", ["rest", "twice"], ["s_out"]),
            n("SequenceLength", ["s_out"], ["len"]),
            n("Less", ["i", "len"], ["cond_out"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("s_in", FLOAT, ["M"])],
        [t("cond_out", BOOL, []), seq("s_out", FLOAT, ["M"]), t("len", INT64, [])],
    )
    return Program(
        [
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            helper.make_node("Loop", ["trips", "", "rows"], ["out", "lens"], name="rotate", body=b),
            n("ConcatFromSequence", ["out"], ["y"], axis=0),
        ],
        [t("x", FLOAT, ["N", "M"]), t("trips", INT64, [])],
        [t("y", FLOAT, [None]), t("lens", INT64, [None])],
        [{"x": _x(3, 2), "trips": np.array(5)}, {"x": _x(2, 0), "trips": np.array(1)}],
        [const("zero", 0, np.int64)],
        min_opset=13,
    )


def if_branches() -> Program:
    """An If whose branches return lists of different lengths, elements of one shape."""
    return Program(
        [
            helper.make_node(
                "If", ["c"], ["s"], name="pick",
                then_branch=body([n("SplitToSequence", ["x"], ["a"], axis=0, keepdims=0)], [], [seq("a", FLOAT, ["M"])]),
                else_branch=body([n("SequenceConstruct", ["r", "r", "r"], ["b"])], [], [seq("b", FLOAT, ["M"])]),
            ),
            n("SequenceLength", ["s"], ["count"]),
            n("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1),
        ],
        [t("c", BOOL, []), t("x", FLOAT, ["N", "M"]), t("r", FLOAT, ["M"])],
        [t("count", INT64, []), t("y", FLOAT, [None, "M"])],
        [{"c": np.array(True), "x": _x(4, 2), "r": _x(2)}, {"c": np.array(False), "x": _x(4, 2), "r": _x(2)},
         {"c": np.array(True), "x": _x(0, 2), "r": _x(2)}],
        min_opset=13,  # If returns sequences from opset 13
    )


def sequence_map() -> Program:
    """SequenceMap over unbound rows: scan outputs of one shape, a dtype change and a
    captured tensor; no row at all gives empty outputs."""
    b = body(
        [n("Add", ["e", "bias"], ["shifted"]), n("Cast", ["shifted"], ["as_int"], to=INT64),
         n("ReduceSum", ["e", "ax0"], ["total"], keepdims=1)],
        [t("e", FLOAT, ["M"]), t("bias", FLOAT, ["M"])],
        [t("as_int", INT64, ["M"]), t("total", FLOAT, [1])],
        [const("ax0", [0], np.int64)],
    )
    return Program(
        [
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            helper.make_node("SequenceMap", ["rows", "bias"], ["ints", "totals"], name="map", body=b),
            n("ConcatFromSequence", ["ints"], ["y"], axis=0, new_axis=1),
            n("ConcatFromSequence", ["totals"], ["z"], axis=0),
        ],
        [t("x", FLOAT, ["N", "M"]), t("bias", FLOAT, ["M"])],
        [t("y", INT64, [None, "M"]), t("z", FLOAT, [None])],
        [{"x": _x(3, 2), "bias": _x(2)}, {"x": _x(0, 2), "bias": _x(2)}, {"x": _x(2, 0), "bias": _x(0)}],
        min_opset=17,
    )


def ragged_split_edit_join(dtype=FLOAT, np_dtype=np.float32) -> Program:
    """Run-time split sizes along axis 0 (zero entries), an element read at a negative
    run-time position, one inserted at a run-time position and one erased, joined back."""
    def data(k, m):
        return _typed(k, m, dtype, np_dtype)
    return Program(
        [
            n("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),
            n("SequenceAt", ["parts", "p"], ["part"]),
            n("SequenceInsert", ["parts", "extra", "q"], ["more"]),
            n("SequenceErase", ["more", "p"], ["fewer"]),
            n("SequenceErase", ["fewer"], ["fewest"]),
            n("ConcatFromSequence", ["fewest"], ["joined"], axis=0),
            n("SequenceLength", ["fewest"], ["count"]),
        ],
        [t("x", dtype, ["N", "M"]), t("sizes", INT64, ["K"]), t("extra", dtype, ["E", "M"]), t("p", INT64, []), t("q", INT32, [])],
        [t("part", dtype, [None, "M"]), t("joined", dtype, [None, "M"]), t("count", INT64, [])],
        [
            {"x": data(6, 2), "sizes": np.array([1, 0, 3, 2]), "extra": data(2, 2), "p": np.array(-1), "q": np.array(1, np.int32)},
            {"x": data(3, 0), "sizes": np.array([3, 0]), "extra": data(1, 0), "p": np.array(0), "q": np.array(-2, np.int32)},
            {"x": data(0, 3), "sizes": np.array([0, 0]), "extra": data(0, 3), "p": np.array(1), "q": np.array(0, np.int32)},
        ],
    )


def ragged_strings() -> Program:
    return ragged_split_edit_join(STRING, object)


def ragged_float16() -> Program:
    return ragged_split_edit_join(F16, np.float16)


def ragged_chunks_of_k() -> Program:
    """A run-time scalar split along the last axis (uneven last chunk), joined back along
    -1 and read; chunk count from SequenceLength."""
    return Program(
        [
            n("SplitToSequence", ["x", "k"], ["chunks"], axis=-1),
            n("SequenceAt", ["chunks", "minus1"], ["last"]),
            n("SequenceLength", ["chunks"], ["count"]),
            n("ConcatFromSequence", ["chunks"], ["back"], axis=-1),
        ],
        [t("x", FLOAT, [2, "M"]), t("k", INT32, [])],
        [t("last", FLOAT, [2, None]), t("count", INT64, []), t("back", FLOAT, [2, "M"])],
        [{"x": _x(2, 7), "k": np.array(3, np.int32)}, {"x": _x(2, 2), "k": np.array(5, np.int32)},
         {"x": _x(2, 1), "k": np.array(1, np.int32)}],
        [const("minus1", -1, np.int64)],
    )


def ragged_map_and_loop() -> Program:
    """SequenceMap over ragged chunks: one output keeps the varying axis (Ragged), one
    reduces it away (Stacked); a Loop appends growing prefixes (Ragged carried) to an
    empty list; an If picks one of two ragged lists."""
    mb = body(
        [n("Relu", ["e"], ["r"]), n("ReduceSum", ["e", "ax0"], ["s"], keepdims=0)],
        [t("e", FLOAT, [None, "M"])],
        [t("r", FLOAT, [None, "M"]), t("s", FLOAT, ["M"])],
        [const("ax0", [0], np.int64)],
    )
    lb = body(
        [
            n("Identity", ["cond_in"], ["cond_out"]),
            n("Add", ["i", "one"], ["i1"]),
            n("Range", ["zero", "i1", "one"], ["rows"]),
            n("Gather", ["x", "rows"], ["prefix"], axis=0),
            n("SequenceInsert", ["acc_in", "prefix"], ["acc_out"]),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), seq("acc_in", FLOAT, [None, "M"])],
        [t("cond_out", BOOL, []), seq("acc_out", FLOAT, [None, "M"])],
    )
    return Program(
        [
            n("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),
            helper.make_node("SequenceMap", ["parts"], ["relued", "sums"], name="map", body=mb),
            n("ConcatFromSequence", ["relued"], ["y"], axis=0),
            n("ConcatFromSequence", ["sums"], ["z"], axis=0, new_axis=1),
            n("SequenceEmpty", [], ["empty"], dtype=FLOAT),
            n("Shape", ["x"], ["xs"]),
            n("Gather", ["xs", "zero"], ["trips"], axis=0),
            helper.make_node("Loop", ["trips", "", "empty"], ["prefixes"], name="grow", body=lb),
            helper.make_node(
                "If", ["c"], ["picked"], name="pick",
                then_branch=body([n("Identity", ["prefixes"], ["a"])], [], [seq("a", FLOAT, [None, "M"])]),
                else_branch=body([n("Identity", ["parts"], ["b"])], [], [seq("b", FLOAT, [None, "M"])]),
            ),
            n("ConcatFromSequence", ["picked"], ["w"], axis=0),
            n("SequenceLength", ["picked"], ["count"]),
        ],
        [t("x", FLOAT, ["N", "M"]), t("sizes", INT64, ["K"]), t("c", BOOL, [])],
        [t("y", FLOAT, ["N", "M"]), t("z", FLOAT, [None, "M"]), t("w", FLOAT, [None, "M"]), t("count", INT64, [])],
        [
            {"x": _x(4, 2) - 3, "sizes": np.array([1, 0, 3]), "c": np.array(True)},
            {"x": _x(4, 2) - 3, "sizes": np.array([2, 2]), "c": np.array(False)},
            {"x": _x(0, 2), "sizes": np.array([0]), "c": np.array(True)},
            {"x": _x(2, 0), "sizes": np.array([2]), "c": np.array(False)},
        ],
        [const("zero", 0, np.int64), const("one", 1, np.int64)],
        min_opset=17,
    )


def packed_outputs() -> Program:
    """Sequence-typed model outputs of each packed kind leave through the Flat ABI:
    unbound rows (Stacked [M]), column chunks (Stacked [N, 1]), split parts (Ragged along
    axis 0), one edited at a run-time position first."""
    return Program(
        [
            n("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
            n("SplitToSequence", ["x"], ["cols"], axis=1),
            n("SplitToSequence", ["x", "sizes"], ["parts0"], axis=0),
            n("SequenceErase", ["parts0", "p"], ["parts"]),
        ],
        [t("x", FLOAT, ["N", "M"]), t("sizes", INT64, ["K"]), t("p", INT64, [])],
        [seq("rows", FLOAT, ["M"]), seq("cols", FLOAT, ["N", 1]), seq("parts", FLOAT, [None, "M"])],
        [{"x": _x(4, 2), "sizes": np.array([1, 0, 3]), "p": np.array(-1)},
         {"x": _x(0, 3), "sizes": np.array([0, 0]), "p": np.array(0)},
         {"x": _x(3, 0), "sizes": np.array([3]), "p": np.array(0)}],
    )


RAGGED = ("ragged_split_edit_join", "ragged_strings", "ragged_float16", "ragged_chunks_of_k", "ragged_map_and_loop")


PROGRAMS: dict[str, Callable[[], Program]] = {
    f.__name__: f
    for f in (unbind_read_stack, equal_chunks, construct_insert_erase, strings, float16, loop_append_once,
              loop_carried_edits, if_branches, sequence_map, ragged_split_edit_join, ragged_strings, ragged_float16,
              ragged_chunks_of_k, ragged_map_and_loop, packed_outputs)
}
CASES = [(name, opset) for name, f in PROGRAMS.items() for opset in OPSETS if opset >= f().min_opset]


@pytest.mark.parametrize(("name", "opset"), CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_stacked_program_lowers_and_matches(name, opset):
    p = PROGRAMS[name]()
    m = model(p.nodes, p.inputs, p.outputs, opset=opset, initializer=p.inits, ir_version=IR_FOR_OPSET[opset])
    _, report = lower_checked(m, inputs=p.feeds)
    intos = {r["into"] for r in report.rewrites}
    assert ("ragged" if name in RAGGED else "stacked") in intos and "flat" not in intos, report.rewrites


def test_append_once_is_a_scan_output_and_carried_edits_carry_the_stack():
    p = loop_append_once()
    m = model(p.nodes, p.inputs, p.outputs, opset=18, initializer=p.inits, ir_version=IR_FOR_OPSET[18])
    _, report = lower_checked(m, inputs=p.feeds)
    assert ("SequenceInsert", "append as a Loop scan output") in {(r["op"], r["how"]) for r in report.rewrites}
    p = loop_carried_edits()
    m = model(p.nodes, p.inputs, p.outputs, opset=18, initializer=p.inits, ir_version=IR_FOR_OPSET[18])
    _, report = lower_checked(m, inputs=p.feeds)
    assert ("Loop", "Loop carrying the packed tensors") in {(r["op"], r["how"]) for r in report.rewrites}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_same_programs_lower_flat_when_stacked_is_off(name):
    # Two representations of one program, each checked against the original.
    p = PROGRAMS[name]()
    opset = max(18, p.min_opset)
    m = model(p.nodes, p.inputs, p.outputs, opset=opset, initializer=p.inits, ir_version=IR_FOR_OPSET[opset])
    _, report = lower_checked(m, inputs=p.feeds, packed=False)
    intos = {r["into"] for r in report.rewrites}
    assert "flat" in intos and "stacked" not in intos


@pytest.mark.parametrize("name", list(FLAT_PROGRAMS))
def test_the_flat_programs_by_default(name):
    # The Flat tests run with the packed paths off; by default some of their webs are
    # packed, and the result must still equal the original.
    p = FLAT_PROGRAMS[name]()
    opset = max(18, p.min_opset)
    lower_checked(build_flat(p, opset), inputs=p.feeds)


def test_packed_model_outputs_leave_through_the_abi():
    import json

    p = packed_outputs()
    m = model(p.nodes, p.inputs, p.outputs, opset=18, initializer=p.inits, ir_version=IR_FOR_OPSET[18])
    low, report = lower_checked(m, inputs=p.feeds)
    assert {(r["node"], r["into"]) for r in report.rewrites if r["op"] == "output"} == {
        ("model output 'rows'", "stacked"), ("model output 'cols'", "stacked"), ("model output 'parts'", "ragged")}
    abi = {e["name"]: e for e in json.loads(next(p.value for p in low.metadata_props if p.key == "seqlower.abi"))["outputs"]}
    assert {k: (e["width"], e["elem_shape"], sorted(e["tensors"])) for k, e in abi.items()} == {
        "rows": (1, ["M"], ["shapes", "values"]), "cols": (2, ["N", 1], ["shapes", "values"]),
        "parts": (2, [None, "M"], ["shapes", "values"])}


def test_a_map_over_a_provably_empty_list_gives_elements_of_the_groups_shape():
    # The map's body doubles the rows, but the list it maps is empty: its result must be
    # [0, N, M] like what is then inserted, not the batched body's [0, 2N, M] (found by
    # the --targets fuzzer, seed 8000065).
    double = body([helper.make_node("Concat", ["e", "e"], ["twice"], axis=0)], [t("e", FLOAT, ["N", "M"])],
                  [t("twice", FLOAT, [None, "M"])])
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["s1"], dtype=FLOAT),
            helper.make_node("SequenceInsert", ["s1", "x"], ["s2"]),
            helper.make_node("SequenceErase", ["s2"], ["s3"]),
            helper.make_node("SequenceMap", ["s3"], ["mapped"], body=double),
            helper.make_node("SequenceInsert", ["mapped", "x", "p"], ["s4"]),  # a run-time position: not Unrolled
            helper.make_node("ConcatFromSequence", ["s4"], ["y"], axis=0, new_axis=1),
        ],
        [t("x", FLOAT, ["N", "M"]), t("p", INT64, [])],
        [t("y", FLOAT, [1, "N", "M"])],
        opset=18,
    )
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    _, report = lower_checked(m, inputs=[{"x": x, "p": np.array(0)}, {"x": x[:0], "p": np.array(-0)}])
    assert {r["into"] for r in report.rewrites} == {"stacked"}
    assert [r["how"] for r in report.rewrites if r["op"] == "SequenceMap"] == ["empty lists: the mapped list is empty"]


def _rows_scanned_then_appended(stops_early: bool, opset: int):
    """TorchScript's ``[x[i] for i in range(n)] + [x.sum(0)]``, stacked: a Loop's scan
    output split into rows and appended to (fuzz seeds 2177, 9959, 10241). With
    ``stops_early`` the body's condition is ``i < 1``: the Loop may stop before its trip
    count, and only the output knows how many rows there are."""
    cond = [helper.make_node("Less", ["i", "one"], ["go"])] if stops_early else [helper.make_node("Identity", ["c"], ["go"])]
    loop_body = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0), *cond],
                     [t("i", INT64, []), t("c", BOOL, [])], [t("go", BOOL, []), t("row", FLOAT, ["w"])])
    nodes = [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
             helper.make_node("Loop", ["n", "yes"], ["rows"], body=loop_body),
             helper.make_node("SplitToSequence", ["rows"], ["s"], keepdims=0),
             helper.make_node("ReduceSum", ["x"], ["total"], axes=[0], keepdims=0) if opset < 13 else
             helper.make_node("ReduceSum", ["x", "axes0"], ["total"], keepdims=0),
             helper.make_node("SequenceInsert", ["s", "total"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0, new_axis=1)]
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "w"])], opset=opset,
                 ir_version=IR_FOR_OPSET[opset], initializer=[
                     const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
                     const("yes", np.array(True)), const("axes0", np.array([0], np.int64))])


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("stops_early", [False, True])
def test_rows_of_a_scan_output_count_by_its_trips_when_it_runs_every_trip(opset, stops_early):
    m = _rows_scanned_then_appended(stops_early, opset)
    inputs = [{"x": _x(k, w)} for k, w in [(0, 3), (2, 3), (3, 0), (1, 1), (0, 0)]]
    low, _ = lower_checked(m, inputs=inputs)
    # Every trip run: the rows are counted by the trip count, not read off the scan
    # output's shape (OpenVINO bounds that by 1 below: seed 10241); else by the shape.
    shapes_read = [n.input[0] for n in low.graph.node if n.op_type == "Shape"]
    assert ("rows" in shapes_read) == stops_early


@pytest.mark.parametrize("target", ["generic", "tensorrt"])
def test_shape_rows_of_a_list_erased_to_nothing_survive_onnxruntimes_constant_folding(target):
    # Graph program 46843: two rows erased from a two-row list leave an output list
    # whose count onnxruntime's optimizer knows is 0. Its shape rows repeated by an Expand
    # folded to a [0, 1] constant that onnxruntime then declared [1, 1] ("Can't merge
    # shape info ... Inferred=1 Declared=0"); a Tile folds right.
    nodes = [
        helper.make_node("Slice", ["x", "zero", "one", "zero"], ["first"]),
        helper.make_node("SequenceConstruct", ["first", "x"], ["s"]),
        helper.make_node("SequenceErase", ["s"], ["s1"]),
        helper.make_node("SequenceErase", ["s1"], ["s2"]),
    ]
    m = model(nodes, [t("x", BOOL, ["N", "M"])], [seq("s2", BOOL, [None, "M"])], opset=18,
              initializer=[const("zero", [0], np.int64), const("one", [1], np.int64)], ir_version=IR_FOR_OPSET[18])
    low, _ = lower_checked(m, inputs=[{"x": np.array([[True, False], [False, True], [True, True], [False, False]])}],
                           target=target)
    assert "Expand" not in {n.op_type for n in low.graph.node}


def test_a_map_body_carrying_a_list_in_a_loop_is_cloned_without_the_emptied_loop():
    # The map's rule lowers its body, then clones it (batched, or run in a Loop): the
    # body's list-carrying Loop, rebuilt with its body moved to the new node, was still
    # there emptied, and was cloned too (the v4 shapes: 10 of 500 programs failed).
    seq = lambda name: helper.make_tensor_sequence_value_info(name, FLOAT, None)  # noqa: E731
    carry = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("SequenceInsert", ["acc", "e"], ["acc_out"])],
                 [t("i", INT64, []), t("c", BOOL, []), seq("acc")], [t("c_out", BOOL, []), seq("acc_out")])
    mbody = body([helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
                  helper.make_node("Loop", ["trips", "", "empty"], ["final"], body=carry),
                  helper.make_node("ConcatFromSequence", ["final"], ["j"], axis=0)],
                 [t("e", FLOAT, [None, None])], [t("j", FLOAT, [None, None])])
    m = model([helper.make_node("SplitToSequence", ["x", "k"], ["parts"], axis=0),
               helper.make_node("SequenceMap", ["parts"], ["mapped"], body=mbody),
               helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)],
              [t("x", FLOAT, ["N", 3]), t("k", INT64, []), t("trips", INT64, [])], [t("y", FLOAT, [None, 3])], opset=17)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    lower_checked(m, inputs=[{"x": x, "k": np.array(k, np.int64), "trips": np.array(n, np.int64)}
                             for k, n in ((1, 1), (2, 2), (3, 1))])
