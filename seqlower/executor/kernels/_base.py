"""Shared machinery of seqlower's spec-exact kernels for onnx's ReferenceEvaluator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import numpy as np
from onnx.reference.op_run import OpRun

from seqlower.errors import ExecutionError, describe_node
from seqlower.executor.values import TensorSeq, elem_type_of, seq_elem_type, type_name

__all__ = ["KernelConfig", "KernelError", "SeqKernel", "KEEPDIMS_POLICIES"]

from seqlower.options import KEEPDIMS_POLICIES  # noqa: E402


class KernelError(ExecutionError):
    """A kernel refused its inputs the way onnxruntime would (with a clearer message)."""


@dataclass
class KernelConfig:
    """Run-wide settings the kernels read, and the notes they leave.

    keepdims_policy: what SplitToSequence does with a scalar split and keepdims=0.
        ``spec``: keepdims is ignored whenever split is given (the spec's text).
        ``onnxruntime``: the split axis is squeezed, which works when every chunk has
        size 1 (split == 1, or a dimension of 1) and is an error otherwise (what
        onnxruntime 1.31 does). ``auto`` (default): onnxruntime's behaviour wherever
        onnxruntime gives a result, the spec where it fails, because TorchScript's
        ``torch.unbind`` export (``SplitToSequence(x, 1, keepdims=0)``) was validated on
        onnxruntime.
    """

    keepdims_policy: str = "auto"
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


class SeqKernel(OpRun):
    """Base of the kernels: optionals may be ``None`` and sequences lists."""

    config: ClassVar[KernelConfig] = KernelConfig()

    @property
    def where(self) -> str:
        n = self.onnx_node
        return describe_node(n.op_type, n.name, list(n.output))

    def fail(self, message: str) -> NoReturn:
        raise KernelError(f"{self.where}: {message}")

    def _check_and_fix_outputs(self, res: tuple[Any, ...]) -> tuple[Any, ...]:
        if not isinstance(res, tuple):
            raise TypeError(f"{type(self).__name__}._run must return a tuple")
        return tuple(np.asarray(x) if np.isscalar(x) else x for x in res)

    # -- argument checks shared by several ops ---------------------------------

    def check_sequence(self, value: Any, what: str = "input sequence") -> list:
        if not isinstance(value, list):
            self.fail(f"{what} must be a sequence, got {'nothing' if value is None else 'a tensor'}")
        return value

    def check_tensor(self, value: Any, what: str) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            self.fail(f"{what} must be a tensor, got {'nothing' if value is None else type(value).__name__}")
        return value

    def check_position(self, value: Any, what: str = "position") -> int | None:
        """A scalar int32/int64 position; exporters (TorchScript) also pass shape [1]."""
        if value is None:
            return None
        arr = self.check_tensor(value, what)
        if arr.dtype not in (np.int32, np.int64):
            self.fail(f"{what} must be int32 or int64, got {type_name(elem_type_of(arr))}")
        if arr.shape not in ((), (1,)):
            self.fail(f"{what} must be a scalar (or shape [1]), got shape {list(arr.shape)}")
        return int(arr.reshape(()))

    def norm_axis(self, axis: int, rank: int, what: str = "axis", extra: int = 0) -> int:
        """Normalise an axis into [0, rank+extra), counting negatives against rank+extra."""
        r = rank + extra
        if not -r <= axis < r:
            self.fail(f"{what} {axis} is out of range [{-r}, {r - 1}] for rank {rank}")
        return axis + r if axis < 0 else axis

    def check_same_type(self, seq: list, tensor: np.ndarray, what: str = "tensor") -> None:
        expected = seq_elem_type(seq)
        got = elem_type_of(tensor)
        if expected is not None and expected != got:
            self.fail(f"{what} has type {type_name(got)} but the sequence holds {type_name(expected)}")

    @staticmethod
    def new_seq(items: Any, elem_type: int | None) -> TensorSeq:
        return TensorSeq(items, elem_type)
