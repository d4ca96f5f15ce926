"""The sequence analysis: what is known about every sequence value at compile time
(the lattice's values and join are in ``seqlower.lattice``, the choice of
representation per web in ``seqlower.choose``, SplitToSequence's facts in
``seqlower.splits``, IR helpers in ``seqlower.irutil``; their names are re-exported
here).

For each sequence-typed value, :func:`analyze` computes a :class:`SeqInfo` (element
dtype, length, per-element shapes and constants when the length is known, a merged
element shape, whether all elements provably share it), by abstract interpretation:
one transfer function per sequence op, ``Identity``, ``If`` (join of the branches)
and ``Loop`` (fixpoint with widening; an append-once-per-iteration carried sequence
has length ``initial + trip_count``). Bodies of ``Loop``/``If``/``Scan``/
``SequenceMap`` and model-local functions are analysed too.

Sequence values that flow into one another form *webs* (weakly connected components
of a networkx graph); each web gets one decision: lowered Unrolled, or kept with the
reason why not. Constant positions out of range and splits that do not add up make the
model invalid: they raise :class:`~seqlower.errors.ModelError` naming the node.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import networkx as nx
import numpy as np
import onnx_ir as ir

from seqlower import ops
from seqlower.builder import merge_shapes, subgraphs
from seqlower.errors import ModelError
from seqlower.irutil import (
    _int_attr,
    _subgraph,
    loop_runs_all_trips,
    loop_shapes_consistent,  # noqa: F401 - re-exported
    _rank_of,  # noqa: F401 - re-exported
    _shape_of,
    _users,  # noqa: F401 - re-exported
    anchored_shape,
    const_array,
    const_position,
    graph_label,
    is_default_domain,
    model_input_dims,
    node_label,
)
from seqlower.choose import LOWERABLE_OPS, Analysis, Chooser, Layout, Web
from seqlower.splits import (
    STATIC_LENGTH_LIMIT,
    dynamic_split_squeezes,
    split_sizes,
    split_squeezes,
    unchanged_split_source,  # noqa: F401 - re-exported
)
from seqlower.lattice import SeqInfo, _fully_known, join, shape_json

__all__ = [
    "SeqInfo",
    "Web",
    "Analysis",
    "analyze",
    "const_array",
    "const_position",
    "split_sizes",
    "shape_json",
    "Layout",
    "dynamic_split_squeezes",
    "LOWERABLE_OPS",
    "is_default_domain",
    "graph_label",
    "node_label",
]

logger = logging.getLogger(__name__)

_WIDEN_AFTER = 4





# -- the analysis -----------------------------------------------------------------------


class _Analyzer(Chooser):
    def __init__(self, model: ir.Model, max_unroll: int, keepdims_policy: str, packed: bool = True,
                 runtime_ranks: bool = True) -> None:
        self.model = model
        self.allow_packed = packed
        self.runtime_ranks = runtime_ranks
        self.max_unroll = max_unroll
        self.policy = keepdims_policy
        self.result = Analysis()
        self.web = nx.Graph()
        self.blockers: dict[ir.Value, str] = {}
        # Values whose web no lowering can take (the rest of ``blockers`` only stops
        # the Unrolled one: a Flat lowering handles them).
        self.hard: set[ir.Value] = set()
        self._quiet = 0
        self._order: dict[ir.Value, int] = {}
        self._links: list[tuple[list[ir.Value], bool]] = []
        self._anchored = frozenset(model_input_dims(model))

    # entry
    def run(self) -> Analysis:
        self._graph(self.model.graph, "main")
        for v in self.model.graph.inputs:
            if v in self.result.info:
                self._block(v, f"'{v.name}' is a sequence-typed model input", hard=False)
        for v in self.model.graph.outputs:
            if v in self.result.info:
                self._block(v, f"'{v.name}' is a sequence-typed model output", hard=False)
        for f in self.model.functions.values():
            label = graph_label(f)
            for v in f.inputs:
                self._seed_from_type(v, label)
            self._graph(f, label)
            for v in [*f.inputs, *f.outputs]:
                if v in self.result.info:
                    self._block(v, f"'{v.name}' crosses the boundary of {label}")
        self._decide()
        return self.result

    def _add(self, v: ir.Value) -> None:
        # Values hash by identity: keep first-seen order so webs and reports are deterministic.
        if v not in self._order:
            self._order[v] = len(self._order)
            self.web.add_node(v)

    def _block(self, v: ir.Value, reason: str, *, hard: bool = True) -> None:
        self._add(v)
        self.blockers.setdefault(v, reason)
        if hard:
            self.hard.add(v)

    def _set(self, v: ir.Value, info: SeqInfo, graph: str) -> None:
        self.result.info[v] = info
        self.result.graph_of.setdefault(v, graph)
        self._add(v)

    def _link(self, values: Sequence[ir.Value | None], *, layout: bool = True) -> None:
        # Resolved in _decide, once every value's info is known (outputs are set after
        # links are declared, and tensors among ``values`` are dropped there). ``layout``:
        # the values hold the same elements, so they share a Flat layout too.
        self._links.append(([v for v in values if v is not None], layout))

    def _seed_from_type(self, v: ir.Value, graph: str) -> None:
        if isinstance(v.type, ir.SequenceType) and v not in self.result.info:
            elem = v.type.elem_type
            dtype = elem.dtype if isinstance(elem, ir.TensorType) else None
            self._set(v, SeqInfo.unknown(dtype, v.shape), graph)

    def _fail(self, node: ir.Node, msg: str) -> None:
        if not self._quiet:
            raise ModelError(f"{node_label(node)}: {msg}")

    # graphs
    def _graph(self, graph: ir.Graph | ir.Function, label: str) -> None:
        for v in graph.inputs:
            self._seed_from_type(v, label)
        for node in graph:
            try:
                self._node(node, label)
            except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
                raise ModelError(f"{node_label(node)} in {label}: malformed node ({e})") from None

    def _node(self, node: ir.Node, label: str) -> None:
        if not is_default_domain(node):
            self._opaque(node, label, f"{node_label(node)} (domain '{node.domain}')")
            return
        _check_input_kinds(node)
        handler = getattr(self, f"_t_{node.op_type}", None)
        if handler is not None:
            handler(node, label)
            return
        for sub in subgraphs(node):
            self._graph(sub, f"{label} > {node_label(node)}.{sub.name or 'body'}")
        self._opaque(node, label, node_label(node))

    def _opaque(self, node: ir.Node, label: str, who: str) -> None:
        """A node with no transfer function: its sequence outputs are known only by type,
        and its sequence inputs cannot change representation."""
        for v in node.inputs:
            if v is not None and v in self.result.info:
                self._block(v, f"'{v.name}' is consumed by {who}, which has no sequence lowering")
        for v in node.outputs:
            self._seed_from_type(v, label)
            if v in self.result.info:
                self._block(v, f"'{v.name}' is produced by {who}, which has no sequence lowering")

    def _in(self, node: ir.Node, i: int) -> SeqInfo | None:
        v = node.inputs[i] if i < len(node.inputs) else None
        return None if v is None else self.result.info.get(v)

    def _need_seq(self, node: ir.Node, i: int) -> SeqInfo:
        info = self._in(node, i)
        if info is None:
            v = node.inputs[i] if i < len(node.inputs) else None
            if v is None or isinstance(v.type, ir.TensorType) or const_array(v) is not None:
                raise ModelError(
                    f"{node_label(node)}: input {i} ('{v.name if v is not None else ''}') is not a sequence"
                )
            # Untyped, from something we cannot see through (an optional, a custom op).
            info = SeqInfo.unknown(None)
            self._set(v, info, self.result.graph_of.get(v, "?"))
            self._block(v, f"'{v.name}' comes from a value seqlower cannot analyse")
        return info

    def _check_arity(self, node: ir.Node, lo: int, hi: int) -> None:
        n = len(node.inputs)
        while n and node.inputs[n - 1] is None:
            n -= 1
        if not lo <= n <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise ModelError(f"{node_label(node)}: expects {want} inputs, got {n}")

    # transfer functions --------------------------------------------------------------

    def _t_SequenceEmpty(self, node: ir.Node, label: str) -> None:
        dtype = ir.DataType(_int_attr(node, "dtype", ir.DataType.FLOAT.value))
        self._set(node.outputs[0], SeqInfo(dtype, 0, (), None, False, ()), label)

    def _t_SequenceConstruct(self, node: ir.Node, label: str) -> None:
        if not node.inputs or any(v is None for v in node.inputs):
            raise ModelError(f"{node_label(node)}: needs at least one input and no empty ones")
        dtypes = {v.dtype for v in node.inputs if v.dtype is not None}
        if len(dtypes) > 1:
            raise ModelError(f"{node_label(node)}: inputs have different dtypes {sorted(d.name for d in dtypes)}")
        info = SeqInfo.of_elements(
            next(iter(dtypes), None), [_shape_of(v) for v in node.inputs], [const_array(v) for v in node.inputs]
        )
        self._set(node.outputs[0], info, label)

    def _t_SplitToSequence(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 2)
        x = node.inputs[0]
        shape = _shape_of(x)
        has_split = len(node.inputs) > 1 and node.inputs[1] is not None
        split = const_array(node.inputs[1]) if has_split else None
        axis = _int_attr(node, "axis", 0)
        rank = shape.rank() if shape is not None else None
        if rank is not None:
            if rank == 0:
                raise ModelError(f"{node_label(node)}: input must have rank >= 1, got a scalar")
            if not -rank <= axis < rank:
                raise ModelError(f"{node_label(node)}: axis {axis} is out of range for rank {rank}")
            axis %= rank
        dim = shape.dims[axis] if rank is not None else None
        dim = dim if isinstance(dim, int) else None
        sizes = split_sizes(node, dim, split, has_split)
        if sizes is None and split is not None and split.ndim == 1:
            sizes_len = len(split)
        else:
            sizes_len = None if sizes is None else len(sizes)
        xc = const_array(x)
        dtype = x.dtype
        if sizes is not None and rank is not None:
            squeeze = split_squeezes(node, sizes, shape, axis, self.policy)
            if squeeze is None:
                self._set(node.outputs[0], SeqInfo.unknown(dtype), label)
                self._block(node.outputs[0], f"{node_label(node)}: whether keepdims=0 drops the axis depends on run-time shapes")
                return
            shapes, consts = [], []
            start = 0
            for s in sizes:
                dims = list(shape.dims)
                dims[axis] = s
                if squeeze:
                    del dims[axis]
                shapes.append(ir.Shape(dims))
                if xc is not None:
                    c = np.take(xc, np.arange(start, start + s), axis=axis)
                    consts.append(c.reshape(tuple(d for i, d in enumerate(c.shape) if i != axis)) if squeeze else c)
                else:
                    consts.append(None)
                start += s
            self._set(node.outputs[0], SeqInfo.of_elements(dtype, shapes, consts), label)
            return
        # Length maybe known, shapes not (or rank unknown).
        elem = None
        uniform = False
        if shape is not None and rank is not None:
            squeeze = dynamic_split_squeezes(node, self.policy)
            if squeeze is None:
                self._set(node.outputs[0], SeqInfo.unknown(dtype), label)
                self._block(node.outputs[0], f"{node_label(node)}: whether keepdims=0 drops the axis depends on run-time shapes")
                return
            dims = list(shape.dims)
            # Chunks of one (no split, or a constant scalar split of 1) all share a shape.
            ones = not has_split or (split is not None and split.ndim == 0 and int(split) == 1)
            dims[axis] = 1 if ones else None
            uniform = ones
            if squeeze:
                del dims[axis]
            elem = ir.Shape(dims)
        if sizes_len is not None:
            self._set(node.outputs[0], SeqInfo(dtype, sizes_len, (elem,) * sizes_len, elem, False, (None,) * sizes_len), label)
        else:
            self._set(node.outputs[0], SeqInfo.unknown(dtype, elem, uniform), label)

    def _t_SequenceInsert(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 2, 3)
        s = self._need_seq(node, 0)
        t = node.inputs[1]
        if s.dtype is not None and t.dtype is not None and s.dtype != t.dtype:
            raise ModelError(f"{node_label(node)}: inserts a {t.dtype.name} tensor into a sequence of {s.dtype.name}")
        pos_v = node.inputs[2] if len(node.inputs) > 2 else None
        pos = const_position(pos_v, node) if pos_v is not None else None
        out = node.outputs[0]
        dtype = s.dtype or t.dtype
        self._link([node.inputs[0], out])
        if s.length is None or (pos_v is not None and pos is None):
            length = None if s.length is None else s.length + 1
            elem = merge_shapes([s.elem_shape, _shape_of(t)]) if s.length != 0 else _shape_of(t)
            uniform = s.uniform and s.elem_shape == _shape_of(t) if s.length != 0 else _fully_known(_shape_of(t))
            if length is not None:
                # Each element's shape is at least the merged one (its rank, the dims
                # they all share): a sound approximation, which later ops can join.
                shapes = (elem,) * length
                self._set(out, SeqInfo(dtype, length, shapes, elem, uniform and _fully_known(elem), (None,) * length), label)
            else:
                self._set(out, SeqInfo.unknown(dtype, elem, uniform), label)
            return
        n = s.length
        p = n if pos is None else pos
        if not -n <= p <= n:
            self._fail(node, f"position {p} is out of range [-{n}, {n}] for a sequence of length {n}")
            self._set(out, SeqInfo.unknown(dtype), label)
            return
        p = p + n if p < 0 else p  # -1 inserts before the last element, not after it
        shapes = [sh if sh is not None else s.elem_shape for sh in (s.shapes or ())]
        consts = list(s.consts or ())
        shapes.insert(p, _shape_of(t))
        consts.insert(p, const_array(t))
        self._set(out, SeqInfo.of_elements(dtype, shapes, consts), label)

    def _t_SequenceErase(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 2)
        s = self._need_seq(node, 0)
        pos_v = node.inputs[1] if len(node.inputs) > 1 else None
        pos = const_position(pos_v, node) if pos_v is not None else None
        out = node.outputs[0]
        self._link([node.inputs[0], out])
        if s.length is None or (pos_v is not None and pos is None):
            length = None if s.length is None else s.length - 1
            if s.length == 0:
                self._fail(node, "erases from an empty sequence")
            if length is not None and length >= 0:
                shapes = (s.elem_shape,) * length
                self._set(out, SeqInfo(s.dtype, length, shapes, s.elem_shape, s.uniform, (None,) * length), label)
            else:
                self._set(out, SeqInfo.unknown(s.dtype, s.elem_shape, s.uniform), label)
            return
        n = s.length
        p = n - 1 if pos is None else pos
        if n == 0 or not -n <= p < n:
            self._fail(
                node,
                "erases from an empty sequence" if n == 0 else f"position {p} is out of range [-{n}, {n - 1}] for a sequence of length {n}",
            )
            self._set(out, SeqInfo.unknown(s.dtype, s.elem_shape, s.uniform), label)
            return
        p %= n
        shapes = [sh if sh is not None else s.elem_shape for sh in (s.shapes or ())]
        consts = list(s.consts or ())
        del shapes[p], consts[p]
        if shapes:
            self._set(out, SeqInfo.of_elements(s.dtype, shapes, consts), label)
        else:
            self._set(out, SeqInfo(s.dtype, 0, (), s.elem_shape, False, ()), label)

    def _t_SequenceAt(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 2, 2)
        s = self._need_seq(node, 0)
        pos = const_position(node.inputs[1], node)
        if s.length is not None and pos is not None:
            n = s.length
            if not -n <= pos < n:
                self._fail(node, f"position {pos} is out of range [-{n}, {n - 1}] for a sequence of length {n}")

    def _t_SequenceLength(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 1)
        self._need_seq(node, 0)

    def _t_ConcatFromSequence(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 1)
        s = self._need_seq(node, 0)
        if s.length == 0:
            self._fail(node, "concatenates an empty sequence (an error on every runtime)")

    def _t_Identity(self, node: ir.Node, label: str) -> None:
        s = self._in(node, 0)
        if s is None:
            return
        self._set(node.outputs[0], s, label)
        self._link([node.inputs[0], node.outputs[0]])

    def _t_If(self, node: ir.Node, label: str) -> None:
        branches = [(name, _subgraph(node, name)) for name in ("then_branch", "else_branch")]
        for name, g in branches:
            if g is None:
                raise ModelError(f"{node_label(node)}: missing attribute {name}")
            self._graph(g, f"{label} > {node_label(node)}.{name}")
        then_g, else_g = branches[0][1], branches[1][1]
        assert then_g is not None and else_g is not None
        if len(then_g.outputs) != len(node.outputs) or len(else_g.outputs) != len(node.outputs):
            raise ModelError(f"{node_label(node)}: branches have a different number of outputs than the node")
        for out, a, b in zip(node.outputs, then_g.outputs, else_g.outputs):
            ia, ib = self.result.info.get(a), self.result.info.get(b)
            if ia is None and ib is None:
                self._seed_from_type(out, label)
                continue
            if ia is None or ib is None:
                raise ModelError(f"{node_label(node)}: output '{out.name}' is a sequence in one branch only")
            self._set(out, join(ia, ib), label)
            self._link([a, out, b])

    def _t_Loop(self, node: ir.Node, label: str) -> None:
        body = _subgraph(node, "body")
        if body is None:
            raise ModelError(f"{node_label(node)}: missing attribute body")
        blabel = f"{label} > {node_label(node)}.body"
        carried_in = list(node.inputs[2:])
        n_carried = len(carried_in)
        if len(body.inputs) != n_carried + 2 or len(body.outputs) < n_carried + 1:
            raise ModelError(f"{node_label(node)}: body signature does not match the node's inputs")
        init = [self.result.info.get(v) if v is not None else None for v in carried_in]
        if all(i is None for i in init):
            # No carried sequence: one pass, so nested loops stay linear.
            for bi in body.inputs:
                self._seed_from_type(bi, blabel)
            self._graph(body, blabel)
            for out in node.outputs:
                self._seed_from_type(out, label)
            for bo in [*body.inputs[2:], *body.outputs[1:], *node.outputs]:
                if bo in self.result.info:
                    self._block(bo, f"'{bo.name}' is carried by {node_label(node)} from a value seqlower cannot analyse")
            return
        for k, bi in enumerate(body.inputs[2:]):
            if init[k] is None:
                self._seed_from_type(bi, blabel)
        # Probe: does one iteration append exactly one element? (errors are not the
        # body's fault here: the probe's lengths are hypothetical)
        appends = [False] * n_carried
        state = [None if i is None else SeqInfo.unknown(i.dtype, i.elem_shape, i.uniform) for i in init]
        if any(i is not None and i.length is not None for i in init):
            self._quiet += 1
            try:
                for k, i in enumerate(init):
                    if i is not None:
                        self.result.info[body.inputs[2 + k]] = i
                self._graph(body, blabel)
                for k, i in enumerate(init):
                    o = self.result.info.get(body.outputs[1 + k])
                    appends[k] = i is not None and o is not None and i.length is not None and o.length == i.length + 1
                    if i is not None and i.length == 0 and o is not None and o.length != 0:
                        # An empty initial value has no element shape to merge: what
                        # the first iteration puts in is where the widening starts
                        # (TorchScript's `xs = []` before a loop that appends).
                        state[k] = SeqInfo.unknown(o.dtype or i.dtype, o.elem_shape, o.uniform)
            finally:
                self._quiet -= 1
        # Fixpoint over widened states: lengths unknown, shapes merged until stable.
        for rounds in range(_WIDEN_AFTER + 1):
            for k, st in enumerate(state):
                if st is not None:
                    self._set(body.inputs[2 + k], st, blabel)
            self._graph(body, blabel)
            changed = False
            for k, st in enumerate(state):
                if st is None:
                    continue
                o = self.result.info.get(body.outputs[1 + k])
                if o is None:
                    raise ModelError(f"{node_label(node)}: carried value {k} is a sequence outside the body only")
                new = join(st, SeqInfo.unknown(o.dtype, o.elem_shape, o.uniform) if o.length != 0 else o)
                if rounds == _WIDEN_AFTER - 1 and new != st:
                    new = SeqInfo.unknown(st.dtype)
                if new != st:
                    state[k], changed = new, True
            if not changed:
                break
        trip = const_array(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
        cond_free = loop_runs_all_trips(node, body)
        for k, st in enumerate(state):
            out = node.outputs[k] if k < len(node.outputs) else None
            if st is None or out is None:
                continue
            i = init[k]
            final = st
            if i is not None and i.length is not None:
                o = self.result.info.get(body.outputs[1 + k])
                unchanged = o is not None and body.outputs[1 + k] is body.inputs[2 + k]
                if unchanged:
                    final = i
                elif appends[k] and trip is not None and trip.size == 1 and cond_free:
                    length = i.length + int(trip.reshape(()))
                    if length == i.length:
                        final = i
                    elif length > STATIC_LENGTH_LIMIT:  # a huge trip count: known only at run time
                        final = SeqInfo.unknown(st.dtype, st.elem_shape, st.uniform)
                    else:
                        final = dataclasses.replace(st, length=length, shapes=(st.elem_shape,) * length, consts=(None,) * length)
            self._set(out, final, label)
            blocked = f"'{out.name}' is carried by {node_label(node)}"
            for v in (carried_in[k], body.inputs[2 + k], body.outputs[1 + k], out):
                if v is not None and v in self.result.info:
                    self._block(v, blocked, hard=False)
            self._link([carried_in[k], body.inputs[2 + k], body.outputs[1 + k], out])

    def _t_Scan(self, node: ir.Node, label: str) -> None:
        body = _subgraph(node, "body")
        if body is not None:
            self._graph(body, f"{label} > {node_label(node)}.body")
        self._opaque(node, label, node_label(node))

    def _t_SequenceMap(self, node: ir.Node, label: str) -> None:
        body = _subgraph(node, "body")
        if body is None:
            raise ModelError(f"{node_label(node)}: missing attribute body")
        first = self._need_seq(node, 0)
        if len(body.inputs) != len(node.inputs) or len(body.outputs) != len(node.outputs):
            raise ModelError(f"{node_label(node)}: body signature does not match the node")
        for i, v in enumerate(node.inputs[1:], start=1):
            s = self._in(node, i)
            if s is not None and s.length is not None and first.length is not None and s.length < first.length:
                self._fail(node, f"sequence input {i} has {s.length} elements, fewer than the first's {first.length}")
        self._graph(body, f"{label} > {node_label(node)}.body")
        n = first.length
        # The body's shapes follow from its declared input shapes. Where every sequence
        # input's elements all have the declared shape, an output shape of numbers and
        # model-input dims is the same for every element; otherwise the body's symbolic
        # dims name per-iteration sizes and, outside, only numbers hold.
        inputs_match = all(
            self._declared_matches(bi.shape, self.result.info.get(v))
            for v, bi in zip(node.inputs, body.inputs) if v is not None and v in self.result.info
        )
        for out, bo in zip(node.outputs, body.outputs):
            dtype = bo.dtype
            uniform = inputs_match and bo.shape is not None and anchored_shape(bo.shape, self._anchored)
            shape = None
            if bo.shape is not None:
                shape = ir.Shape([
                    d if isinstance(d, int) or (inputs_match and anchored_shape(ir.Shape([d]), self._anchored)) else None
                    for d in bo.shape.dims
                ])
            if n is None:
                self._set(out, SeqInfo.unknown(dtype, shape, uniform), label)
            else:
                self._set(out, SeqInfo(dtype, n, (shape,) * n, shape if n else None, uniform and n > 0, (None,) * n), label)
        # One web (Unrolled needs every input unrolled), but each input and output keeps
        # its own Flat layout: the body may change ranks.
        self._link([*node.inputs, *node.outputs], layout=False)

    def _declared_matches(self, declared: ir.Shape | None, info: SeqInfo | None) -> bool:
        """Whether a body input's declared shape holds for every element of the sequence
        bound to it: same rank, and each declared size (a number or a model-input dim) is
        the elements' size there. The body's inferred shapes rest on the declared ones."""
        if info is None or info.elem_shape is None or declared is None or declared.rank() != info.elem_shape.rank():
            return info is not None and info.length == 0
        for d, e in zip(declared.dims, info.elem_shape.dims):
            named = isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value is not None)
            if named and not (d == e and anchored_shape(ir.Shape([e]), self._anchored)):
                return False
        return True

    # decisions -------------------------------------------------------------------------

# Which inputs of each sequence op are sequences (True) and which tensors (False); the
# last entry repeats for variadic inputs (seqlower.ops).
_INPUT_KINDS: dict[str, tuple[bool, ...]] = {
    n: f.inputs for n, f in ops.REGISTRY.items() if f.family == "sequence" and f.inputs
}


def _check_input_kinds(node: ir.Node) -> None:
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


def analyze(model: ir.Model, *, max_unroll: int = 64, keepdims_policy: str = "auto", packed: bool = True,
            runtime_ranks: bool = True) -> Analysis:
    """Compute SeqInfo for every sequence value and one decision per web (``packed``
    False: dynamic webs are all Flat, the universal representation). ``runtime_ranks``
    False: a web where a tensor of unknown rank enters is kept, with the reason, rather
    than made Flat with ranks known at run time (the pipeline's rounds wait for
    inference to find the rank, which lowers better)."""
    return _Analyzer(model, max_unroll, keepdims_policy, packed, runtime_ranks).run()
