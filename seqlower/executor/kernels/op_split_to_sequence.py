from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.values import elem_type_of, type_name


class SplitToSequence(SeqKernel):
    def _run(self, x, split=None, axis=0, keepdims=1):
        x = self.check_tensor(x, "input")
        if x.ndim == 0:
            self.fail("input must have rank >= 1, got a scalar")
        a = self.norm_axis(axis, x.ndim)
        d = x.shape[a]
        squeeze = split is None and not keepdims
        if split is None:
            sizes = [1] * d
        else:
            split = self.check_tensor(split, "split")
            if split.dtype not in (np.int32, np.int64):
                self.fail(f"split must be int32 or int64, got {type_name(elem_type_of(split))}")
            if split.ndim == 0:
                k = int(split)
                if k <= 0:
                    self.fail(f"scalar split must be positive, got {k}")
                sizes = [k] * (d // k) + ([d % k] if d % k else [])
                if not keepdims:
                    squeeze = self._keepdims_policy(k, sizes, x.shape, a)
            elif split.ndim == 1:
                sizes = [int(s) for s in split]
                if any(s < 0 for s in sizes):
                    self.fail(f"split entries must be >= 0, got {sizes}")
                if sum(sizes) != d:
                    self.fail(f"split {sizes} sums to {sum(sizes)} but dimension {a} has size {d}")
            else:
                self.fail(f"split must be a scalar or 1-D, got shape {list(split.shape)}")
        bounds = np.cumsum([0, *sizes])
        chunks = [np.take(x, np.arange(lo, hi), axis=a) for lo, hi in zip(bounds[:-1], bounds[1:])]
        if squeeze:
            chunks = [c.reshape(c.shape[:a] + c.shape[a + 1 :]) for c in chunks]
        return (self.new_seq(chunks, elem_type_of(x)),)

    def _keepdims_policy(self, k: int, sizes: list[int], shape: tuple[int, ...], a: int) -> bool:
        """Whether to drop the split axis of a scalar split's chunks with keepdims=0 (see
        KernelConfig).

        onnxruntime reshapes every chunk to its shape without the split axis, which works
        when the chunk has size 1 along it (split == 1, or a dimension of 1) or has no
        elements at all, and fails otherwise.
        """
        policy = self.config.keepdims_policy
        rest = int(np.prod(shape[:a] + shape[a + 1 :]))
        ort_works = rest == 0 or all(s == 1 for s in sizes)
        if policy == "spec" or (policy == "auto" and not ort_works):
            squeeze = False
        elif ort_works:
            squeeze = True
        else:
            self.fail(
                f"scalar split {k} with keepdims=0 gives chunks of sizes {sizes}, which fails on onnxruntime"
                " (keepdims policy 'onnxruntime');"
                " use --keepdims-policy spec to ignore keepdims as the spec says"
            )
        self.config.note(
            f"{self.where}: keepdims=0 with scalar split {k}: policy '{policy}' "
            + ("squeezed the chunks (onnxruntime's behaviour)" if squeeze else "kept the split axis (the spec)")
        )
        return squeeze
