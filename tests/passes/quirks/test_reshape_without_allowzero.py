"""Reshape with allowzero=1 rewritten for onnx2torch (quirk no-allowzero): a constant shape
without 0 just loses the attribute; computed shapes with zero dims (known rank and not),
float, int64 and string, keep their numbers; other targets keep allowzero."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from tests.helpers import FLOAT, INT64, const, lower_checked, model, ops_of, t
from tests.test_exported_models import DATA


def _allowzero(low) -> list[int]:
    return [a.i for n in low.graph.node if n.op_type == "Reshape" for a in n.attribute if a.name == "allowzero"]


def test_a_constant_shape_without_zero_drops_the_attribute():
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], [t("x", FLOAT, [2, 3])], [t("y", FLOAT, [3, 2])],
              initializer=[const("s", np.array([3, 2], np.int64))], opset=14)
    low, _ = lower_checked(m, inputs=[{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}], target="onnx2torch")
    assert ops_of(low) == ["Reshape"] and _allowzero(low) == []


@pytest.mark.parametrize("dtype", [FLOAT, INT64, TensorProto.STRING])
@pytest.mark.parametrize("known_rank", [True, False])
def test_computed_shapes_with_zero_dims(dtype, known_rank):
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
              [t("x", dtype, ["n"]), t("s", INT64, [2] if known_rank else ["r"])], [t("y", dtype, None if not known_rank else [None, None])],
              opset=18)
    np_type = {FLOAT: np.float32, INT64: np.int64, TensorProto.STRING: object}[dtype]

    def x(n):
        return np.array([f"v{i}" for i in range(n)], dtype=object) if dtype == TensorProto.STRING else np.arange(n).astype(np_type)

    feeds = [{"x": x(6), "s": np.array([2, 3])}, {"x": x(0), "s": np.array([0, 3])}, {"x": x(0), "s": np.array([4, 0])}]
    low, report = lower_checked(m, inputs=feeds, target="onnx2torch")
    assert _allowzero(low) == [] and any(r["how"] == "padded Reshape and Slice" for r in report.rewrites)


def test_other_targets_keep_allowzero_and_the_fixture_loses_it_for_onnx2torch():
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], [t("x", FLOAT, ["n"]), t("s", INT64, [2])],
              [t("y", FLOAT, [None, None])], opset=14)
    assert _allowzero(to_proto(lower_with_report(load_model(m), LowerOptions(target="generic"))[0])) == [1]
    # TorchScript's unbind at opset 17: its lowering's exact reshapes used allowzero.
    import onnx

    fixture = onnx.load(DATA / "ts_unbind_del_append_stack_opset17.onnx")
    assert 1 in _allowzero(to_proto(lower_with_report(load_model(fixture), LowerOptions(target="generic"))[0]))
    assert _allowzero(to_proto(lower_with_report(load_model(fixture), LowerOptions(target="onnx2torch"))[0])) == []
