"""TensorRT's profile, read off onnx-tensorrt's docs/operators.md (tools/trt_profile.py):
what it lacks and runs on which types, each restriction named by ``check --target
tensorrt`` in the doc's words, and the forms the lowering for tensorrt writes instead
(constant axes as initializers, integer CumSum counted by ReduceSum, NonZero of a float
mask, If branches' outputs named apart), with the numbers unchanged. No TensorRT runs
here: the numbers are checked on onnxruntime. (That no fixture lowered for tensorrt has
a gap of a node seqlower wrote is held by tests/test_targets.py's grid.)"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower.errors import describe_node
from seqlower.targets import load_target
from seqlower.targets.quirks import quirk_findings
from tests.helpers import FLOAT, INT64, body, const, lower_checked, model, t

TRT = load_target("tensorrt")


def _findings(m: onnx.ModelProto, quirk: str) -> list[tuple[str, str, str]]:
    return quirk_findings(m, [quirk])


def _node(op: str, *outputs: str) -> str:
    return describe_node(op, "", list(outputs))


def test_the_profile_is_the_docs_table():
    # Marked N in the doc: every sequence and optional op, Compress, Unique, the string ops.
    assert {"SequenceAt", "SplitToSequence", "ConcatFromSequence", "Optional", "Compress", "Unique",
            "StringSplit"} <= TRT.lacks
    assert TRT.opsets == (9, 20) and not TRT.sequences
    assert TRT.types["NonZero"] == ("FLOAT", "FLOAT16")
    assert "INT64" not in TRT.types["CumSum"] and "BOOL" in TRT.types["Where"]
    assert "INT64" in TRT.types["ConstantOfShape"]  # (the doc's 'INF64')
    assert set(TRT.types).isdisjoint(TRT.lacks)
    assert {q for q, _ in TRT.quirks} >= {"trt-axes-initializer", "trt-op-types", "trt-loop-scan-length",
                                          "trt-if-branches", "trt-opset-range", "no-strings"}


def test_an_opset_past_20_is_named():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])], opset=21)
    assert [w for w, _, _ in _findings(m, "trt-opset-range")] == ["the model's opset import ai.onnx 21"]
    m17 = model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])], opset=17)
    assert _findings(m17, "trt-opset-range") == []


def test_axes_computed_at_run_time_are_named_and_constant_ones_pass():
    computed = model([helper.make_node("Shape", ["x"], ["s"]),
                      helper.make_node("Slice", ["s", "zero", "one"], ["a"]),
                      helper.make_node("Sub", ["a", "one"], ["axes"]),
                      helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                     [t("x", FLOAT, [3, 4])], [t("y", FLOAT, None)],
                     initializer=[const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64))])
    assert [w for w, _, _ in _findings(computed, "trt-axes-initializer")] == [_node('ReduceSum', 'y')]
    # A Loop body's Constant axes are weights to TensorRT's parser (importConstant).
    loop_body = body([helper.make_node("Constant", [], ["ax"], value=helper.make_tensor("v", INT64, [1], [1])),
                      helper.make_node("ReduceSum", ["x", "ax"], ["r"], keepdims=0),
                      helper.make_node("Add", ["acc", "r"], ["acc2"]),
                      helper.make_node("Identity", ["c"], ["c2"])],
                     [t("i", INT64, []), t("c", TensorProto.BOOL, []), t("acc", FLOAT, [3])],
                     [t("c2", TensorProto.BOOL, []), t("acc2", FLOAT, [3])])
    looped = model([helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=loop_body)],
                   [t("x", FLOAT, [3, 4]), t("n", INT64, []), t("acc0", FLOAT, [3])], [t("acc", FLOAT, [3])])
    assert _findings(looped, "trt-axes-initializer") == []


def test_integer_cumsum_and_nonzero_are_written_in_types_tensorrt_runs():
    # SplitToSequence by run-time sizes lowers to element bounds counted by an int64
    # CumSum; a NonZero of an int64 mask finds the positions.
    m = model([helper.make_node("CumSum", ["k", "ax"], ["c"]),
               helper.make_node("NonZero", ["k"], ["nz"]),
               helper.make_node("CumSum", ["x", "ax"], ["cx"])],
              [t("k", INT64, ["n"]), t("x", FLOAT, ["n"])],
              [t("c", INT64, ["n"]), t("nz", INT64, [1, None]), t("cx", FLOAT, ["n"])],
              initializer=[const("ax", np.array(0, np.int64))])
    named = {w for w, _, _ in _findings(m, "trt-op-types")}
    assert named == {_node('CumSum', 'c'), _node('NonZero', 'nz')}
    feeds = [{"k": np.array([3, 0, -2, 5], np.int64), "x": np.arange(4, dtype=np.float32)},
             {"k": np.zeros(0, np.int64), "x": np.zeros(0, np.float32)}]
    low, _ = lower_checked(m, inputs=feeds, target="tensorrt")
    assert _findings(low, "trt-op-types") == []
    assert [n.op_type for n in low.graph.node].count("CumSum") == 1  # (the float one stays)


def test_if_branches_giving_outputs_of_one_name_are_named_apart():
    then = body([helper.make_node("Identity", ["x"], ["r"])], [], [t("r", FLOAT, [2])])
    other = body([helper.make_node("Neg", ["x"], ["r"])], [], [t("r", FLOAT, [2])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [t("c", TensorProto.BOOL, []), t("x", FLOAT, [2])], [t("y", FLOAT, [2])])
    assert [w for w, _, _ in _findings(m, "trt-if-branches")] == [_node('If', 'y')]
    low, _ = lower_checked(m, inputs=[{"c": np.array(True), "x": np.ones(2, np.float32)},
                                      {"c": np.array(False), "x": np.ones(2, np.float32)}], target="tensorrt")
    assert _findings(low, "trt-if-branches") == []


def _grown_in_loop(trips: int | None) -> onnx.ModelProto:
    """The Loop of test_loops_tensorrt_cannot_parse_are_named (a carried list grown and a
    scan output), ``trips`` a constant or the model input ``n``."""
    grows = body([helper.make_node("Unsqueeze", ["i", "zero"], ["row"]),
                  helper.make_node("Concat", ["acc", "row"], ["acc2"], axis=0),
                  helper.make_node("Identity", ["c"], ["c2"]),
                  helper.make_node("Identity", ["i"], ["step"])],
                 [t("i", INT64, []), t("c", TensorProto.BOOL, []), t("acc", INT64, [None])],
                 [t("c2", TensorProto.BOOL, []), t("acc2", INT64, [None]), t("step", INT64, [])])
    inits = [const("zero", np.array([0], np.int64)), const("acc0", np.zeros(0, np.int64))]
    inputs = [t("x", INT64, [None])]
    if trips is None:
        inputs.append(t("n", INT64, []))
    else:
        inits.append(const("n", np.array(trips, np.int64)))
    return model([helper.make_node("Loop", ["n", "", "acc0"], ["acc", "steps"], body=grows),
                  helper.make_node("Concat", ["x", "acc"], ["y"], axis=0)],
                 inputs, [t("y", INT64, [None]), t("steps", INT64, [None])], initializer=inits)


def test_loops_tensorrt_cannot_parse_are_named():
    m = _grown_in_loop(None)
    assert [w for w, _, _ in _findings(m, "trt-loop-carried-shape")] == [_node('Loop', 'acc')]
    assert [w for w, _, _ in _findings(m, "trt-loop-scan-length")] == [_node('Loop', 'acc')]


def test_topk_and_constant_attributes_past_the_doc_are_named():
    m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0),
               helper.make_node("TopK", ["x", "big"], ["v2", "i2"]),
               helper.make_node("Constant", [], ["s"], value_strings=["a"])],
              [t("x", FLOAT, [5000])], [t("v", FLOAT, None), t("v2", FLOAT, None), t("s", TensorProto.STRING, [1])],
              initializer=[const("k", np.array([2], np.int64)), const("big", np.array([4000], np.int64))])
    assert [w for w, _, _ in _findings(m, "trt-topk")] == [_node('TopK', 'v', 'i'), _node('TopK', 'v2', 'i2')]
    assert [w for w, _, _ in _findings(m, "trt-constant-attributes")] == [_node('Constant', 's')]


def test_the_profile_tool_reads_the_docs_table_as_written():
    """tools/trt_profile.py on rows as the doc writes them: N lacked, Y with its types (the
    doc's INF64 read as INT64), a row without trailing cells, the header skipped."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from trt_profile import read_table

    doc = """| Operator | Supported  | Supported Types | Restrictions |
|---|---|---|---|
| Compress                  | N          |
| ConstantOfShape           | Y          | FP32, FP16, BF16, INT32, INF64, BOOL |
| NonZero                   | Y          | FP32, FP16
| CumSum                    | Y          | FP32, FP16, BF16 | `axis` must be an initializer |
"""
    lacks, types = read_table(doc)
    assert lacks == ["Compress"]
    assert types == {"ConstantOfShape": ["BFLOAT16", "BOOL", "FLOAT", "FLOAT16", "INT32", "INT64"],
                     "NonZero": ["FLOAT", "FLOAT16"], "CumSum": ["BFLOAT16", "FLOAT", "FLOAT16"]}


def test_a_flat_lists_bounds_of_unknown_row_shape_are_counted_in_a_type_tensorrt_runs():
    """Random program 230076 (v3 shapes, opset 24): a Loop carries a Flat list whose rows
    lost their shape, and its bounds' integer CumSum was left for want of a rank. Its rows
    are [n, W] by construction: the sizes are 1-D, the CumSum is counted by ReduceSum."""
    import random

    from tests.program_generator import generate

    rng = random.Random(230076)
    m, feeds = generate(lambda kind, *a: rng.randint(a[0], a[1]) if kind == "int" else rng.choice(a[0]), shapes="v3")
    low, _ = lower_checked(m, inputs=[feeds], target="tensorrt")
    assert _findings(low, "trt-op-types") == []


def test_a_loop_of_constant_trips_tensorrt_cannot_parse_is_unrolled():
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.io.models import to_proto
    from seqlower.targets import target_gaps
    from tests.helpers import ops_of

    m = _grown_in_loop(5)
    assert _findings(m, "trt-loop-carried-shape")  # (as exported, it is named)
    low, report = lower_checked(m, inputs=[{"x": np.arange(3, dtype=np.int64)}], target="tensorrt")
    assert "Loop" not in ops_of(low) and not report.gaps
    # A Loop of fixed shapes stays a Loop (no scan output, the state keeps its shape).
    keeps = body([helper.make_node("Add", ["acc", "i"], ["acc2"]), helper.make_node("Identity", ["c"], ["c2"])],
                 [t("i", INT64, []), t("c", TensorProto.BOOL, []), t("acc", INT64, [])],
                 [t("c2", TensorProto.BOOL, []), t("acc2", INT64, [])])
    fixed = model([helper.make_node("Loop", ["n", "", "a0"], ["a"], body=keeps)], [t("a0", INT64, [])],
                  [t("a", INT64, [])], initializer=[const("n", np.array(5, np.int64))])
    lowered, _ = lower_with_report(load_model(fixed), LowerOptions(target="tensorrt"))
    assert "Loop" in ops_of(to_proto(lowered)) and not target_gaps(to_proto(lowered), TRT)


def test_a_loop_of_run_time_trips_tensorrt_cannot_parse_is_bounded_by_max_trips():
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.executor import Executor
    from tests.helpers import ops_of

    m = _grown_in_loop(None)
    _, report = lower_with_report(load_model(m), LowerOptions(target="tensorrt"))
    assert {g.why.rsplit("(quirk ", 1)[1][:-1] for g in report.gaps} == {"trt-loop-carried-shape", "trt-loop-scan-length"}
    feeds = [{"x": np.arange(2, dtype=np.int64), "n": np.array(k, np.int64)} for k in (0, 1, 4)]
    low, report = lower_checked(m, inputs=feeds, target="tensorrt", max_trips=4)
    assert "Loop" not in ops_of(low) and not report.gaps
    # Past the bound, the model says so.
    out = Executor(low, backend="onnxruntime").run({"x": np.arange(2, dtype=np.int64), "n": np.array(5, np.int64)}).outputs
    assert bool(out["seqlower_trips_exceeded"])


# Fixtures whose list Loops lower to Loops tensorrt's parser refuses (a list grown, scans
# of a run-time length), one of each export family, and whether one stays so lowered
# without a bound (else its trip counts are constants, and the Loops are unrolled).
BOUNDED_FOR_TENSORRT = [("exported/ts_loop_collect_steps_opset17", True), ("exported/ts_nonzero_rows_loop_opset17", True),
                        ("exported/ts_masks_mapped_and_zipped_10323_opset19", False),
                        ("tensorflow/tf_ragged_map_scaled_rows_opset17", True),
                        ("tensorflow/tf_tensor_array_while_opset17", True)]


@pytest.mark.parametrize("name, needs_bound", BOUNDED_FOR_TENSORRT)
def test_fixtures_lowered_for_tensorrt_with_max_trips_have_no_loop_it_refuses(name, needs_bound):
    """Lowered for tensorrt with --max-trips 12, no Loop is left that its parser refuses,
    and every stored case the export runs on onnxruntime gives the framework's numbers
    there (the flag down)."""
    from pathlib import Path

    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.io.models import to_proto
    from tests.helpers import cases_match

    path = Path(__file__).parent / "data" / f"{name}.onnx"
    m = onnx.load(path)
    _, plain = lower_with_report(load_model(m), LowerOptions(target="tensorrt"))
    assert any("(quirk trt-loop" in g.why for g in plain.gaps) == needs_bound
    lowered, report = lower_with_report(load_model(m), LowerOptions(target="tensorrt", max_trips=12))
    low = to_proto(lowered)
    assert not [g for g in report.gaps if "(quirk trt-loop" in g.why], report.gaps
    flag = next((o.name for o in low.graph.output if o.name == "seqlower_trips_exceeded"), None)
    ran = cases_match(m, low, path, "onnxruntime", flag)
    assert ran >= 3
