from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel


class SequenceLength(SeqKernel):
    def _run(self, seq):
        return (np.array(len(self.check_sequence(seq)), dtype=np.int64),)
