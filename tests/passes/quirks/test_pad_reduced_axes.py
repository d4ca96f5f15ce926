"""tract quirk "reduce-empty-axis": reductions over an axis that may be empty get one
neutral element along it (passes/quirks/pad_reduced_axes.py). tract's own failure first (when
it passes, take the quirk off the profile), then every reduction at the axes and shapes
that hit it, lowered for tract, against the reference backend on tract itself."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.quirks.pad_reduced_axes import REDUCTIONS
from seqlower.fastpath.pipeline import lower_proto_with_report
from seqlower.targets import load_target
from tests.helpers import FLOAT, INT64, const, lowered_for, model, ops_of, t


def _reduce(op: str, axes: list[int] | None, *, keepdims: int = 0, opset: int = 18, dtype: int = FLOAT,
            dims=("n", "w")) -> onnx.ModelProto:
    as_input = opset >= (13 if op == "ReduceSum" else 18)
    inputs, inits, attrs = ["x"], [], {"keepdims": keepdims}
    if axes is not None and as_input:
        inputs.append("axes")
        inits.append(const("axes", np.array(axes, np.int64)))
    elif axes is not None:
        attrs["axes"] = axes
    out_rank = len(dims) if keepdims else len(dims) - len({a % len(dims) for a in (axes if axes is not None else range(len(dims)))})
    return model([helper.make_node(op, inputs, ["y"], **attrs)], [t("x", dtype, list(dims))], [t("y", dtype, [None] * out_rank)],
                 initializer=inits, opset=opset)


def _lowered(m: onnx.ModelProto) -> onnx.ModelProto:
    return lowered_for(m, "tract")


def test_tract_panics_on_a_sum_over_an_empty_last_axis_and_misreads_an_empty_max():
    x = {"x": np.zeros((3, 0), np.float32)}
    with pytest.raises(Exception, match="crashed|panic"):
        Executor(_reduce("ReduceSum", [1]), backend="tract").run(x)
    got = Executor(_reduce("ReduceMax", [1]), backend="tract").run(x).outputs["y"]
    assert np.all(np.isfinite(got)) and got.shape == (3,)  # ONNX: -inf
    assert "reduce-empty-axis" in dict(load_target("tract").quirks)


FEEDS = [np.arange(8, dtype=np.float32).reshape(2, 4) - 3, np.zeros((3, 0), np.float32), np.zeros((0, 3), np.float32),
         np.zeros((0, 0), np.float32)]


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes", [[1], [0], [-1], None, [0, 1]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_every_reduction_lowered_for_tract_gives_onnx_numbers_on_tract(op, axes, keepdims):
    m = _reduce(op, axes, keepdims=keepdims)
    low = _lowered(m)
    reference, tract = Executor(m, backend="reference"), Executor(low, backend="tract")
    for x in FEEDS:
        if op == "ReduceLogSum" and x.size:
            x = np.abs(x) + 1
        with np.errstate(all="ignore"):
            want = reference.run({"x": x}).outputs["y"]
        got = tract.run({"x": x}).outputs["y"]
        assert got.shape == want.shape, (x.shape, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{x.shape}")


@pytest.mark.parametrize("opset", [11, 13, 17, 18])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_axes_as_attribute_or_input_at_every_opset(opset, op):
    m = _reduce(op, [1], keepdims=1, opset=opset)
    low = _lowered(m)
    for x in FEEDS:
        with np.errstate(all="ignore"):
            want = Executor(m, backend="reference").run({"x": x}).outputs["y"]
        for backend in ("tract", "onnxruntime"):
            np.testing.assert_allclose(Executor(low, backend=backend).run({"x": x}).outputs["y"], want, rtol=1e-6,
                                       err_msg=f"{backend} {x.shape}")


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_integer_extremes(op):
    m = _reduce(op, [1], dtype=INT64)
    low = _lowered(m)
    for x in (np.arange(6, dtype=np.int64).reshape(2, 3) - 2, np.zeros((2, 0), np.int64)):
        want = Executor(m, backend="reference").run({"x": x}).outputs["y"]
        np.testing.assert_array_equal(Executor(low, backend="tract").run({"x": x}).outputs["y"], want)


def test_known_positive_axes_are_left_alone_and_a_second_lowering_pads_nothing():
    static = _reduce("ReduceSum", [1], dims=("n", 4))
    assert ops_of(_lowered(static)) == ["ReduceSum"]
    once = _lowered(_reduce("ReduceSum", [1]))
    twice = _lowered(once)
    assert ops_of(once).count("Expand") == 1 and ops_of(twice) == ops_of(once)


def test_a_product_is_left_alone_tract_gives_one_for_nothing():
    # Padded, a product of the shape dims that reshapes write inside lowered loops made a
    # second lowering differ from the first (shapes forgotten between them).
    m = _reduce("ReduceProd", [1])
    assert ops_of(_lowered(m)) == ["ReduceProd"]
    got = Executor(m, backend="tract").run({"x": np.zeros((3, 0), np.float32)}).outputs["y"]
    np.testing.assert_array_equal(got, np.ones(3, np.float32))


def test_the_cli_region_reaches_reductions_of_a_model_without_sequences():
    """The region the CLI lowers holds every node a quirk of the target rewrites."""
    m = _reduce("ReduceMean", [1])
    out, report = lower_proto_with_report(m, LowerOptions(target="tract"))
    low = out if isinstance(out, onnx.ModelProto) else to_proto(out)
    assert "ReduceMean" not in ops_of(low) and "Concat" in ops_of(low)
    got = Executor(low, backend="tract").run({"x": np.zeros((2, 0), np.float32)}).outputs["y"]
    assert got.shape == (2,) and np.isnan(got).all()


@pytest.mark.parametrize("op,extreme", [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_a_row_of_infinities_keeps_its_infinity_on_tract(op, extreme):
    """tract's float max starts from the lowest finite float: a row of -inf (an attention
    mask's fully masked row) came out as -3.4e38, with no empty axis involved."""
    m = _reduce(op, [1], dims=("n", 4))
    x = np.array([[extreme] * 4, [1, 2, extreme, 3]], np.float32)
    assert np.isfinite(Executor(m, backend="tract").run({"x": x}).outputs["y"][0])
    low = _lowered(m)
    np.testing.assert_array_equal(Executor(low, backend="tract").run({"x": x}).outputs["y"],
                                  Executor(m, backend="reference").run({"x": x}).outputs["y"])
