"""onnx2torch reads a CumSum without ``reverse`` as reverse=1 (quirk cumsum-reverse-default):
lowered for it, every CumSum says reverse=0 or 1 out loud, the main graph's, a subgraph's
and the lowerings' own, and the numbers stay the same. (onnx2torch is not a dependency of
the suite; tools/runtimes.py runs the fixtures on it: 4 models with wrong numbers before,
none after.)"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, body, const, lower_checked, model, t
from tests.test_exported_models import DATA


def _cumsums(m: onnx.ModelProto) -> list[dict[str, int]]:
    found, graphs = [], [m.graph]
    while graphs:
        g = graphs.pop()
        for n in g.node:
            if n.op_type == "CumSum":
                found.append({a.name: a.i for a in n.attribute})
            graphs += [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    return found


def test_every_cumsum_spells_out_its_direction_for_onnx2torch():
    branch = body([helper.make_node("CumSum", ["x", "axis"], ["z"])], [], [t("z", FLOAT, ["n"])])
    other = body([helper.make_node("CumSum", ["x", "axis"], ["z2"], reverse=1)], [], [t("z2", FLOAT, ["n"])])
    m = model([helper.make_node("CumSum", ["x", "axis"], ["a"]),
               helper.make_node("If", ["c"], ["b"], then_branch=branch, else_branch=other),
               helper.make_node("Add", ["a", "b"], ["y"])],
              [t("x", FLOAT, ["n"]), t("c", BOOL, [])], [t("y", FLOAT, ["n"])],
              initializer=[const("axis", 0, np.int64)])
    feeds = [{"x": np.array([3.0, 3.0, 1.0], np.float32), "c": np.array(c)} for c in (True, False)]
    low, _ = lower_checked(m, inputs=feeds, target="onnx2torch")
    assert sorted(c.get("reverse") for c in _cumsums(low)) == [0, 0, 1]
    # Other targets keep the model as it was written.
    plain = to_proto(lower_with_report(load_model(m), LowerOptions(target="generic"))[0])
    assert sorted(str(c.get("reverse")) for c in _cumsums(plain)) == ["1", "None", "None"]


def test_the_split_with_run_time_sizes_gets_it_on_its_element_bounds():
    # ts_split_dynamic_sizes: onnx2torch summed [3, 3, 1] to [7, 4, 1] before.
    low = to_proto(lower_with_report(load_model(onnx.load(DATA / "ts_split_dynamic_sizes_opset17.onnx")),
                                     LowerOptions(target="onnx2torch"))[0])
    cumsums = _cumsums(low)
    assert cumsums and all(c.get("reverse") == 0 for c in cumsums)
