"""The sequence analysis: what is known about every sequence value at compile time
(the lattice's values and join are in ``seqlower.lattice``, IR helpers in
``seqlower.irutil``; their names are re-exported here).

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
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import onnx_ir as ir

from seqlower import ops
from seqlower.builder import merge_shapes, subgraphs
from seqlower.errors import ModelError
from seqlower.irutil import (
    _rank_of,
    _shape_of,
    _users,
    anchored_shape,
    const_array,
    const_position,
    graph_label,
    is_default_domain,
    model_input_dims,
    node_label,
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

# Ops whose sequence inputs and outputs the lowerings can rewrite (seqlower.ops).
LOWERABLE_OPS = ops.names("sequence", lowered=True) | ops.names("control", lowered=True)
_WIDEN_AFTER = 4


@dataclass
class Web:
    """Sequence values that must share one representation, and the decision.

    ``repr`` is ``unrolled`` (static), ``packed`` (dynamic, each sequence one tensor:
    Stacked ``[n, *elem]`` where every element has one shape, Ragged ``data`` + ``lengths``
    where they differ along one axis), ``flat`` (dynamic: values + shapes tensors) or ``kept``
    (left as sequences); ``reason`` says why a web is not Unrolled.
    """

    values: list[ir.Value]
    reason: str | None = None
    repr: str = "unrolled"

    @property
    def unrolled(self) -> bool:
        return self.repr == "unrolled"

    @property
    def flat(self) -> bool:
        return self.repr == "flat"

    @property
    def packed(self) -> bool:
        return self.repr == "packed"


@dataclass(frozen=True)
class Layout:
    """How a Flat sequence's shapes tensor is laid out: ``width`` columns (the largest
    element rank), and a ``ranks`` tensor when element ranks differ (``ranked``).
    Shared by values whose elements flow into one another unchanged."""

    width: int | None  # None: only model inputs of unknown rank feed it (passed through)
    ranked: bool


@dataclass
class Analysis:
    info: dict[ir.Value, SeqInfo] = field(default_factory=dict)
    webs: list[Web] = field(default_factory=list)
    web_of: dict[ir.Value, Web] = field(default_factory=dict)
    graph_of: dict[ir.Value, str] = field(default_factory=dict)
    layout_of: dict[ir.Value, Layout] = field(default_factory=dict)
    # Packed values: Stacked ones' element shape (numbers and model-input dims only), and
    # Ragged ones' varying axis and element shape (None along that axis).
    stacked_shape: dict[ir.Value, ir.Shape] = field(default_factory=dict)
    ragged: dict[ir.Value, tuple[int, ir.Shape]] = field(default_factory=dict)

    def unrolled(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].unrolled

    def flat(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].flat

    def packed(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].packed


# A static length past this is treated as known only at run time: the analysis lists
# one entry per element, and a declared dim of 2**62 must not make it allocate that.
STATIC_LENGTH_LIMIT = 1 << 20


def split_sizes(node: ir.Node, dim: int | None, split: np.ndarray | None, has_split: bool) -> list[int] | None:
    """Chunk sizes of SplitToSequence when they are known at compile time (and number
    at most ``STATIC_LENGTH_LIMIT``)."""
    if has_split and split is None:
        return None
    if split is not None:
        if split.dtype not in (np.int32, np.int64):
            raise ModelError(f"{node_label(node)}: split must be int32 or int64, got {split.dtype}")
        if split.ndim == 0:
            k = int(split)
            if k <= 0:
                raise ModelError(f"{node_label(node)}: scalar split must be positive, got {k}")
            if dim is None or dim // k > STATIC_LENGTH_LIMIT:
                return None
            return [k] * (dim // k) + ([dim % k] if dim % k else [])
        if split.ndim != 1:
            raise ModelError(f"{node_label(node)}: split must be a scalar or 1-D, got shape {list(split.shape)}")
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes):
            raise ModelError(f"{node_label(node)}: split entries must be >= 0, got {sizes}")
        if dim is not None and sum(sizes) != dim:
            raise ModelError(f"{node_label(node)}: split {sizes} sums to {sum(sizes)} but the dimension is {dim}")
        return sizes
    return None if dim is None or dim > STATIC_LENGTH_LIMIT else [1] * dim


def _int_attr(node: ir.Node, name: str, default: int | None) -> int | None:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()


def _subgraph(node: ir.Node, name: str) -> ir.Graph | None:
    a = node.attributes.get(name)
    return None if a is None or a.type != ir.AttributeType.GRAPH else a.as_graph()


def split_squeezes(node: ir.Node, sizes: Sequence[int], x_shape: ir.Shape | None, axis: int, policy: str) -> bool | None:
    """Whether SplitToSequence's chunks lose the split axis (None: only known at run time).

    The spec: only without ``split`` and with keepdims=0. onnxruntime also reshapes the
    chunks of a scalar split when keepdims=0, which works when every chunk has size 1
    along the axis or the chunk has no elements; the executor's keepdims policy
    (``seqlower.executor.kernels``) decides, and this mirrors it exactly.
    """
    keepdims = _int_attr(node, "keepdims", 1)
    split = node.inputs[1] if len(node.inputs) > 1 else None
    if split is None:
        return not keepdims
    if keepdims:
        return False
    arr = const_array(split)
    if arr is None or arr.ndim != 0 or policy == "spec":
        return False if (arr is not None and arr.ndim != 0) or policy == "spec" else None
    all_ones = all(s == 1 for s in sizes)
    rest_zero: bool | None = None
    if x_shape is not None:
        rest = [d for i, d in enumerate(x_shape.dims) if i != axis]
        if any(d == 0 for d in rest):
            rest_zero = True
        elif all(isinstance(d, int) for d in rest):
            rest_zero = False
    ort_works = True if all_ones or rest_zero else (False if rest_zero is False else None)
    if ort_works is None:
        return None
    if policy == "auto":
        return ort_works
    if not ort_works:  # policy "onnxruntime"
        raise ModelError(
            f"{node_label(node)}: scalar split with keepdims=0 gives chunks of sizes {list(sizes)}, which fails"
            " on onnxruntime (keepdims policy 'onnxruntime'); use --keepdims-policy spec"
        )
    return True


# -- the analysis -----------------------------------------------------------------------


class _Analyzer:
    def __init__(self, model: ir.Model, max_unroll: int, keepdims_policy: str, packed: bool = True) -> None:
        self.model = model
        self.allow_packed = packed
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

    def _decide(self) -> None:
        layout_graph = nx.Graph()
        for values, layout in self._links:
            vs = [v for v in values if v in self.result.info]
            for a, b in zip(vs, vs[1:]):
                self.web.add_edge(a, b)
                if layout:
                    layout_graph.add_edge(a, b)
        order = self._order.__getitem__
        for comp in sorted(nx.connected_components(self.web), key=lambda c: min(map(order, c))):
            values = sorted(comp, key=order)
            web = Web(values)
            self.result.webs.append(web)
            for v in values:
                self.result.web_of[v] = web
            web.reason = self._unroll_blocker(values)
            if web.reason is None:
                continue
            web.repr = "kept"
            if any(v in self.hard for v in values):
                continue
            layout_graph.add_nodes_from(values)
            layouts: dict[ir.Value, Layout] = {}
            why = None
            for group in nx.connected_components(layout_graph.subgraph(values)):
                layout, why = self._layout(sorted(group, key=order))
                if layout is None:
                    break
                layouts.update(dict.fromkeys(group, layout))
            why = why or self._flat_blocker(values, layouts)
            if why is not None:
                web.reason = why
                continue
            web.repr = "flat"
            self.result.layout_of.update(layouts)
            if self.allow_packed and self._pack(values, layout_graph):
                web.repr = "packed"

    def _pack(self, values: list[ir.Value], layout_graph: nx.Graph) -> bool:
        """Whether every layout group of the web can be one tensor per sequence value, and
        how (recorded in ``stacked_shape`` / ``ragged``).

        Stacked: every element of every value has one shape, made of numbers and
        model-input dims (one size for the whole run, so even an empty sequence knows
        it). Ragged: the elements differ along one axis only, the other dims being such
        sizes; the group's splits are along that axis and its concats join along it.
        Model inputs stay Flat (the ABI gives no shape guarantee); model outputs are
        converted to the ABI where they leave. A Loop whose carried
        tensors' declared shapes are not the same going in and coming out (the shapes
        inference derived from them would prove nothing)."""
        inputs, outputs = set(self.model.graph.inputs), set(self.model.graph.outputs)
        order = self._order.__getitem__
        stacked: dict[ir.Value, ir.Shape] = {}
        ragged: dict[ir.Value, tuple[int, ir.Shape]] = {}
        for group in nx.connected_components(layout_graph.subgraph(values)):
            group_values = sorted(group, key=order)
            shapes: list[ir.Shape] = []
            for v in group_values:
                if v in inputs:
                    return False
                p = v.producer()
                if p is not None and p.op_type == "Loop" and not loop_shapes_consistent(p):
                    return False
                info = self.result.info.get(v)
                if info is None or (info.length != 0 and info.elem_shape is None):
                    return False
                if info.length != 0:
                    assert info.elem_shape is not None
                    shapes.append(info.elem_shape)
            if not shapes or any(s.rank() != shapes[0].rank() for s in shapes):
                return False
            infos = [self.result.info[v] for v in group_values if self.result.info[v].length != 0]
            if all(i.uniform for i in infos) and all(s == shapes[0] for s in shapes) and anchored_shape(shapes[0], self._anchored):
                stacked.update(dict.fromkeys(group_values, shapes[0]))
                continue
            axis = self._ragged_axis(group_values, shapes)
            # A Ragged model output along axis 0 is already the ABI's values in order.
            if axis is None or (axis != 0 and any(v in outputs for v in group_values)):
                return False
            merged = ir.Shape([None if i == axis else d for i, d in enumerate(shapes[0].dims)])
            ragged.update(dict.fromkeys(group_values, (axis, merged)))
        self.result.stacked_shape.update(stacked)
        self.result.ragged.update(ragged)
        return True

    def _ragged_axis(self, values: list[ir.Value], shapes: list[ir.Shape]) -> int | None:
        """The one axis along which a group's elements may differ, or None."""
        rank = shapes[0].rank()
        varying = [
            i for i in range(rank)
            if not (all(s.dims[i] == shapes[0].dims[i] for s in shapes) and anchored_shape(ir.Shape([shapes[0].dims[i]]), self._anchored))
        ]
        if len(varying) != 1:
            return None
        axis = varying[0]
        for v in values:
            p = v.producer()
            if p is not None and p.op_type == "SplitToSequence" and is_default_domain(p):
                x = p.inputs[0]
                if x is None or x.shape is None or _int_attr(p, "axis", 0) % x.shape.rank() != axis:
                    return None
                if dynamic_split_squeezes(p, self.policy) is not False:
                    return None
            for use in _users(v):
                if use.op_type == "ConcatFromSequence" and (_int_attr(use, "new_axis", 0) or _int_attr(use, "axis", 0) % rank != axis):
                    return None
        return axis

    def _unroll_blocker(self, values: list[ir.Value]) -> str | None:
        hard = next((self.blockers[v] for v in values if v in self.hard), None)
        if hard is not None:
            return hard
        for v in values:
            for use in _users(v):
                why = self._hard_use_reason(use, v)
                if why:
                    self.hard.add(v)
                    self.blockers.setdefault(v, why)
                    return why
        for v in values:
            if v in self.blockers:
                return self.blockers[v]
        for v in values:
            info = self.result.info.get(v)
            if info is None:
                self.hard.add(v)
                return f"'{v.name}' has no sequence information"
            if info.length is None:
                return f"the length of '{v.name}' is only known at run time"
            if info.length > self.max_unroll:
                return f"'{v.name}' has {info.length} elements, more than --max-unroll {self.max_unroll}"
        for v in values:
            for use in _users(v):
                why = self._runtime_position(use)
                if why:
                    return why
        return None

    def _hard_use_reason(self, node: ir.Node, v: ir.Value) -> str | None:
        if not is_default_domain(node) or node.op_type not in LOWERABLE_OPS:
            return f"'{v.name}' is consumed by {node_label(node)}, which has no sequence lowering"
        if node.op_type == "SequenceInsert" and node.inputs[1] is v:
            return f"{node_label(node)} inserts a sequence into a sequence"
        return None

    @staticmethod
    def _runtime_position(node: ir.Node) -> str | None:
        index = {"SequenceAt": 1, "SequenceInsert": 2, "SequenceErase": 1}.get(node.op_type)
        if index is None or len(node.inputs) <= index or node.inputs[index] is None:
            return None
        if const_array(node.inputs[index]) is None:
            return f"the position of {node_label(node)} is only known at run time"
        return None

    def _layout(self, group: list[ir.Value]) -> tuple[Layout | None, str | None]:
        """The Flat layout of values whose elements flow into one another unchanged: the
        ranks of every tensor that enters them, which must be known at compile time."""
        ranks: set[int] = set()
        unknown_inputs = []
        for v in group:
            for r, who in self._entry_ranks(v):
                if r is None:
                    if who is None:
                        unknown_inputs.append(v)
                        continue
                    return None, f"the rank of {who}, an element of '{v.name}', is unknown"
                ranks.add(r)
        if unknown_inputs and not ranks:
            # Only passed through (no op here needs the rank): rows as wide as the
            # caller's elements, with their ranks.
            return Layout(None, True), None
        # A model input of unknown element rank takes the rank its web gives it; the ABI
        # records it, so a caller learns the contract instead of guessing.
        return Layout(max(ranks, default=0), len(ranks) > 1), None

    def _entry_ranks(self, v: ir.Value) -> list[tuple[int | None, str | None]]:
        p = v.producer()
        if p is None:
            if v in self.model.graph.inputs:
                shape = v.shape  # onnx_ir keeps a sequence's element shape on the value
                return [(shape.rank() if shape is not None else None, None)]
            return []
        op = p.op_type
        if op == "SequenceConstruct":
            return [(_rank_of(t), f"'{t.name}'") for t in p.inputs if t is not None]
        if op == "SequenceInsert":
            t = p.inputs[1]
            return [(_rank_of(t), f"'{t.name}'")]
        if op == "SplitToSequence":
            r = _rank_of(p.inputs[0])
            if r is None:
                return [(None, f"'{p.inputs[0].name}' (split by {node_label(p)})")]
            squeeze = dynamic_split_squeezes(p, self.policy)
            return [(r - 1 if squeeze else r, None)]
        if op == "SequenceMap":
            first = self.result.info.get(p.inputs[0]) if p.inputs and p.inputs[0] is not None else None
            if first is not None and first.length == 0:
                return []  # a map over no element makes none: nothing of any rank enters
            body = _subgraph(p, "body")
            bo = body.outputs[list(p.outputs).index(v)] if body is not None else None
            return [(_rank_of(bo), f"'{bo.name if bo is not None else '?'}' (made by {node_label(p)})")]
        return []

    def _flat_blocker(self, values: list[ir.Value], layouts: dict[ir.Value, Layout]) -> str | None:
        for v in values:
            p = v.producer()
            if p is not None and p.op_type == "SplitToSequence":
                if dynamic_split_squeezes(p, self.policy) is None:
                    return f"{node_label(p)}: whether keepdims=0 drops the axis depends on run-time shapes"
                split = p.inputs[1] if len(p.inputs) > 1 else None
                if split is not None and _rank_of(split) is None:
                    return f"{node_label(p)}: the rank of split '{split.name}' (scalar or 1-D) is unknown"
            for use in _users(v):
                if use.op_type == "ConcatFromSequence" and layouts[v].ranked:
                    return f"{node_label(use)} concatenates elements of different ranks"
        return None


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


def loop_shapes_consistent(node: ir.Node) -> bool:
    """Whether each tensor a Loop carries has the same declared shape going in, in the
    body and coming out: then, by induction, the shapes inference derived from them hold
    in every iteration."""
    body = _subgraph(node, "body")
    if body is None:
        return False
    for j, bi in enumerate(body.inputs[2:]):
        if isinstance(bi.type, ir.SequenceType) or bi.shape is None:
            continue
        init = node.inputs[2 + j] if 2 + j < len(node.inputs) else None
        bo = body.outputs[1 + j] if 1 + j < len(body.outputs) else None
        if init is None or bo is None or init.shape != bi.shape or bo.shape != bi.shape:
            return False
    return True


def unchanged_split_source(node: ir.Node, policy: str) -> ir.Value | None:
    """The input of the SplitToSequence this concat undoes (same axis, nothing changed
    in between but Identity), or None."""
    v = node.inputs[0]
    p = v.producer() if v is not None else None
    while p is not None and p.op_type == "Identity" and is_default_domain(p):
        p = p.inputs[0].producer() if p.inputs[0] is not None else None
    if p is None or p.op_type != "SplitToSequence" or not is_default_domain(p):
        return None
    x = p.inputs[0]
    if x is None or x.shape is None:
        return None
    r = x.shape.rank()
    split_axis = _int_attr(p, "axis", 0) % r
    squeeze = dynamic_split_squeezes(p, policy)
    if squeeze is None:
        return None
    new_axis = bool(_int_attr(node, "new_axis", 0))
    if new_axis != squeeze:
        return None
    axis = _int_attr(node, "axis", 0)
    return x if axis % r == split_axis else None


def dynamic_split_squeezes(node: ir.Node, policy: str) -> bool | None:
    """Whether SplitToSequence's chunks lose the split axis, decided without knowing the
    chunk sizes (None: only known at run time; see :func:`split_squeezes`)."""
    keepdims = _int_attr(node, "keepdims", 1)
    split = node.inputs[1] if len(node.inputs) > 1 else None
    if split is None:
        return not keepdims
    if keepdims or policy == "spec":
        return False
    arr = const_array(split)
    if arr is None:
        # A 1-D split ignores keepdims; a run-time scalar one depends on the policy.
        return False if split.shape is not None and split.shape.rank() == 1 else None
    if arr.ndim != 0:
        return False
    # Chunks of 1 are what onnxruntime squeezes (torch.unbind); others fail there.
    return True if int(arr) == 1 else None


def loop_runs_all_trips(node: ir.Node, body: ir.Graph) -> bool:
    """True when the Loop's condition can never stop it early: no initial ``cond``
    or a constant true, and the body passes its cond through or outputs constant true."""
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if cond is not None:
        c = const_array(cond)
        if c is None or not bool(c.reshape(())):
            return False
    out = body.outputs[0]
    while out is not None and (p := out.producer()) is not None and p.op_type == "Identity" and is_default_domain(p) and p.inputs:
        out = p.inputs[0]
    if out is body.inputs[1]:
        return True
    c = const_array(out)
    return c is not None and bool(c.reshape(()))


def analyze(model: ir.Model, *, max_unroll: int = 64, keepdims_policy: str = "auto", packed: bool = True) -> Analysis:
    """Compute SeqInfo for every sequence value and one decision per web (``packed``
    False: dynamic webs are all Flat, the universal representation)."""
    return _Analyzer(model, max_unroll, keepdims_policy, packed).run()
