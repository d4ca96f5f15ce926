"""seqlower.passes as users compose it: inside their own onnx_ir PassManager, next to
onnx_ir's common passes; and installed under seqlower, never as a top-level module."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx_ir.passes.common import CheckerPass, RemoveUnusedNodesPass, TopologicalSortPass

import seqlower.passes as sp
from seqlower import LowerOptions
from seqlower.demo import build_demo_model
from seqlower.executor import Executor
from seqlower.io.inventory import take_inventory


def test_build_passes_runs_in_a_users_pass_manager_next_to_onnx_irs_passes():
    original = build_demo_model()
    model = ir.serde.deserialize_model(original)
    pm = ir.passes.PassManager([TopologicalSortPass(), *sp.build_passes(LowerOptions(target="openvino")),
                                RemoveUnusedNodesPass(), CheckerPass(full_check=True)])
    result = pm(model)
    assert result.modified
    lowered = ir.serde.serialize_model(result.model)
    assert take_inventory(lowered).clean
    feeds = {"x": np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32),
             "y": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)}
    want = Executor(original).run(feeds).outputs
    got = Executor(lowered).run(feeds).outputs
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


def test_one_pass_alone_reports_whether_it_changed_anything():
    model = ir.serde.deserialize_model(build_demo_model())
    first = sp.InferSequenceShapesPass()(model)
    assert isinstance(first, ir.passes.PassResult)
    nothing = ir.serde.deserialize_model(onnx.helper.make_model(
        onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
                               [onnx.helper.make_tensor_value_info("x", 1, [2])],
                               [onnx.helper.make_tensor_value_info("y", 1, [2])]),
        opset_imports=[onnx.helper.make_opsetid("", 17)]))
    assert not sp.LowerFlatSequencesPass(64, "auto", True)(nothing).modified


def test_every_exported_name_resolves_to_a_pass_class():
    for name in sp.__all__:
        value = getattr(sp, name)
        if name != "build_passes":
            assert issubclass(value, ir.passes.PassBase), name
    with pytest.raises(AttributeError):
        sp.NoSuchPass  # noqa: B018


def test_no_top_level_passes_module_is_installed(tmp_path):
    # From a folder that is not the repository: only the installed distribution counts.
    probe = "import importlib.util as u; print(u.find_spec('passes') is None, u.find_spec('seqlower.passes') is not None)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
