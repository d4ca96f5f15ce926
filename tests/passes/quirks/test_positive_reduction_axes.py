"""onnxruntime quirk "reduce-negative-axis-empty": reductions and ArgMax/ArgMin count
negative axes from the front (passes/quirks/positive_reduction_axes.py). onnxruntime's own
wrong shapes first (when they are right, take the quirk off the profile), then every
reduction, at every opset's axes form, lowered for onnxruntime and run on it against
the reference backend, and the one form no rewrite reaches named by check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower.executor import Executor
from seqlower.passes.quirks.pad_reduced_axes import REDUCTIONS
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, INT64, const, lowered_for, model, ops_of, t


def _reduce(op: str, axes, *, keepdims: int = 1, opset: int = 18, dims=("n", "w", "c"), axes_input: str | None = None,
            dtype: int = FLOAT) -> onnx.ModelProto:
    inputs, inits, attrs, extra = ["x"], [], {"keepdims": keepdims}, []
    if op in ("ArgMax", "ArgMin"):
        attrs["axis"] = axes
        out_dtype = INT64
    else:
        out_dtype = dtype
        if opset >= (13 if op == "ReduceSum" else 18):
            inputs.append("axes")
            if axes_input == "runtime":
                extra.append(t("axes", INT64, [None]))
            else:
                inits.append(const("axes", np.array(axes, np.int64)))
        else:
            attrs["axes"] = axes
    if dims is None:  # x of a rank known only at run time: a Reshape to a run-time shape
        nodes = [helper.make_node("Reshape", ["flat", "shape"], ["x"])]
        graph_inputs = [t("flat", dtype, ["k"]), t("shape", INT64, [None])]
        out_dims = None
    else:
        nodes, graph_inputs = [], [t("x", dtype, list(dims))]
        out_dims = [None] * (len(dims) - (0 if keepdims else 1 if op in ("ArgMax", "ArgMin") else len(axes or dims)))
    nodes.append(helper.make_node(op, inputs, ["y"], **attrs))
    return model(nodes, [*graph_inputs, *extra], [t("y", out_dtype, out_dims)], initializer=inits, opset=opset)


def _lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    return lowered_for(m, "onnxruntime")


def test_onnxruntime_returns_an_empty_input_unreduced_over_a_negative_axis():
    x = {"x": np.zeros((3, 0, 2), np.float32)}
    assert Executor(_reduce("ReduceSum", [-1]), backend="onnxruntime").run(x).outputs["y"].shape == (3, 0, 2)
    assert Executor(_reduce("ReduceSum", [2]), backend="onnxruntime").run(x).outputs["y"].shape == (3, 0, 1)
    assert Executor(_reduce("ArgMax", -3, opset=13), backend="onnxruntime").run(x).outputs["y"].shape == (3, 0, 2)
    assert "reduce-negative-axis-empty" in dict(load_target("onnxruntime").quirks)


FEEDS = [np.zeros((3, 0, 2), np.float32), np.zeros((0, 3, 2), np.float32), np.zeros((2, 3, 0), np.float32),
         np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5]


def _compare(m: onnx.ModelProto, low: onnx.ModelProto, feeds=FEEDS, extra=None) -> None:
    reference, ort = Executor(m, backend="reference"), Executor(low, backend="onnxruntime")
    for x in feeds:
        given = {i.name for i in m.graph.input}
        run = {"x": x} if "x" in given else {"flat": x.reshape(-1), "shape": np.array(x.shape, np.int64)}
        run.update(extra or {})
        try:
            with np.errstate(all="ignore"):
                want = reference.run(run).outputs["y"]
        except Exception:  # noqa: BLE001 - an argmax over an empty axis: no result to compare
            continue
        got = ort.run(run).outputs["y"]
        assert got.shape == want.shape, (x.shape, got.shape, want.shape)
        if mean_of_nothing(m, x):
            continue  # ONNX: undefined (onnxruntime gives 0, the reference NaN)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{x.shape}")


def mean_of_nothing(m: onnx.ModelProto, x: np.ndarray) -> bool:
    return m.graph.node[-1].op_type == "ReduceMean" and x.size == 0


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes", [[-1], [-2], [0, -1], [-3, -2, -1]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_every_reduction_with_negative_axes_gives_onnx_shapes_on_onnxruntime(op, axes, keepdims):
    m = _reduce(op, axes, keepdims=keepdims)
    low = _lowered(m)
    feeds = [np.abs(x) + 1 if op == "ReduceLogSum" and x.size else x for x in FEEDS]
    _compare(m, low, feeds)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [-1, -2, -3])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_and_argmin_count_their_axis_from_the_front(op, axis, keepdims):
    m = _reduce(op, axis, keepdims=keepdims, opset=13)
    low = _lowered(m)
    assert all(a.i >= 0 for n in low.graph.node for a in n.attribute if a.name == "axis")
    _compare(m, low)


@pytest.mark.parametrize("opset", [11, 13, 17, 18])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_axes_as_attribute_or_input_at_every_opset(opset, op):
    m = _reduce(op, [-1], keepdims=0, opset=opset)
    _compare(m, _lowered(m))


def test_run_time_axes_are_counted_from_the_front_at_run_time():
    m = _reduce("ReduceSum", None, keepdims=0, axes_input="runtime")
    low = _lowered(m)
    assert "Where" in ops_of(low)
    for axes in ([-1], [1], [-3, 2], []):
        _compare(m, low, extra={"axes": np.array(axes, np.int64)})


def test_a_constant_axes_input_on_an_input_of_unknown_rank_is_counted_at_run_time():
    m = _reduce("ReduceMax", [-1], keepdims=0, dims=None)
    low = _lowered(m)
    assert "Where" in ops_of(low)
    _compare(m, low)


def test_positive_axes_are_left_alone_and_a_second_lowering_changes_nothing():
    assert ops_of(_lowered(_reduce("ReduceSum", [1]))) == ["ReduceSum"]
    once = _lowered(_reduce("ReduceSum", None, axes_input="runtime"))
    assert _lowered(once).SerializeToString() == _lowered(_lowered(once)).SerializeToString()
    assert ops_of(_lowered(once)) == ops_of(once)


def test_an_axes_attribute_over_an_input_of_unknown_rank_is_named_by_check():
    m = _reduce("ReduceMean", [-1], opset=13, dims=None)
    low = _lowered(m)
    gaps = target_gaps(low, load_target("onnxruntime"))
    assert len(gaps) == 1 and "ReduceMean" in gaps[0].where and "reduce-negative-axis-empty" in gaps[0].why
    ranked = _lowered(_reduce("ReduceMean", [-1], opset=13))
    assert target_gaps(ranked, load_target("onnxruntime")) == []
    # Not a gap on a target without the quirk.
    assert not any("reduce-negative-axis-empty" in g.why for g in target_gaps(low, load_target("openvino")))


def test_reductions_in_functions_and_loop_bodies_are_counted_from_the_front():
    body = helper.make_graph(
        [helper.make_node("Slice", ["xs", "zero", "i_1d", "zero"], ["head"]),
         helper.make_node("ReduceSum", ["head", "minus_two"], ["s"], keepdims=0),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [t("i", INT64, []), t("cond", TensorProto.BOOL, [])],
        [t("cond_out", TensorProto.BOOL, []), t("s", FLOAT, [None])],
        [const("zero", np.array([0], np.int64)), const("minus_two", np.array([-2], np.int64))],
    )
    body.node.insert(0, helper.make_node("Unsqueeze", ["i", "zero"], ["i_1d"]))
    m = model([helper.make_node("Loop", ["trips", ""], ["sums"], body=body)],
              [t("trips", INT64, []), t("xs", FLOAT, ["k", "c"])], [t("sums", FLOAT, [None, 2])], opset=17)
    feeds = {"trips": np.array(3, np.int64), "xs": np.arange(8, dtype=np.float32).reshape(4, 2)}
    low = _lowered(m)
    want = Executor(m, backend="reference").run(feeds).outputs["sums"]
    with pytest.raises(Exception, match="Loop"):  # the first row's unreduced [0, 2] breaks the scan
        Executor(m, backend="onnxruntime").run(feeds)
    np.testing.assert_allclose(Executor(low, backend="onnxruntime").run(feeds).outputs["sums"], want)
