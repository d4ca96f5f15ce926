"""Model-local functions that take, return or hold sequences are inlined at their calls.

A function's signature has no types, so a list crossing its boundary can only be lowered
where its call is: the ONNX Model Zoo's resnet preprocessing model maps a
``seq(tensor(uint8))`` of images of different sizes through a ``SequenceMap`` inside a
function. So, before the rounds:

1. A function is inlined (onnx_ir's ``InlinePass``, at every call: main graph, subgraphs,
   other functions) when a node of it, at any depth, is a sequence, optional or map op,
   when a call passes it or takes from it a value of a sequence or optional type, or when
   it calls a function that is inlined.
2. Every other function stays as it is.

A function the inliner cannot take (an opset other than the model's, a graph attribute
parameter) stays, and the report says why.
"""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass

from seqlower import coverage
from seqlower.ir.helpers import graphs_of, subgraphs
from seqlower.ops import makes_lists
from seqlower.passes.keys import NOTES_KEY

__all__ = ["InlineSequenceFunctionsPass"]

logger = logging.getLogger(__name__)

def _is_list_type(t: ir.TypeProtocol | None) -> bool:
    return isinstance(t, (ir.SequenceType, ir.OptionalType))


def _holds_lists(node: ir.Node) -> bool:
    if node.domain in ("", "ai.onnx", "ai.onnx.ml") and makes_lists(node.op_type):
        return True
    return any(_is_list_type(v.type) for v in (*node.inputs, *node.outputs) if v is not None)


def _nodes(graph: ir.Graph | ir.Function):
    for node in graph:
        yield node
        for sub in subgraphs(node):
            yield from _nodes(sub)


def with_lists(model: ir.Model) -> set[ir.OperatorIdentifier]:
    """The model-local functions that take, return or hold sequences, or call one that does."""
    functions = model.functions
    calls: dict[ir.OperatorIdentifier, set[ir.OperatorIdentifier]] = {k: set() for k in functions}
    chosen: set[ir.OperatorIdentifier] = set()
    for key, f in functions.items():
        for node in _nodes(f):
            if _holds_lists(node):
                chosen.add(key)
            if node.op_identifier() in functions:
                calls[key].add(node.op_identifier())
    # A call site that hands a function a list, or takes one from it.
    scopes: list[ir.Graph | ir.Function] = [*graphs_of(model), *functions.values()]
    for scope in scopes:
        for node in _nodes(scope):
            if node.op_identifier() in functions and any(
                    _is_list_type(v.type) for v in (*node.inputs, *node.outputs) if v is not None):
                chosen.add(node.op_identifier())
    grown = True
    while grown:
        grown = False
        for key, called in calls.items():
            if key not in chosen and called & chosen:
                chosen.add(key)
                grown = True
    return chosen


def _not_inlinable(model: ir.Model, f: ir.Function) -> str:
    """Why onnx_ir's inliner would refuse ``f`` (checked first: it fails half-way)."""
    for domain, version in f.opset_imports.items():
        if model.opset_imports.get(domain, version) != version:
            return f"it imports {domain or 'ai.onnx'} {version} where the model imports {model.opset_imports[domain]}"
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in f.attributes.values()):
        return "it takes a graph attribute"
    return ""


class InlineSequenceFunctionsPass(ir.passes.InPlacePass):
    """Inline the model-local functions ``with_lists`` names; keep the others."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not model.functions:
            return ir.passes.PassResult(model, False)
        chosen = with_lists(model)
        notes = model.meta.setdefault(NOTES_KEY, [])
        for key in sorted(chosen):
            if why := _not_inlinable(model, model.functions[key]):
                coverage.hit("inline:kept", "model")
                chosen.discard(key)
                notes.append(f"function {key[0]}::{key[1]} holds sequences but is not inlined: {why}; they stay")
        if not chosen:
            return ir.passes.PassResult(model, False)
        try:
            result = InlinePass(criteria=lambda f: f.identifier() in chosen)(model)
        except (ValueError, ir.passes.PassError, ir.passes.PreconditionError) as e:
            cause = e.__cause__ or e
            why = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
            notes.append(f"functions holding sequences were not inlined ({why}); their sequences stay")
            coverage.hit("inline:kept", "model")
            return ir.passes.PassResult(model, False)
        coverage.hit("inline:function", "model")
        names = ", ".join(sorted(f"{d}::{n}" for d, n, _ in chosen))
        notes.append(
            f"inlined model-local functions that take, return or hold sequences: {names}")
        return ir.passes.PassResult(result.model, result.modified)
