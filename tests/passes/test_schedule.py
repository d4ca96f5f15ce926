"""The pass schedule: with check_each_pass, a model a pass leaves invalid is caught right
after that pass, naming it."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.errors import ModelError
from seqlower.options import LowerOptions
from seqlower.passes.schedule import CheckModelPass, Rounds, ThenAgain, build_passes
from tests.helpers import FLOAT, model, t


class _DropAnInput(ir.passes.InPlacePass):
    """Breaks the model: Add loses its second input."""

    def call(self, m: ir.Model) -> ir.passes.PassResult:
        node = next(iter(m.graph))
        node.resize_inputs(1)
        return ir.passes.PassResult(m, True)


def _add() -> ir.Model:
    return ir.serde.deserialize_model(model([helper.make_node("Add", ["x", "x"], ["y"])],
                                            [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]))


class _Nothing(ir.passes.InPlacePass):
    def call(self, m: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(m, False)


def test_the_check_names_the_pass_that_broke_the_model():
    m = _add()
    assert not CheckModelPass(_Nothing())(m).modified
    with pytest.raises(ModelError, match="the model after _DropAnInput: fails the ONNX checker: .*Add.* input size 1"):
        CheckModelPass(_DropAnInput())(m)


def test_a_pass_that_changed_nothing_is_not_checked_again():
    # (the model the last check passed: an invalid input model is the input's own fault,
    # and the lowering's final check names it)
    m = _add()
    _DropAnInput()(m)
    assert not CheckModelPass(_Nothing())(m).modified


def _rounds_at(passes) -> int:
    return next(k for k, p in enumerate(passes) if isinstance(getattr(p, "inner", p), Rounds))


def test_check_each_pass_puts_a_check_around_every_pass():
    plain = build_passes(LowerOptions())
    checked = build_passes(LowerOptions(), check_each=True)
    at, checked_at = _rounds_at(plain), _rounds_at(checked)
    assert at == checked_at and len(checked) == len(plain)
    rounds, checked_rounds = plain[at].passes, checked[checked_at].passes
    assert len(checked_rounds) == len(rounds)
    assert all(isinstance(p, CheckModelPass) and type(p.inner) is type(q) for q, p in zip(rounds, checked_rounds))
    # What runs before the rounds (the inlining of functions) is checked too.
    assert all(isinstance(p, CheckModelPass) for p in checked[:checked_at])
    # The run-time-ranks step (then the rounds again) is checked too.
    then_again = checked[checked_at + 1]
    assert isinstance(then_again, ThenAgain) and then_again.then is checked[checked_at]
    assert [type(p.inner).__name__ for p in then_again.first.passes] == ["LowerFlatSequencesPass"]


def test_a_rank_found_in_a_later_round_is_waited_for():
    # TorchScript's list loop over nonzero rows: the inserted tensor's rank is unknown
    # until the inlined If's values are inferred again (the second round). The rounds
    # wait for it (Ragged, one tensor) rather than take Flat with ranks at run time.
    from pathlib import Path

    import onnx

    from seqlower import load_model, lower_with_report

    path = Path(__file__).parent.parent / "data" / "exported" / "ts_nonzero_rows_loop_opset13.onnx"
    _, report = lower_with_report(load_model(onnx.load(path)), LowerOptions())
    seq_rewrites = [r for r in report.rewrites if r["op"].startswith(("Sequence", "Concat"))]
    assert seq_rewrites and {r["into"] for r in seq_rewrites} == {"ragged"}
    assert not any("run time" in r["how"] for r in report.rewrites)


def _split_map_concat(loop: bool):
    import numpy as np
    from onnx import helper

    from tests.helpers import body, const, model, t

    fn = body([helper.make_node("Relu", ["e"], ["o"])], [t("e", shape=[2, 3])], [t("o", shape=[2, 3])])
    nodes = [helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0)]
    outputs = [t("y", shape=[4, 3])]
    if loop:
        step = body([helper.make_node("Add", ["acc", "acc"], ["acc_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
                    [t("i", 7, []), t("c", 9, []), t("acc", shape=[4, 3])], [t("c_out", 9, []), t("acc_out", shape=[4, 3])])
        nodes.append(helper.make_node("Loop", ["n", "", "y"], ["z"], body=step))
        outputs = [t("z", shape=[4, 3])]
    inputs = [t("x", shape=[4, 3])] + ([t("n", 7, [])] if loop else [])
    return model(nodes, inputs, outputs, initializer=[const("two", np.array(2, np.int64))])


def test_the_rounds_stop_when_the_first_leaves_nothing_another_could_change():
    from seqlower import load_model
    from seqlower.lowering import _run_passes

    for loop in (False, True):
        passes = build_passes(LowerOptions())
        m = _run_passes(passes, load_model(_split_map_concat(loop)))
        assert not any(n.op_type.startswith("Sequence") for n in m.graph)
        # Tensor-only without subgraphs: done after one round. A Loop body may learn
        # shapes in a second inference, so the rounds go on until nothing changes.
        rounds = passes[_rounds_at(passes)]
        assert (rounds.rounds_run > 1) == loop, (loop, rounds.rounds_run)


def test_an_analysis_a_pass_changed_nothing_with_is_the_next_passes_and_no_further(monkeypatch):
    import seqlower.analysis.analyzer as analysis_module
    from seqlower import load_model
    from seqlower.lowering import _run_passes

    calls: list[dict] = []
    real = analysis_module.analyze

    def counted(model, **params):
        calls.append(params)
        return real(model, **params)

    import seqlower.passes.folds.infer_sequence_shapes as inference_module

    monkeypatch.setattr(analysis_module, "analyze", counted)
    monkeypatch.setattr(inference_module, "analyze", counted)
    m = load_model(_split_map_concat(False))
    passes = build_passes(LowerOptions())
    _run_passes(passes, m)
    lowering = dict(max_unroll=64, keepdims_policy="auto", packed=True, runtime_ranks=True)
    # The inference analyses with the fold's parameters and leaves its analysis; the fold
    # folds nothing here, so the Unrolled lowering after it reads the same one: the first
    # round makes one analysis before it lowers (and the inference one onnx run).
    first_round = calls[: next(i for i, c in enumerate(calls) if c.get("runtime_ranks") is False)]
    assert first_round == [lowering, lowering]  # the inference's (the fold's and Unrolled's), then Packed's
    assert analysis_module.ANALYSIS_STASH_KEY not in m.meta  # nothing outlives the rounds


def test_a_stash_is_not_used_with_other_parameters_or_after_a_change():
    from seqlower import load_model
    from seqlower.analysis.analyzer import analyze, analyze_reusing, keep_for_next_pass

    m = load_model(_split_map_concat(False))
    a = analyze(m, max_unroll=64)
    keep_for_next_pass(m, a, max_unroll=64)
    assert analyze_reusing(m, max_unroll=0) is not a
    keep_for_next_pass(m, a, max_unroll=64)
    m.graph.remove(m.graph.node(len(m.graph) - 1), safe=False)  # a change the rounds did not see
    assert analyze_reusing(m, max_unroll=64) is not a
    keep_for_next_pass(m, a, max_unroll=64)
    assert analyze_reusing(m, max_unroll=64) is a
    assert analyze_reusing(m, max_unroll=64) is not a  # used once


def _collect_rows():
    """A Loop appending x's rows to a list, then the rows joined: lowered, the Loop carries
    a tensor, and its body's new values are typed by the next round's inference."""
    from tests.helpers import body, const, model, t

    step = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
                 helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"])],
                [t("i", 7, []), t("c", 9, []), helper.make_tensor_sequence_value_info("acc", FLOAT, ["M"])],
                [t("c_out", 9, []), helper.make_tensor_sequence_value_info("acc_out", FLOAT, ["M"])])
    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "zero"], ["n"], axis=0),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
             helper.make_node("Loop", ["n", "", "empty"], ["rows"], body=step),
             helper.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0, new_axis=1)]
    import numpy as np
    return model(nodes, [t("x", shape=["N", "M"])], [t("y", shape=[None, "M"])],
                 initializer=[const("zero", np.array(0, np.int64))])


def test_a_round_that_only_typed_the_model_is_not_run_again_whole():
    # Round 1 lowers the list; round 2's inference types the Loop body the lowering
    # wrote and nothing else changes: round 3 runs the passes before the inference
    # only (they change nothing), not a third whole-model inference.
    from seqlower import load_model
    from seqlower.lowering import _run_passes
    from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass

    passes = build_passes(LowerOptions())
    rounds = passes[_rounds_at(passes)]
    inference = next(p for p in rounds.passes if isinstance(p, InferSequenceShapesPass))
    ran: list[bool] = []
    real = inference.call
    inference.call = lambda m: (r := real(m), ran.append(r.modified))[0]
    m = _run_passes(passes, load_model(_collect_rows()))
    assert ran == [True, True], ran  # (the second typed the body; a third would find nothing)
    assert rounds.rounds_run == 3
    assert not any(n.op_type.startswith(("Sequence", "Concat")) and "Sequence" in n.op_type for n in m.graph)
