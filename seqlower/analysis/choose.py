"""The choice of representation: one decision per web of sequence values (Unrolled,
Stacked, Ragged, Flat, or kept with the reason), and the Flat layout of each group.
A mixin of the analysis (``seqlower.analysis.analyzer._Analyzer``), which computes the facts
(``SeqInfo``) these decisions read."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import onnx_ir as ir

from seqlower import coverage, ops
from seqlower.keys import KEEP_KEY
from seqlower.ir.helpers import (
    int_attr,
    rank_of,
    split_rank,
    subgraph_of,
    users_of,
    anchored_shape,
    const_array,
    is_default_domain,
    loop_shapes_consistent,
    node_label,
)
from seqlower.analysis.lattice import SeqInfo
from seqlower.analysis.splits import dynamic_split_squeezes

__all__ = ["Analysis", "Chooser", "LOWERABLE_OPS", "Layout", "Web"]

# Ops whose sequence inputs and outputs the lowerings can rewrite (seqlower.ops).
LOWERABLE_OPS = ops.names("sequence", lowered=True) | ops.names("control", lowered=True)


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

    width: int | None  # None: a rank that enters is unknown; the rows are as wide as run time makes them
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
    # Tensors read at a constant position out of a list whose element there is a constant:
    # that constant (what the fold replaces them with; passes/folds/fold_sequence_constants.py).
    consts_of: dict[ir.Value, np.ndarray] = field(default_factory=dict)
    max_unroll: int = 64  # the --max-unroll the decisions were made with
    # SequenceMap bodies whose shapes onnx inferred from input shapes that not every
    # element has (a Loop's carried list is typed by its first value): their dims prove
    # nothing, and a lowering that copies them gives a runtime false facts to fold.
    unproven_bodies: list[ir.Graph] = field(default_factory=list)

    def unrolled(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].unrolled

    def flat(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].flat

    def packed(self, v: ir.Value | None) -> bool:
        return v is not None and v in self.web_of and self.web_of[v].packed


def _kept_by_validation(v: ir.Value) -> str | None:
    """Why ``lower``'s validation keeps the web of ``v`` as it is (seqlower.keys.KEEP_KEY
    on the op making or reading it), or None."""
    for node in (v.producer(), *users_of(v)):
        if node is not None and (why := node.metadata_props.get(KEEP_KEY)) is not None:
            return why
    return None


class Chooser:
    """The decisions, over what the analysis found (``self.result``)."""

    def _decide(self) -> None:
        # (The model's inputs and outputs as sets once, not once per web: 909 webs of a
        # model with 1,800 outputs were 1.6 million reads.)
        self._io = set(self.model.graph.inputs), set(self.model.graph.outputs)
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
        if coverage.enabled():
            coverage.count_representations(self.result)

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
        inputs, outputs = self._io
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
                if x is None or x.shape is None or int_attr(p, "axis", 0) % x.shape.rank() != axis:
                    return None
                if dynamic_split_squeezes(p, self.policy) is not False:
                    return None
            for use in users_of(v):
                if use.op_type == "ConcatFromSequence" and (int_attr(use, "new_axis", 0) or int_attr(use, "axis", 0) % rank != axis):
                    return None
        return axis

    def _unroll_blocker(self, values: list[ir.Value]) -> str | None:
        hard = next((self.blockers[v] for v in values if v in self.hard), None)
        if hard is not None:
            return hard
        for v in values:
            if (why := _kept_by_validation(v)) is not None:
                self.hard.add(v)
                self.blockers.setdefault(v, why)
                return why
        for v in values:
            for use in users_of(v):
                why = self._hard_use_reason(use, v)
                if why:
                    self.hard.add(v)
                    self.blockers.setdefault(v, why)
                    return why
        for v in values:
            if v in self.blockers:
                return self.blockers[v]
        exempt: bool | None = None  # computed once, for the first list past --max-unroll
        for v in values:
            info = self.result.info.get(v)
            if info is None:
                self.hard.add(v)
                return f"'{v.name}' has no sequence information"
            if info.length is None:
                return f"the length of '{v.name}' is only known at run time"
            if info.length > self.max_unroll:
                if exempt is None:
                    exempt = self._no_node_per_element(values)
                if not exempt:
                    return f"'{v.name}' has {info.length} elements, more than --max-unroll {self.max_unroll}"
        for v in values:
            for use in users_of(v):
                why = self._runtime_position(use)
                if why:
                    return why
        return None

    @staticmethod
    def _no_node_per_element(values: list[ir.Value]) -> bool:
        """Whether unrolling the web makes no node per element: its lists are only cut from
        tensors, edited at constant positions, read and joined (one Gather), never mapped
        or carried through control flow. --max-unroll bounds the nodes unrolling makes, so
        it does not apply to such a web."""
        cuts: set[tuple[int, bool, int]] = set()  # (axis, squeezed, rank) of each SplitToSequence
        joins: set[tuple[int, bool]] = set()  # (axis, new_axis) of each ConcatFromSequence
        for v in values:
            p = v.producer()
            if p is not None and p.op_type in ("If", "Loop", "Scan", "SequenceMap"):
                return False
            if p is not None and p.op_type == "SplitToSequence":
                x = p.inputs[0]
                has_split = len(p.inputs) > 1 and p.inputs[1] is not None
                keepdims = int_attr(p, "keepdims", 1)
                if x is None or x.shape is None or x.shape.rank() == 0 or (has_split and not keepdims):
                    return False
                rank = x.shape.rank()
                cuts.add((int_attr(p, "axis", 0) % rank, not keepdims, rank))
            for use in users_of(v):
                if use.op_type in ("If", "Loop", "Scan", "SequenceMap"):
                    return False
                if use.op_type == "ConcatFromSequence":
                    joins.add((int_attr(use, "axis", 0), bool(int_attr(use, "new_axis", 0))))
        # Joined along the axis they were cut on (passes/lowering/_static_rows.py): one node.
        if len(cuts) != 1:
            return False
        ((axis, squeezed, rank),) = cuts
        for at, new_axis in joins:
            if squeezed and not ((new_axis and at % rank == axis) or (not new_axis and rank >= 2 and at % (rank - 1) == axis)):
                return False
            if not squeezed and (new_axis or at % rank != axis):
                return False
        return True

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
        """The Flat layout of values whose elements flow into one another unchanged: as
        wide as the largest rank of the tensors that enter them, or, when one of those
        ranks is unknown at compile time, as wide as the run time makes it (``width``
        None; then every element's rank is carried too)."""
        ranks: set[int] = set()
        unknown = False
        for v in group:
            for r, who in self._entry_ranks(v):
                if r is not None:
                    ranks.add(r)
                elif who is not None:  # a tensor of unknown rank enters
                    if not self.runtime_ranks:
                        return None, f"the rank of {who}, an element of '{v.name}', is unknown"
                    return Layout(None, True), None
                else:  # a model input's elements, of unknown rank
                    unknown = True
        if unknown and not ranks:
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
            return [(rank_of(t), f"'{t.name}'") for t in p.inputs if t is not None]
        if op == "SequenceInsert":
            t = p.inputs[1]
            return [(rank_of(t), f"'{t.name}'")]
        if op == "SplitToSequence":
            r = rank_of(p.inputs[0])
            if r is None:
                return [(None, f"'{p.inputs[0].name}' (split by {node_label(p)})")]
            squeeze = dynamic_split_squeezes(p, self.policy)
            if squeeze is None:  # decided at run time: either rank enters
                return [(r - 1, None), (r, None)]
            return [(r - 1 if squeeze else r, None)]
        if op == "SequenceMap":
            first = self.result.info.get(p.inputs[0]) if p.inputs and p.inputs[0] is not None else None
            if first is not None and first.length == 0:
                return []  # a map over no element makes none: nothing of any rank enters
            body = subgraph_of(p, "body")
            bo = body.outputs[list(p.outputs).index(v)] if body is not None else None
            return [(rank_of(bo), f"'{bo.name if bo is not None else '?'}' (made by {node_label(p)})")]
        return []

    def _flat_blocker(self, values: list[ir.Value], layouts: dict[ir.Value, Layout]) -> str | None:
        for v in values:
            p = v.producer()
            if p is not None and p.op_type == "SplitToSequence":
                split = p.inputs[1] if len(p.inputs) > 1 else None
                if split is not None and split_rank(split) is None:
                    return f"{node_label(p)}: the rank of split '{split.name}' (scalar or 1-D) is unknown"
            for use in users_of(v):
                if use.op_type == "ConcatFromSequence" and layouts[v].ranked and layouts[v].width is not None:
                    if not self.runtime_ranks:
                        return f"{node_label(use)} concatenates elements of different ranks"
                    # Which rank it concatenates is chosen at run time (an If between lists
                    # of other ranks): the rows as wide as the run makes them.
                    fixed, runtime = layouts[v], Layout(None, True)
                    for k, layout in layouts.items():
                        if layout is fixed:
                            layouts[k] = runtime
        return None
