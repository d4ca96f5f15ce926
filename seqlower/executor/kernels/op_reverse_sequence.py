from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.values import elem_type_of, type_name


class ReverseSequence(SeqKernel):
    def _run(self, x, sequence_lens, batch_axis=1, time_axis=0):
        x = self.check_tensor(x, "input")
        lens = self.check_tensor(sequence_lens, "sequence_lens")
        if x.ndim < 2:
            self.fail(f"input must have rank >= 2, got rank {x.ndim}")
        if {batch_axis, time_axis} != {0, 1}:
            self.fail(f"batch_axis ({batch_axis}) and time_axis ({time_axis}) must be 0 and 1 in some order")
        if lens.dtype != np.int64:
            self.fail(f"sequence_lens must be int64, got {type_name(elem_type_of(lens))}")
        batch, steps = x.shape[batch_axis], x.shape[time_axis]
        if lens.shape != (batch,):
            self.fail(f"sequence_lens must have shape [{batch}], got {list(lens.shape)}")
        bad = lens[(lens < 0) | (lens > steps)]
        if bad.size:
            self.fail(f"sequence_lens value {int(bad[0])} is outside [0, {steps}]")
        # View as [batch, time, ...] so one loop serves both axis orders.
        view = np.swapaxes(x, 0, 1) if batch_axis == 1 else x
        out = view.copy()
        for b, n in enumerate(lens.tolist()):
            out[b, :n] = view[b, :n][::-1]
        return (np.swapaxes(out, 0, 1) if batch_axis == 1 else out,)
