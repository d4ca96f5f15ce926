from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel


class OptionalGetElement(SeqKernel):
    def _run(self, x=None):
        if x is None:
            self.fail("the optional is empty")
        return (x,)
