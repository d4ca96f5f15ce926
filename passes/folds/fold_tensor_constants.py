"""onnxscript's constant folding on the tensor ops only: sequence ops are seqlower's.

onnxscript's folder rewrites sequence ops by itself (its partial evaluators turn a
``SplitToSequence`` into ``Split`` with ``num_outputs``, an attribute only opset 18 has,
at every opset), and folds the rest through onnx's reference kernels, which get some
sequence edges wrong (SEMANTICS.md). A node that reads or makes a sequence or an
optional is left as it is; the lowerings and ``FoldSequenceConstantsPass`` own it.
"""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnxscript.optimizer._constant_folding import (DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                                                    DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT)
# The pass class itself, to skip sequence nodes before its op-specific rewrites run
# (``should_fold`` is asked only after them).
from onnxscript.optimizer._constant_folding import FoldConstantsPass  # noqa: E402

__all__ = ["fold_tensor_constants", "touches_sequences"]


def touches_sequences(node: ir.Node) -> bool:
    if node.domain in ("", "ai.onnx") and (node.op_type.startswith("Sequence") or node.op_type in (
            "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalHasElement", "OptionalGetElement")):
        return True
    return any(v is not None and isinstance(v.type, (ir.SequenceType, ir.OptionalType))
               for v in (*node.inputs, *node.outputs))


class _TensorFolding(FoldConstantsPass):
    def process_node(self, node: ir.Node, is_function: bool):  # noqa: ANN201 - onnxscript's Replacement
        if touches_sequences(node):
            return None
        return super().process_node(node, is_function)


def fold_tensor_constants(model: ir.Model) -> bool:
    """Fold ``model``'s tensor constants in place (onnx_ir's warnings about initializers it
    keeps quieted: facts about the model, nothing for the user to act on); whether it changed."""
    quiet = logging.getLogger("onnx_ir")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _TensorFolding(shape_inference=False, input_size_limit=DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                              output_size_limit=DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT)(model).modified
    finally:
        quiet.setLevel(level)
