from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.kernels._subgraph import run_body


class If(SeqKernel):
    """If whose branches may yield sequences and empty optionals."""

    def need_context(self) -> bool:
        return True

    def _run(self, cond, context=None, then_branch=None, else_branch=None, attributes=None, bindings=None):
        cond = self.check_tensor(cond, "cond")
        if cond.size != 1:
            self.fail(f"cond must have exactly one element, got shape {list(cond.shape)}")
        branch = self.then_branch if bool(cond.reshape(()).item()) else self.else_branch
        outs = run_body(branch, context or {}, {}, attributes)
        if len(outs) != len(self.onnx_node.output):
            self.fail(f"branch returned {len(outs)} values for {len(self.onnx_node.output)} outputs")
        return tuple(outs)
