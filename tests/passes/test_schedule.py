"""The pass schedule: with check_each_pass, a model a pass leaves invalid is caught right
after that pass, naming it."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.errors import ModelError
from seqlower.options import LowerOptions
from seqlower.passes.schedule import CheckModelPass, build_passes
from tests.helpers import FLOAT, model, t


class _DropAnInput(ir.passes.InPlacePass):
    """Breaks the model: Add loses its second input."""

    def call(self, m: ir.Model) -> ir.passes.PassResult:
        node = next(iter(m.graph))
        node.resize_inputs(1)
        return ir.passes.PassResult(m, True)


def _add() -> ir.Model:
    return ir.serde.deserialize_model(model([helper.make_node("Add", ["x", "x"], ["y"])],
                                            [t("x", FLOAT, [2])], [t("y", FLOAT, [2])]))


def test_the_check_names_the_pass_that_broke_the_model():
    m = _add()
    assert not CheckModelPass("Nothing")(m).modified
    _DropAnInput()(m)
    with pytest.raises(ModelError, match="the model after _DropAnInput: fails the ONNX checker: .*Add.* input size 1"):
        CheckModelPass("_DropAnInput")(m)


def test_check_each_pass_puts_a_check_after_every_pass():
    plain = build_passes(LowerOptions())
    checked = build_passes(LowerOptions(), check_each=True)
    rounds, checked_rounds = plain[0].passes, checked[0].passes
    assert len(checked_rounds) == 2 * len(rounds) and len(checked) == 1 + 2 * (len(plain) - 1)
    assert all(isinstance(p, CheckModelPass) and p.after == type(q).__name__
               for q, p in zip(rounds, checked_rounds[1::2]))
