"""A sequence where a tensor goes, or a tensor where a sequence goes: refused before the
analysis reads the node, with the node named."""

from __future__ import annotations

import onnx_ir as ir

from seqlower import ops
from seqlower.errors import ModelError
from seqlower.ir.helpers import node_label

__all__ = ["check_input_kinds"]


# Which inputs of each sequence op are sequences (True) and which tensors (False); the
# last entry repeats for variadic inputs (seqlower.ops).
_INPUT_KINDS: dict[str, tuple[bool, ...]] = {
    n: f.inputs for n, f in ops.REGISTRY.items() if f.family == "sequence" and f.inputs
}


def check_input_kinds(node: ir.Node) -> None:
    """A sequence where a tensor goes, or a tensor where a sequence goes: onnx's checker
    and inference let some through (an op type changed, say), and no lowering fits them."""
    if node.op_type in ("Loop", "If"):
        # Trip counts and conditions are tensors, in and out of a Loop body.
        body = node.attributes["body"].as_graph() if node.op_type == "Loop" and "body" in node.attributes else None
        ends = [*node.inputs[: 2 if node.op_type == "Loop" else 1], *(body.outputs[:1] if body is not None else [])]
        for v in ends:
            if v is not None and isinstance(v.type, ir.SequenceType):
                raise ModelError(f"{node_label(node)}: '{v.name}' is a sequence where a trip count or condition goes")
        return
    kinds = _INPUT_KINDS.get(node.op_type)
    if kinds is None:
        return
    for i, v in enumerate(node.inputs):
        if v is None or v.type is None:
            continue
        want = kinds[min(i, len(kinds) - 1)]
        is_seq = isinstance(v.type, ir.SequenceType)
        if node.op_type == "SequenceMap" and i > 0:
            continue  # its extra inputs may be tensors or sequences
        if is_seq != want and not isinstance(v.type, ir.OptionalType):
            raise ModelError(f"{node_label(node)}: input {i} ('{v.name}') is a {'sequence' if is_seq else 'tensor'};"
                             f" {node.op_type} takes a {'sequence' if want else 'tensor'} there")
