"""The ``reference`` backend: onnx's ReferenceEvaluator with seqlower's kernels."""

from __future__ import annotations

from typing import Any

import onnx
from onnx.reference import ReferenceEvaluator

from seqlower.errors import ExecutionError, SeqlowerError
from seqlower.executor.kernels import KernelConfig, make_kernels

__all__ = ["ReferenceBackend"]


def _evaluator_class(kernels: list[type]) -> type[ReferenceEvaluator]:
    # onnx builds function bodies with ``self.__class__(f)`` and no new_ops, so the
    # kernels ride on the class: every nested evaluator (subgraphs, functions) gets them.
    class SeqEvaluator(ReferenceEvaluator):
        def __init__(self, proto: Any, *args: Any, new_ops: Any = None, **kwargs: Any) -> None:
            super().__init__(proto, *args, new_ops=[*kernels, *(new_ops or [])], **kwargs)

    return SeqEvaluator


class ReferenceBackend:
    name = "reference"

    def __init__(self, proto: onnx.ModelProto, config: KernelConfig) -> None:
        self.config = config
        try:
            self._evaluator = _evaluator_class(make_kernels(config))(proto)
        except SeqlowerError:
            raise
        except Exception as e:
            raise ExecutionError(f"reference backend cannot load the model: {_first_line(e)}") from None

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        try:
            return list(self._evaluator.run(None, feeds))
        except SeqlowerError:
            raise
        except RecursionError:
            raise ExecutionError("reference backend: subgraphs nest too deeply to run") from None
        except Exception as e:
            raise ExecutionError(f"reference backend failed: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
