from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.values import elem_type_of, type_name


class SequenceConstruct(SeqKernel):
    def _run(self, *inputs):
        if not inputs:
            self.fail("needs at least one input")
        tensors = [self.check_tensor(t, f"input {i}") for i, t in enumerate(inputs)]
        types = {elem_type_of(t) for t in tensors}
        if len(types) > 1:
            self.fail(f"inputs have different types: {sorted(type_name(t) for t in types)}")
        return (self.new_seq(tensors, types.pop()),)
