"""Optionals become a ``present`` flag and a payload (passes/lowering/lower_optionals.py), through
the signatures passes/lowering/convert.py converts: an If returning an optional that is absent in
one branch, and a Loop carrying an optional that starts as a plain tensor and is emptied
in the body. Each program lowers to a model without optional types and gives the
original's numbers on both backends (the ONNX backend cases cover the single ops)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.helpers import BOOL, FLOAT, INT64, body, lower_checked, model, opt, t

_OPT_FLOAT = helper.make_tensor_type_proto(FLOAT, [None])  # what opt() wraps


def _no_optional_types(m: onnx.ModelProto) -> bool:
    graphs = [m.graph]
    while graphs:
        g = graphs.pop()
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value") == "optional_type":
                return False
        graphs += [a.g for n in g.node for a in n.attribute if a.HasField("g")]
    return True


def test_an_if_returns_an_optional_absent_in_one_branch():
    then_b = body([helper.make_node("Optional", ["x"], ["some"])], [], [opt("some", _OPT_FLOAT)])
    else_b = body([helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(FLOAT, [None]))], [],
                  [opt("none", _OPT_FLOAT)])
    m = model(
        [
            helper.make_node("If", ["c"], ["maybe"], then_branch=then_b, else_branch=else_b),
            helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
            helper.make_node("If", ["has"], ["y"],
                             then_branch=body([helper.make_node("OptionalGetElement", ["maybe"], ["got"])], [], [t("got", FLOAT, [None])]),
                             else_branch=body([helper.make_node("Neg", ["x"], ["neg"])], [], [t("neg", FLOAT, [None])])),
        ],
        [t("c", BOOL, []), t("x", FLOAT, ["N"])],
        [t("has", BOOL, []), t("y", FLOAT, [None])],
        opset=18,
    )
    x = np.arange(3, dtype=np.float32)
    low, report = lower_checked(m, inputs=[{"c": np.array(True), "x": x}, {"c": np.array(False), "x": x}])
    assert _no_optional_types(low)
    assert {r["how"] for r in report.rewrites if r["op"] == "If"} >= {"If returning present + payload"}


def test_a_loop_carries_an_optional_that_is_emptied():
    # Carried: an optional made of x, kept while i < 2, then made absent; the Loop's
    # output is declared nowhere (its type comes from the body).
    b = body(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Less", ["i", "two"], ["keep"]),
            helper.make_node(
                "If", ["keep"], ["acc_out"],
                then_branch=body([helper.make_node("Identity", ["acc_in"], ["kept"])], [], [opt("kept", _OPT_FLOAT)]),
                else_branch=body([helper.make_node("Optional", [], ["gone"], type=helper.make_tensor_type_proto(FLOAT, [None]))],
                                 [], [opt("gone", _OPT_FLOAT)]),
            ),
        ],
        [t("i", INT64, []), t("cond_in", BOOL, []), opt("acc_in", _OPT_FLOAT)],
        [t("cond_out", BOOL, []), opt("acc_out", _OPT_FLOAT)],
        [helper.make_tensor("two", INT64, [], [2])],
    )
    m = model(
        [
            helper.make_node("Optional", ["x"], ["start"]),
            helper.make_node("Loop", ["trips", "", "start"], ["final"], body=b, name="carry"),
            helper.make_node("OptionalHasElement", ["final"], ["still"]),
        ],
        [t("trips", INT64, []), t("x", FLOAT, ["N"])],
        [t("still", BOOL, [])],
        opset=18,
    )
    x = np.arange(4, dtype=np.float32)
    low, report = lower_checked(m, inputs=[{"trips": np.array(k), "x": x} for k in (0, 2, 3)])
    assert _no_optional_types(low)
    assert [r["how"] for r in report.rewrites if r["op"] == "Loop"] == ["Loop carrying present + payload"]


def test_an_optional_of_a_list_whose_type_is_not_declared_is_unwrapped_to_the_list():
    # Found by the generator's v4 shapes: Optional(list) -> OptionalHasElement /
    # OptionalGetElement, with no value_info for the optional (onnx infers none where the
    # list's element shape is unknown); the rules read the pair the Optional rule made,
    # not only values typed optional (before, the getter returned the optional itself).
    m = model(
        [
            helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0),
            helper.make_node("Optional", ["rows"], ["maybe"]),
            helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
            helper.make_node("OptionalGetElement", ["maybe"], ["back"]),
            helper.make_node("SequenceLength", ["back"], ["n"]),
            helper.make_node("ConcatFromSequence", ["back"], ["y"], axis=0),
        ],
        [t("x", FLOAT, ["N", 2])],
        [t("has", BOOL, []), t("n", INT64, []), t("y", FLOAT, [None, 2])],
        opset=18,
    )
    low, _ = lower_checked(m, inputs=[{"x": np.arange(2 * k, dtype=np.float32).reshape(k, 2)} for k in (3, 1)])
    assert _no_optional_types(low)


def test_an_unwrapped_list_returned_by_the_model_keeps_its_declared_type_after_each_pass():
    # The getter's output is a graph output: an Identity takes its name, and took no type
    # (the model after LowerOptionalsPass failed the checker: "Field 'type' of
    # 'value_info' is required").
    m = model(
        [helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0),
         helper.make_node("Optional", ["rows"], ["maybe"]),
         helper.make_node("OptionalGetElement", ["maybe"], ["back"])],
        [t("x", FLOAT, ["N", 2])],
        [helper.make_tensor_sequence_value_info("back", FLOAT, None)],
        opset=18,
    )
    lower_checked(m, inputs=[{"x": np.arange(6, dtype=np.float32).reshape(3, 2)}], check_each_pass=True)
