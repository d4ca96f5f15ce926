"""passes/quirks/slice_stale_scans.py: a Loop's scan outputs read as empty when it ran no
iteration, for OpenVINO, whose compiled model gives such a Loop its previous run's scans."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.executor import Executor
from seqlower.passes.quirks.slice_stale_scans import SliceStaleScansPass
from tests.helpers import BOOL, FLOAT, INT64, model, t


def _scanning_loop(trips: str = "n") -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [t("i", INT64, []), t("c", BOOL, []), t("acc", FLOAT, [2])],
        [t("c_out", BOOL, []), t("acc_out", FLOAT, [2]), t("scan", FLOAT, [2])])
    inits = [helper.make_tensor("three", INT64, [], [3])] if trips == "three" else []
    return model([helper.make_node("Loop", [trips, "", "x"], ["out", "scans"], body=body)],
                 [t("n", INT64, []), t("x", FLOAT, [2])], [t("out", FLOAT, [2]), t("scans", FLOAT, [None, 2])],
                 opset=13, initializer=inits)


def _rewritten(m: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    irm = ir.serde.deserialize_model(m)
    modified = SliceStaleScansPass()(irm).modified
    return ir.serde.serialize_model(irm), modified


def _runs(m: onnx.ModelProto, backend: str) -> list[list]:
    ex = Executor(m, backend=backend)
    x = np.array([1.0, 2.0], np.float32)
    return [ex.run({"n": np.array(n), "x": x}).outputs["scans"].tolist() for n in (3, 0, 2, 0)]


def test_a_loop_that_runs_no_iteration_gives_no_scan_row():
    m = _scanning_loop()
    low, modified = _rewritten(m)
    assert modified and [n.op_type for n in low.graph.node] == ["Loop", "Greater", "Shape", "Where", "Gather", "Slice"]
    onnx.checker.check_model(low, full_check=True)
    want = [[[2, 4], [3, 6], [4, 8]], [], [[2, 4], [3, 6]], []]
    assert _runs(low, "onnxruntime") == want == _runs(m, "onnxruntime")
    assert _runs(low, "reference") == want
    pytest.importorskip("openvino")
    assert _runs(low, "openvino") == want
    # The quirk itself: when this fails on OpenVINO, take the quirk off its profile.
    assert _runs(m, "openvino")[1] == [[2, 4], [3, 6], [4, 8]]


def test_read_once_it_changes_nothing_and_a_constant_trip_count_is_left_alone():
    low, _ = _rewritten(_scanning_loop())
    assert not _rewritten(low)[1]
    assert not _rewritten(_scanning_loop("three"))[1]
