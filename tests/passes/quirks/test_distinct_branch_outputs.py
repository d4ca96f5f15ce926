"""If branches whose outputs share a name give them apart (TensorRT, quirk
trt-if-branches), through an Identity in the else branch; the numbers unchanged."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.helpers import FLOAT, body, lower_checked, model, t


def test_outputs_of_one_name_are_named_apart_and_give_the_same_numbers():
    then = body([helper.make_node("Identity", ["x"], ["r"]), helper.make_node("Abs", ["x"], ["q"])], [],
                [t("r", FLOAT, [2]), t("q", FLOAT, [2])])
    other = body([helper.make_node("Neg", ["x"], ["r"]), helper.make_node("Relu", ["x"], ["p"])], [],
                 [t("r", FLOAT, [2]), t("p", FLOAT, [2])])
    m = model([helper.make_node("If", ["c"], ["y", "z"], then_branch=then, else_branch=other)],
              [t("c", TensorProto.BOOL, []), t("x", FLOAT, [2])], [t("y", FLOAT, [2]), t("z", FLOAT, [2])])
    feeds = [{"c": np.array(v), "x": np.array([1, -2], np.float32)} for v in (True, False)]
    low, report = lower_checked(m, inputs=feeds, target="tensorrt")
    branches = {a.name: a.g for a in low.graph.node[0].attribute}
    names = [[o.name for o in branches[b].output] for b in ("then_branch", "else_branch")]
    assert names[0][0] != names[1][0] and names[0][1] != names[1][1]
    assert [r["into"] for r in report.rewrites if r["op"] == "If"] == ["If"]
