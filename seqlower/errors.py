"""The one exception type of seqlower's Python API.

Every failure a user can cause (an unreadable model, an invalid node, a kernel that
rejects its inputs, an onnxruntime crash) surfaces as :class:`SeqlowerError` with a
one-line message naming the file or the node. The CLI prints that line and exits 2
(or 1 where the failure is a verdict, like a mismatch).
"""

from __future__ import annotations

__all__ = ["SeqlowerError", "LoweringDefect", "ModelError", "ExecutionError", "ModelWarning", "describe_node"]


class SeqlowerError(Exception):
    """Base class of every error seqlower raises on purpose. Its message is one line."""


class ModelError(SeqlowerError):
    """The model file or the model itself is unreadable or invalid."""


class LoweringDefect(ModelError):
    """What seqlower wrote is wrong (the lowered model fails onnx's checker): a defect of
    the lowering, never of the input. ``lower`` validates: such a web is kept instead."""


class ExecutionError(SeqlowerError):
    """A model could not be run: a kernel rejected its inputs, or a backend failed."""


class ModelWarning(UserWarning):
    """Something in a model that seqlower accepts but a strict reader would not (a graph
    input without a shape, as tf2onnx writes them). One line, naming the file; the CLI
    prints it once as ``seqlower: warning: ...``."""


def describe_node(op_type: str, name: str | None, outputs: list[str] | tuple[str, ...] = ()) -> str:
    """``SequenceInsert node 'ins1'`` or, for unnamed nodes, the first output's name."""
    if name:
        return f"{op_type} node {name!r}"
    first = next((o for o in outputs if o), None)
    if first:
        return f"{op_type} node (output {first!r})"
    return f"{op_type} node"
