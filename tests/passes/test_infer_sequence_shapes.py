"""Shape inference that keeps sequence types and adds lengths' consequences."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from passes.infer_sequence_shapes import InferSequenceShapesPass, refine_shape
from seqlower.model_io import to_proto
from tests.helpers import FLOAT, const, model, seq, t


def test_sequences_stay_sequences_and_reads_get_exact_shapes():
    # The sequence is a model output, so it stays; onnx alone would say [?, 4] for the
    # SequenceAt and ? for the concat axis.
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
            helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
            helper.make_node("SequenceInsert", ["s1", "y"], ["s"]),
            helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
            helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
            helper.make_node("ConcatFromSequence", ["s"], ["stack_pair"], axis=-1, new_axis=1),
            helper.make_node("Concat", ["first", "cat"], ["both"], axis=0),
        ],
        [t("x", FLOAT, [2, 4]), t("y", FLOAT, [3, 4])],
        [seq("s", FLOAT), t("both", FLOAT, [None, 4])],
        initializer=[const("zero", 0, np.int64)],
    )
    irm = ir.serde.deserialize_model(m)
    assert InferSequenceShapesPass()(irm).modified
    values = {v.name: v for n in irm.graph for v in n.outputs}
    assert isinstance(values["s"].type, ir.SequenceType) and values["s"].shape == ir.Shape([None, 4])
    assert values["first"].shape == ir.Shape([2, 4])
    assert values["cat"].shape == ir.Shape([5, 4])
    assert values["stack_pair"].shape == ir.Shape([None, 4, 2])  # the count of elements is the new axis
    assert values["both"].shape == ir.Shape([7, 4])
    onnx.checker.check_model(to_proto(irm), full_check=True)
    assert not InferSequenceShapesPass()(irm).modified, "a second run finds nothing new"


def test_refine_never_forgets_a_known_dim():
    assert refine_shape(ir.Shape([2, None]), ir.Shape([None, 3])) == ir.Shape([2, 3])
    assert refine_shape(ir.Shape(["N"]), ir.Shape([None])) == ir.Shape(["N"])
    assert refine_shape(ir.Shape([2]), ir.Shape([2, 3])) == ir.Shape([2])
    assert refine_shape(None, ir.Shape([1])) == ir.Shape([1])
