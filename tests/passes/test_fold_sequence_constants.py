"""Folding where the sequence itself stays (its web is not static)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.passes.fold_sequence_constants import FoldSequenceConstantsPass, reverse_sequence
from seqlower.errors import ModelError
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, seq, t


def _run(m):
    irm = ir.serde.deserialize_model(m)
    from seqlower.passes.infer_sequence_shapes import InferSequenceShapesPass

    InferSequenceShapesPass()(irm)
    result = FoldSequenceConstantsPass()(irm)
    return irm, result


def test_length_folds_although_elements_are_unknown_and_the_sequence_stays():
    # A 1-D split gives a known length over an unknown dim; the sequence is a model
    # output, so it leaves through the ABI (Ragged inside), and its length is a constant.
    m = model(
        [
            helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=0),
            helper.make_node("SequenceLength", ["s"], ["n"], name="len"),
        ],
        [t("x", FLOAT, ["N"])],
        [seq("s", FLOAT), t("n", INT64, [])],
        initializer=[const("sizes", [1, 2, 3], np.int64)],
    )
    irm, result = _run(m)
    assert result.modified
    assert [n.op_type for n in irm.graph] == ["SplitToSequence", "Identity"]
    low, report = lower_checked(m, inputs=[{"x": np.arange(6, dtype=np.float32)}])
    assert any(r["op"] == "SequenceLength" and r["how"] == "folded" for r in report.rewrites)
    assert any(r["op"] == "SplitToSequence" and r["into"] == "ragged" for r in report.rewrites)
    assert [o.name for o in low.graph.output] == ["s_values", "s_shapes", "n"]


def test_nothing_to_fold_is_not_modified():
    m = model(
        [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0), helper.make_node("SequenceLength", ["s"], ["n"])],
        [t("x", FLOAT, ["N"])],
        [t("n", INT64, [])],
    )
    irm, result = _run(m)
    assert not result.modified and [n.op_type for n in irm.graph] == ["SplitToSequence", "SequenceLength"]


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_folds_for_both_axis_orders(batch_axis, time_axis):
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2) if time_axis == 0 else np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    lens = np.array([4, 0, 1], np.int64)
    m = model(
        [helper.make_node("ReverseSequence", ["rx", "lens"], ["r"], batch_axis=batch_axis, time_axis=time_axis),
         helper.make_node("Add", ["r", "x"], ["y"])],
        [t("x", FLOAT, list(x.shape))],
        [t("y", FLOAT, list(x.shape))],
        initializer=[const("rx", x), const("lens", lens)],
    )
    low, _ = lower_checked(m)
    assert ops_of(low) == ["Add"]


def test_reverse_sequence_numpy_matches_the_spec_and_rejects_bad_lengths():
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)  # batch 2, time 3
    out = reverse_sequence(x, np.array([3, 1], np.int64), batch_axis=0, time_axis=1, where="n")
    assert out.tolist() == [["c", "b", "a"], ["d", "e", "f"]]
    with pytest.raises(ModelError, match="sequence_lens\\[1\\] = 4 is out of range"):
        reverse_sequence(x, np.array([0, 4], np.int64), 0, 1, "n")
