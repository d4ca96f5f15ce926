"""seqlower/coverage.py: the decision points a lowering reaches, counted by context only
while coverage is on."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, coverage, load_model, lower_with_report
from seqlower.fastpath import coverage_universe
from tests.helpers import FLOAT, model, t

INT64 = onnx.TensorProto.INT64


@pytest.fixture
def counting():
    coverage.reset()
    coverage.enable()
    yield
    coverage.enable(False)
    coverage.reset()


def _loop_appending() -> onnx.ModelProto:
    """A Loop appending x's rows one a step to a list (a list edited in a Loop body)."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
         helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [t("i", INT64, []), t("c", onnx.TensorProto.BOOL, []), onnx.helper.make_tensor_sequence_value_info(
            "acc", FLOAT, None)],
        [t("c_out", onnx.TensorProto.BOOL, []), onnx.helper.make_tensor_sequence_value_info("acc_out", FLOAT, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
             helper.make_node("Shape", ["x"], ["sh"], start=0, end=1),
             helper.make_node("Squeeze", ["sh"], ["n"]),
             helper.make_node("Loop", ["n", "", "e"], ["rows"], body=body),
             helper.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["N", 3])], [t("y", FLOAT, [None])])


def test_contexts_are_read_from_scope_labels():
    assert coverage.context_of("main") == "main"
    assert coverage.context_of("function local::f") == "function"
    assert coverage.context_of("main > Loop node 'l'.body") == "loop"
    assert coverage.context_of("main > If node (output 'y').then_branch") == "if"
    assert coverage.context_of("main > SequenceMap node 'm'.body") == "map"
    assert coverage.context_of("main > Loop node 'l'.body > If node 'c'.else_branch") == "nested"


def test_a_lowering_counts_its_transfers_rules_and_representations_by_context(counting):
    low, report = lower_with_report(load_model(_loop_appending()), LowerOptions())
    assert report.tensor_only
    hits = coverage.hits()
    assert hits["transfer:SequenceInsert", "loop"] >= 1 and hits["transfer:Loop", "main"] >= 1
    assert any(p.startswith("rule:") and p.endswith(":SequenceInsert") and w == "loop" for p, w in hits)
    assert any(p.startswith("repr:") and w == "loop" for p, w in hits)
    # every point reached is one the report's universe knows
    universe = coverage_universe.universe()
    assert all(p in universe and w in universe[p] for p, w in hits)


def test_nothing_is_counted_while_coverage_is_off():
    coverage.reset()
    lower_with_report(load_model(_loop_appending()), LowerOptions())
    assert not coverage.hits()


def test_a_quirk_rewrite_that_changes_the_model_is_counted(counting):
    # tract's profile has quirks whose rewrites change a lowered Loop; at least one must be counted.
    lower_with_report(load_model(_loop_appending()), LowerOptions(target="tract"))
    assert any(p.startswith("quirk:") and w == "model" for p, w in coverage.hits())
