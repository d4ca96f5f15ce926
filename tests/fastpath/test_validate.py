"""seqlower/fastpath/validate.py through the one road (Job.lower, seqlower.lower, seqlower
lower): what lower writes ran against the original first. A lowering that fails the
checker, crashes, or gives other numbers is not written: the failing web stays as it was,
reported with the reason, and the rest is lowered; the output runs and matches.

Defects are injected around the real pipeline (the region's lowering spoiled where the
web that reads ``x`` is not marked kept, or the whole pipeline failing), so these tests
hold whatever the lowering's bugs of the day are."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

import seqlower
from seqlower.cli import main
from seqlower.executor.verify import verify
from seqlower.fastpath import pipeline, validate
from seqlower.fastpath.job import Job
from seqlower.io.inventory import take_inventory
from seqlower.keys import KEEP_KEY
from seqlower.options import LowerOptions
from tests.helpers import FLOAT, model, t


def _two_webs() -> onnx.ModelProto:
    """Two independent webs: x's rows reversed, y's columns summed."""
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["rows"], name="split_x", axis=0, keepdims=0),
        helper.make_node("SequenceErase", ["rows", "zero"], ["rest"], name="erase_x"),
        helper.make_node("ConcatFromSequence", ["rest"], ["a"], name="concat_x", axis=0, new_axis=1),
        helper.make_node("SplitToSequence", ["y"], ["cols"], name="split_y", axis=1, keepdims=0),
        helper.make_node("SequenceLength", ["cols"], ["n"], name="length_y"),
        helper.make_node("ConcatFromSequence", ["cols"], ["b"], name="concat_y", axis=0),
    ]
    return model(nodes, [t("x", FLOAT, ["N", 3]), t("y", FLOAT, [2, "M"])],
                 [t("a", FLOAT, [None, 3]), t("b", FLOAT, [None]), t("n", onnx.TensorProto.INT64, [])],
                 initializer=[onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")])


def _x_web_marked(proto: onnx.ModelProto) -> bool:
    node = next(n for n in proto.graph.node if n.name == "split_x")
    return any(p.key == KEEP_KEY for p in node.metadata_props)


@pytest.fixture
def spoil_x(monkeypatch):
    """The lowering of x's web (in the sequence region's sub-model) gives wrong numbers
    (a Neg on output 'a') or, with ``crash``, raises; not once validation keeps that web."""
    real = pipeline._lower_region
    mode = {"how": "wrong"}

    def spoiled(region, label, options, reserved=None):
        marked = _x_web_marked(region.model)
        if not marked and mode["how"] == "crash":
            raise RuntimeError("a pass failed")
        lowered, report = real(region, label, options, reserved)
        if not marked:
            for node in lowered.graph.node:
                node.output[:] = ["a_spoiled" if o == "a" else o for o in node.output]
            lowered.graph.node.append(helper.make_node("Neg", ["a_spoiled"], ["a"]))
        return lowered, report

    monkeypatch.setattr(pipeline, "_lower_region", spoiled)
    return mode


@pytest.mark.parametrize("how", ["wrong", "crash"])
def test_a_web_whose_lowering_fails_stays_and_the_rest_is_lowered(spoil_x, how):
    spoil_x["how"] = how
    m = _two_webs()
    job = Job.read(m)
    report = job.lower(LowerOptions())
    low = job.model()
    left = {op.node for op in take_inventory(low).ops}
    assert left == {"SplitToSequence node 'split_x'", "SequenceErase node 'erase_x'", "ConcatFromSequence node 'concat_x'"}
    assert all(r["reason"].startswith("validation: the lowering failed or differed") for r in report.remaining)
    assert {r["op"] for r in report.rewrites} >= {"SplitToSequence", "ConcatFromSequence"}  # y's web
    assert report.validation["kept"].startswith("validation:") and report.validation["compared"] >= 1
    assert not any(p.key == KEEP_KEY for n in low.graph.node for p in n.metadata_props)
    rep = verify(m, low, samples=3, dims={"N": 4, "M": 2}, backend="onnxruntime")
    assert rep.equivalent, rep.to_json()


def test_without_validation_the_defect_is_written(spoil_x):
    low = seqlower.lower(_two_webs(), validate=False)
    assert take_inventory(low).clean
    assert not verify(_two_webs(), low, samples=2, dims={"N": 4, "M": 2}, backend="onnxruntime").equivalent


def test_when_no_web_alone_explains_it_every_web_stays(monkeypatch):
    real = pipeline.lower_proto_with_report

    def always_wrong(proto, options, **kwargs):
        marked = {n.name for n in proto.graph.node for p in n.metadata_props if p.key == KEEP_KEY}
        if {"split_x", "split_y"} <= marked:
            return real(proto, options, **kwargs)
        raise RuntimeError("a pass failed")

    monkeypatch.setattr(pipeline, "lower_proto_with_report", always_wrong)
    m = _two_webs()
    low = seqlower.lower(m)
    assert len(take_inventory(low).ops) == len(m.graph.node)
    assert verify(m, low, samples=2, dims={"N": 4, "M": 2}, backend="onnxruntime").equivalent


def test_nothing_validates_the_model_stays_as_it_was(monkeypatch):
    def broken(proto, options, **kwargs):
        raise RuntimeError("a pass failed")

    monkeypatch.setattr(pipeline, "lower_proto_with_report", broken)
    m = _two_webs()
    job = Job.read(m)
    report = job.lower()
    low = job.model()
    assert [n.op_type for n in low.graph.node] == [n.op_type for n in m.graph.node]
    assert len(report.remaining) == len(m.graph.node) and "RuntimeError: a pass failed" in report.remaining[0]["reason"]


def test_the_cli_reports_the_kept_web_and_strict_fails(spoil_x, tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_two_webs(), src)
    code = main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0 and "validation: the lowering failed or differed" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["validation"]["backend"] == "onnxruntime" and not doc["tensor_only"]
    code = main(["lower", str(src), "-o", str(tmp_path / "s.onnx"), "--strict"])
    assert code == 1


def test_a_clean_lowering_records_what_validation_compared(tmp_path):
    job = Job.read(_two_webs())
    report = job.lower()
    assert report.tensor_only and report.validation["backend"] == "onnxruntime"
    assert report.validation["samples"] == 2 and report.validation["compared"] == 2
    assert "kept" not in report.validation
    assert not Job.read(_two_webs()).lower(LowerOptions(validate=False)).validation


def test_with_a_target_whose_runtime_is_here_the_lowered_model_runs_there_too(monkeypatch, capsys, tmp_path):
    from seqlower.executor import native_backend

    pytest.importorskip("openvino")
    job = Job.read(_two_webs())
    report = job.lower(LowerOptions(target="openvino"))
    assert report.validation["target"]["backend"] == "openvino" and report.validation["target"]["compared"] == 2
    assert not [g for g in report.gaps if g.what == "model"]
    # A runtime that computes other numbers (as OpenVINO did on held-out exports) is named
    # before anything is written: a gap of the target, --strict exits 1.
    real = native_backend.NativeBackend.run
    monkeypatch.setattr(native_backend.NativeBackend, "run", lambda self, feeds: [
        np.asarray(v) + 1 if np.asarray(v).dtype.kind == "f" else v for v in real(self, feeds)])
    job = Job.read(_two_webs())
    report = job.lower(LowerOptions(target="openvino"))
    [gap] = [g for g in report.gaps if g.what == "model"]
    assert "validation on openvino: the lowered model fails or differs there" in gap.why
    src = tmp_path / "m.onnx"
    onnx.save(_two_webs(), src)
    code = main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "--target", "openvino", "--strict"])
    assert code == 1 and "validation on openvino" in capsys.readouterr().out


def test_onnxruntime_computing_the_original_otherwise_is_not_a_failure_of_the_lowering():
    # onnxruntime's Gather of string rows copies one string a row (quirk string-gather-rows):
    # the original's row read that way differs from the lowering, which the reference
    # (the spec) confirms; the web is lowered, not kept.
    nodes = [helper.make_node("Gather", ["x", "first"], ["row"], axis=0),
             helper.make_node("SequenceConstruct", ["row", "row"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    m = model(nodes, [t("x", onnx.TensorProto.STRING, [3, 3]), t("p", onnx.TensorProto.INT64, [])],
              [t("y", onnx.TensorProto.STRING, [3])],
              initializer=[onnx.numpy_helper.from_array(np.array(0, np.int64), "first")])
    report = Job.read(m).lower(LowerOptions(target="onnxruntime"))
    assert report.tensor_only and "kept" not in report.validation, report.to_json()
    # The whole models side by side (the region alone does not hold the Gather):
    job = Job.read(m)
    job.lower(LowerOptions(target="onnxruntime", validate=False))
    assert not verify(m, job.model(), samples=2, backend="onnxruntime").equivalent  # onnxruntime's own bug
    result = validate.run_validation(m, job.model(), LowerOptions(target="onnxruntime"))
    assert result.failure is None and result.compared == 2
    assert any("computes the original otherwise than the reference" in n for n in result.notes)


def _insert_at(rows_type=FLOAT) -> onnx.ModelProto:
    """x inserted into an empty list at p, erased at q, inserted again at r: of positions
    in [0, 4), only p = q = r = 0 is valid."""
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=rows_type),
             helper.make_node("SequenceInsert", ["e", "x", "p"], ["s"]),
             helper.make_node("SequenceErase", ["s", "q"], ["s2"]),
             helper.make_node("SequenceInsert", ["s2", "x", "r"], ["s3"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["N", 2]), *(t(n, onnx.TensorProto.INT64, []) for n in "pqr")],
                 [t("y", FLOAT, [None, 2])])


def test_samples_the_original_rejects_are_replaced_by_ones_it_runs():
    # Positions drawn in [0, 4) are past the end of the list for every sample but by chance:
    # the original fails, which proves nothing; validation goes on to samples whose
    # integers are zero, which the original runs, and compares those.
    report = Job.read(_insert_at()).lower()
    assert report.tensor_only and report.validation["compared"] >= 1, report.validation
    assert not any("proved nothing" in n for n in report.notes)


def test_a_runtime_wrong_only_on_empty_tensors_is_named_before_writing(monkeypatch):
    # OpenVINO sized a zero-element tensor after a Loop as all zeros ([1, 0, 2] read as
    # [0, 0, 2]): the target's validation has a sample with zero-size dims, which finds it.
    from seqlower.executor import native_backend

    pytest.importorskip("openvino")
    real = native_backend.NativeBackend.run
    monkeypatch.setattr(native_backend.NativeBackend, "run", lambda self, feeds: [
        np.zeros([0] * np.ndim(v), np.asarray(v).dtype) if np.size(v) == 0 else v for v in real(self, feeds)])
    report = Job.read(_insert_at()).lower(LowerOptions(target="openvino"))
    [gap] = [g for g in report.gaps if g.what == "model"]
    assert "validation on openvino" in gap.why and report.validation["target"]["compared"] >= 1


def test_where_the_original_runs_on_the_target_and_the_lowering_does_not_the_original_is_written(monkeypatch):
    # OpenVINO runs some sequence programs itself, and refused the lowering of two
    # (a Reshape of run-time rank): never worse than the original, which is written as it
    # was, with the reason; a lowering it runs is written as before.
    from seqlower.executor import native_backend

    pytest.importorskip("openvino")
    real = native_backend.NativeBackend.run

    def refuses_lowered(self, feeds):
        if b"SequenceConstruct" not in self._data and b"SplitToSequence" not in self._data:
            raise seqlower.ExecutionError("openvino failed: CPU plug-in doesn't support Reshape of dynamic rank")
        return real(self, feeds)

    monkeypatch.setattr(native_backend.NativeBackend, "run", refuses_lowered)
    m = model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
               helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
              [t("x", FLOAT, ["N", 3])], [t("y", FLOAT, [None, 3])])
    job = Job.read(m)
    report = job.lower(LowerOptions(target="openvino"))
    assert "the original runs on openvino: kept as it was" in report.remaining[0]["reason"]
    assert [n.op_type for n in job.model().graph.node] == ["SequenceConstruct", "ConcatFromSequence"]
    assert report.validation["target"]["failure"]



def test_a_runtime_failing_only_on_loops_of_no_trips_at_real_sizes_is_named(monkeypatch):
    # OpenVINO reshaped a no-trip Loop's stack to [4, 0] (program 9400316): the target's
    # validation has a sample of integers all 0 at dims of 2, which finds it.
    from seqlower.executor import native_backend
    from tests.helpers import BOOL, INT64, body

    pytest.importorskip("openvino")
    real = native_backend.NativeBackend.run

    def no_trips_fail(self, feeds):
        if int(np.asarray(feeds["p"])) == int(np.asarray(feeds["q"])) == 0 and np.asarray(feeds["x"]).size:
            raise seqlower.ExecutionError("openvino failed: reshape: the shape of input data (8) conflicts")
        return real(self, feeds)

    monkeypatch.setattr(native_backend.NativeBackend, "run", no_trips_fail)
    seq = helper.make_tensor_sequence_value_info
    loop_body = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("SequenceInsert", ["acc", "x"], ["acc_out"])],
                     [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT, None)], [t("c_out", BOOL, []), seq("acc_out", FLOAT, None)])
    m = model([helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
               helper.make_node("Loop", ["p", "", "e"], ["s"], body=loop_body),
               helper.make_node("SequenceInsert", ["s", "x", "q"], ["s2"]),
               helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)],
              [t("x", FLOAT, ["N", "M"]), t("p", INT64, []), t("q", INT64, [])], [t("y", FLOAT, [None, None])])
    report = Job.read(m).lower(LowerOptions(target="openvino"))
    [gap] = [g for g in report.gaps if g.what == "model"]
    assert "validation on openvino" in gap.why
