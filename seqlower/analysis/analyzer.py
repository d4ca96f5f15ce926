"""The sequence analysis: what is known about every sequence value at compile time
(the lattice's values and join are in ``seqlower.analysis.lattice``, the transfer functions of
If, Loop, Scan and SequenceMap in ``seqlower.analysis.transfer_control``, the choice of
representation per web in ``seqlower.analysis.choose``, SplitToSequence's facts in
``seqlower.analysis.splits``, IR helpers in ``seqlower.ir.helpers``; their names are re-exported
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

import logging
from collections.abc import Sequence
from typing import Any

import networkx as nx
import numpy as np
import onnx_ir as ir

from seqlower.ops import TRANSFERS, transfer
from seqlower.ir.helpers import concat_shape, merge_shapes, subgraphs
from seqlower.errors import ModelError
from seqlower.keys import ANALYSIS_STASH_KEY
from seqlower.ir.helpers import (
    int_attr,
    graphs_of,
    shape_of_value,
    const_array,
    const_position,
    graph_label,
    is_default_domain,
    model_input_dims,
    node_label,
)
from seqlower.analysis.choose import LOWERABLE_OPS, Analysis, Chooser, Layout, Web
from seqlower.analysis.transfer_control import ControlFlow
from seqlower.analysis.splits import (
    dynamic_split_squeezes,
    split_sizes,
    split_squeezes,
)
from seqlower.analysis.lattice import SeqInfo, fully_known, shape_json, shifted
from seqlower.analysis.input_kinds import check_input_kinds

__all__ = [
    "SeqInfo",
    "Web",
    "Analysis",
    "analyze",
    "analyze_reusing",
    "keep_for_next_pass",
    "ANALYSIS_STASH_KEY",
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


# -- the analysis -----------------------------------------------------------------------


# The input of each op that holds positions or sizes (int32 or int64 by the spec).
# A run-time scalar split with keepdims=0: onnxruntime (the "auto" policy) squeezes the
# chunks only when each has size 1 along the axis or none has an element.
_RUNTIME_SQUEEZE = "{}: whether keepdims=0 drops the axis depends on run-time shapes"
_INDEX_INPUTS = {"SequenceAt": 1, "SequenceInsert": 2, "SequenceErase": 1, "SplitToSequence": 1}


class _Analyzer(ControlFlow, Chooser):
    def __init__(self, model: ir.Model, max_unroll: int, keepdims_policy: str, packed: bool = True,
                 runtime_ranks: bool = True) -> None:
        self.model = model
        self.allow_packed = packed
        self.runtime_ranks = runtime_ranks
        self.max_unroll = max_unroll
        self.policy = keepdims_policy
        self.result = Analysis(max_unroll=max_unroll)
        self.web = nx.Graph()
        self.blockers: dict[ir.Value, str] = {}
        # Values whose web no lowering can take (the rest of ``blockers`` only stops
        # the Unrolled one: a Flat lowering handles them).
        self.hard: set[ir.Value] = set()
        self._quiet = 0
        self._order: dict[ir.Value, int] = {}
        self._links: list[tuple[list[ir.Value], bool]] = []
        self._anchored = frozenset(model_input_dims(model))
        # Shapes of tensors read out of lists (ConcatFromSequence, SequenceAt) that the
        # model does not declare yet: a list cut from them later in the same run sees
        # them, so a chain of split -> map -> concat blocks is known in one analysis,
        # not one block per round of onnx inference.
        self.tensor_shapes: dict[ir.Value, ir.Shape] = {}

    def _const(self, v: ir.Value) -> np.ndarray | None:
        """An element's constant: its own, or the one it was read as out of a list."""
        known = self.result.consts_of.get(v)
        return known if known is not None else const_array(v)

    def _shape(self, v: ir.Value | None) -> ir.Shape | None:
        declared = shape_of_value(v)
        known = self.tensor_shapes.get(v) if v is not None else None
        if known is None or declared is None or declared.rank() != known.rank():
            return declared if declared is not None else known
        return ir.Shape([d if isinstance(d, int) else k if isinstance(k, int) else d
                         for d, k in zip(declared.dims, known.dims)])

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
        # A position out of range is an error only where the node surely runs: an If
        # branch, a Loop or map body, a function may not (TorchScript guards a pop with
        # `if len(xs) > 0`, whose branch reads an empty list when it is not taken).
        nested = graph is not self.model.graph
        self._quiet += nested
        try:
            for v in graph.inputs:
                self._seed_from_type(v, label)
            for node in graph:
                try:
                    self._node(node, label)
                except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
                    raise ModelError(f"{node_label(node)} in {label}: malformed node ({e})") from None
        finally:
            self._quiet -= nested

    def _node(self, node: ir.Node, label: str) -> None:
        if not is_default_domain(node):
            self._opaque(node, label, f"{node_label(node)} (domain '{node.domain}')")
            return
        check_input_kinds(node)
        handler = TRANSFERS.get(node.op_type)
        if handler is not None:
            handler(self, node, label)
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
        k = _INDEX_INPUTS.get(node.op_type)
        v = node.inputs[k] if k is not None and k < len(node.inputs) else None
        if v is not None and v.dtype is not None and v.dtype not in (ir.DataType.INT32, ir.DataType.INT64):
            what = "split" if node.op_type == "SplitToSequence" else "position"
            raise ModelError(f"{node_label(node)}: {what} must be int32 or int64, got {v.dtype.name} ('{v.name}')")

    # transfer functions --------------------------------------------------------------

    @transfer("SequenceEmpty")

    def _t_SequenceEmpty(self, node: ir.Node, label: str) -> None:
        dtype = ir.DataType(int_attr(node, "dtype", ir.DataType.FLOAT.value))
        self._set(node.outputs[0], SeqInfo.empty(dtype), label)

    @transfer("SequenceConstruct")

    def _t_SequenceConstruct(self, node: ir.Node, label: str) -> None:
        if not node.inputs or any(v is None for v in node.inputs):
            raise ModelError(f"{node_label(node)}: needs at least one input and no empty ones")
        dtypes = {v.dtype for v in node.inputs if v.dtype is not None}
        if len(dtypes) > 1:
            raise ModelError(f"{node_label(node)}: inputs have different dtypes {sorted(d.name for d in dtypes)}")
        info = SeqInfo.of_elements(
            next(iter(dtypes), None), [self._shape(v) for v in node.inputs], [self._const(v) for v in node.inputs]
        )
        self._set(node.outputs[0], info, label)

    @transfer("SplitToSequence")

    def _t_SplitToSequence(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 2)
        x = node.inputs[0]
        shape = self._shape(x)
        has_split = len(node.inputs) > 1 and node.inputs[1] is not None
        split = const_array(node.inputs[1]) if has_split else None
        axis = int_attr(node, "axis", 0)
        rank = shape.rank() if shape is not None else None
        if rank is not None:
            if rank == 0:
                raise ModelError(f"{node_label(node)}: input must have rank >= 1, got a scalar")
            if not -rank <= axis < rank:
                raise ModelError(f"{node_label(node)}: axis {axis} is out of range for rank {rank}")
            axis %= rank
        dim = shape.dims[axis] if rank is not None else None
        sizes = split_sizes(node, dim if isinstance(dim, int) else None, split, has_split)
        if sizes is not None and rank is not None:
            self._split_known(node, label, shape, axis, sizes)
            return
        # Length maybe known, shapes not (or rank unknown).
        if sizes is None and split is not None and split.ndim == 1:
            sizes_len = len(split)
        else:
            sizes_len = None if sizes is None else len(sizes)
        self._split_unknown(node, label, shape if rank is not None else None, axis, split, has_split, sizes_len)

    def _split_known(self, node: ir.Node, label: str, shape: ir.Shape, axis: int, sizes: list[int]) -> None:
        """Every chunk's size known: each element's shape (and value, of a constant)."""
        x, dtype = node.inputs[0], node.inputs[0].dtype
        squeeze = split_squeezes(node, sizes, shape, axis, self.policy)
        if squeeze is None:
            # The chunks' rank (r - 1 or r) is decided in the graph: Flat, ranks carried.
            self._set(node.outputs[0], SeqInfo.repeated(dtype, len(sizes), None), label)
            self._block(node.outputs[0], _RUNTIME_SQUEEZE.format(node_label(node)), hard=False)
            return
        xc = const_array(x)
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

    def _split_unknown(self, node: ir.Node, label: str, shape: ir.Shape | None, axis: int, split: Any,
                       has_split: bool, sizes_len: int | None) -> None:
        """The chunks' sizes not known (``shape``: the input's, when its rank is): the
        length where the split says it, one element shape where the chunks are of one."""
        dtype = node.inputs[0].dtype
        elem = None
        uniform = False
        sym = None
        if shape is not None:
            squeeze = dynamic_split_squeezes(node, self.policy)
            if squeeze is None:
                info = SeqInfo.unknown(dtype) if sizes_len is None else SeqInfo.repeated(dtype, sizes_len, None)
                self._set(node.outputs[0], info, label)
                self._block(node.outputs[0], _RUNTIME_SQUEEZE.format(node_label(node)), hard=False)
                return
            dims = list(shape.dims)
            # Chunks of one (no split, or a constant scalar split of 1) all share a shape.
            ones = not has_split or (split is not None and split.ndim == 0 and int(split) == 1)
            along = dims[axis]
            if ones and isinstance(along, ir.SymbolicDim) and along.value in self._anchored:
                sym = (along.value, 0)  # one element per row of a model input's dim
            dims[axis] = 1 if ones else None
            uniform = ones
            if squeeze:
                del dims[axis]
            elem = ir.Shape(dims)
        if sizes_len is not None:
            self._set(node.outputs[0], SeqInfo.repeated(dtype, sizes_len, elem), label)
        else:
            self._set(node.outputs[0], SeqInfo.unknown(dtype, elem, uniform).with_length_sym(sym), label)

    @transfer("SequenceInsert")

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
            elem = merge_shapes([s.elem_shape, self._shape(t)]) if s.length != 0 else self._shape(t)
            uniform = s.uniform and s.elem_shape == self._shape(t) if s.length != 0 else fully_known(self._shape(t))
            if length is not None:
                # Each element's shape is at least the merged one (its rank, the dims
                # they all share): a sound approximation, which later ops can join.
                self._set(out, SeqInfo.repeated(dtype, length, elem, uniform and fully_known(elem)), label)
            else:
                self._set(out, SeqInfo.unknown(dtype, elem, uniform).with_length_sym(shifted(s.length_sym, 1)), label)
            return
        n = s.length
        p = n if pos is None else pos
        if not -n <= p <= n:
            self._fail(node, f"position {p} is out of range [-{n}, {n}] for a sequence of length {n}")
            self._set(out, SeqInfo.unknown(dtype), label)
            return
        p = p + n if p < 0 else p  # -1 inserts before the last element, not after it
        # (The elements are shared with the input's info: an insert costs O(log n), not a
        # copy of the list; 10,000 inserts into 10,000 rows were 10^8 copies.)
        self._set(out, SeqInfo.from_elements(dtype, s.elements.insert(p, (self._shape(t), self._const(t)))), label)

    @transfer("SequenceErase")

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
                self._set(out, SeqInfo.repeated(s.dtype, length, s.elem_shape, s.uniform), label)
            else:
                self._set(out, SeqInfo.unknown(s.dtype, s.elem_shape, s.uniform).with_length_sym(shifted(s.length_sym, -1)), label)
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
        if n == 1:
            self._set(out, SeqInfo.empty(s.dtype, s.elem_shape), label)
        else:
            self._set(out, SeqInfo.from_elements(s.dtype, s.elements.delete(p)), label)

    @transfer("SequenceAt")

    def _t_SequenceAt(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 2, 2)
        s = self._need_seq(node, 0)
        pos = const_position(node.inputs[1], node)
        if s.length is not None and pos is not None:
            n = s.length
            if not -n <= pos < n:
                self._fail(node, f"position {pos} is out of range [-{n}, {n - 1}] for a sequence of length {n}")
            else:
                if s.shapes is not None and s.shapes[pos] is not None:
                    self.tensor_shapes[node.outputs[0]] = s.shapes[pos]
                if s.consts is not None and s.consts[pos] is not None:
                    self.result.consts_of[node.outputs[0]] = s.consts[pos]
                return
        if s.elem_shape is not None:
            # Any element is at least of the shape they all share (its rank, the dims
            # every element has): what the read gives, whatever the position.
            self.tensor_shapes[node.outputs[0]] = s.elem_shape

    @transfer("SequenceLength")

    def _t_SequenceLength(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 1)
        self._need_seq(node, 0)

    @transfer("ConcatFromSequence")

    def _t_ConcatFromSequence(self, node: ir.Node, label: str) -> None:
        self._check_arity(node, 1, 1)
        s = self._need_seq(node, 0)
        if s.length == 0:
            self._fail(node, "concatenates an empty sequence (an error on every runtime)")
        elif s.shapes is not None and "axis" in node.attributes:
            new_axis = bool(int_attr(node, "new_axis", 0))
            try:
                shape = concat_shape(list(s.shapes), node.attributes["axis"].as_int(), new_axis)
            except (ValueError, IndexError):
                shape = None  # an axis out of range: the lowering says so
            if shape is not None:
                self.tensor_shapes[node.outputs[0]] = shape

    # decisions -------------------------------------------------------------------------

def analyze(model: ir.Model, *, max_unroll: int = 64, keepdims_policy: str = "auto", packed: bool = True,
            runtime_ranks: bool = True) -> Analysis:
    """Compute SeqInfo for every sequence value and one decision per web (``packed``
    False: dynamic webs are all Flat, the universal representation). ``runtime_ranks``
    False: a web where a tensor of unknown rank enters is kept, with the reason, rather
    than made Flat with ranks known at run time (the pipeline's rounds wait for
    inference to find the rank, which lowers better)."""
    return _Analyzer(model, max_unroll, keepdims_policy, packed, runtime_ranks).run()


def _fingerprint(model: ir.Model) -> tuple[int, ...]:
    # A guard against a stash outliving a change the rounds did not see (a pass run
    # outside them): every graph's node count.
    return tuple(len(g) for g in graphs_of(model))


def analyze_reusing(model: ir.Model, **params: Any) -> Analysis:
    """``analyze(model, **params)``, or the analysis the previous pass left for it with the
    same parameters (``keep_for_next_pass``), which is used once."""
    stash = model.meta.pop(ANALYSIS_STASH_KEY, None)
    if stash is not None and stash[0] == params and stash[2] == _fingerprint(model):
        return stash[1]
    return analyze(model, **params)


def keep_for_next_pass(model: ir.Model, analysis: Analysis, **params: Any) -> None:
    """Leave ``analysis`` for the next pass: call only when this pass changed nothing."""
    model.meta[ANALYSIS_STASH_KEY] = (params, analysis, _fingerprint(model))
