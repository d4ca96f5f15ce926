"""seqlower.targets.quirks: each detector beside the runtime failure it was bisected from.
When a runtime is fixed, its test here fails: take the quirk off the profile."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.cli import main
from seqlower.executor import Executor
from seqlower.targets import load_target, target_gaps
from tests.helpers import BOOL, FLOAT, body, model, t


def _if_model(then_rows: int) -> onnx.ModelProto:
    """Bisected from TorchScript's list built under an `if` (ts_list_under_if_split):
    one branch stacks three rows, the other one, or both one."""
    rows = [helper.make_node("Unsqueeze", ["x", "zero"], [f"r{k}"]) for k in range(then_rows)]
    then = body([helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", onnx.TensorProto.INT64, [1], [0])),
                 *rows, helper.make_node("Concat", [f"r{k}" for k in range(then_rows)], ["a"], axis=0)],
                [], [t("a", FLOAT, [then_rows, "n"])])
    other = body([helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", onnx.TensorProto.INT64, [1], [0])),
                  helper.make_node("Unsqueeze", ["x", "zero"], ["b"])], [], [t("b", FLOAT, [1, "n"])])
    return model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [t("x", FLOAT, ["n"]), t("c", BOOL, [])], [t("y", FLOAT, [None, "n"])])


def test_tract_fails_an_if_whose_branches_differ_in_shape_and_check_names_it(tmp_path, capsys):
    m = _if_model(3)
    feeds = {"x": np.arange(4, dtype=np.float32), "c": np.array(True)}
    with pytest.raises(Exception, match="If"):
        Executor(m, backend="tract").run(feeds)
    gaps = target_gaps(m, load_target("tract"))
    assert [g.where for g in gaps] == ["If node (output 'y')"] and "[3, n] and [1, n]" in gaps[0].why
    assert "quirk if-branch-facts" in gaps[0].why
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    assert main(["check", str(path), "--target", "tract"]) == 1
    out = capsys.readouterr().out
    assert "If node (output 'y')" in out and "if-branch-facts" in out
    # Other targets have no such quirk.
    assert target_gaps(m, load_target("openvino")) == []


def test_an_if_with_branches_of_one_shape_has_no_gap_and_runs_on_tract():
    m = _if_model(1)
    assert target_gaps(m, load_target("tract")) == []
    for c in (True, False):
        out = Executor(m, backend="tract").run({"x": np.arange(4, dtype=np.float32), "c": np.array(c)}).outputs["y"]
        np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32)[None])
