from __future__ import annotations

import onnx

from seqlower.executor.kernels._base import SeqKernel


class SequenceEmpty(SeqKernel):
    def _run(self, dtype=None):
        return (self.new_seq([], onnx.TensorProto.FLOAT if dtype is None else int(dtype)),)
