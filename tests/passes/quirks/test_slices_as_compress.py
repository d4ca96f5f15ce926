"""OpenVINO quirk "slice-run-time-end": a Slice to an end known only at run time is taken
for the whole axis where its Shape is read. Lowered for OpenVINO, each such Slice is a
Gather of the positions a mask keeps (passes/quirks/slices_as_compress.py). The fixture
ts_masks_mapped_and_zipped_10323 is the export it was found in (fuzz seed 10323)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.targets import load_target
from tests.helpers import FLOAT, INT64, const, lowered_for, model, ops_of, t


def _element_length_read_back() -> onnx.ModelProto:
    """seqlower reduce (then tools/bisect_runtime.py)'s cut of seed 10323, then by hand: a row's mask (NonZero)
    is the buffer; ``Slice(buffer, 0, end)`` with ``end`` from a CumSum (0); the Shape of
    what it became is the next list's bounds, which read another buffer."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus1"], ["flat"]),
        helper.make_node("Cast", ["flat"], ["buffer"], to=onnx.TensorProto.FLOAT),
        helper.make_node("CumSum", ["lengths", "zero"], ["ends"]),
        helper.make_node("Concat", ["zero1", "ends"], ["bounds"], axis=0),
        helper.make_node("Gather", ["bounds", "one1"], ["start"]),
        helper.make_node("Sub", ["one1", "start"], ["end"]),
        helper.make_node("Slice", ["buffer", "zero1", "end", "zero1"], ["elem"]),
        helper.make_node("Mul", ["elem", "two"], ["mapped"]),
        helper.make_node("Shape", ["mapped"], ["mapped_len"]),
        helper.make_node("Concat", ["one1", "mapped_len"], ["bounds2"], axis=0),
        helper.make_node("Gather", ["bounds2", "one1"], ["end2"]),
        helper.make_node("Concat", ["head", "buffer"], ["buffer2"], axis=0),
        helper.make_node("Slice", ["buffer2", "zero1", "end2", "zero1"], ["y"]),
    ]
    return model(nodes, [t("x", FLOAT, [3, 2])], [t("y", FLOAT, [None])], opset=19, initializer=[
        const("minus1", np.array([-1], np.int64)), const("lengths", np.array([1, 0, 1], np.int64)),
        const("zero", np.array(0, np.int64)), const("zero1", np.array([0], np.int64)),
        const("one1", np.array([1], np.int64)), const("two", np.array(2.0, np.float32)),
        const("head", np.array([7.0], np.float32))])


_X = np.array([[1.6, -0.6], [-0.5, -1.1], [0.9, -2.3]], np.float32)


def test_openvino_takes_a_slice_to_a_run_time_end_for_the_whole_axis():
    # The quirk itself: when OpenVINO is fixed, this fails and the rewrite can go.
    assert "slice-run-time-end" in dict(load_target("openvino").quirks)
    m = _element_length_read_back()
    want = Executor(m, backend="onnxruntime").run({"x": _X}).outputs["y"]
    got = Executor(m, backend="openvino").run({"x": _X}).outputs["y"]
    assert want.tolist() == [] and got.shape != want.shape


def test_lowered_for_openvino_it_gives_onnxruntime_s_numbers():
    m = _element_length_read_back()
    low = lowered_for(m, "openvino")
    # The element's Slice is gone (its Shape is read), the last one stays (nothing reads its Shape).
    assert ops_of(low).count("Slice") == 1 and "Compress" not in ops_of(low)  # (OpenVINO lacks Compress)
    for x in (_X, -_X, np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)):
        want = Executor(m, backend="onnxruntime").run({"x": x}).outputs["y"]
        got = Executor(low, backend="openvino").run({"x": x}).outputs["y"]
        np.testing.assert_array_equal(got, want)


def _bounds_model(opset: int, steps: bool) -> onnx.ModelProto:
    """x[s0:e0, s1:e1] with every bound an input (negative ones included), its Shape
    read, and a Slice of axis 1 to a constant end that stays."""
    extra = ["axes", "ones"] if steps else ["axes"]
    nodes = [helper.make_node("Slice", ["x", "s", "e", *extra], ["y"]),
             helper.make_node("Neg", ["y"], ["minus_y"]),
             helper.make_node("Shape", ["minus_y"], ["y_dims"]),
             helper.make_node("Slice", ["x", "zero1", "two1", "one1"], ["z"]),
             helper.make_node("Shape", ["z"], ["z_dims"])]
    return model(nodes, [t("x", FLOAT, ["n", "w"]), t("s", INT64, [2]), t("e", INT64, [2])],
                 [t("y", FLOAT, [None, None]), t("y_dims", INT64, [2]), t("z", FLOAT, ["n", None]),
                  t("z_dims", INT64, [2])], opset=opset, initializer=[
                     const("axes", np.array([0, -1], np.int64)), const("ones", np.array([1, 1], np.int64)),
                     const("zero1", np.array([0], np.int64)), const("one1", np.array([1], np.int64)),
                     const("two1", np.array([2], np.int64))])


@pytest.mark.parametrize("opset,steps", [(11, False), (13, True), (19, False)])
def test_every_bound_means_what_onnx_says(opset, steps):
    from seqlower.passes.quirks.slices_as_compress import SlicesAsCompressPass
    from seqlower.io.models import to_proto
    import onnx_ir as ir

    m = _bounds_model(opset, steps)
    low = ir.serde.deserialize_model(m)
    SlicesAsCompressPass()(low)
    low = to_proto(low)
    assert ops_of(low).count("Slice") == 1 and ops_of(low).count("Compress") == 2
    onnx.checker.check_model(low, full_check=True)
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    bounds = [([0, 0], [4, 5]), ([1, -3], [-1, 100]), ([-100, 2], [2, 2]), ([3, 4], [1, 5]),
              ([5, -1], [9, 5]), ([0, -5], [-4, -1])]
    for s, e in bounds:
        feeds = {"x": x, "s": np.array(s, np.int64), "e": np.array(e, np.int64)}
        want = Executor(m, backend="onnxruntime").run(feeds).outputs
        got = Executor(low, backend="onnxruntime").run(feeds).outputs
        for name in ("y", "y_dims", "z", "z_dims"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{s}:{e}")
    empty = {"x": np.zeros((0, 5), np.float32), "s": np.array([0, 1], np.int64), "e": np.array([3, 3], np.int64)}
    assert Executor(low, backend="onnxruntime").run(empty).outputs["y"].shape == (0, 2)


def test_a_slice_stepping_by_other_than_one_or_whose_shape_nothing_reads_stays():
    nodes = [helper.make_node("Slice", ["x", "s", "e", "axes", "back"], ["y"]), helper.make_node("Shape", ["y"], ["d"]),
             helper.make_node("Slice", ["x", "s", "e", "axes"], ["y2"])]
    m = model(nodes, [t("x", FLOAT, ["n"]), t("s", INT64, [1]), t("e", INT64, [1])],
              [t("y", FLOAT, [None]), t("d", INT64, [1]), t("y2", FLOAT, [None])],
              initializer=[const("axes", np.array([0], np.int64)), const("back", np.array([-1], np.int64))])
    low = lowered_for(m, "openvino")
    assert ops_of(low).count("Slice") == 2 and "NonZero" not in ops_of(low)


def test_a_slice_of_a_tensor_of_static_shape_stays():
    # OpenVINO runs it right, and fails to compile the Compress's NonZero when the end
    # comes from constants it does not fold (fuzz seeds 10013, 10116, 10191): here a
    # CumSum of constant lengths, in a model whose input is exported as a default
    # (keep_initializers_as_inputs) that OpenVINO reads as its constant.
    nodes = [helper.make_node("CumSum", ["lengths", "zero"], ["ends"]),
             helper.make_node("Add", ["ends", "pos"], ["end"]),
             helper.make_node("Slice", ["x", "zero1", "end", "zero1"], ["y"]),
             helper.make_node("Shape", ["y"], ["d"])]
    m = model(nodes, [t("x", FLOAT, [4, 2]), t("pos", INT64, [1])], [t("y", FLOAT, [None, 2]), t("d", INT64, [2])], opset=19, initializer=[
        const("lengths", np.array([1], np.int64)), const("zero", np.array(0, np.int64)),
        const("zero1", np.array([0], np.int64)), const("pos", np.array([1], np.int64))])
    low = lowered_for(m, "openvino")
    assert "Slice" in ops_of(low) and "NonZero" not in ops_of(low)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(Executor(low, backend="openvino").run({"x": x}).outputs["y"], x[:2])
