from __future__ import annotations

from seqlower.executor.kernels._base import SeqKernel


class Optional(SeqKernel):
    """An optional is its value, or None when empty (no wrapping list, so that
    SequenceLength of an Optional(sequence) is the sequence's length)."""

    def _run(self, x=None, type=None):  # noqa: A002 - the attribute's name
        if x is None and type is None:
            self.fail("an empty Optional needs the 'type' attribute")
        return (x,)
