from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.values import seq_elem_type


class SequenceErase(SeqKernel):
    def _run(self, seq, position=None):
        seq = self.check_sequence(seq)
        n = len(seq)
        if n == 0:
            self.fail("cannot erase from an empty sequence")
        p = self.check_position(position)
        if p is None:
            p = n - 1
        elif not -n <= p < n:
            self.fail(f"position {p} is out of range [{-n}, {n - 1}] for a sequence of length {n}")
        elif p < 0:
            p += n
        out = self.new_seq(seq, seq_elem_type(seq))
        del out[p]
        return (out,)
