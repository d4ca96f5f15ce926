"""OpenVINO quirk "transpose-empty": a Transpose whose dims other than 1 keep their order
is a Reshape there in which a 0 copies the input's dim, so one of an empty tensor fails
or comes out in another empty shape. Lowered for OpenVINO, each is a Reshape to its
permuted dims, or, where OpenVINO knows dims of 1 this analysis does not, a Transpose of
an input whose dims OpenVINO no longer knows (passes/quirks/transposes_as_reshapes.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import load_model
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from seqlower.passes.quirks.transposes_as_reshapes import TransposesAsReshapesPass
from seqlower.targets import load_target
from tests.helpers import BOOL, FLOAT, INT64, const, lower_checked, model, ops_of, t


def _known_ones(opset: int, dtype: int = FLOAT) -> onnx.ModelProto:
    """Transposes of [1, N, M] and [N, M, 1] whose 1 moves past N and M."""
    return model([helper.make_node("Transpose", ["a"], ["ya"], perm=[1, 2, 0]),
                  helper.make_node("Transpose", ["b"], ["yb"], perm=[2, 0, 1])],
                 [t("a", dtype, [1, "N", "M"]), t("b", dtype, ["N", "M", 1])],
                 [t("ya", dtype, ["N", "M", 1]), t("yb", dtype, [1, "N", "M"])], opset=opset)


def _ones_only_openvino_knows() -> onnx.ModelProto:
    """``Reshape(x, [1, 1, N, M])``, declared [?, ?, ?, ?] (onnx does not propagate the
    target), transposed [1, 2, 3, 0]: graph program 20220's lowered ConcatFromSequence."""
    return model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Concat", ["one", "one", "s"], ["target"], axis=0),
                  helper.make_node("Reshape", ["x", "target"], ["a"]), helper.make_node("Transpose", ["a"], ["y"], perm=[1, 2, 3, 0])],
                 [t("x", FLOAT, ["N", "M"])], [t("y", FLOAT, [None, None, None, None])], opset=17,
                 initializer=[const("one", np.array([1], np.int64))])


def _rewritten(m: onnx.ModelProto) -> onnx.ModelProto:
    low = to_proto(TransposesAsReshapesPass()(load_model(m)).model)
    onnx.checker.check_model(low, full_check=True)
    return low


SIZES = [(0, 0), (0, 3), (2, 0), (2, 3)]


def test_openvino_reshapes_a_transpose_of_an_empty_tensor_wrong():
    # The quirk itself: when OpenVINO is fixed, this fails and the rewrite can go.
    assert "transpose-empty" in dict(load_target("openvino").quirks)
    m = _known_ones(17)
    with pytest.raises(Exception, match="conflicts with the reshape pattern"):
        Executor(m, backend="openvino").run({"a": np.zeros((1, 0, 3), np.float32), "b": np.zeros((0, 3, 1), np.float32)})
    got = Executor(m, backend="openvino").run({"a": np.zeros((1, 0, 0), np.float32), "b": np.zeros((0, 0, 1), np.float32)}).outputs
    assert got["ya"].shape == (1, 0, 1)  # ONNX: (0, 0, 1)
    with pytest.raises(Exception, match="conflicts with the reshape pattern"):
        Executor(_ones_only_openvino_knows(), backend="openvino").run({"x": np.zeros((0, 3), np.float32)})


@pytest.mark.parametrize("opset,dtype", [(11, FLOAT), (13, INT64), (14, BOOL), (18, FLOAT), (21, INT64)])
def test_a_transpose_moving_only_ones_is_a_reshape_openvino_gives_right(opset, dtype):
    m = _known_ones(opset, dtype)
    low = _rewritten(m)
    assert "Transpose" not in ops_of(low)
    np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    for n, w in SIZES:
        feeds = {"a": np.arange(n * w).astype(np_type).reshape(1, n, w), "b": np.arange(n * w).astype(np_type).reshape(n, w, 1)}
        want = {"ya": feeds["a"].transpose(1, 2, 0), "yb": feeds["b"].transpose(2, 0, 1)}
        for backend in ("onnxruntime", "openvino"):
            got = Executor(low, backend=backend).run(feeds).outputs
            for k, v in want.items():
                assert got[k].shape == v.shape and np.array_equal(got[k], v), (backend, k, (n, w))


def test_ones_only_openvino_knows_are_hidden_from_it_and_it_transposes():
    m = _ones_only_openvino_knows()
    low = _rewritten(m)
    assert ops_of(low).count("Transpose") == 1 and "Where" in ops_of(low)
    assert _rewritten(low).SerializeToString() == low.SerializeToString()  # once
    for n, w in SIZES:
        x = np.arange(n * w, dtype=np.float32).reshape(n, w)
        got = Executor(low, backend="openvino").run({"x": x}).outputs["y"]
        assert got.shape == (1, n, w, 1) and np.array_equal(got, x.reshape(1, 1, n, w).transpose(1, 2, 3, 0))


@pytest.mark.parametrize("shape,perm", [([2, 3], [1, 0]), (["N", 3, 2], [0, 2, 1]), (["N", "M"], [0, 1])])
def test_static_positive_dims_real_permutations_and_identities_stay(shape, perm):
    m = model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], [t("x", FLOAT, shape)],
              [t("y", FLOAT, [shape[p] for p in perm])])
    assert _rewritten(m).SerializeToString() == m.SerializeToString()


def test_graph_program_20220_runs_on_openvino():
    # A list of one empty [N, M] element, mapped, concatenated on a new last axis: the
    # lowering's stacked Transpose, of dims [?, 1, N, M] here and [1, 1, N, M] there.
    import random

    from tests.program_generator import generate

    rng = random.Random(20220)
    m, feeds = generate(lambda kind, *a: rng.randint(a[0], a[1]) if kind == "int" else rng.choice(a[0]), shapes="v3")
    assert "ConcatFromSequence" in ops_of(m) and feeds["x"].size == 0
    low, _ = lower_checked(m, inputs=[feeds], target="openvino")
    assert "Transpose" in ops_of(low) and "Where" in ops_of(low)
    want = Executor(m, backend="reference").run(feeds).outputs
    got = Executor(low, backend="openvino").run(feeds).outputs
    for k, v in want.items():
        assert np.asarray(got[k]).shape == np.asarray(v).shape and np.array_equal(got[k], v), k
