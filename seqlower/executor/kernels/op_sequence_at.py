from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel


class SequenceAt(SeqKernel):
    def _run(self, seq, position):
        seq = self.check_sequence(seq)
        n = len(seq)
        p = self.check_position(position)
        if p is None:
            self.fail("position is required")
        if not -n <= p < n:
            self.fail(f"position {p} is out of range [{-n}, {n - 1}] for a sequence of length {n}")
        return (seq[p],)
