"""Lower Stacked webs (see ``seqlower.analysis``): every element of every sequence in
the web has one shape, made of numbers and model-input dims, so a sequence is one tensor
``data`` of shape ``[n, *elem]`` and element ``i`` is ``Gather(data, i, axis=0)``.

The fast path of the dynamic lowerings: no bounds, offsets or shape rows. SequenceAt is
one Gather, SequenceLength one Shape, an unbind a Transpose, a stack a Transpose, a
concatenation a Transpose and a Reshape. Loop-carried and If-returned sequences carry
``data``; a Loop's append-once sequence is a scan output; SequenceMap is a Loop whose
outputs are scan outputs. Empty sequences are ``[0, *elem]`` tensors (the model-input
dims of ``elem`` are read from the inputs' shapes at run time).

Webs that touch the model boundary stay Flat (the ABI), and so does everything the
analysis cannot prove uniform.
"""

from __future__ import annotations

import onnx_ir as ir

from passes._rewrite import (
    REPORT_KEY,
    Scope,
    inline_graph,
    rebuild_node,
    replace_output,
    returned_by,
    rewrite_record,
    subgraph_scopes,
    take_over,
    walk_scopes,
)
from passes._tensor_ops import INT64, MAX_INT64, Ops
from seqlower.analysis import (
    Analysis,
    analyze,
    dynamic_split_squeezes,
    is_default_domain,
    model_input_dims,
    node_label,
    unchanged_split_source,
)
from seqlower.builder import Builder, NameAuthority

__all__ = ["LowerStackedSequencesPass"]


class LowerStackedSequencesPass(ir.passes.InPlacePass):
    """Rewrite every Stacked web into ``[n, *elem]`` tensors."""

    def __init__(self, max_unroll: int = 64, keepdims_policy: str = "auto", stacked: bool = True) -> None:
        super().__init__()
        self.max_unroll = max_unroll
        self.keepdims_policy = keepdims_policy
        self.stacked = stacked

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        analysis = analyze(model, max_unroll=self.max_unroll, keepdims_policy=self.keepdims_policy, stacked=self.stacked)
        if not any(w.stacked for w in analysis.webs):
            return ir.passes.PassResult(model, False)
        lw = _Lowerer(model, analysis, self.keepdims_policy)
        for scope in walk_scopes(model):
            lw.graph(scope)
        for graph, nodes in lw.dead:
            graph.remove(nodes, safe=True)
        model.meta.setdefault(REPORT_KEY, []).extend(lw.records)
        return ir.passes.PassResult(model, lw.modified)


class _Lowerer:
    def __init__(self, model: ir.Model, analysis: Analysis, policy: str) -> None:
        self.model = model
        self.analysis = analysis
        self.policy = policy
        self.names = NameAuthority(model)
        self.input_dims = model_input_dims(model)
        self.seqs: dict[ir.Value, ir.Value] = {}
        self.records: list[dict[str, str]] = []
        self.modified = False
        self.dead: list[tuple[ir.Graph | ir.Function, list[ir.Node]]] = []

    def graph(self, scope: Scope) -> None:
        lowered: list[ir.Node] = []
        for node in list(scope.graph):
            if not is_default_domain(node) or not self._touches(node):
                for sub in subgraph_scopes(node, scope):
                    self.graph(sub)
                continue
            rule = RULES.get(node.op_type)
            assert rule is not None, f"no Stacked rule for {node_label(node)}"
            how = rule(self, node, Ops(scope.builder(node, self.names)), scope)
            self.records.append(rewrite_record(node, scope, "stacked", how))
            lowered.append(node)
            self.modified = True
        if lowered:
            self.dead.append((scope.graph, lowered))

    def _touches(self, node: ir.Node) -> bool:
        values = [*node.inputs, *node.outputs]
        if node.op_type == "Loop" and "body" in node.attributes:
            body = node.attributes["body"].as_graph()
            values += [*body.inputs, *body.outputs]
        return any(self.analysis.stacked(v) for v in values)

    def data(self, v: ir.Value | None) -> ir.Value:
        assert v is not None and v in self.seqs, f"sequence {v} was not lowered before its use"
        return self.seqs[v]

    def elem(self, v: ir.Value) -> ir.Shape:
        return self.analysis.stacked_shape[v]

    def set(self, v: ir.Value, data: ir.Value) -> None:
        if data.type is None and v.type is not None and isinstance(v.type, ir.SequenceType):
            data.type = v.type.elem_type
        data.shape = ir.Shape([None, *self.elem(v).dims])
        self.seqs[v] = data

    def elem_dims(self, v: ir.Value, o: Ops, name: str) -> ir.Value:
        """The element shape as a 1-D int64 tensor: numbers as constants, model-input
        dims read from the input's shape."""
        parts: list[ir.Value] = []
        run: list[int] = []
        for d in self.elem(v).dims:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                parts.append(o.ints(run))
                run = []
            assert isinstance(d, ir.SymbolicDim) and d.value in self.input_dims
            source, axis = self.input_dims[d.value]
            parts.append(o.slice(o.shape(source, f"{name}_src_dims"), o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_{d.value}"))
        if run or not parts:
            parts.append(o.ints(run))
        return o.concat(parts, 0, f"{name}_elem_dims")

    def count(self, data: ir.Value, o: Ops, name: str) -> ir.Value:
        return o.op("Gather", [o.shape(data, f"{name}_dims"), o.scalar(0)], f"{name}_count", dtype=INT64, shape=[])

    def normalise(self, data: ir.Value, p: ir.Value | None, o: Ops, name: str) -> ir.Value:
        """A position input as a non-negative int64 scalar (a missing one is ``n``)."""
        n = self.count(data, o, name)
        if p is None:
            return n
        if p.dtype != INT64:
            p = o.op("Cast", [p], f"{name}_i64", dtype=INT64, to=INT64)
        p = o.reshape(p, o.ints([]), f"{name}_scalar")
        neg = o.op("Less", [p, o.scalar(0)], f"{name}_neg", dtype=ir.DataType.BOOL)
        return o.op("Where", [neg, o.op("Add", [p, n], f"{name}_wrapped"), p], f"{name}_norm", dtype=INT64, shape=[])

    def exact(self, v: ir.Value, stacked: ir.Value, count1: ir.Value, o: Ops, name: str) -> ir.Value:
        """``stacked`` reshaped to ``[n, *elem]``: a Loop that runs no iteration may give
        its scan outputs a shape of another rank."""
        target = o.concat([count1, self.elem_dims(v, o, name)], 0, f"{name}_target")
        flat = o.reshape(stacked, o.ints([-1]), f"{name}_flat")
        dtype = stacked.dtype
        assert dtype is not None
        return o.reshape_exact(flat, target, len(self.elem(v).dims) + 1, name, dtype)

    def output(self, old: ir.Value, new: ir.Value, node: ir.Node, scope: Scope) -> None:
        replace_output(old, new, scope, self.names, node, owned=True)


def _perm_to_front(rank: int, axis: int) -> list[int]:
    return [axis] + [i for i in range(rank) if i != axis]


def _perm_from_front(rank: int, axis: int) -> list[int]:
    """Transpose ``[n, e0, ..]`` (``rank`` axes) so that ``n`` lands at ``axis``."""
    return list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))


def _transpose(x: ir.Value, perm: list[int], o: Ops, name: str) -> ir.Value:
    if perm == sorted(perm):
        return x
    return o.op("Transpose", [x], name, perm=perm)


def _sequence_empty(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    attr = node.attributes.get("dtype")
    dtype = ir.DataType(attr.as_int()) if attr is not None else ir.DataType.FLOAT
    name = out.name or "empty"
    target = o.concat([o.ints([0]), lw.elem_dims(out, o, name)], 0, f"{name}_shape")
    data = o.op("Expand", [o.b.zeros(dtype, (), "zero"), target], f"{name}_data", dtype=dtype)
    lw.set(out, data)
    return "empty [0, *elem]"


def _sequence_construct(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    name = out.name or "construct"
    rows = [o.unsqueeze(t, [0], f"{name}_{k}") for k, t in enumerate(node.inputs) if t is not None]
    lw.set(out, o.concat(rows, 0, f"{name}_data") if len(rows) > 1 else o.identity(rows[0], f"{name}_data"))
    return "Concat of Unsqueeze"


def _identity(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    lw.set(node.outputs[0], o.identity(lw.data(node.inputs[0]), f"{node.outputs[0].name or 'seq'}_data"))
    return "Identity"


def _sequence_insert(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    data = lw.data(node.inputs[0])
    out = node.outputs[0]
    name = out.name or "insert"
    row = o.unsqueeze(node.inputs[1], [0], f"{name}_row")
    p = node.inputs[2] if len(node.inputs) > 2 else None
    if p is None:
        lw.set(out, o.concat([data, row], 0, f"{name}_data"))
        return "Concat (append)"
    p1 = o.reshape(lw.normalise(data, p, o, name), o.ints([1]), f"{name}_pos1")
    head = o.slice(data, o.ints([0]), p1, [0], f"{name}_head")
    tail = o.slice(data, p1, o.ints([MAX_INT64]), [0], f"{name}_tail")
    lw.set(out, o.concat([head, row, tail], 0, f"{name}_data"))
    return "Slice + Concat"


def _sequence_erase(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    data = lw.data(node.inputs[0])
    out = node.outputs[0]
    name = out.name or "erase"
    p = node.inputs[1] if len(node.inputs) > 1 else None
    if p is None:
        lw.set(out, o.slice(data, o.ints([0]), o.ints([-1]), [0], f"{name}_data"))
        return "Slice (drop last)"
    p1 = o.reshape(lw.normalise(data, p, o, name), o.ints([1]), f"{name}_pos1")
    head = o.slice(data, o.ints([0]), p1, [0], f"{name}_head")
    tail = o.slice(data, o.op("Add", [p1, o.ints([1])], f"{name}_next1"), o.ints([MAX_INT64]), [0], f"{name}_tail")
    lw.set(out, o.concat([head, tail], 0, f"{name}_data"))
    return "Slice + Concat"


def _sequence_at(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    data = lw.data(node.inputs[0])
    out = node.outputs[0]
    # Gather takes negative indices itself.
    p = o.reshape(node.inputs[1], o.ints([]), f"{out.name or 'at'}_pos")
    lw.output(out, o.op("Gather", [data, p], f"{out.name or 'at'}_elem", shape=out.shape, axis=0), node, scope)
    return "Gather"


def _sequence_length(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    out = node.outputs[0]
    lw.output(out, lw.count(lw.data(node.inputs[0]), o, out.name or "len"), node, scope)
    return "Shape"


def _split_to_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    x = node.inputs[0]
    out = node.outputs[0]
    name = out.name or "split"
    assert x is not None and x.shape is not None
    rank = x.shape.rank()
    axis = node.attributes["axis"].as_int() % rank if "axis" in node.attributes else 0
    squeeze = dynamic_split_squeezes(node, lw.policy)
    assert squeeze is not None
    front = _perm_to_front(rank, axis)
    if squeeze:
        lw.set(out, _transpose(x, front, o, f"{name}_data"))
        return "Transpose (unbind)"
    chunk = lw.elem(out).dims[axis]
    assert isinstance(chunk, int)
    if chunk == 1:
        lw.set(out, o.unsqueeze(_transpose(x, front, o, f"{name}_front"), [axis + 1], f"{name}_data"))
        return "Transpose + Unsqueeze"
    # Equal chunks of c: [.., d, ..] -> [.., n, c, ..] -> n to the front.
    dims = o.shape(x, f"{name}_dims")
    length = lw.analysis.info[out].length
    if length is not None:
        n = o.ints([length])
    else:
        d = o.slice(dims, o.ints([axis]), o.ints([axis + 1]), [0], f"{name}_d")
        n = o.op("Div", [d, o.ints([chunk])], f"{name}_n")
    target = o.concat(
        [o.slice(dims, o.ints([0]), o.ints([axis]), [0], f"{name}_pre"), n, o.ints([chunk]),
         o.slice(dims, o.ints([axis + 1]), o.ints([MAX_INT64]), [0], f"{name}_post")],
        0, f"{name}_target",
    )
    assert x.dtype is not None
    grouped = o.reshape_exact(o.reshape(x, o.ints([-1]), f"{name}_flat"), target, rank + 1, f"{name}_grouped", x.dtype)
    lw.set(out, _transpose(grouped, _perm_to_front(rank + 1, axis), o, f"{name}_data"))
    return "Reshape + Transpose (equal chunks)"


def _concat_from_sequence(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    src = node.inputs[0]
    data = lw.data(src)
    out = node.outputs[0]
    name = out.name or "concat"
    r = len(lw.elem(src).dims)
    new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
    axis = node.attributes["axis"].as_int()
    source = unchanged_split_source(node, lw.policy)
    if source is not None:
        lw.output(out, source, node, scope)
        return "the split's input itself"
    if new_axis:
        axis %= r + 1
        lw.output(out, _transpose(data, _perm_from_front(r + 1, axis), o, f"{name}_stacked"), node, scope)
        return "Transpose (stack)"
    axis %= r
    t = _transpose(data, _perm_from_front(r + 1, axis), o, f"{name}_moved")
    dims = o.shape(t, f"{name}_dims")
    pair = o.slice(dims, o.ints([axis]), o.ints([axis + 2]), [0], f"{name}_pair")
    merged = o.b.reduce("ReduceProd", pair, [0], f"{name}_merged", keepdims=True)
    target = o.concat(
        [o.slice(dims, o.ints([0]), o.ints([axis]), [0], f"{name}_pre"), merged,
         o.slice(dims, o.ints([axis + 2]), o.ints([MAX_INT64]), [0], f"{name}_post")],
        0, f"{name}_target",
    )
    assert data.dtype is not None
    joined = o.reshape_exact(o.reshape(t, o.ints([-1]), f"{name}_flat"), target, r, f"{name}_joined", data.dtype, out.shape)
    lw.output(out, joined, node, scope)
    return "Transpose + Reshape"


def _if(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    branches = [node.attributes["then_branch"].as_graph(), node.attributes["else_branch"].as_graph()]
    for key, g in zip(("then_branch", "else_branch"), branches):
        lw.graph(Scope(g, f"{scope.label} > {node_label(node)}.{key}", scope.opset, False))
    protos = []
    for side, g in enumerate(branches):
        outs = [lw.data(g.outputs[k]) if lw.analysis.stacked(out) else g.outputs[k] for k, out in enumerate(node.outputs)]
        fixed = returned_by(g, outs, lw.names, scope.opset)
        g.outputs.clear()
        g.outputs.extend(fixed)
    for out in node.outputs:
        if lw.analysis.stacked(out):
            data_name = lw.names.fresh(f"{out.name or 'seq'}_data")
            elem_type = out.type.elem_type if isinstance(out.type, ir.SequenceType) else None
            protos.append((data_name, elem_type, ir.Shape([None, *lw.elem(out).dims])))
        else:
            protos.append((out.name, out.type, out.shape))
    new = rebuild_node(node, list(node.inputs), protos)
    for out, nv in zip(node.outputs, new.outputs):
        if lw.analysis.stacked(out):
            lw.set(out, nv)
        else:
            take_over(out, nv, scope.graph)
    return "If returning [n, *elem]"


def _loop(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    bscope = Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False)
    carried = list(node.inputs[2:])
    n_carried = len(carried)
    n_scans = len(body.outputs) - 1 - n_carried
    stacked_k = [lw.analysis.stacked(body.inputs[2 + k]) for k in range(n_carried)]
    # Append-once sequences leave the carried state and become scan outputs (one shape
    # every step: the web is uniform).
    appends = {k: a for k in range(n_carried) if stacked_k[k] and (a := _append_once(body, k)) is not None}
    bo_ops = Ops(Builder(body, None, scope.opset, lw.names, main_graph=False))
    keep = [k for k in range(n_carried) if k not in appends]
    new_body_inputs = list(body.inputs[:2])
    for k in keep:
        bi = body.inputs[2 + k]
        if not stacked_k[k]:
            new_body_inputs.append(bi)
            continue
        elem_type = bi.type.elem_type if isinstance(bi.type, ir.SequenceType) else None
        data_in = ir.Value(name=lw.names.fresh(f"{bi.name or 'carried'}_data"), type=elem_type)
        new_body_inputs.append(data_in)
        lw.set(bi, data_in)
    body.inputs.clear()
    body.inputs.extend(new_body_inputs)
    for k, (ins, t) in appends.items():
        body.outputs[1 + k] = bo_ops.identity(t, f"{body.outputs[1 + k].name or 'appended'}_elem")
        lw.records.append(rewrite_record(ins, bscope, "stacked", "append as a Loop scan output"))
        body.remove(ins, safe=False)
    lw.graph(bscope)
    new_outputs = [body.outputs[0]]
    for k in keep:
        bo = body.outputs[1 + k]
        new_outputs.append(lw.data(bo) if stacked_k[k] else bo)
    new_outputs += list(body.outputs[1 + n_carried :])
    new_outputs += [body.outputs[1 + k] for k in appends]
    fixed = returned_by(body, new_outputs, lw.names, scope.opset)
    body.outputs.clear()
    body.outputs.extend(fixed)
    inputs: list[ir.Value | None] = list(node.inputs[:2])
    protos = []
    for k in keep:
        out = node.outputs[k] if k < len(node.outputs) else None
        if stacked_k[k]:
            inputs.append(lw.data(carried[k]))
            elem_type = carried[k].type.elem_type if isinstance(carried[k].type, ir.SequenceType) else None
            protos.append((lw.names.fresh(f"{(out.name if out is not None else None) or 'carried'}_data"), elem_type,
                           ir.Shape([None, *lw.elem(carried[k]).dims])))
        else:
            inputs.append(carried[k])
            protos.append((out.name, out.type, out.shape) if out is not None else (lw.names.fresh("unused"), None, None))
    for out in node.outputs[n_carried : n_carried + n_scans]:
        protos.append((out.name, out.type, out.shape))
    for k in appends:
        out = node.outputs[k] if k < len(node.outputs) else None
        elem_type = carried[k].type.elem_type if isinstance(carried[k].type, ir.SequenceType) else None
        protos.append((lw.names.fresh(f"{(out.name if out is not None else None) or 'appended'}_scan"), elem_type, None))
    new = rebuild_node(node, inputs, protos)
    for i, k in enumerate(keep):
        out = node.outputs[k] if k < len(node.outputs) else None
        if out is None:
            continue
        if stacked_k[k]:
            lw.set(out, new.outputs[i])
        else:
            take_over(out, new.outputs[i], scope.graph)
    for j, out in enumerate(node.outputs[n_carried : n_carried + n_scans]):
        take_over(out, new.outputs[len(keep) + j], scope.graph)
    after = Ops(Builder(scope.graph, node, scope.opset, lw.names, main_graph=scope.main))
    for i, k in enumerate(appends):
        out = node.outputs[k] if k < len(node.outputs) else None
        if out is None:
            continue
        scan = new.outputs[len(keep) + n_scans + i]
        name = out.name or "appended"
        trips = after.slice(after.shape(scan, f"{name}_scan_dims"), after.ints([0]), after.ints([1]), [0], f"{name}_trips")
        lw.set(out, after.concat([lw.data(carried[k]), lw.exact(out, scan, trips, after, f"{name}_scan")], 0, f"{name}_data"))
    if appends:
        return "Loop carrying [n, *elem]; appends as scan outputs" if keep else "Loop: appends as scan outputs"
    return "Loop carrying [n, *elem]"


def _append_once(body: ir.Graph, k: int) -> tuple[ir.Node, ir.Value] | None:
    """The SequenceInsert and tensor when carried sequence ``k`` is only appended to, once
    per step, and the result only returned (TorchScript's ``xs.append(t)``)."""
    bi, bo = body.inputs[2 + k], body.outputs[1 + k]
    ins = bo.producer()
    if ins is None or ins.graph is not body or ins.op_type != "SequenceInsert" or not is_default_domain(ins):
        return None
    if ins.inputs[0] is not bi or (len(ins.inputs) > 2 and ins.inputs[2] is not None):
        return None
    if len(bi.uses()) != 1 or bi in body.outputs or bo.uses() or list(body.outputs).count(bo) != 1:
        return None
    t = ins.inputs[1]
    return None if t is None else (ins, t)


def _sequence_map(lw: _Lowerer, node: ir.Node, o: Ops, scope: Scope) -> str:
    body = node.attributes["body"].as_graph()
    lw.graph(Scope(body, f"{scope.label} > {node_label(node)}.body", scope.opset, False))
    base = node.outputs[0].name or "map"
    names = lw.names
    loop_body = ir.Graph([], [], nodes=[], name=names.fresh(f"{base}_loop_body"), opset_imports={"": scope.opset})
    it = ir.Value(name=names.fresh(f"{base}_i"), type=ir.TensorType(INT64), shape=ir.Shape([]))
    cond = ir.Value(name=names.fresh(f"{base}_cond"), type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    loop_body.inputs.extend([it, cond])
    bo_ops = Ops(Builder(loop_body, None, scope.opset, names, main_graph=False))
    value_map: dict[ir.Value, ir.Value | None] = {}
    for inp, bi in zip(node.inputs, body.inputs):
        if inp is not None and inp in lw.seqs:
            value_map[bi] = bo_ops.op("Gather", [lw.data(inp), it], f"{bi.name or 'x'}_elem", axis=0)
        else:
            value_map[bi] = inp
    for init in body.initializers.values():
        assert init.const_value is not None
        value_map[init] = bo_ops.b.constant(init.const_value.numpy(), f"{init.name}")
    mapped = inline_graph(body, value_map, bo_ops.b, names, "map")
    cond_out = bo_ops.identity(cond, f"{base}_cond_out")
    loop_body.outputs.extend(returned_by(loop_body, [cond_out, *[mapped[bo] for bo in body.outputs]], names, scope.opset))
    count = lw.count(lw.data(node.inputs[0]), o, base)
    loop = ir.Node("", "Loop", [count, None], [ir.AttrGraph("body", loop_body)], num_outputs=len(body.outputs), name=names.fresh(f"{base}_loop"))
    o.b.graph.insert_before(node, loop)
    count1 = o.reshape(count, o.ints([1]), f"{base}_count1")
    for k, (out, scan) in enumerate(zip(node.outputs, loop.outputs)):
        scan.name = names.fresh(f"{out.name or base}_scan")
        scan.type = ir.TensorType(body.outputs[k].dtype) if body.outputs[k].dtype is not None else None
        lw.set(out, lw.exact(out, scan, count1, o, f"{out.name or base}_{k}"))
    node.attributes.pop("body")
    return "Loop with scan outputs"


RULES = {
    "SplitToSequence": _split_to_sequence,
    "SequenceEmpty": _sequence_empty,
    "SequenceConstruct": _sequence_construct,
    "SequenceInsert": _sequence_insert,
    "SequenceErase": _sequence_erase,
    "SequenceAt": _sequence_at,
    "SequenceLength": _sequence_length,
    "ConcatFromSequence": _concat_from_sequence,
    "SequenceMap": _sequence_map,
    "Identity": _identity,
    "If": _if,
    "Loop": _loop,
}
