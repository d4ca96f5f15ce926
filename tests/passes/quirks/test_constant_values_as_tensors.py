"""Constant value_int(s)/value_float(s)/value_string(s) as value tensors for onnx2torch
(quirk constant-list-value): same dtype, shape and numbers; other
targets keep the model's form."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.io.models import to_proto
from tests.helpers import FLOAT, INT64, lower_checked, model, t
from tests.test_exported_models import DATA


def _forms(m: onnx.ModelProto) -> list[str]:
    out, graphs = [], [m.graph]
    while graphs:
        g = graphs.pop()
        for n in g.node:
            if n.op_type == "Constant":
                out += [a.name for a in n.attribute]
            graphs += [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    return sorted(out)


@pytest.mark.parametrize("form, value, elem, shape", [
    ("value_int", 3, INT64, []), ("value_ints", [0, 2], INT64, [2]), ("value_float", 1.5, FLOAT, []),
    ("value_floats", [0.5, -1.0], FLOAT, [2]), ("value_string", "a", TensorProto.STRING, []),
    ("value_strings", ["a", "bc"], TensorProto.STRING, [2]),
])
def test_each_form_keeps_its_value(form, value, elem, shape):
    m = model([helper.make_node("Constant", [], ["c"], **{form: value}), helper.make_node("Identity", ["c"], ["y"])],
              [], [t("y", elem, shape)], opset=17)
    low, _ = lower_checked(m, inputs=[{}], target="onnx2torch", backends=("reference",))
    assert _forms(low) == ["value"]
    assert _forms(to_proto(lower_with_report(load_model(m), LowerOptions(target="generic"))[0])) == [form]


def test_dynamo_unsqueeze_axes_become_tensors():
    low = to_proto(lower_with_report(load_model(onnx.load(DATA / "dynamo_split_chunk_unbind_opset18.onnx")),
                                     LowerOptions(target="onnx2torch"))[0])
    assert _forms(low) and set(_forms(low)) == {"value"}
