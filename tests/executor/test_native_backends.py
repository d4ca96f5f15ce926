"""The openvino and tract backends: real runtimes without sequence support, run in a
child process. They run what seqlower lowers for them; where they do not yet, the gap
is listed here with its cause (Stage 4 shrinks these lists: a fixed gap fails the test
until it is taken off)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor, compare_values
from seqlower.io.models import to_proto
from tests.helpers import FLOAT, INT64, body, const, model, t
from tests.test_exported_models import MODELS, load_cases
from tests.test_pipeline_backend_cases import CASES
from tests.test_tensorflow_models import EXPORT_FAILS
from tests.test_tensorflow_models import MODELS as TF_MODELS

NATIVE = ("openvino", "tract")

# Lowered exported fixtures OpenVINO 2026.4 does not run on every stored case, and why.
# (ts_rows_of_no_trip_appended_2177_opset11 was one: a scan output of no iteration,
# settled to the appended row's dims by a padded Reshape below opset 14, whose count
# OpenVINO read off the Loop's output with a lower bound of 1; the count is now the
# trip count, passes/lowering/lower_packed_sequences.py's _settled.)
OPENVINO_GAPS: dict[str, str] = {}
# Lowered fixtures its CPU plugin compiles only for concrete input shapes (the executor
# then compiles per input shapes, and says so): quirk "dynamic-compile".
OPENVINO_STATIC = {
    "dynamo_embedding_bag_opset18": "the dynamic while loop with nested Ifs fails to compile (unordered_map::at)",
}
# tract 0.23.9 runs these lowered fixtures (their Loops over a dim became Scans); the
# others fail in its analysis: a Loop carrying a list that grows (no Scan can carry it),
# Equal in dynamo's embedding_bag.
TRACT_RUNS = {
    "dynamo_split_chunk_unbind_opset18", "dynamo_chunk_dynamic_batch_opset18",
    "ts_loop_collect_steps_opset13", "ts_loop_collect_steps_opset17",
    "ts_unbind_del_append_stack_opset13", "ts_unbind_del_append_stack_opset17",
    "ts_chunk_dynamic_dim_opset13", "ts_chunk_dynamic_dim_opset17", "ts_chunk_pop_cat_opset13", "ts_chunk_pop_cat_opset17",
    "ts_split_dynamic_sizes_opset13", "ts_split_dynamic_sizes_opset17",
    "ts_nonzero_rows_loop_opset13", "ts_nonzero_rows_loop_opset17",
    "ts_guarded_pop_of_empty_1039_opset14", "ts_loops_over_empty_lists_1037_opset15",
    "ts_rows_of_no_trip_appended_2177_opset11", "ts_zip_of_empty_lists_2436_opset19", "ts_max_of_unbound_rows_3041_opset14",
    "ts_empty_rows_appended_5166_opset18", "ts_mapped_then_summed_4603_opset18",
    "ts_first_chunk_unbound_1021_opset19",  # (since a map over pieces runs on the whole tensor)
}


def _tensor_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["rows"], axis=0),
        helper.make_node("Mul", ["rows", "two"], ["scaled"]),
        helper.make_node("Concat", ["scaled", "x"], ["y"], axis=0),
    ]
    return model(nodes, [t("x", FLOAT, ["N", 3]), t("idx", INT64, ["K"])], [t("y", FLOAT, [None, 3])],
                 initializer=[const("two", 2.0, np.float32)])


@pytest.mark.parametrize("backend", NATIVE)
def test_native_backend_runs_a_tensor_model_like_the_reference(backend):
    m = _tensor_model()
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "idx": np.array([3, 0, 3])}
    want = Executor(m).run(feeds).outputs
    got = Executor(m, backend=backend).run(feeds).outputs
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{backend}/{name}")


def test_tract_returns_a_shape_output_through_the_executor():
    # Its Python API refuses the TDim tensor (quirk "shape-output"); the worker converts it.
    from seqlower.targets import load_target

    assert "shape-output" in dict(load_target("tract").quirks)
    m = model([helper.make_node("Shape", ["x"], ["dims"])], [t("x", FLOAT, ["N"])], [t("dims", INT64, [1])])
    out = Executor(m, backend="tract").run({"x": np.zeros(3, np.float32)}).outputs["dims"]
    assert out.dtype == np.int64 and out.tolist() == [3]


def test_tract_takes_an_input_with_an_initializer_as_that_constant():
    # keep_initializers_as_inputs: the scale is an input with a default. tract makes it a
    # constant; the executor feeds it the rest and refuses another value.
    from seqlower.targets import load_target

    assert "initializer-input-constant" in dict(load_target("tract").quirks)
    m = model([helper.make_node("Mul", ["x", "scale"], ["y"])], [t("x", FLOAT, ["n"]), t("scale", FLOAT, [1])],
              [t("y", FLOAT, ["n"])], initializer=[const("scale", np.array([1.5], np.float32))])
    ex = Executor(m, backend="tract")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(ex.run({"x": x}).outputs["y"], x * 1.5)
    np.testing.assert_array_equal(ex.run({"x": x, "scale": np.array([1.5], np.float32)}).outputs["y"], x * 1.5)
    with pytest.raises(Exception, match="takes input 'scale' as its initializer"):
        ex.run({"x": x, "scale": np.array([2.0], np.float32)})


def _runs_every_case(low: onnx.ModelProto, backend: str, path: Path, notes: list[str] | None = None) -> bool:
    ex = Executor(low, backend=backend)  # (one load for every case, as a user runs it)
    for feeds, expected in load_cases(path):
        try:
            result = ex.run(feeds)
        except Exception:  # noqa: BLE001 - any failure of the runtime is a gap
            return False
        out = result.outputs
        if notes is not None:
            notes += result.notes
        if not all(out[k].shape == v.shape and np.allclose(out[k], v, rtol=1e-5, atol=1e-5) for k, v in expected.items()):
            return False
    return True


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_openvino_runs_the_lowered_fixtures_but_the_listed_gaps(path):
    low = to_proto(lower_with_report(load_model(onnx.load(path)), LowerOptions(target="openvino"))[0])
    notes: list[str] = []
    assert _runs_every_case(low, "openvino", path, notes) == (path.stem not in OPENVINO_GAPS), OPENVINO_GAPS.get(path.stem, "now runs")
    static = any("did not compile the model for dynamic shapes" in n for n in notes)
    assert static == (path.stem in OPENVINO_STATIC), OPENVINO_STATIC.get(path.stem, notes)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_tract_runs_the_lowered_fixtures_it_can(path):
    from seqlower.targets import load_target, target_gaps

    lowered, report = lower_with_report(load_model(onnx.load(path)), LowerOptions(target="tract"))
    low = to_proto(lowered)
    assert _runs_every_case(low, "tract", path) == (path.stem in TRACT_RUNS)
    # What tract does not run, the report names: a Loop no Scan can replace, and why.
    gaps = target_gaps(low, load_target("tract"), report.kept_loops)
    assert (path.stem in TRACT_RUNS) == (not gaps), gaps


# tf2onnx fixtures (tests/data/tensorflow) lowered for OpenVINO: the cases (by index) it
# does not run, and why. Cases the export itself fails are not asked (EXPORT_FAILS).
OPENVINO_TF_GAPS: dict[str, tuple[set[int], str]] = {}
# (The ragged maps over values with no rows crashed it, SIGSEGV, or failed ('memory desc
# is undefined') until reshape_exact stated its shape's length: OpenVINO bounded a Slice
# of a row to 1..2 dims and made a Reshape of dynamic rank.)


@pytest.mark.parametrize("path", TF_MODELS, ids=lambda p: p.stem)
def test_openvino_runs_the_lowered_tensorflow_fixtures_but_the_listed_gaps(path):
    name = path.stem.rsplit("_opset", 1)[0]
    low = to_proto(lower_with_report(load_model(onnx.load(path)), LowerOptions(target="openvino"))[0])
    ex = Executor(low, backend="openvino")
    failed = set()
    for k, (feeds, expected) in enumerate(load_cases(path)):
        if k in EXPORT_FAILS.get((name, "reference"), ()):
            continue
        try:
            out = ex.run(feeds).outputs
        except Exception:  # noqa: BLE001 - a runtime failure is a gap; wrong numbers are not
            failed.add(k)
            continue
        for output, want in expected.items():
            assert compare_values(output, want, out[output]).ok, (k, output, "wrong numbers on OpenVINO")
    gaps, why = OPENVINO_TF_GAPS.get(name, (set(), ""))
    assert failed == gaps, why or "now runs"


def test_reverse_sequence_lowered_for_tract_runs_on_tract():
    m = model([helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)],
              [t("x", FLOAT, [4, 3]), t("lens", INT64, [3])], [t("y", FLOAT, [4, 3])])
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "lens": np.array([4, 0, 2])}
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="tract"))[0])
    want = Executor(m).run(feeds).outputs["y"]
    np.testing.assert_array_equal(Executor(low, backend="tract").run(feeds).outputs["y"], want)


def test_tract_gets_no_intermediate_shapes():
    # Its quirk: named dims in value_info break its analysis (dynamo's chunk: Split-13).
    path = next(p for p in MODELS if p.stem == "dynamo_chunk_dynamic_batch_opset18")
    for target, shapes in (("tract", False), ("openvino", True)):
        low = to_proto(lower_with_report(load_model(onnx.load(path)), LowerOptions(target=target))[0])
        inits = {i.name for i in low.graph.initializer}
        assert any(v.type.tensor_type.HasField("shape") for v in low.graph.value_info if v.name not in inits) == shapes
        assert [i.type for i in low.graph.input] == [i.type for i in onnx.load(path).graph.input]


# The ONNX backend cases that touch sequences, as they are (lists in and out through the
# ABI, every data set), lowered for each runtime. What a runtime does not run, and why.
_TRACT_GROWS = "a Loop that grows a Flat list (from the ABI: no shape proof) cannot be a Scan, and tract has no Loop"
CONFORMANCE_GAPS = {
    "openvino": {
        "test_reversesequence_bfloat16": "OpenVINO returns a bfloat16 output as float16",
    },
    "tract": {
        "test_reversesequence_bfloat16": "tract has no bfloat16",
        "test_if_opt": "the optional's If has branches of different shapes (quirk if-branch-facts)",
        "test_loop13_seq": _TRACT_GROWS,
        "test_loop16_seq_none": _TRACT_GROWS,
        # (identity_1_sequence maps elementwise: it runs once on the values, no Loop.)
        **{f"test_sequence_map_{k}": _TRACT_GROWS for k in (
            "identity_1_sequence_expanded", "identity_2_sequences", "identity_2_sequences_expanded",
            "identity_1_sequence_1_tensor", "identity_1_sequence_1_tensor_expanded", "add_2_sequences",
            "add_2_sequences_expanded", "add_1_sequence_1_tensor")},
        **{f"test_sequence_map_{k}": "a Reshape to a computed shape inside a Scan body ('shape input is variable')"
           for k in ("add_1_sequence_1_tensor_expanded", "extract_shapes", "extract_shapes_expanded")},
        "test_split_to_sequence_1": "the split is read from data: tract's analysis of the shapes it decides fails "
                                    "(quirk data-dependent-shape)",
        "test_sequence_insert_at_front": "tract fails an empty Slice whose bounds are computed (0..0, 'Invalid slicing range')",
    },
}


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_lowered_conformance_cases_run_on_native_runtimes_but_the_listed_gaps(case, backend):
    low = to_proto(lower_with_report(load_model(case.model), LowerOptions(target=backend))[0])
    datasets = [dict(zip([i.name for i in case.model.graph.input], inputs)) for inputs, _ in case.data_sets]
    gap = CONFORMANCE_GAPS[backend].get(case.name)
    try:
        ex = Executor(low, backend=backend)
        ran = True
        for feeds, (_, expected) in zip(datasets, case.data_sets):
            result = ex.run(feeds)
            for port, want in zip(ex.outputs, expected):
                ran &= compare_values(port.name, want, result.outputs[port.name], case.rtol, case.atol).ok
    except Exception:  # noqa: BLE001 - a runtime failure is a gap
        ran = False
    assert ran == (gap is None), gap or "does not run"


def test_openvino_compiles_per_input_shape_only_a_model_with_nested_loops():
    # (quirk stale-state-across-shapes: a compiled model with nested Loops keeps inner trip
    # counts from a run with other shapes; any other model is compiled once)
    from seqlower.executor.native_backend import _nested_loops

    inner = body([helper.make_node("Identity", ["c"], ["c2"])], [t("i", INT64, []), t("c", onnx.TensorProto.BOOL, [])],
                 [t("c2", onnx.TensorProto.BOOL, [])])
    loop = helper.make_node("Loop", ["n", ""], [], body=inner)
    outer = body([helper.make_node("Identity", ["c"], ["c2"]), loop], [t("i", INT64, []), t("c", onnx.TensorProto.BOOL, [])],
                 [t("c2", onnx.TensorProto.BOOL, [])])
    assert _nested_loops(model([helper.make_node("Loop", ["n", ""], [], body=outer)], [t("n", INT64, [])], []).graph, False)
    assert not _nested_loops(model([helper.make_node("Loop", ["n", ""], [], body=inner)], [t("n", INT64, [])], []).graph, False)
