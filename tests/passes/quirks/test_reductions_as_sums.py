"""onnx2torch quirk "no-reduce-18" (every reduction but ReduceSum written with ReduceSum
from opset 18, or named) and OpenVINO quirks on reductions: "reduce-axes-attribute-ignored" (ReduceL1, ReduceLogSum
and ReduceLogSumExp at opsets 13-17 written with ReduceSum: passes/quirks/reductions_as_sums.py)
and "reduce-extremes-finite" (max and min padded and corrected: passes/quirks/pad_reduced_axes.py).
OpenVINO's own wrong numbers first (when they are right, take the quirk off the
profile), then each op, lowered for OpenVINO and run on it, against the reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, INT64, lower_checked, lowered_for, model, ops_of, t


def _reduce(op: str, axes: list[int], *, keepdims: int = 1, opset: int = 13, dtype: int = FLOAT,
            dims=("n", "w")) -> onnx.ModelProto:
    rank = len(dims)
    out = [None] * (rank if keepdims else rank - len(axes))
    return model([helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims)], [t("x", dtype, list(dims))],
                 [t("y", dtype, out)], opset=opset)


def _lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    return lowered_for(m, "openvino")


def test_openvino_reduces_every_axis_where_the_attribute_names_one():
    m = _reduce("ReduceLogSumExp", [1], keepdims=0)
    x = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert Executor(m, backend="openvino").run(x).outputs["y"].shape == ()  # ONNX: (2,)
    assert "reduce-axes-attribute-ignored" in dict(load_target("openvino").quirks)


def test_openvino_gives_a_finite_max_of_nothing_and_of_minus_infinities():
    m = model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], [t("x", FLOAT, ["n", "w"])],
              [t("y", FLOAT, [None])], opset=13)
    ov = Executor(m, backend="openvino")
    assert np.isfinite(ov.run({"x": np.zeros((2, 0), np.float32)}).outputs["y"]).all()
    assert np.isfinite(ov.run({"x": np.full((2, 3), -np.inf, np.float32)}).outputs["y"]).all()
    assert "reduce-extremes-finite" in dict(load_target("openvino").quirks)


def _feeds(op: str, dtype=np.float32) -> list[np.ndarray]:
    xs = [np.arange(12, dtype=dtype).reshape(3, 4) - 4, np.zeros((2, 0), dtype), np.zeros((0, 3), dtype)]
    if np.dtype(dtype).kind == "f":
        xs += [np.array([[-np.inf] * 3, [1, 2, -np.inf]], dtype), np.array([[np.inf, 1, 2], [100, 101, 102]], dtype)]
    if op == "ReduceLogSum":
        xs = [np.abs(x) + 1 for x in xs]
    return xs


def _compare(m: onnx.ModelProto, low: onnx.ModelProto, xs: list[np.ndarray]) -> None:
    reference, ov = Executor(m, backend="reference"), Executor(low, backend="openvino")
    for x in xs:
        with np.errstate(all="ignore"):
            want = reference.run({"x": x}).outputs["y"]
        got = ov.run({"x": x}).outputs["y"]
        assert got.shape == want.shape, (x, got.shape, want.shape)
        node = m.graph.node[-1]
        if node.op_type == "ReduceLogSumExp":
            # The reference's max shift makes a row of only -inf NaN; log(sum(exp(-inf))) is -inf.
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            only_minus_inf = np.all(np.isneginf(x), axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
            want = np.where(only_minus_inf & np.isnan(want), -np.inf, want)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{x}")


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes", [[1], [0], [-1]])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [13, 17])
def test_each_op_lowered_for_openvino_gives_onnx_numbers_on_openvino(op, axes, keepdims, opset):
    m = _reduce(op, axes, keepdims=keepdims, opset=opset)
    low = _lowered(m)
    assert op not in ops_of(low) and "ReduceSum" in ops_of(low)
    _compare(m, low, _feeds(op))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_types(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for op in ("ReduceLogSumExp", "ReduceL1"):
        m = _reduce(op, [1], keepdims=0, dtype=elem)
        low = _lowered(m)
        x = (np.arange(6).reshape(2, 3) - 2).astype(dtype)
        want = Executor(m, backend="reference").run({"x": x}).outputs["y"]
        np.testing.assert_allclose(Executor(low, backend="openvino").run({"x": x}).outputs["y"], want, rtol=1e-3)


def test_integer_l1_is_a_sum_and_integer_log_sums_are_named():
    m = _reduce("ReduceL1", [1], dtype=INT64)
    _compare(m, _lowered(m), _feeds("ReduceL1", np.int64))
    logs = model([helper.make_node("ReduceLogSum", ["x"], ["y"], axes=[1])], [t("x", INT64, ["n", "w"])],
                 [t("y", INT64, [None, None])], opset=13)
    low = _lowered(logs)
    gaps = target_gaps(low, load_target("openvino"))
    assert len(gaps) == 1 and "reduce-axes-attribute-ignored" in gaps[0].why
    assert target_gaps(_lowered(_reduce("ReduceLogSum", [1])), load_target("openvino")) == []


def test_opsets_where_openvino_reads_the_axes_are_left_alone():
    for opset in (11, 18):
        m = _reduce("ReduceL1", [1], opset=opset) if opset < 18 else model(
            [helper.make_node("ReduceL1", ["x", "axes"], ["y"])], [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, None])],
            initializer=[onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")], opset=18)
        assert "ReduceL1" in ops_of(_lowered(m))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("opset", [13, 18])
def test_max_and_min_lowered_for_openvino_keep_their_infinities_and_extremes(op, dtype, opset):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if opset < 18:
        m = _reduce(op, [1], keepdims=0, dtype=elem, opset=opset)
    else:
        m = model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [t("x", elem, ["n", "w"])], [t("y", elem, [None])],
                  initializer=[onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")], opset=18)
    low = _lowered(m)
    xs = [x for x in _feeds(op, dtype)]
    if np.dtype(dtype).kind == "f":
        xs.append(np.array([[np.inf] * 3, [1, np.inf, -np.inf]], dtype))
    if dtype == np.int64:
        # OpenVINO computes int64 as int32 (quirk int64-as-int32): int64's extremes, the
        # max and min of nothing, do not exist there.
        xs = [x for x in xs if x.size]
    if np.dtype(dtype).kind != "f":
        assert ops_of(low) == [op]  # its integer reductions of nothing are right
    reference, ov = Executor(m, backend="reference"), Executor(low, backend="openvino")
    for x in xs:
        want = reference.run({"x": x}).outputs["y"]
        np.testing.assert_array_equal(ov.run({"x": x}).outputs["y"], want, err_msg=f"{x}")


def test_openvino_reduces_integers_through_float32():
    m = model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], [t("x", INT64, ["n", "w"])],
              [t("y", INT64, [None])], opset=13)
    x = np.array([[2**24 + 1, 3]], np.int64)
    assert Executor(m, backend="openvino").run({"x": x}).outputs["y"].tolist() == [2**24]
    assert "integer-reductions-in-float32" in dict(load_target("openvino").quirks)


def test_openvino_computes_int64_as_int32():
    m = model([helper.make_node("Identity", ["x"], ["y"])], [t("x", INT64, ["n"])], [t("y", INT64, ["n"])])
    got = Executor(m, backend="openvino").run({"x": np.array([2**31 - 1, 2**31, 2**32 + 3], np.int64)}).outputs["y"]
    assert got.tolist() == [2**31 - 1, -2**31, 3]
    assert "int64-as-int32" in dict(load_target("openvino").quirks)


def test_sums_and_means_are_not_padded_for_openvino():
    m = model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], [t("x", FLOAT, ["n", "w"])],
              [t("y", FLOAT, [None])], initializer=[onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")], opset=13)
    assert ops_of(_lowered(m)) == ["ReduceSum"]


def _reduce_18(op: str, axes: list[int] | None, keepdims: int = 1, noop: int | None = None, dtype: int = FLOAT,
               axes_input: bool = False) -> onnx.ModelProto:
    inputs, inits, extra = ["x"], [], []
    if axes_input:
        inputs.append("axes")
        extra.append(t("axes", INT64, [None]))
    elif axes is not None:
        inputs.append("axes")
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    attrs = {"keepdims": keepdims, **({} if noop is None else {"noop_with_empty_axes": noop})}
    reduced = 0 if keepdims or axes_input or (axes is None and noop) else 2 if axes is None else len({a % 2 for a in axes})
    out = None if axes_input and not keepdims else [None] * (2 - reduced)
    return model([helper.make_node(op, inputs, ["y"], **attrs)], [t("x", dtype, ["n", "w"]), *extra],
                 [helper.make_tensor_value_info("y", dtype, out)], initializer=inits, opset=18)


def _some_of_each(x: np.ndarray, axes: list[int] | None, noop: int | None) -> bool:
    """No mean of nothing (undefined in ONNX: onnxruntime gives 0, the reference NaN)."""
    reduced = [] if axes is None and noop else range(x.ndim) if axes is None else axes
    return all(x.shape[a] > 0 for a in reduced)


ONNX2TORCH_SUMS = ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceMean"]
XS = [np.arange(12, dtype=np.float32).reshape(3, 4) + 1, np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)]


@pytest.mark.parametrize("op", ONNX2TORCH_SUMS)
@pytest.mark.parametrize("axes,noop", [([1], None), ([0], None), ([-1], None), (None, None), (None, 1), ([0, 1], None)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_opset_18_reductions_lowered_for_onnx2torch_are_sums(op, axes, noop, keepdims):
    m = _reduce_18(op, axes, keepdims, noop)
    xs = [x for x in XS if op != "ReduceMean" or _some_of_each(x, axes, noop)]
    # onnxruntime returns an empty input unreduced over a negative axis (its quirk
    # reduce-negative-axis-empty, rewritten only for it): the reference alone there.
    backends = ("reference",) if axes and min(axes) < 0 else ("reference", "onnxruntime")
    with np.errstate(all="ignore"):
        low, _ = lower_checked(m, inputs=[{"x": x} for x in xs], target="onnx2torch", backends=backends)
    assert op not in ops_of(low) and "ReduceSum" in ops_of(low)


def test_run_time_axes_and_integer_sums_for_onnx2torch():
    m = _reduce_18("ReduceMean", None, 0, axes_input=True)
    feeds = [{"x": XS[0], "axes": np.array(a, np.int64)} for a in ([1], [0, -1], [])]
    low, _ = lower_checked(m, inputs=feeds, target="onnx2torch")
    assert "ReduceMean" not in ops_of(low)
    ints = _reduce_18("ReduceSumSquare", [1], dtype=INT64)
    low, _ = lower_checked(ints, inputs=[{"x": np.arange(6, dtype=np.int64).reshape(2, 3) - 3}], target="onnx2torch")
    assert ops_of(low) == ["Mul", "ReduceSum"]


def test_what_no_sum_writes_is_named_for_onnx2torch():
    for op, dtype in (("ReduceMax", FLOAT), ("ReduceProd", FLOAT), ("ReduceLogSumExp", FLOAT), ("ReduceMean", INT64)):
        low = lowered_for(_reduce_18(op, [1], dtype=dtype), "onnx2torch")
        gaps = target_gaps(low, load_target("onnx2torch"))
        assert len(gaps) == 1 and op in gaps[0].where and "no-reduce-18" in gaps[0].why, (op, gaps)
    low = lowered_for(_reduce_18("ReduceMean", [1]), "onnx2torch")
    assert target_gaps(low, load_target("onnx2torch")) == []


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([0, 1], 1), (None, 0), ([-2], 1)])
def test_opset_18_extremes_and_products_over_static_dims_are_their_slices_for_onnx2torch(op, axes, keepdims):
    # (TorchScript's min of a [2] vector at opset 19, the user's own node: onnx2torch has
    # no converter for it, and the legalizer's slices run the same numbers)
    inputs, inits = ["x"], []
    if axes is not None:
        inputs.append("axes")
        inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    reduced = {a % 2 for a in axes} if axes is not None else {0, 1}
    dims = [1 if a in reduced else d for a, d in enumerate([3, 4]) if keepdims or a not in reduced]
    m = model([helper.make_node(op, inputs, ["y"], keepdims=keepdims)], [t("x", FLOAT, [3, 4])],
              [t("y", FLOAT, dims)], initializer=inits, opset=18)
    xs = [{"x": (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 3}]
    low, report = lower_checked(m, inputs=xs, target="onnx2torch")
    assert op not in ops_of(low) and not report.gaps
    # Over a dim known only at run time it stays, named.
    assert target_gaps(lowered_for(_reduce_18(op, [1]), "onnx2torch"), load_target("onnx2torch"))


def test_onnx2torch_itself_converts_the_sums_and_not_the_originals():
    """Runs only where onnx2torch is installed (it is not a test dependency)."""
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec("onnx2torch") is None:
        pytest.skip("onnx2torch is not installed (not a test dependency)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
    from runtimes import _stub_torchvision, run_onnx2torch

    _stub_torchvision()
    for op in ONNX2TORCH_SUMS:
        m = _reduce_18(op, [1], 0)
        with pytest.raises(Exception, match="not implemented"):
            run_onnx2torch(m, {"x": XS[0]})
        low = lowered_for(m, "onnx2torch")
        want = Executor(m, backend="reference").run({"x": XS[0]}).outputs["y"]
        np.testing.assert_allclose(np.asarray(run_onnx2torch(low, {"x": XS[0]})["y"]), want, rtol=1e-5)
