from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel


class ZipMap(SeqKernel):
    """ai.onnx.ml ZipMap (the spec in numpy; onnx's evaluator has none): each row of
    float ``X`` ([N, C], or [C] for one row) becomes a map from the C class labels
    (``classlabels_int64s`` or ``classlabels_strings``, exactly one) to its values.
    onnxruntime refuses other ranks and a label count other than C; so does this."""

    op_domain = "ai.onnx.ml"

    def _run(self, x, classlabels_int64s=None, classlabels_strings=None):
        if (classlabels_int64s is None) == (classlabels_strings is None):
            self.fail("needs exactly one of classlabels_int64s and classlabels_strings")
        labels = ([int(k) for k in classlabels_int64s] if classlabels_int64s is not None
                  else [k.decode() if isinstance(k, bytes) else str(k) for k in classlabels_strings])
        x = np.asarray(x)
        if x.dtype != np.float32:
            self.fail(f"X must be float32, got {x.dtype}")
        if x.ndim not in (1, 2):
            self.fail(f"X must have rank 1 or 2, got shape {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] != len(labels):
            self.fail(f"X has {rows.shape[1]} columns for {len(labels)} class labels")
        return ([{k: np.float32(v) for k, v in zip(labels, row)} for row in rows],)
