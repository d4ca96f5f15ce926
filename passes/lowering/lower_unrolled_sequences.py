"""Lower sequences whose length and positions are known at compile time (Unrolled).

Each sequence value of a web the analysis decided to unroll becomes a Python list of
tensor values; the sequence ops become list operations at compile time and a few
tensor nodes. One rule per op (the table ``RULES``):

1. ``SplitToSequence`` -> ``Split`` with explicit sizes (+ ``Squeeze`` per chunk when
   the chunks lose the axis: keepdims=0 without split, or the keepdims policy).
2. ``SequenceEmpty``, ``SequenceConstruct``, ``SequenceInsert``, ``SequenceErase``,
   ``Identity`` -> list operations (negative positions normalised); no node.
3. ``SequenceAt`` -> the element itself; ``SequenceLength`` -> a constant.
4. ``ConcatFromSequence`` -> ``Concat`` (``Unsqueeze`` first when new_axis=1).
5. ``SequenceMap`` -> its body inlined once per element.
6. ``If`` with sequence outputs -> one tensor output per element.

Constant elements stay numpy arrays until a tensor op needs them, so an all-constant
chain folds into one initializer. Before::

    s0 = SequenceEmpty()
    s1 = SequenceInsert(s0, a)          # a, b constants
    s2 = SequenceInsert(s1, b, zero)
    y  = ConcatFromSequence<axis=0>(s2)

After::

    y = initializer concat([b, a])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import (
    Scope,
    inline_graph,
    inline_map_body,
    replace_output,
)
from seqlower.passes.lowering.convert import Converter, Proto, WebLoweringPass, rule, rules
from seqlower.passes.lowering.convert_control import convert_if
from seqlower.analysis.analyzer import (
    Analysis,
    const_array,
    const_position,
    node_label,
    split_sizes,
    split_squeezes,
)
from seqlower.ir.builder import Builder
from seqlower.ir.helpers import concat_shape
from seqlower.passes.lowering._batched_map import batched_plan, run_batched, sliced_plan
from seqlower.passes.lowering._static_rows import Src, gather_rows, stack_rows, take_rows
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.errors import ModelError

__all__ = ["LowerUnrolledSequencesPass"]

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Elem:
    """One element of an unrolled sequence: a tensor value, a constant, or both."""

    value: ir.Value | None
    const: np.ndarray | None
    shape: ir.Shape | None
    dtype: ir.DataType | None
    # Where the element was cut from (passes/lowering/_static_rows.py); with value None, it is
    # made (a Gather or Slice of the source) only where something reads it alone.
    src: Src | None = None

    @staticmethod
    def of(v: ir.Value) -> Elem:
        c = const_array(v)
        return Elem(v, c, ir.Shape(c.shape) if c is not None else v.shape, v.dtype)

    @staticmethod
    def constant(c: np.ndarray) -> Elem:
        return Elem(None, c, ir.Shape(c.shape), ir.DataType.from_numpy(c.dtype))


class LowerUnrolledSequencesPass(WebLoweringPass):
    """Rewrite every Unrolled web (see ``seqlower.analysis.analyzer``) into tensor ops."""

    web_repr = "unrolled"

    def __init__(self, max_unroll: int = 64, keepdims_policy: str = "auto") -> None:
        super().__init__(max_unroll, keepdims_policy)

    @staticmethod
    def lowerer(model: ir.Model, analysis: Analysis, policy: str) -> Converter:
        return _Lowerer(model, analysis, policy)


class _Lowerer(Converter):
    representation = "unrolled"
    wants_builder = True

    def __init__(self, model: ir.Model, analysis: Analysis, policy: str) -> None:
        super().__init__(model)
        self.analysis = analysis
        self.policy = policy
        self.elems: dict[ir.Value, list[Elem]] = {}
        self._materialized: dict[tuple[int, int], ir.Value] = {}
        # Values a SequenceMap's body computed on whole tensors (_sliced_map): made by this
        # lowering, so a ConcatFromSequence that is one of them may give it its name.
        self.made: set[ir.Value] = set()
        # A tensor that is an element read out of a list (SequenceAt): put into a list
        # again, it keeps where it came from.
        self.read_out: dict[ir.Value, Elem] = {}

    def element(self, v: ir.Value) -> Elem:
        return self.read_out.get(v) or Elem.of(v)

    def walks_into(self, node: ir.Node) -> bool:
        # A map's body is lowered before it is inlined once per element; an If's rule
        # lowers its branches.
        return node.op_type != "If"

    def first_owned(self, node: ir.Node) -> ir.Value | None:
        # Unrolled lists never cross a Loop's signature (a trip count makes the length unknown).
        return next((v for v in (*node.inputs, *node.outputs) if v is not None and self.owns(v)), None)

    # -- the converter (passes/lowering/convert.py) ------------------------------------------------

    def owns(self, v: ir.Value | None) -> bool:
        return self.analysis.unrolled(v)

    def types(self, v: ir.Value, base: str) -> list[Proto]:
        """One tensor per element, typed from the lattice (an If's output: the join of
        its branches)."""
        info = self.analysis.info[v]
        assert info.length is not None
        dtype = ir.TensorType(info.dtype) if info.dtype is not None else None
        shapes = info.shapes if info.shapes is not None else (None,) * info.length
        return [(self.names.fresh(f"{base}_{j}"), dtype, shapes[j]) for j in range(info.length)]

    def tensors(self, v: ir.Value, b: Builder) -> list[ir.Value]:
        return [self.materialize(e, b, f"{v.name or 'seq'}_{j}") for j, e in enumerate(self.seq(v))]

    def bind(self, v: ir.Value, tensors: Sequence[ir.Value], scope: Scope, made_by: ir.Node | None) -> None:
        self.elems[v] = [Elem(t, None, t.shape, t.dtype) for t in tensors]

    # -- elements -----------------------------------------------------------------------

    def materialize(self, e: Elem, b: Builder, name: str) -> ir.Value:
        if e.value is not None:
            return e.value
        key = (id(e), id(b.graph))
        v = self._materialized.get(key)
        if v is None:
            if e.const is not None:
                v = b.constant(e.const, name)
            else:
                assert e.src is not None
                s = e.src
                if s.squeezed:
                    rank = s.value.shape.rank() if s.value.shape is not None else (e.shape.rank() + 1 if e.shape is not None else 0)
                    v = take_rows(b, s.value, s.start, s.axis, rank, name)
                    v.shape = e.shape
                else:
                    v = b.slice(s.value, b.ints([s.start], f"{name}_start"), b.ints([s.stop], f"{name}_stop"), [s.axis],
                                name)
                    v.shape = e.shape
            self._materialized[key] = v
        return v

    def seq(self, v: ir.Value | None) -> list[Elem]:
        assert v is not None and v in self.elems, f"sequence {v} was not lowered before its use"
        return self.elems[v]

    def replace(self, node: ir.Node, new: ir.Value, scope: Scope, owned: bool) -> None:
        replace_output(node.outputs[0], new, scope, self.names, node, owned)

    def constant_output(self, node: ir.Node, array: np.ndarray, b: Builder, scope: Scope) -> None:
        out = node.outputs[0]
        v = b.constant(array, out.name or "folded")
        self.replace(node, v, scope, owned=not scope.main)


# -- rules --------------------------------------------------------------------------------


@rule("SplitToSequence", "unrolled")
def _split_to_sequence(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    info = lw.analysis.info[out]
    axis = node.attributes["axis"].as_int() if "axis" in node.attributes else 0
    shape = x.shape
    xc = const_array(x)
    if xc is not None:
        shape = ir.Shape(xc.shape)
    if shape is not None:
        axis %= shape.rank()
    has_split = len(node.inputs) > 1 and node.inputs[1] is not None
    split = const_array(node.inputs[1]) if has_split else None
    dim = shape.dims[axis] if shape is not None else None
    sizes = split_sizes(node, dim if isinstance(dim, int) else None, split, has_split)
    assert sizes is not None and len(sizes) == info.length, "the analysis unrolled a split of unknown sizes"
    squeeze = split_squeezes(node, sizes, shape, axis, lw.policy)
    assert squeeze is not None
    base = out.name or "chunk"
    if xc is not None:
        # The analysis already cut the constant into its chunks.
        assert info.consts is not None and info.all_const
        lw.elems[out] = [Elem.constant(c) for c in info.consts]
        return "folded"
    if not sizes:
        lw.elems[out] = []
        return "empty"
    dim = sum(sizes)
    starts = np.cumsum([0, *sizes]).tolist()
    srcs = [Src(x, axis, starts[i], starts[i + 1], bool(squeeze), dim) for i in range(len(sizes))]
    if len(sizes) > lw.analysis.max_unroll:
        # Past --max-unroll only a web that makes no node per element is unrolled (see
        # choose.py): its elements are made where something reads one alone.
        infos = info.shapes if info.shapes is not None else [None] * len(sizes)
        lw.elems[out] = [Elem(None, None, infos[i], x.dtype, srcs[i]) for i in range(len(sizes))]
        return "rows, gathered where joined"
    parts = b.split(x, sizes, axis, [f"{base}_{i}" for i in range(len(sizes))], f"{base}_split")
    if squeeze:
        parts = [b.squeeze(p, [axis], f"{base}_{i}_squeezed") for i, p in enumerate(parts)]
    lw.elems[out] = [Elem(p, None, p.shape, p.dtype, srcs[i]) for i, p in enumerate(parts)]
    return "Split + Squeeze" if squeeze else "Split"


@rule("SequenceEmpty", "unrolled")
def _sequence_empty(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    lw.elems[node.outputs[0]] = []
    return "list"


@rule("SequenceConstruct", "unrolled")
def _sequence_construct(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    lw.elems[node.outputs[0]] = [lw.element(v) for v in node.inputs if v is not None]
    return "list"


@rule("Identity", "unrolled")
def _identity(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    # A copy: each sequence value owns its list (see _take_items).
    lw.elems[node.outputs[0]] = list(lw.seq(node.inputs[0]))
    return "list"


def _position(node: ir.Node, index: int) -> int | None:
    v = node.inputs[index] if len(node.inputs) > index else None
    return None if v is None else const_position(v, node)


def _take_items(lw: _Lowerer, node: ir.Node) -> list[Elem]:
    """The input sequence's list, to change into the output's: taken over when this
    node is its only reader (the common insert/erase chain, so no copy per insert),
    copied otherwise."""
    v = node.inputs[0]
    items = lw.seq(v)
    assert v is not None
    if not v.is_graph_output() and all(use.node is node for use in v.uses()):
        return items
    return list(items)


# Positions below were checked against the known length by the analysis, which is
# what made the web Unrolled; only normalisation is left.


@rule("SequenceInsert", "unrolled")
def _sequence_insert(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    items = _take_items(lw, node)
    p = _position(node, 2)
    n = len(items)
    p = n if p is None else (p + n if p < 0 else p)
    assert 0 <= p <= n
    items.insert(p, lw.element(node.inputs[1]))
    lw.elems[node.outputs[0]] = items
    return "list"


@rule("SequenceErase", "unrolled")
def _sequence_erase(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    items = _take_items(lw, node)
    p = _position(node, 1)
    n = len(items)
    p = n - 1 if p is None else p
    assert -n <= p < n
    del items[p]
    lw.elems[node.outputs[0]] = items
    return "list"


@rule("SequenceAt", "unrolled")
def _sequence_at(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    items = lw.seq(node.inputs[0])
    p = _position(node, 1)
    assert p is not None and -len(items) <= p < len(items)
    e = items[p]
    if e.value is None and e.const is not None:
        lw.constant_output(node, e.const, b, scope)
        return "folded"
    value = lw.materialize(e, b, node.outputs[0].name or "element")
    lw.replace(node, value, scope, owned=e.value is None)
    lw.read_out[value] = e
    return "element"


@rule("SequenceLength", "unrolled")
def _sequence_length(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    lw.constant_output(node, np.array(len(lw.seq(node.inputs[0])), dtype=np.int64), b, scope)
    return "folded"


@rule("ConcatFromSequence", "unrolled")
def _concat_from_sequence(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    items = lw.seq(node.inputs[0])
    out = node.outputs[0]
    assert items, "the analysis rejects a concat of an empty static sequence"
    axis = node.attributes["axis"].as_int()
    new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
    ranks = {e.shape.rank() for e in items if e.shape is not None}
    if len(ranks) > 1:
        raise ModelError(f"{node_label(node)}: elements have different ranks {sorted(ranks)}")
    rank = next(iter(ranks), None)
    if rank is not None:
        lo, hi = (-rank - 1, rank) if new_axis else (-rank, rank - 1)
        if not lo <= axis <= hi:
            raise ModelError(f"{node_label(node)}: axis {axis} is out of range [{lo}, {hi}]")
        if rank == 0 and not new_axis:
            raise ModelError(f"{node_label(node)}: cannot concatenate scalars without new_axis=1")
    if all(e.const is not None for e in items):
        arrays = [e.const for e in items]
        try:
            folded = np.stack(arrays, axis=axis) if new_axis else np.concatenate(arrays, axis=axis)
        except ValueError as err:
            raise ModelError(f"{node_label(node)}: elements do not fit together ({err})") from None
        lw.constant_output(node, folded.astype(arrays[0].dtype, copy=False), b, scope)
        return "folded"
    base = out.name or "concat"
    if rank is not None:
        gathered = gather_rows(items, axis, bool(new_axis), b, base,
                               lambda e: lw.materialize(e, b, f"{base}_loose"))
        if gathered is not None:
            made = gathered.producer() is not None and (gathered.producer() in b.nodes or gathered in lw.made)
            if made and gathered.shape is None:
                gathered.shape = out.shape
            lw.replace(node, gathered, scope, owned=made)
            return "one Gather, Slice or Reshape of the rows it joins"
    values = [lw.materialize(e, b, f"{base}_in{i}") for i, e in enumerate(items)]
    if new_axis:
        values = [b.unsqueeze(v, [axis], f"{base}_in{i}_unsqueezed") for i, v in enumerate(values)]
    shape = concat_shape([e.shape for e in items], axis, bool(new_axis))
    if len(values) == 1 and not new_axis:
        new = values[0]
        lw.replace(node, new, scope, owned=False)
        return "element"
    new = b.concat(values, axis, base, shape)
    lw.replace(node, new, scope, owned=True)
    return "Unsqueeze + Concat" if new_axis else "Concat"


def _sliced_map(lw: _Lowerer, node: ir.Node, body: ir.Graph, b: Builder) -> bool:
    """The body once on the tensor the elements were cut from, when they are its pieces
    along one axis, in order (of any sizes, the axis kept), and every op of the body acts
    on each position along that axis alone (passes/lowering/_batched_map.py's ``sliced_plan``):
    each output element is then the same piece of the body's result, and a
    ConcatFromSequence of them that result itself, as a person would write it."""
    seq_inputs = [(inp, bi) for inp, bi in zip(node.inputs, body.inputs) if inp is not None and lw.analysis.unrolled(inp)]
    if len(seq_inputs) != 1:
        return False
    inp, bi = seq_inputs[0]
    srcs = [e.src for e in lw.seq(inp)]
    first = srcs[0] if srcs else None
    if first is None or first.squeezed or first.value.shape is None:
        return False
    if any(s is None or s.value is not first.value or s.axis != first.axis or s.squeezed for s in srcs):
        return False
    if any(a.stop != z.start for a, z in zip(srcs, srcs[1:])):  # type: ignore[union-attr]
        return False
    plan = sliced_plan(body, bi, first.axis, b.opset)
    if plan is None:
        return False
    x, k, start, stop = first.value, first.axis, first.start, srcs[-1].stop  # type: ignore[union-attr]
    base = node.outputs[0].name or "map"
    if start != 0 or stop != first.size:
        x = b.slice(x, b.ints([start], f"{base}_start"), b.ints([stop], f"{base}_stop"), [k], f"{base}_pieces")
    value_map: dict[ir.Value, ir.Value | None] = {bi: x}
    value_map.update({v: i for i, v in zip(node.inputs, body.inputs) if v is not bi})
    mapped = inline_map_body(body, value_map, b, lw.names)
    for v, k in plan.items():
        clone = mapped.get(v)
        if clone is not None and clone is not x and clone.shape is not None:
            # (the body's shapes are a piece's: the cut axis is the whole run here)
            clone.shape = ir.Shape([stop - start if i == k else d for i, d in enumerate(clone.shape.dims)])
    for out, bo in zip(node.outputs, body.outputs):
        y = mapped.get(bo, bo)
        if bo in mapped and y is not x:
            lw.made.add(y)
        info = lw.analysis.info.get(out)
        shapes = info.shapes if info is not None and info.shapes is not None else [None] * len(srcs)
        lw.elems[out] = [Elem(None, None, shapes[i], y.dtype or bo.dtype,
                              Src(y, plan[bo], s.start - start, s.stop - start, False, stop - start))  # type: ignore[union-attr]
                         for i, s in enumerate(srcs)]
    return True


def _batched_map(lw: _Lowerer, node: ir.Node, body: ir.Graph, b: Builder) -> bool:
    """The body once on the stacked elements (passes/lowering/_batched_map.py), as a person would
    write it, when the elements of each list share one static shape and the body's ops
    allow it; each output element is then a row of the body's stacked result."""
    seq_inputs = [(inp, bi) for inp, bi in zip(node.inputs, body.inputs) if inp is not None and lw.analysis.unrolled(inp)]
    n = len(lw.seq(seq_inputs[0][0]))
    if n == 0:
        return False
    for inp, _ in seq_inputs:
        # One shape (a run-time batch dim shared by name is one shape too).
        shapes = {None if e.shape is None else tuple(e.shape.dims) for e in lw.seq(inp)}
        if len(shapes) != 1 or None in shapes or any(d is None or isinstance(d, ir.SymbolicDim) and d.value is None
                                                      for d in next(iter(shapes))):  # type: ignore[union-attr]
            return False
    plan = batched_plan(body, [bi for _, bi in seq_inputs], b.opset)
    if plan is None:
        return False
    value_map: dict[ir.Value, ir.Value | None] = {bi: inp for inp, bi in zip(node.inputs, body.inputs)}
    base = node.outputs[0].name or "map"
    for inp, bi in seq_inputs:
        items = lw.seq(inp)
        stacked = stack_rows(items, b, f"{base}_{bi.name or 'x'}")
        if stacked is None:
            stacked = b.concat([b.unsqueeze(lw.materialize(e, b, f"{bi.name or 'x'}_{i}"), [0], f"{base}_in{i}")
                                for i, e in enumerate(items)], 0, f"{base}_{bi.name or 'x'}_stack", None)
        value_map[bi] = stacked
    outputs = [(bo, out.name or "map") for out, bo in zip(node.outputs, body.outputs)]
    count1 = b.ints([n], f"{base}_n")
    stacks = run_batched(body, plan, value_map, [bi for _, bi in seq_inputs], outputs, count1, Ops(b), lw.names)
    for out, bo, (y, _) in zip(node.outputs, body.outputs, stacks):
        info = lw.analysis.info.get(out)
        shapes = info.shapes if info is not None and info.shapes is not None else [bo.shape] * n
        if shapes[0] is not None and (y.shape is None or y.shape.rank() == shapes[0].rank() + 1):
            y.shape = ir.Shape([n, *shapes[0].dims])  # the stack's length is known here
        lw.elems[out] = [Elem(None, None, shapes[i], y.dtype or bo.dtype, Src(y, 0, i, i + 1, True, n)) for i in range(n)]
    return True


@rule("SequenceMap", "unrolled")
def _sequence_map(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    first = lw.seq(node.inputs[0])
    n = len(first)
    if n and _sliced_map(lw, node, body, b):
        return f"the body once on the tensor the {n} elements are pieces of"
    if _batched_map(lw, node, body, b):
        return f"the body once on the {n} stacked elements (batched)"
    outs: list[list[Elem]] = [[] for _ in node.outputs]
    for i in range(n):
        value_map: dict[ir.Value, ir.Value | None] = {}
        for j, (inp, bi) in enumerate(zip(node.inputs, body.inputs)):
            if inp is not None and lw.analysis.unrolled(inp):
                value_map[bi] = lw.materialize(lw.seq(inp)[i], b, f"{bi.name or 'x'}_{i}")
            else:
                value_map[bi] = inp
        for init in body.initializers.values():
            c = const_array(init)
            assert c is not None
            value_map[init] = b.constant(c, f"{init.name}_{i}")
        inlined = inline_graph(body, value_map, b, lw.names, i)
        for k, bo in enumerate(body.outputs):
            v = inlined[bo]
            outs[k].append(Elem(v, None, v.shape, v.dtype))
    for out, items in zip(node.outputs, outs):
        lw.elems[out] = items
    return f"body inlined {n} times"


@rule("If", "unrolled")
def _if(lw: _Lowerer, node: ir.Node, b: Builder, scope: Scope) -> str:
    if not convert_if(lw, node, scope):
        return "nothing left: both branches give empty lists"
    return "one output per element"


RULES = rules("unrolled")
