"""onnxruntime quirk "integer-division-by-zero": integer Div and Mod whose divisor may
hold a zero divide by 1 there (passes/quirks/guard_integer_division.py). onnxruntime's own
failure first (when it passes, take the quirk off the profile), then every integer
dtype, both Mods, broadcasting, empty dividends and subgraphs, lowered for onnxruntime
and run on it, against the reference backend on the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower.executor import Executor
from seqlower.targets import load_target
from tests.helpers import const, lowered_for, model, ops_of, t

DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _binary(op: str, dtype=np.int64, opset: int = 17, divisor=None, **attrs) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [t("a", elem, ["n"])]
    inits = []
    if divisor is None:
        inputs.append(t("b", elem, ["m"]))
    else:
        inits.append(const("b", np.asarray(divisor, dtype)))
    return model([helper.make_node(op, ["a", "b"], ["c"], **attrs)], inputs, [t("c", elem, [None])],
                 initializer=inits, opset=opset)


def _lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    return lowered_for(m, "onnxruntime")


def test_onnxruntime_raises_on_an_empty_dividend_over_zero():
    """ONNX defines the result (empty); onnxruntime 1.31 raises."""
    feeds = {"a": np.zeros(0, np.int64), "b": np.zeros(1, np.int64)}
    for op in ("Div", "Mod"):
        with pytest.raises(Exception, match="by zero"):
            Executor(_binary(op), backend="onnxruntime").run(feeds)
    assert "integer-division-by-zero" in dict(load_target("onnxruntime").quirks)


def _cases(dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    signed = np.issubdtype(dtype, np.signedinteger)
    a = np.array([7, -7, 0, 5] if signed else [7, 9, 0, 5]).astype(dtype)
    b = np.array([2, -3, 0, 0] if signed else [2, 3, 0, 0]).astype(dtype)
    return [
        (np.zeros(0, dtype), np.zeros(1, dtype)),  # empty over zero: ONNX's empty result
        (np.zeros(0, dtype), np.zeros(0, dtype)),
        (a, b),  # zeros among other divisors: 0 there, as the reference gives
        (a, np.array([3], dtype)),
        (a, np.array([0], dtype)),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})], ids=["div", "mod", "fmod"])
def test_every_integer_dtype_runs_on_onnxruntime_with_the_reference_numbers(dtype, op, attrs):
    m = _binary(op, dtype, **attrs)
    low = _lowered(m)
    reference, ort = Executor(m, backend="reference"), Executor(low, backend="onnxruntime")
    for a, b in _cases(dtype):
        with np.errstate(all="ignore"):
            want = reference.run({"a": a, "b": b}).outputs["c"]
        got = ort.run({"a": a, "b": b}).outputs["c"]
        assert got.dtype == want.dtype and got.shape == want.shape, (a, b, got, want)
        np.testing.assert_array_equal(got, want, err_msg=f"{a} {op} {b}")


@pytest.mark.parametrize("opset", [7, 10, 13, 14])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_older_opsets_test_zero_where_equal_has_the_type(opset, dtype):
    """Equal takes only int32/int64 before opset 11: other divisors are tested as int64."""
    m = _binary("Div", dtype, opset=opset)
    low = _lowered(m)
    a, b = np.array([6, 0, 9], dtype), np.array([3, 0, 0], dtype)
    with np.errstate(all="ignore"):
        want = Executor(m, backend="reference").run({"a": a, "b": b}).outputs["c"]
    np.testing.assert_array_equal(Executor(low, backend="onnxruntime").run({"a": a, "b": b}).outputs["c"], want)


def test_constant_divisors_without_zero_and_float_divisions_are_left_alone():
    assert ops_of(_lowered(_binary("Div", divisor=[2, 3]))) == ["Div"]
    assert ops_of(_lowered(_binary("Mod", divisor=[0, 3]))).count("Equal") == 1
    floats = model([helper.make_node("Div", ["a", "b"], ["c"])], [t("a", TensorProto.FLOAT, ["n"]), t("b", TensorProto.FLOAT, ["n"])],
                   [t("c", TensorProto.FLOAT, ["n"])])
    assert ops_of(_lowered(floats)) == ["Div"]


def test_a_second_lowering_guards_nothing_again():
    once = _lowered(_binary("Div"))
    assert ops_of(_lowered(once)) == ops_of(once)
    assert _lowered(once).SerializeToString() == _lowered(_lowered(once)).SerializeToString()


def test_divisions_in_loop_bodies_are_guarded():
    """A Loop whose body divides an empty slice by a count that reaches 0."""
    body = helper.make_graph(
        [helper.make_node("Sub", ["n_in", "one"], ["count"]),
         helper.make_node("Unsqueeze", ["count", "zero_1d"], ["count_1d"]),
         helper.make_node("Slice", ["xs", "zero_1d", "count_1d"], ["head"]),
         helper.make_node("Div", ["head", "count"], ["q"]),
         helper.make_node("ReduceSum", ["q"], ["s"], keepdims=0),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [t("i", TensorProto.INT64, []), t("cond", TensorProto.BOOL, []), t("n_in", TensorProto.INT64, [])],
        [t("cond_out", TensorProto.BOOL, []), t("count", TensorProto.INT64, []), t("s", TensorProto.INT64, [])],
        [const("one", np.array(1, np.int64)), const("zero_1d", np.array([0], np.int64))],
    )
    m = model([helper.make_node("Loop", ["trips", "", "n0"], ["n_final", "sums"], body=body)],
              [t("trips", TensorProto.INT64, []), t("n0", TensorProto.INT64, []), t("xs", TensorProto.INT64, ["k"])],
              [t("n_final", TensorProto.INT64, []), t("sums", TensorProto.INT64, [None])], opset=17)
    feeds = {"trips": np.array(3, np.int64), "n0": np.array(2, np.int64), "xs": np.array([4, 6, 8], np.int64)}
    with pytest.raises(Exception, match="while running Div"):
        Executor(m, backend="onnxruntime").run(feeds)
    low = _lowered(m)
    want = Executor(m, backend="reference").run(feeds).outputs
    got = Executor(low, backend="onnxruntime").run(feeds).outputs
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
