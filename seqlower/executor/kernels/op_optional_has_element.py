from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel


class OptionalHasElement(SeqKernel):
    def _run(self, x=None):
        return (np.array(x is not None),)
