"""Lower optional values into a ``present`` flag and a payload.

An ``optional(T)`` value becomes a bool scalar ``present`` and a value of type ``T``
(a tensor, or a sequence the sequence lowerings then take): zeros or an empty sequence
when absent. The rules:

- ``Optional(x)`` -> present = true, payload = x; ``Optional<type>()`` -> present =
  false, payload = an empty tensor / ``SequenceEmpty``.
- ``OptionalHasElement(o)`` -> present (true for a plain tensor or sequence, false for
  a missing input); ``OptionalGetElement(o)`` -> the payload (a plain value itself).
- ``Identity``, ``If`` outputs and ``Loop``-carried values carry both.
- Optional model inputs and outputs become ``<name>_present`` and the payload; the
  ``seqlower.abi`` entry has kind ``optional_tensor`` (or ``optional_sequence``, written
  with the payload's sequence tensors by the Flat lowering).

The payload of an absent optional is never read: ``OptionalGetElement`` of an absent
optional is an error in the original, and the lowered model returns the placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import (
    OPTIONAL_SEQUENCES_KEY,
    Scope,
    replace_output,
)
from seqlower.passes.lowering.convert import Converter, Proto, Rule, rule, rules
# (registers the If and Loop rules it shares with Flat and Packed)
from seqlower.passes.lowering import convert_control  # noqa: F401
from seqlower import ops
from seqlower.analysis.analyzer import is_default_domain, shape_json
from seqlower.ir.builder import Builder
from seqlower.ir.helpers import subgraphs

__all__ = ["LowerOptionalsPass", "OPTIONAL_SEQUENCES_KEY"]

# model.meta: payload input/output name -> the ``present`` tensor's name, for sequence
# payloads whose ABI entry the Flat lowering writes.
BOOL = ir.DataType.BOOL

_OPS = ops.names("optional")


def _is_optional(v: ir.Value | None) -> bool:
    return v is not None and isinstance(v.type, ir.OptionalType)


def _typed_optional(v: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``v`` is an optional, giving an untyped If or Loop output (or an Identity
    of one) the optional type its branches or body give it: this pass runs before shape
    inference, and an exporter need not declare intermediate types."""
    if v is None or v.type is not None or depth > _MAX_DEPTH:
        return _is_optional(v)
    p = v.producer()
    if p is None or not is_default_domain(p):
        return False
    k = v.index()
    sources: list[ir.Value | None] = []
    if p.op_type == "If":
        sources = [g.outputs[k] for g in subgraphs(p) if k < len(g.outputs)]
    elif p.op_type == "Loop" and "body" in p.attributes and k < len(p.inputs) - 2:
        body = p.attributes["body"].as_graph()
        sources = [body.outputs[1 + k]]  # (opset 16's loop16_seq_none: an optional in, a plain list out)
    elif p.op_type == "Identity":
        sources = [p.inputs[0]]
    for source in sources:
        if _typed_optional(source, depth + 1):
            assert source is not None
            v.type = source.type
            return True
    return False


# Nesting past what protobuf reads is refused before any pass runs.
_MAX_DEPTH = 64


class LowerOptionalsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not _has_optionals(model):
            return ir.passes.PassResult(model, False)
        lw = _Lowerer(model)
        lw.lower_model()
        return ir.passes.PassResult(model, True)


def _has_optionals(model: ir.Model) -> bool:
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for g in graphs:
        if any(_is_optional(v) for v in [*g.inputs, *g.outputs]):
            return True
        for node in ir.traversal.RecursiveGraphIterator(g):
            if node.op_type in _OPS and is_default_domain(node):
                return True
            if any(_is_optional(v) for v in node.outputs):
                return True
    return False


class _Lowerer(Converter):
    representation = "optional"
    carrying = "present + payload"
    wants_builder = True
    boundary = True

    def __init__(self, model: ir.Model) -> None:
        super().__init__(model)
        self.pairs: dict[ir.Value, tuple[ir.Value, ir.Value]] = {}

    def pair(self, v: ir.Value) -> tuple[ir.Value, ir.Value]:
        assert v in self.pairs, f"optional {v.name} was not lowered before its use"
        return self.pairs[v]

    # -- the converter (passes/lowering/convert.py) ------------------------------------------------

    def owns(self, v: ir.Value | None) -> bool:
        return _is_optional(v)

    def into(self, v: ir.Value | None) -> str:
        return "present + payload"

    def carries(self, node: ir.Node, k: int) -> bool:
        # An optional carried value may start as a plain one, or (opset 16's
        # test_loop16_seq_none) come out as one: either way it becomes a pair.
        init, bi = node.inputs[2 + k], node.attributes["body"].as_graph().inputs[2 + k]
        return _is_optional(bi) or _is_optional(init)

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        inner = v.type.elem_type if isinstance(v.type, ir.OptionalType) else v.type
        return [(self.names.fresh(f"{base}_present"), ir.TensorType(BOOL), ir.Shape([])),
                (self.names.fresh(f"{base}_payload"), inner, v.shape)]

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        return list(_pair_of(self, v, b))

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        present, payload = tensors
        if _is_optional(v):
            self.pairs[v] = (present, payload)
        elif made_by is None:  # a plain body input carried as a pair: read the payload
            ir.convenience.replace_all_uses_with(v, payload)
        else:  # a plain output of what carries a pair
            producer = v.producer()
            assert producer is not None
            replace_output(v, payload, scope, self.names, producer, owned=False)

    def rule_for(self, node: ir.Node) -> Rule | None:
        # Optional ops, and what carries optionals; anything else (bodies may still
        # read optionals from outside) is walked into.
        touches = is_default_domain(node) and (
            # (a list, not a generator: every untyped output gets its type, not just the first)
            node.op_type in _OPS or any([_typed_optional(v) for v in [*node.inputs, *node.outputs]])
            or (node.op_type == "Loop" and any(_is_optional(v) for v in node.attributes["body"].as_graph().inputs))
        )
        return RULES.get(node.op_type) if touches else None

    # -- values ---------------------------------------------------------------------------

    def placeholder(self, t: ir.TypeProtocol, b: Builder, name: str) -> ir.Value:
        """An absent optional's payload: zeros of size 0, or an empty sequence."""
        if isinstance(t, ir.SequenceType):
            elem = t.elem_type
            dtype = elem.dtype if isinstance(elem, ir.TensorType) else ir.DataType.FLOAT
            node = b._emit("SequenceEmpty", [], {"dtype": dtype.value}, outputs=[name], node_name=f"{name}_empty")
            out = node.outputs[0]
            out.type = ir.SequenceType(ir.TensorType(dtype))
            return out
        return b.zeros(t.dtype if t.dtype is not None else ir.DataType.FLOAT, (0,), name)

    def flag(self, value: bool, b: Builder) -> ir.Value:
        return b.constant(np.array(value), "present" if value else "absent")

    # -- the model boundary --------------------------------------------------------------

    def abi_input(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        assert isinstance(v.type, ir.OptionalType)
        inner = v.type.elem_type
        name = v.name or "optional"
        present = ir.Value(name=self.names.fresh(f"{name}_present"), type=ir.TensorType(BOOL), shape=ir.Shape([]))
        shape = v.shape if v.shape is not None else ir.Shape([None])
        entry = None
        if isinstance(inner, ir.SequenceType):
            # The Flat lowering writes the payload's entry, joined with this flag.
            payload = ir.Value(name=name, type=inner, shape=shape)
            self.model.meta.setdefault(OPTIONAL_SEQUENCES_KEY, {})[name] = present.name
        else:
            payload = ir.Value(name=self.names.fresh(f"{name}_value"), type=inner, shape=shape)
            entry = _tensor_entry(name, inner, shape, present.name, payload.name or "value")
        v.name = None
        self.pairs[v] = (present, payload)
        return [present, payload], entry

    def abi_output(self, v: ir.Value, scope: Scope) -> tuple[list[ir.Value], dict | None]:
        assert isinstance(v.type, ir.OptionalType)
        b = scope.builder(None, self.names)
        present, payload = self.pair(v)
        name = v.name or "optional"
        v.name = None
        p = b.identity(present, f"{name}_present")
        inner = v.type.elem_type
        entry = None
        if isinstance(inner, ir.SequenceType):
            out = b.identity(payload, name)
            out.name = name  # ``v`` gave it up above
            self.model.meta.setdefault(OPTIONAL_SEQUENCES_KEY, {})[name] = p.name
        else:
            out = b.identity(payload, f"{name}_value")
            out.shape = out.shape if out.shape is not None else (v.shape or ir.Shape([None]))
            entry = _tensor_entry(name, inner, v.shape, p.name or "present", out.name or "value")
        return [p, out], entry


def _tensor_entry(name: str, t: ir.TypeProtocol, shape: ir.Shape | None, present: str, value: str) -> dict:
    dims = shape_json(shape)
    dtype = t.dtype if t.dtype is not None else ir.DataType.FLOAT
    return {"name": name, "kind": "optional_tensor", "elem_type": dtype.name, "elem_shape": dims,
            "tensors": {"present": present, "value": value}}


# -- rules --------------------------------------------------------------------------------


@rule("Optional", "optional")
def _optional(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    out = node.outputs[0]
    x = node.inputs[0] if node.inputs else None
    if x is not None:
        if out.type is None and x.type is not None:
            out.type = ir.OptionalType(x.type)  # what reads it tells optionals by type
        lw.pairs[out] = (lw.flag(True, b), x)
        return "present"
    attr = node.attributes.get("type")
    # The attribute holds the element type (an ir.TypeAndShape); the output's type says it too.
    inner = attr.value.type if attr is not None else out.type.elem_type  # type: ignore[union-attr]
    lw.pairs[out] = (lw.flag(False, b), lw.placeholder(inner, b, f"{out.name or 'none'}_placeholder"))
    return "absent"


@rule("OptionalHasElement", "optional")
def _has_element(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    x = node.inputs[0] if node.inputs else None
    if x is None:
        flag = lw.flag(False, b)
    elif x in lw.pairs or _is_optional(x):
        # (in pairs: an Optional of a value whose type is unknown, as a list's may be)
        flag = lw.pair(x)[0]
    else:
        flag = lw.flag(True, b)
    replace_output(node.outputs[0], flag, scope, lw.names, node, owned=False)
    return "present flag"


@rule("OptionalGetElement", "optional")
def _get_element(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    x = node.inputs[0]
    assert x is not None
    payload = lw.pair(x)[1] if x in lw.pairs or _is_optional(x) else x
    replace_output(node.outputs[0], payload, scope, lw.names, node, owned=False)
    return "payload"


@rule("Identity", "optional")
def _identity(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    lw.pairs[node.outputs[0]] = lw.pair(node.inputs[0])  # type: ignore[arg-type]
    return "same pair"


def _pair_of(lw: _Lowerer, v: ir.Value, b: Builder) -> tuple[ir.Value, ir.Value]:
    """A value as (present, payload): a plain tensor or sequence is present (an
    optional lowered already is its pair, typed or not)."""
    if v in lw.pairs or _is_optional(v):
        return lw.pair(v)
    return lw.flag(True, b), v


RULES = rules("optional")
