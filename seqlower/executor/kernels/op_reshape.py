from __future__ import annotations

import numpy as np
from onnx.reference.ops.op_reshape import reshape_reference_implementation

from seqlower.executor.kernels._base import SeqKernel


class Reshape(SeqKernel):
    """Reshape at every opset: onnx's evaluator has no Reshape-1, whose target shape is
    the ``shape`` attribute (onnxmltools writes IR 3 models at opset 1, and their lowered
    ZipMap is one). From opset 5 the shape is the second input, as onnx computes it."""

    def _run(self, data, shape=None, allowzero=None):
        if shape is None:
            self.fail("needs a shape (the attribute before opset 5, the second input from it)")
        target = np.array(shape, dtype=np.int64).reshape(-1)
        return (reshape_reference_implementation(data, target, int(allowzero or 0)),)
