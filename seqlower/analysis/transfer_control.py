"""Transfer functions of the ops that carry lists through subgraphs (a mixin of the
analyzer in ``seqlower.analysis.analyzer``): ``Identity``; ``If``, the join of its branches;
``Loop``, a fixpoint with widening over the carried lists (an append-once-per-iteration
list over a constant trip count has length ``initial + trips``); ``Scan`` (opaque);
``SequenceMap``, its body analysed once with the element shapes its inputs declare."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from seqlower.errors import ModelError
from seqlower.ops import transfer
from seqlower.ir.helpers import subgraph_of, anchored_shape, const_array, loop_runs_all_trips, node_label
from seqlower.analysis.lattice import Elements, SeqInfo, join
from seqlower.analysis.splits import STATIC_LENGTH_LIMIT

__all__ = ["ControlFlow"]

# Rounds of a Loop's fixpoint before a list that still changes widens to unknown.
_WIDEN_AFTER = 4


class ControlFlow:
    """The analyzer's transfer functions for Identity, If, Loop, Scan and SequenceMap."""

    @transfer("Identity")

    def _t_Identity(self, node: ir.Node, label: str) -> None:
        s = self._in(node, 0)
        if s is None:
            return
        self._set(node.outputs[0], s, label)
        self._link([node.inputs[0], node.outputs[0]])

    @transfer("If")

    def _t_If(self, node: ir.Node, label: str) -> None:
        branches = [(name, subgraph_of(node, name)) for name in ("then_branch", "else_branch")]
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

    @transfer("Loop")

    def _t_Loop(self, node: ir.Node, label: str) -> None:
        body = subgraph_of(node, "body")
        if body is None:
            raise ModelError(f"{node_label(node)}: missing attribute body")
        blabel = f"{label} > {node_label(node)}.body"
        carried_in = list(node.inputs[2:])
        if len(body.inputs) != len(carried_in) + 2 or len(body.outputs) < len(carried_in) + 1:
            raise ModelError(f"{node_label(node)}: body signature does not match the node's inputs")
        init = [self.result.info.get(v) if v is not None else None for v in carried_in]
        if all(i is None for i in init):
            self._loop_without_lists(node, body, label, blabel)
            return
        for k, bi in enumerate(body.inputs[2:]):
            if init[k] is None:
                self._seed_from_type(bi, blabel)
        appends, state = self._loop_probe(body, blabel, init)
        self._loop_fixpoint(node, body, blabel, state)
        trip = const_array(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
        counted = trip is not None and trip.size == 1 and loop_runs_all_trips(node, body)
        for k, st in enumerate(state):
            out = node.outputs[k] if k < len(node.outputs) else None
            if st is None or out is None:
                continue
            final = self._loop_result(body, k, init[k], st, int(trip.reshape(())) if counted and appends[k] else None)
            self._set(out, final, label)
            blocked = f"'{out.name}' is carried by {node_label(node)}"
            for v in (carried_in[k], body.inputs[2 + k], body.outputs[1 + k], out):
                if v is not None and v in self.result.info:
                    self._block(v, blocked, hard=False)
            self._link([carried_in[k], body.inputs[2 + k], body.outputs[1 + k], out])

    def _loop_without_lists(self, node: ir.Node, body: ir.Graph, label: str, blabel: str) -> None:
        """No carried sequence: one pass, so nested loops stay linear."""
        for bi in body.inputs:
            self._seed_from_type(bi, blabel)
        self._graph(body, blabel)
        for out in node.outputs:
            self._seed_from_type(out, label)
        for bo in [*body.inputs[2:], *body.outputs[1:], *node.outputs]:
            if bo in self.result.info:
                self._block(bo, f"'{bo.name}' is carried by {node_label(node)} from a value seqlower cannot analyse")

    def _loop_probe(self, body: ir.Graph, blabel: str, init: list[SeqInfo | None]) -> tuple[list[bool], list[SeqInfo | None]]:
        """Whether one iteration appends exactly one element to each carried list (errors
        are not the body's fault here: the probe's lengths are hypothetical), and the
        state the fixpoint starts from."""
        appends = [False] * len(init)
        state = [None if i is None else SeqInfo.unknown(i.dtype, i.elem_shape, i.uniform) for i in init]
        if not any(i is not None and i.length is not None for i in init):
            return appends, state
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
                    # An empty initial value has no element shape to merge: what the
                    # first iteration puts in is where the widening starts
                    # (TorchScript's `xs = []` before a loop that appends).
                    state[k] = SeqInfo.unknown(o.dtype or i.dtype, o.elem_shape, o.uniform)
        finally:
            self._quiet -= 1
        return appends, state

    def _loop_fixpoint(self, node: ir.Node, body: ir.Graph, blabel: str, state: list[SeqInfo | None]) -> None:
        """Widened states (lengths unknown, shapes joined) until the body gives back
        nothing new; past _WIDEN_AFTER rounds a state widens to unknown."""
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
                return

    def _loop_result(self, body: ir.Graph, k: int, i: SeqInfo | None, st: SeqInfo, trips: int | None) -> SeqInfo:
        """What carried list ``k`` is after the Loop: the initial value when the body
        gives it back unchanged, ``initial + trips`` elements when each of a known number
        of iterations appends one, else the fixpoint's state."""
        if i is None or i.length is None:
            return st
        if body.outputs[1 + k] is body.inputs[2 + k] and body.outputs[1 + k] in self.result.info:
            return i
        if trips is None:
            return st
        length = i.length + trips
        if length == i.length:
            return i
        if length > STATIC_LENGTH_LIMIT:  # a huge trip count: known only at run time
            return SeqInfo.unknown(st.dtype, st.elem_shape, st.uniform)
        return dataclasses.replace(st, length=length, elements=Elements.repeat((st.elem_shape, None), length))

    @transfer("Scan")

    def _t_Scan(self, node: ir.Node, label: str) -> None:
        body = subgraph_of(node, "body")
        if body is not None:
            self._graph(body, f"{label} > {node_label(node)}.body")
        self._opaque(node, label, node_label(node))

    @transfer("SequenceMap")

    def _t_SequenceMap(self, node: ir.Node, label: str) -> None:
        body = subgraph_of(node, "body")
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
        # A number (or model-input dim) declared on a body input that not every element
        # has: onnx inferred the body from a false premise (it types a Loop's carried
        # list by its first value), and no dim it derived holds.
        premise = all(
            self._declared_matches(bi.shape, self.result.info.get(v), numbers_only=True)
            for v, bi in zip(node.inputs, body.inputs) if v is not None and v in self.result.info
        )
        if not premise:
            self.result.unproven_bodies.append(body)
        for out, bo in zip(node.outputs, body.outputs):
            dtype = bo.dtype
            uniform = inputs_match and bo.shape is not None and anchored_shape(bo.shape, self._anchored)
            shape = None
            if bo.shape is not None and premise:
                shape = ir.Shape([
                    d if isinstance(d, int) or (inputs_match and anchored_shape(ir.Shape([d]), self._anchored)) else None
                    for d in bo.shape.dims
                ])
            elif bo.shape is not None:
                # The body's shapes were inferred from input shapes its elements do not
                # all have (onnx types a Loop's carried list by its first value): even a
                # number there may be one of those, so only the rank holds.
                shape = ir.Shape([None] * bo.shape.rank())
            if n is None:
                self._set(out, SeqInfo.unknown(dtype, shape, uniform).with_length_sym(first.length_sym), label)
            else:
                self._set(out, SeqInfo.repeated(dtype, n, shape, uniform) if n else SeqInfo.empty(dtype), label)
        # One web (Unrolled needs every input unrolled), but each input and output keeps
        # its own Flat layout: the body may change ranks.
        self._link([*node.inputs, *node.outputs], layout=False)

    def _declared_matches(self, declared: ir.Shape | None, info: SeqInfo | None, numbers_only: bool = False) -> bool:
        """Whether a body input's declared shape holds for every element of the sequence
        bound to it: same rank, and each declared size (a number or a model-input dim;
        ``numbers_only``: a number or an anchored dim, not a body's own symbol) is the
        elements' size there. The body's inferred shapes rest on the declared ones."""
        if numbers_only and (declared is None or info is None or info.length == 0):
            return True  # nothing declared that could be false, or no element to differ
        if info is None or info.elem_shape is None or declared is None or declared.rank() != info.elem_shape.rank():
            return info is not None and info.length == 0
        for d, e in zip(declared.dims, info.elem_shape.dims):
            named = isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value is not None
                                           and (not numbers_only or d.value in self._anchored))
            if named and not (d == e and anchored_shape(ir.Shape([e]), self._anchored)):
                return False
        return True
