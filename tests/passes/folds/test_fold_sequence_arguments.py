"""passes/folds/fold_sequence_arguments.py: a split's sizes computed from static shapes become a
constant; where they stay run-time, an Expand in their computation that gives nothing
whatever its input holds is folded to the empty constant (TorchScript's ``chunk`` sizes,
which onnxruntime's optimizer miscounts once the lowering reads their Shape)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.executor.verify import verify
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t


def _chunk_sizes(chunks: int) -> list[onnx.NodeProto]:
    """TorchScript's ``x.chunk(chunks, 0)`` sizes, as it exports them (opset 18)."""
    return [
        helper.make_node("Shape", ["x"], ["dims"]),
        helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
        helper.make_node("Add", ["n", "chunks_m1"], ["n_up"]),
        helper.make_node("Div", ["n_up", "chunks"], ["q"]),
        helper.make_node("ConstantOfShape", ["one1"], ["ones"], value=helper.make_tensor("v", INT64, [1], [1])),
        helper.make_node("Mul", ["ones", "minus1"], ["neg"]),
        helper.make_node("Equal", ["chunks_m1", "neg"], ["is_neg"]),
        helper.make_node("Where", ["is_neg", "ones", "chunks_m1"], ["reps"]),
        helper.make_node("Expand", ["q", "reps"], ["head"]),
        helper.make_node("Mul", ["q", "chunks_m1"], ["taken"]),
        helper.make_node("Sub", ["n", "taken"], ["last"]),
        helper.make_node("Concat", ["head", "last"], ["sizes"], axis=0),
    ], [const("zero", np.array(0, np.int64)), const("chunks_m1", np.array([chunks - 1], np.int64)),
        const("chunks", np.array(chunks, np.int64)), const("one1", np.array([1], np.int64)),
        const("minus1", np.array(-1, np.int64))]


def _chunk_appended(chunks: int = 1) -> onnx.ModelProto:
    nodes, inits = _chunk_sizes(chunks)
    nodes += [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=0),
        helper.make_node("ReduceSum", ["x", "axes0"], ["total"], keepdims=1),
        helper.make_node("SequenceInsert", ["s", "total"], ["s2"]),
        helper.make_node("SequenceLength", ["s2"], ["count"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0),
    ]
    inits.append(const("axes0", np.array([0], np.int64)))
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, [None, "w"]), t("count", INT64, [])],
                 initializer=inits, opset=18)


FEEDS = [{"x": np.arange(n * w, dtype=np.float32).reshape(n, w)} for n, w in [(3, 2), (0, 2), (1, 1), (4, 0)]]


def test_an_expand_to_a_computed_zero_in_split_sizes_folds_and_runs_on_onnxruntime_optimized():
    m = _chunk_appended()
    # onnxruntime runs the original to a wrong count or an error (sizes [n, n]): the
    # lowered model on it is held to the original on the reference backend.
    with pytest.raises(AssertionError, match="onnxruntime"):
        lower_checked(m, inputs=FEEDS)
    low, _ = lower_checked(m, inputs=FEEDS, backends=("reference",))
    assert "Expand" not in ops_of(low)
    for level in ("disable", "basic", "all"):
        rep = verify(m, low, inputs=FEEDS, backend="reference", lowered_backend="onnxruntime", ort_opt_level=level)
        assert rep.equivalent, (level, rep.to_json())


@pytest.mark.parametrize("chunks", [2, 3])
def test_an_expand_that_gives_values_stays(chunks):
    m = _chunk_appended(chunks)
    feeds = [f for f in FEEDS if f["x"].shape[0] >= chunks]
    low, _ = lower_checked(m, inputs=feeds)
    assert "Expand" in ops_of(low)
