"""Folding where the sequence itself stays (its web is not static)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.passes.folds.fold_sequence_constants import FoldSequenceConstantsPass, reverse_sequence
from seqlower.errors import ModelError
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, seq, t


def _run(m):
    irm = ir.serde.deserialize_model(m)
    from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass

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


def _moved_constant_rows(read_into: str) -> onnx.ModelProto:
    """Rows of x with a constant row inserted, read back at a constant position (the fold
    folds that read) and put into the list again (``element``) or carried by a Loop
    (``loop``)."""
    nodes = [helper.make_node("SplitToSequence", ["x", "one"], ["s0"], axis=0),
             helper.make_node("SequenceInsert", ["s0", "row", "zero"], ["s1"]),
             helper.make_node("SequenceAt", ["s1", "zero"], ["read"])]
    if read_into == "element":
        nodes += [helper.make_node("SequenceInsert", ["s1", "read"], ["s2"]),
                  helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)]
    else:
        body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["acc"], ["acc_out"])],
                                 "b", [t("i", INT64, []), t("c", helper.TensorProto.BOOL, []), t("acc", FLOAT, [None, 3])],
                                 [t("c_out", helper.TensorProto.BOOL, []), t("acc_out", FLOAT, [None, 3])])
        nodes += [helper.make_node("Loop", ["one", "", "read"], ["y"], body=body)]
    row = np.ones((1, 3), np.float32)
    return model(nodes, [t("x", FLOAT, [4, 3])], [t("y", FLOAT, [None, 3])],
                 initializer=[const("one", 1, np.int64), const("zero", 0, np.int64), const("row", row)])


def test_a_fold_of_reads_the_analysis_knew_leaves_its_analysis_to_the_lowering(monkeypatch):
    """The fold replaces a read of a constant element by the constant; put back into a
    list, it is what the analysis counted as that element, so the Unrolled lowering
    after the fold uses the fold's analysis: the same model comes out, one analysis
    less. Carried by a Loop (whose transfer reads constants anew), it is analysed anew."""
    import seqlower.passes.folds.fold_sequence_constants as fold_module
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.analysis.analyzer import ANALYSIS_STASH_KEY
    from seqlower.io.models import to_proto

    m = _moved_constant_rows("element")
    irm, result = _run(m)
    assert result.modified and "SequenceAt" not in ops_of(to_proto(irm))
    assert ANALYSIS_STASH_KEY in irm.meta
    low, _ = lower_checked(m, inputs=[{"x": np.arange(12, dtype=np.float32).reshape(4, 3)}])
    monkeypatch.setattr(fold_module, "_still_holds", lambda *a: False)
    fresh = to_proto(lower_with_report(load_model(m), LowerOptions())[0])
    assert fresh.SerializeToString() == low.SerializeToString()
    monkeypatch.undo()
    int_rows = model([helper.make_node("SplitToSequence", ["x", "one"], ["s0"], axis=0),
                      helper.make_node("SequenceInsert", ["s0", "row", "zero"], ["s1"]),
                      helper.make_node("SequenceAt", ["s1", "zero"], ["read"]),
                      helper.make_node("ReduceSum", ["read"], ["trips"], keepdims=0),
                      helper.make_node("Loop", ["trips", "", "x"], ["y"], body=helper.make_graph(
                          [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["acc"], ["acc_out"])],
                          "b", [t("i", INT64, []), t("c", helper.TensorProto.BOOL, []), t("acc", INT64, [None, 3])],
                          [t("c_out", helper.TensorProto.BOOL, []), t("acc_out", INT64, [None, 3])]))],
                     [t("x", INT64, [4, 3])], [t("y", INT64, [None, 3])],
                     initializer=[const("one", 1, np.int64), const("zero", 0, np.int64), const("row", np.array([[2, 0, 0]], np.int64))])
    irm, result = _run(int_rows)
    assert result.modified and ANALYSIS_STASH_KEY in irm.meta  # a tensor op between: the analysis reads no Loop constant through it
    irm, result = _run(_moved_constant_rows("loop"))
    assert result.modified and ANALYSIS_STASH_KEY not in irm.meta
