"""Spec-exact kernels for the sequence ops, control flow, optionals and the ai.onnx.ml ops
where onnx's evaluator is wrong.

Each kernel replaces onnx's ReferenceEvaluator kernel of the same name through
``new_ops``; ``make_kernels(config)`` binds a run's :class:`KernelConfig` to them.
"""

from __future__ import annotations

from seqlower.executor.kernels._base import KEEPDIMS_POLICIES, KernelConfig, KernelError, SeqKernel
from seqlower.executor.kernels.op_concat_from_sequence import ConcatFromSequence
from seqlower.executor.kernels.op_identity import Identity
from seqlower.executor.kernels.op_if import If
from seqlower.executor.kernels.op_linear_classifier import LinearClassifier
from seqlower.executor.kernels.op_loop import Loop
from seqlower.executor.kernels.op_optional import Optional
from seqlower.executor.kernels.op_optional_get_element import OptionalGetElement
from seqlower.executor.kernels.op_optional_has_element import OptionalHasElement
from seqlower.executor.kernels.op_reshape import Reshape
from seqlower.executor.kernels.op_reverse_sequence import ReverseSequence
from seqlower.executor.kernels.op_sequence_at import SequenceAt
from seqlower.executor.kernels.op_sequence_construct import SequenceConstruct
from seqlower.executor.kernels.op_sequence_empty import SequenceEmpty
from seqlower.executor.kernels.op_sequence_erase import SequenceErase
from seqlower.executor.kernels.op_sequence_insert import SequenceInsert
from seqlower.executor.kernels.op_sequence_length import SequenceLength
from seqlower.executor.kernels.op_sequence_map import SequenceMap
from seqlower.executor.kernels.op_split_to_sequence import SplitToSequence
from seqlower.executor.kernels.op_svm_classifier import SVMClassifier
from seqlower.executor.kernels.op_zip_map import ZipMap

__all__ = ["KEEPDIMS_POLICIES", "KernelConfig", "KernelError", "KERNELS", "make_kernels"]

KERNELS: tuple[type[SeqKernel], ...] = (
    ConcatFromSequence,
    Identity,
    If,
    LinearClassifier,
    Loop,
    Optional,
    OptionalGetElement,
    OptionalHasElement,
    Reshape,
    ReverseSequence,
    SequenceAt,
    SequenceConstruct,
    SequenceEmpty,
    SequenceErase,
    SequenceInsert,
    SequenceLength,
    SequenceMap,
    SplitToSequence,
    SVMClassifier,
    ZipMap,
)


def make_kernels(config: KernelConfig) -> list[type[SeqKernel]]:
    """Kernel classes bound to ``config`` (the evaluator keys them by class name)."""
    if config.keepdims_policy not in KEEPDIMS_POLICIES:
        raise ValueError(f"keepdims policy must be one of {KEEPDIMS_POLICIES}, got {config.keepdims_policy!r}")
    return [type(k.__name__, (k,), {"config": config, "__module__": k.__module__}) for k in KERNELS]
