"""SequenceMap over Stacked lists run once on the whole stacks (passes/lowering/_batched_map.py):
which bodies batch (elementwise with broadcasting, reductions and softmax-like ops with
shifted axes, Transpose, Squeeze/Unsqueeze, Concat, MatMul) and come out Loop-free and
equal to the original on both backends, and which fall back to the Loop."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import FLOAT, INT64, body, const, lower_checked, model, ops_of, t
from tests.passes.patterns import IR_FOR_OPSET

BATCHED = "the body once on the stacks (batched)"


def _map_model(nodes, body_in, body_out, out_elem, *, elem3=False, opset=17, inits=(), extra=()):
    """x [N, K, M] (elem3) or [N, M] unbound into rows, mapped with ``nodes``, stacked."""
    x_shape = ["N", 2, "M"] if elem3 else ["N", "M"]
    b = body(nodes, [body_in, *extra], body_out, initializer=list(inits))
    return model(
        [helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
         helper.make_node("SequenceMap", ["rows", *[e.name for e in extra]], [o.name + "_seq" for o in body_out], body=b, name="map"),
         *[helper.make_node("ConcatFromSequence", [o.name + "_seq"], [o.name + "_y"], axis=0, new_axis=1) for o in body_out]],
        [t("x", FLOAT, x_shape), *[t(e.name, e.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in e.type.tensor_type.shape.dim]) for e in extra]],
        [t(o.name + "_y", o.type.tensor_type.elem_type, [None] * (1 + len(o.type.tensor_type.shape.dim))) for o in body_out],
        opset=opset, ir_version=IR_FOR_OPSET[opset],
    )


def _feeds(elem3, extra=None):
    shapes = [(3, 2, 4), (0, 2, 4), (2, 2, 0)] if elem3 else [(3, 4), (0, 4), (2, 0)]
    out = []
    for s in shapes:
        f = {"x": (np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) - 5) / 3}
        if extra:
            f.update(extra(s))
        out.append(f)
    return out


def _check(m, feeds, batched=True):
    low, report = lower_checked(m, inputs=feeds)
    hows = [r["how"] for r in report.rewrites if r["op"] == "SequenceMap"]
    assert (hows == [BATCHED]) == batched and len(hows) == 1, hows
    assert ("Loop" in ops_of(low)) != batched
    return low


E, E3 = t("e", FLOAT, ["M"]), t("e", FLOAT, [2, "M"])


def test_elementwise_with_a_captured_tensor_and_a_constant_output():
    m = _map_model(
        [helper.make_node("Add", ["e", "bias"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
         helper.make_node("Cast", ["r"], ["i"], to=INT64), helper.make_node("Identity", ["c"], ["k"])],
        E, [t("r", FLOAT, ["M"]), t("i", INT64, ["M"]), t("k", FLOAT, [3])], None,
        inits=[const("c", [1.0, 2.0, 3.0], np.float32)], extra=[t("bias", FLOAT, ["M"])],
    )
    _check(m, _feeds(False, lambda s: {"bias": np.linspace(-1, 1, s[-1]).astype(np.float32)}))


@pytest.mark.parametrize("opset", [17, 18])  # SequenceMap exists from 17
def test_reductions_with_axes_as_attribute_or_input_and_reduce_all(opset):
    if opset >= 18:
        nodes = [helper.make_node("ReduceMax", ["e", "ax"], ["mx"], keepdims=1), helper.make_node("ReduceSum", ["e", "ax"], ["sm"], keepdims=0)]
        inits = [const("ax", [-1], np.int64)]
    else:  # ReduceMax's axes an attribute, ReduceSum's an input
        nodes = [helper.make_node("ReduceMax", ["e"], ["mx"], axes=[1], keepdims=1), helper.make_node("ReduceSum", ["e", "ax"], ["sm"], keepdims=0)]
        inits = [const("ax", [0], np.int64)]
    nodes.append(helper.make_node("ReduceMean", ["e"], ["all"], keepdims=0))
    nodes.append(helper.make_node("ArgMax", ["e"], ["am"], axis=1, keepdims=0))
    m = _map_model(nodes, E3, [t("mx", FLOAT, [2, 1]), t("sm", FLOAT, [None]), t("all", FLOAT, []), t("am", INT64, [2])],
                   None, elem3=True, opset=opset, inits=inits)
    # Reductions over an empty axis have no value: only non-empty elements here.
    _check(m, _feeds(True)[:2])


def test_softmax_transpose_unsqueeze_squeeze_concat_matmul():
    nodes = [
        helper.make_node("Softmax", ["e"], ["sm"], axis=-1),
        helper.make_node("Transpose", ["e"], ["tr"]),
        helper.make_node("Unsqueeze", ["e", "ax0"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax0"], ["sq"]),
        helper.make_node("Concat", ["e", "sq"], ["cat"], axis=0),
        helper.make_node("MatMul", ["e", "w"], ["mm"]),
    ]
    m = _map_model(nodes, E3, [t("sm", FLOAT, [2, "M"]), t("tr", FLOAT, ["M", 2]), t("cat", FLOAT, [4, "M"]), t("mm", FLOAT, [2, 3])],
                   None, elem3=True, inits=[const("ax0", [0], np.int64)], extra=[t("w", FLOAT, ["M", 3])])
    _check(m, _feeds(True, lambda s: {"w": np.ones((s[-1], 3), np.float32)}))


def test_matmul_of_a_vector_element_by_a_matrix():
    m = _map_model([helper.make_node("MatMul", ["e", "w"], ["mm"])], E, [t("mm", FLOAT, [3])], None, extra=[t("w", FLOAT, ["M", 3])])
    _check(m, _feeds(False, lambda s: {"w": np.arange(s[-1] * 3, dtype=np.float32).reshape(s[-1], 3)}))


@pytest.mark.parametrize("case", ["shape", "reshape", "squeeze_all", "matrix_times_vector", "dynamic_axes"])
def test_bodies_that_do_not_batch_keep_the_loop(case):
    opset, extra, elem3, inits = 17, [], False, []
    if case == "shape":
        nodes, outs = [helper.make_node("Shape", ["e"], ["s"])], [t("s", INT64, [1])]
    elif case == "reshape":
        nodes, outs = [helper.make_node("Reshape", ["e", "shp"], ["r"])], [t("r", FLOAT, [None, 1])]
        inits = [const("shp", [-1, 1], np.int64)]
    elif case == "squeeze_all":
        nodes, outs = [helper.make_node("Unsqueeze", ["e", "ax0"], ["u"]), helper.make_node("Squeeze", ["u"], ["s"])], [t("s", FLOAT, ["M"])]
        inits = [const("ax0", [0], np.int64)]
    elif case == "dynamic_axes":
        nodes, outs = [helper.make_node("ReduceSum", ["e", "ax"], ["s"], keepdims=1)], [t("s", FLOAT, [1])]
        extra = [t("ax", INT64, [1])]
    else:
        nodes, outs = [helper.make_node("MatMul", ["w", "e"], ["mm"])], [t("mm", FLOAT, [3])]
        extra = [t("w", FLOAT, [3, "M"])]
    m = _map_model(nodes, E3 if elem3 else E, outs, None, elem3=elem3, opset=opset, inits=inits, extra=extra)
    extras = {"matrix_times_vector": lambda s: {"w": np.ones((3, s[-1]), np.float32)},
              "dynamic_axes": lambda s: {"ax": np.array([0])}}
    _check(m, _feeds(elem3, extras.get(case))[:2], batched=False)


def test_an_element_of_lower_rank_than_the_result_is_lifted_and_batches():
    # e [M] + c [2, M] per element: the stack [n, M] gets a unit axis, [n, 1, M], so it
    # still lines up from the right against c.
    m = _map_model([helper.make_node("Add", ["e", "c"], ["s"])], E, [t("s", FLOAT, [2, "M"])], None,
                   extra=[t("c", FLOAT, [2, "M"])])
    _check(m, _feeds(False, lambda s: {"c": np.arange(2 * s[-1], dtype=np.float32).reshape(2, s[-1])}))


def test_a_body_whose_if_reads_the_element_from_outside_is_not_batched():
    # The If takes no input: its branches read the element from the body's scope. A
    # batched body ran them on the stack with their axes unshifted (a Concat along the
    # element's axis 0 joined the stack along the batch axis, and the If's declared rank
    # was one short: the checker refused the lowered model).
    branch = lambda name, axis: body([helper.make_node("Concat", ["e", "e"], [name], axis=axis)], [],
                                     [t(name, FLOAT, [None, None])])
    for count in (1, 2):  # (Unrolled lists of one element and of two)
        m = model(
            [helper.make_node("SequenceConstruct", ["x"] * count, ["s"]),
             helper.make_node("SequenceMap", ["s"], ["m"], body=body(
                 [helper.make_node("If", ["c"], ["r"], then_branch=branch("a", 0), else_branch=branch("b", 1))],
                 [t("e", FLOAT, ["N", "M"])], [t("r", FLOAT, [None, None])])),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0, new_axis=1)],
            [t("x", FLOAT, ["N", "M"]), t("c", onnx.TensorProto.BOOL, [])], [t("y", FLOAT, [None, None, None])],
            opset=17, ir_version=IR_FOR_OPSET[17])
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        lower_checked(m, inputs=[{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)}])
