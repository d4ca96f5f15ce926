from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel


class ConcatFromSequence(SeqKernel):
    def _run(self, seq, axis=None, new_axis=0):
        seq = self.check_sequence(seq)
        if axis is None:
            self.fail("attribute axis is required")
        if not seq:
            # The spec is silent; onnxruntime and the reference evaluator both reject it.
            self.fail("cannot concatenate an empty sequence")
        ranks = {t.ndim for t in seq}
        if len(ranks) > 1:
            self.fail(f"elements have different ranks {sorted(ranks)}")
        rank = ranks.pop()
        if new_axis:
            a = self.norm_axis(axis, rank, extra=1)
            shapes = {t.shape for t in seq}
            if len(shapes) > 1:
                self.fail(f"new_axis=1 needs equal shapes, got {sorted(list(s) for s in shapes)}")
            return (np.stack(seq, axis=a),)
        if rank == 0:
            self.fail("cannot concatenate scalars without new_axis=1")
        a = self.norm_axis(axis, rank)
        ref = seq[0].shape
        for i, t in enumerate(seq):
            if t.shape[:a] + t.shape[a + 1 :] != ref[:a] + ref[a + 1 :]:
                self.fail(f"element {i} has shape {list(t.shape)}, incompatible with {list(ref)} off axis {a}")
        return (np.concatenate(seq, axis=a),)
