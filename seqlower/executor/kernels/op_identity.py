from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel


class Identity(SeqKernel):
    """Also passes sequences and empty optionals through, which onnx's kernel cannot."""

    def _run(self, x=None):
        return (x,)
