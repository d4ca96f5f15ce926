from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.values import elem_type_of, seq_elem_type


class SequenceInsert(SeqKernel):
    def _run(self, seq, tensor, position=None):
        seq = self.check_sequence(seq)
        tensor = self.check_tensor(tensor, "tensor")
        self.check_same_type(seq, tensor)
        n = len(seq)
        p = self.check_position(position)
        if p is None:
            p = n
        elif not -n <= p <= n:
            self.fail(f"position {p} is out of range [{-n}, {n}] for a sequence of length {n}")
        elif p < 0:
            p += n
        out = self.new_seq(seq, seq_elem_type(seq) or elem_type_of(tensor))
        out.insert(p, tensor)
        return (out,)
