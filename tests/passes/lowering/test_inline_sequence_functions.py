"""InlineSequenceFunctionsPass: model-local functions that take, return or hold sequences
are inlined at every call and lowered there; other functions stay. The models are
programs of the shape of the ONNX Model Zoo's resnet preprocessing (a SequenceMap inside a
function over a seq(tensor(uint8)) of images of different sizes), checked on both
backends with images of different sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.executor.verify import verify
from seqlower.io.models import to_proto
from seqlower.passes.lowering.inline_sequence_functions import InlineSequenceFunctionsPass
from tests.helpers import FLOAT, body, lower_checked, model, t

UINT8 = TensorProto.UINT8


def _images_type(elem=UINT8, shape=("H", "W", 3)) -> onnx.TypeProto:
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, list(shape)))


def _preprocess_function(resize: bool, opset: int = 18) -> onnx.FunctionProto:
    """images -> one batch [N, 3, 8, 8] (resize) or the images normalised, as a list."""
    consts = [numpy_helper.from_array(np.array(255, np.float32), "c255"),
              numpy_helper.from_array(np.array(0.45, np.float32), "mean")]
    nodes = [helper.make_node("Cast", ["img"], ["f"], to=FLOAT)]
    if resize:
        consts.append(numpy_helper.from_array(np.array([8, 8, 3], np.int64), "sizes"))
        nodes += [helper.make_node("Resize", ["f", "", "", "sizes"], ["r"], mode="linear"),
                  helper.make_node("Div", ["r", "c255"], ["d"]), helper.make_node("Sub", ["d", "mean"], ["s"]),
                  helper.make_node("Transpose", ["s"], ["out"], perm=[2, 0, 1])]
        out = t("out", FLOAT, [3, 8, 8])
    else:
        nodes += [helper.make_node("Div", ["f", "c255"], ["d"]), helper.make_node("Sub", ["d", "mean"], ["out"])]
        out = t("out", FLOAT, ["h", "w", 3])
    map_body = body(nodes, [t("img", UINT8, ["h", "w", 3])], [out], initializer=consts)
    inner = [helper.make_node("SequenceMap", ["images"], ["pre"], body=map_body)]
    if resize:
        inner.append(helper.make_node("ConcatFromSequence", ["pre"], ["batch"], axis=0, new_axis=1))
    return helper.make_function("local", "preprocess", ["images"], ["batch" if resize else "pre"], inner,
                                [helper.make_opsetid("", opset)])


def _preprocess_model(resize: bool) -> onnx.ModelProto:
    fn = _preprocess_function(resize)
    out = t("batch", FLOAT, ["N", 3, 8, 8]) if resize else helper.make_value_info(
        "batch", helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, None)))
    call = helper.make_node("preprocess", ["images"], ["batch"], domain="local")
    return model([call], [helper.make_value_info("images", _images_type())], [out], opset=18, functions=[fn])


def _images(sizes) -> dict:
    rng = np.random.default_rng(0)
    return {"images": [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in sizes]}


@pytest.mark.parametrize("resize", [True, False])
def test_a_map_over_images_inside_a_function_lowers(resize):
    m = _preprocess_model(resize)
    feeds = [_images([(4, 5), (2, 7), (9, 3)]), _images([(1, 1)])]
    if not resize:
        feeds += [_images([(0, 3), (2, 2)]), {"images": []}]  # (Resize refuses an empty image)
    low, report = lower_checked(m, inputs=feeds)
    assert not low.functions and any("local::preprocess" in n for n in report.notes)
    # The images cross the model boundary as the Flat pair.
    assert [i.name for i in low.graph.input] == ["images_values", "images_shapes"]
    ops = {n.op_type for n in low.graph.node}
    # Normalising is elementwise: it runs once on the values, no Loop; resizing needs one.
    assert ("Loop" in ops) == resize


def test_other_functions_stay_and_sequence_functions_called_from_them_are_inlined():
    # local::pad (no sequence) stays; local::halves (holds a split) and local::outer (calls
    # halves from a Loop body) go.
    halves = helper.make_function(
        "local", "halves", ["x"], ["y"],
        [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0),
         helper.make_node("ConcatFromSequence", ["parts"], ["y"], axis=1)],
        [helper.make_opsetid("", 17)])
    pad = helper.make_function("local", "pad", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                               [helper.make_opsetid("", 17)])
    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]),
                      helper.make_node("halves", ["acc"], ["h"], domain="local"),
                      helper.make_node("ReduceSum", ["h"], ["h_row"], keepdims=1),
                      helper.make_node("Add", ["acc", "h_row"], ["acc_out"])],
                     [t("i", TensorProto.INT64, []), t("c", TensorProto.BOOL, []), t("acc", FLOAT, [2, 3])],
                     [t("c_out", TensorProto.BOOL, []), t("acc_out", FLOAT, [2, 3])])
    outer = helper.make_function(
        "local", "outer", ["x", "n"], ["y"], [helper.make_node("Loop", ["n", "", "x"], ["y"], body=loop_body)],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    m = model([helper.make_node("outer", ["x", "n"], ["a"], domain="local"),
               helper.make_node("pad", ["a"], ["y"], domain="local")],
              [t("x", FLOAT, [2, 3]), t("n", TensorProto.INT64, [])], [t("y", FLOAT, [2, 3])],
              functions=[halves, pad, outer])
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 3)).astype(np.float32), "n": np.array(k, np.int64)} for k in (0, 1, 3)]
    low, _ = lower_checked(m, inputs=feeds)
    assert [f.name for f in low.functions] == ["pad"]
    assert "SplitToSequence" not in str(low)


def test_nothing_changes_without_functions_holding_sequences():
    pad = helper.make_function("local", "pad", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                               [helper.make_opsetid("", 17)])
    m = model([helper.make_node("pad", ["x"], ["y"], domain="local")], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])],
              functions=[pad])
    result = InlineSequenceFunctionsPass()(load_model(m))
    assert not result.modified and list(result.model.functions) == [("local", "pad", "")]


def test_a_function_the_inliner_cannot_take_stays_with_the_reason():
    # Its ai.onnx opset differs from the model's: onnx_ir's inliner refuses it.
    fn = _preprocess_function(False, opset=17)
    call = helper.make_node("preprocess", ["images"], ["batch"], domain="local")
    out = helper.make_value_info("batch", helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, None)))
    m = model([call], [helper.make_value_info("images", _images_type())], [out], opset=18, functions=[fn])
    low_ir, report = lower_with_report(load_model(m), LowerOptions(target="onnxruntime"))
    low = to_proto(low_ir)
    assert len(low.functions) == 1 and any("not inlined" in n and "17" in n for n in report.notes)
    feeds = _images([(2, 3), (1, 4)])
    assert verify(m, low, inputs=[feeds], backend="reference").equivalent


def test_the_lowered_model_runs_images_of_every_size_the_original_runs():
    m = _preprocess_model(True)
    low = to_proto(lower_with_report(load_model(m), LowerOptions())[0])
    for sizes in ([(3, 3)], [(5, 2), (2, 5)], [(1, 9), (9, 1), (4, 4)]):
        feeds = _images(sizes)
        want = Executor(m).run(feeds).outputs["batch"]
        for backend in ("reference", "onnxruntime"):
            got = Executor(low, backend=backend).run(feeds).outputs["batch"]
            assert got.shape == (len(sizes), 3, 8, 8) and np.allclose(got, want, atol=1e-5)
