"""Plumbing shared by the passes: walking graphs with their opset, replacing a node's
tensor output while keeping graph-output names, rebuilding an If/Loop whose signature
changes, writing the ABI mapping, and recording rewrites."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from seqlower.analysis.analyzer import graph_label, node_label, shape_json
from seqlower.passes.keys import ABI_KEY, LEGALIZE_KEY, NOTES_KEY, OPTIONAL_SEQUENCES_KEY, REPORT_KEY
from seqlower.ir.builder import Builder, Legalize, NameAuthority, ai_onnx_opset
from seqlower.io.protos import GENERATED_DIM
from seqlower.ir.helpers import subgraphs

__all__ = [
    "Scope", "walk_scopes", "replace_output", "rewrite_record", "inline_graph", "returned_by", "rebuild_node",
    "named_copy", "take_over", "take_places", "hand_over", "discard_subgraphs", "note_max_unroll", "write_abi", "read_abi_doc", "write_abi_doc", "sequence_abi_entry", "append_once", "map_loop_body", "inline_map_body", "rewrite_each_node", "visit_each_node", "REPORT_KEY", "NOTES_KEY", "ABI_KEY", "OPTIONAL_SEQUENCES_KEY",
]



@dataclass
class Scope:
    graph: ir.Graph | ir.Function
    label: str
    opset: int
    main: bool
    # What writes another form of an op the target refuses (passes/legalize.py), for every
    # builder of this scope and the scopes inside it; None: anything may be written.
    legalize: Legalize | None = None

    def builder(self, anchor: ir.Node | None, names: NameAuthority, after: ir.Node | None = None) -> Builder:
        return Builder(self.graph, anchor, self.opset, names, main_graph=self.main, after=after, legalize=self.legalize)


def subgraph_scopes(node: ir.Node, scope: Scope) -> Iterator[Scope]:
    for attr in node.attributes.values():
        graphs = (
            [attr.as_graph()]
            if attr.type == ir.AttributeType.GRAPH
            else list(attr.as_graphs())
            if attr.type == ir.AttributeType.GRAPHS
            else []
        )
        for g in graphs:
            yield Scope(g, f"{scope.label} > {node_label(node)}.{attr.name}", scope.opset, False, scope.legalize)


def walk_scopes(model: ir.Model) -> Iterator[Scope]:
    """The main graph and every model-local function, with their ai.onnx opset (bodies
    are reached by the passes themselves, in node order)."""
    # A graph importing no ai.onnx opset holds no sequence op, and nothing may be emitted.
    legalize = model.meta.get(LEGALIZE_KEY)
    if (opset := ai_onnx_opset(model)) is not None:
        yield Scope(model.graph, "main", opset, True, legalize)
    for f in model.functions.values():
        if (opset := ai_onnx_opset(model, f)) is not None:
            yield Scope(f, graph_label(f), opset, False, legalize)


def replace_output(old: ir.Value, new: ir.Value, scope: Scope, names: NameAuthority, anchor: ir.Node, owned: bool) -> None:
    """Make every use of ``old`` (a tensor output of a node being lowered) use ``new``.

    A graph output keeps its name: ``new`` takes it when this rewrite made ``new`` and
    nothing else uses it; otherwise an Identity named like ``old`` is emitted, since
    ``new`` may be an initializer, an outer-scope value or another output.
    """
    if new.shape is None and old.shape is not None:
        new.shape = _unclaimed(old.shape) if anchor.op_type == "SequenceAt" else old.shape
    if old.is_graph_output():
        outputs = scope.graph.outputs
        if owned and not new.uses() and not new.is_graph_output() and new.producer() is not None:
            name = old.name
            old.name = None
            new.name = name
            target = new
        else:
            b = scope.builder(anchor, names)
            name = old.name
            old.name = None
            target = b.identity(new, name or "out")
            if target.type is None:
                # (the graph output keeps its declared type: an untyped output fails the checker)
                target.type, target.shape = old.type, target.shape or old.shape
            if name:
                # fresh() handed out a suffixed name because `name` was still taken by `old`.
                target.name = name
        for i in graph_output_positions(outputs, old):
            outputs[i] = target
        ir.convenience.replace_all_uses_with(old, target)
        return
    ir.convenience.replace_all_uses_with(old, new)


def _unclaimed(shape: ir.Shape) -> ir.Shape:
    """``shape`` without the dims onnx's inference made up (``unk__k``): a list's element
    type names one such dim for every element, and two elements read out of it then claim
    one size they do not share (the halves of an odd split: onnxruntime's planner reused
    one's buffer for the other, "Shape mismatch attempting to re-use buffer")."""
    return ir.Shape([ir.SymbolicDim(None) if isinstance(d, ir.SymbolicDim) and d.value is not None
                     and GENERATED_DIM.fullmatch(d.value) else d for d in shape.dims])


def rewrite_record(node: ir.Node, scope: Scope, into: str, how: str, label: str | None = None) -> dict[str, str]:
    """``label``: the node's label taken before a rule renamed its outputs, so the report
    names the node as ``inspect`` and ``check`` do on the input model."""
    return {"op": node.op_type, "node": label or node_label(node), "graph": scope.label, "into": into, "how": how}


def inline_graph(body: ir.Graph, value_map: dict[ir.Value, ir.Value | None], b: Builder, names: NameAuthority, i: int | str) -> dict[ir.Value, ir.Value]:
    """Clone ``body``'s nodes before the anchor with fresh names, its inputs and
    initializers bound by ``value_map`` (None: an omitted input); return the map from
    every body value (inputs, initializers, node outputs) to its clone or binding.

    Built on the public ``Graph.clone``, which also remaps what nested subgraphs read
    of the body; outer-scope values stay themselves."""
    clone = body.clone(allow_outer_scope_values=True)
    mapping: dict[ir.Value, ir.Value | None] = {}
    pairs = [*zip(body.inputs, clone.inputs), *zip(body.initializers.values(), clone.initializers.values())]
    for original, copy in pairs:
        bound = value_map.get(original, original)
        mapping[original] = bound
        for use in list(copy.uses()):
            use.node.replace_input_with(use.idx, bound)
    # The clone is a scaffold: its values must not stay its inputs and outputs (a
    # graph output gets no value_info when written).
    clone.initializers.clear()
    clone.outputs.clear()
    clone.inputs.clear()
    for original_node, node in zip(body, list(clone)):
        mapping.update(zip(original_node.outputs, node.outputs))
        clone.remove(node)
        _rename(node, names, i)
        if b.anchor is None:
            b.graph.append(node)
        else:
            b.graph.insert_before(b.anchor, node)
        b.nodes.append(node)
    for bo in body.outputs:  # a body output may be an outer value itself
        mapping.setdefault(bo, bo)
    return {k: v for k, v in mapping.items() if v is not None}


def _rename(node: ir.Node, names: NameAuthority, i: int | str) -> None:
    """Fresh names for a cloned node, its outputs and everything in its subgraphs."""
    stack = [node]
    while stack:
        n = stack.pop()
        n.name = names.fresh(f"{n.name or n.op_type}_{i}")
        for v in n.outputs:
            if v.name:
                v.name = names.fresh(f"{v.name}_{i}")
        value = n.attributes.get("value") if n.op_type == "Constant" else None
        if value is not None and value.type == ir.AttributeType.TENSOR and n.outputs[0].name:
            # Graph.clone shares the tensor among the copies: each gets its own, named
            # like its output (else the last copy's name is every copy's).
            n.attributes["value"] = ir.AttrTensor("value", named_copy(value.value, n.outputs[0].name))
        for attr in n.attributes.values():
            graphs = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else list(attr.as_graphs()) if attr.type == ir.AttributeType.GRAPHS else []
            for g in graphs:
                for v in g.inputs:
                    if v.name:
                        v.name = names.fresh(f"{v.name}_{i}")
                for name in list(g.initializers):
                    v = g.initializers.pop(name)
                    v.name = names.fresh(f"{name}_{i}")
                    g.register_initializer(v)
                stack.extend(g)


def named_copy(t: ir.TensorProtocol, name: str) -> ir.TensorProtocol:
    """A tensor of ``t``'s values of its own, named ``name`` (strings included)."""
    if t.dtype == ir.DataType.STRING:
        return ir.StringTensor(t.numpy(), shape=t.shape, name=name)
    return ir.tensor(t.numpy(), dtype=t.dtype, name=name)


def returned_by(graph: ir.Graph, values: Sequence[ir.Value], names: NameAuthority, opset: int) -> list[ir.Value]:
    """``values`` as outputs ``graph`` itself produces, each once: an outer value, an
    input or a repeat goes through an Identity."""
    b = Builder(graph, None, opset, names, main_graph=False)
    seen: set[ir.Value] = set()
    out = []
    for v in values:
        p = v.producer()
        if v in seen or p is None or p.graph is not graph:
            v = b.identity(v, f"{v.name or 'out'}_ret")
        seen.add(v)
        out.append(v)
    return out


def rebuild_node(
    node: ir.Node, inputs: Sequence[ir.Value | None], protos: Sequence[tuple[str | None, ir.TypeProtocol | None, ir.Shape | None]]
) -> ir.Node:
    """A copy of ``node`` (an If or Loop whose signature a lowering changes) before it,
    with new inputs and outputs named and typed by ``protos``; old outputs whose names
    the new ones take give them up, and the subgraphs move to the copy."""
    taken = {name for name, _, _ in protos}
    for out in node.outputs:
        if out.name in taken:
            out.name = None
    new = ir.Node(node.domain, node.op_type, list(inputs), list(node.attributes.values()), num_outputs=len(protos), name=node.name)
    node.name = None
    assert node.graph is not None
    node.graph.insert_before(node, new)
    for nv, (name, t, shape) in zip(new.outputs, protos):
        nv.name, nv.type, nv.shape = name, t, shape
    for key in [k for k, a in node.attributes.items() if a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)]:
        node.attributes.pop(key)
    return new


def graph_output_positions(outputs: Sequence[ir.Value], v: ir.Value) -> list[int]:
    """Where ``v`` is among a graph's outputs. By ``list.index`` on the list under
    onnx_ir's container (C speed, Value compares by identity): a region of 2,500 blocks
    has 2,500 outputs, and a Python loop over them for each block was quadratic (5.4 s
    of a 10,000-node chain's lowering)."""
    data = getattr(outputs, "data", outputs)
    found: list[int] = []
    i = -1
    while True:
        try:
            i = data.index(v, i + 1)
        except ValueError:
            return found
        found.append(i)


def take_over(old: ir.Value, new: ir.Value, graph: ir.Graph | ir.Function) -> None:
    """``new`` (which already has ``old``'s name) replaces ``old`` everywhere, as a
    graph output too."""
    outputs = graph.outputs
    for i in graph_output_positions(outputs, old):
        outputs[i] = new
    ir.convenience.replace_all_uses_with(old, new)


def take_places(olds: Sequence[ir.Value], news: Sequence[ir.Value], graph: ir.Graph | ir.Function) -> None:
    """Each new value takes its old one's name, type and shape, and its place everywhere
    (as a graph output too): the outputs of a node that replaces another."""
    for old, new in zip(olds, news):
        new.name, new.type, new.shape = old.name, old.type, old.shape
        old.name = None
        take_over(old, new, graph)


def hand_over(olds: Sequence[ir.Value], news: Sequence[ir.Value], b: Builder, graph: ir.Graph | ir.Function,
              suffix: str) -> None:
    """Each old value's readers read its new value instead; a graph output keeps its name
    through an Identity named ``<old>_<suffix>`` (a node that goes hands over its results)."""
    kept_olds, results = [], []
    for old, new in zip(olds, news):
        if old.is_graph_output():
            kept_olds.append(old)
            results.append(b.identity(new, f"{old.name or 'out'}_{suffix}"))
        else:
            old.replace_all_uses_with(new)
    take_places(kept_olds, results, graph)


def discard_subgraphs(node: ir.Node) -> None:
    """Let a removed node's subgraphs drop what they read, so that an outer value read
    only there is dead (and the clean-up takes it). Nesting is bounded by the pipeline's
    check, so the recursive walk is safe."""
    for sub in subgraphs(node):
        for n in ir.traversal.RecursiveGraphIterator(sub):
            for k in range(len(n.inputs)):
                n.replace_input_with(k, None)


def note_max_unroll(model: ir.Model, webs: Sequence[object], into: str) -> None:
    """Say in the report where --max-unroll stopped a one-value-per-element lowering."""
    notes = model.meta.setdefault(NOTES_KEY, [])
    for web in webs:
        reason = getattr(web, "reason", None) or ""
        if "--max-unroll" in reason:
            notes.append(f"--max-unroll stopped unrolling: {reason}; lowered as {into} tensors instead")


def read_abi_doc(model: ir.Model) -> dict:
    """The model's ABI mapping (``seqlower.abi``), a new empty one when it has none."""
    props = model.metadata_props
    return json.loads(props[ABI_KEY]) if ABI_KEY in props else {"version": 1, "inputs": [], "outputs": []}


def write_abi_doc(model: ir.Model, doc: dict) -> None:
    model.metadata_props[ABI_KEY] = json.dumps(doc, sort_keys=True)


def write_abi(model: ir.Model, key: str, entries: list[dict]) -> None:
    """Append ABI entries (``key``: inputs or outputs) to the model's mapping."""
    doc = read_abi_doc(model)
    doc.setdefault(key, []).extend(entries)
    write_abi_doc(model, doc)


def sequence_abi_entry(
    model: ir.Model, v: ir.Value, dtype: ir.DataType, width: int, ranked: bool, tensors: dict[str, str], name: str
) -> dict:
    """The ABI entry of sequence ``v`` carried by ``tensors`` (an optional sequence's
    payload joins its present flag)."""
    shape = v.shape  # onnx_ir keeps a sequence's element shape on the value
    if ranked:
        dims = None
    elif shape is not None and shape.rank() == width:
        dims = shape_json(shape)
    else:
        dims = [None] * width
    entry = {"name": name, "kind": "sequence", "elem_type": dtype.name, "elem_shape": dims, "width": width, "tensors": tensors}
    present = model.meta.get(OPTIONAL_SEQUENCES_KEY, {}).get(name)
    if present is not None:
        entry["kind"] = "optional_sequence"
        entry["tensors"]["present"] = present
    return entry


def append_once(body: ir.Graph, k: int) -> tuple[ir.Node, ir.Value] | None:
    """The SequenceInsert and the tensor when Loop-carried sequence ``k`` is TorchScript's
    ``xs.append(t)`` once per iteration: the body's only use of the sequence appends ``t``
    at the end, and the result is only returned."""
    bi, bo = body.inputs[2 + k], body.outputs[1 + k]
    ins = bo.producer()
    if ins is None or ins.graph is not body or ins.op_type != "SequenceInsert" or ins.domain not in ("", "ai.onnx"):
        return None
    if ins.inputs[0] is not bi or (len(ins.inputs) > 2 and ins.inputs[2] is not None):
        return None
    if len(bi.uses()) != 1 or bi in body.outputs or bo.uses() or list(body.outputs).count(bo) != 1:
        return None
    t = ins.inputs[1]
    return None if t is None else (ins, t)


def map_loop_body(names: NameAuthority, base: str, opset: int) -> tuple[ir.Graph, ir.Value, ir.Value, Builder]:
    """An empty Loop body for a lowered SequenceMap: the graph, its iteration and
    condition inputs, and a builder that appends to it."""
    graph = ir.Graph([], [], nodes=[], name=names.fresh(f"{base}_loop_body"), opset_imports={"": opset})
    it = ir.Value(name=names.fresh(f"{base}_i"), type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    cond = ir.Value(name=names.fresh(f"{base}_cond"), type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    graph.inputs.extend([it, cond])
    return graph, it, cond, Builder(graph, None, opset, names, main_graph=False)


def inline_map_body(body: ir.Graph, value_map: dict[ir.Value, ir.Value | None], b: Builder, names: NameAuthority) -> dict[ir.Value, ir.Value]:
    """A SequenceMap body cloned into a Loop body (its initializers as constants there),
    with its inputs bound by ``value_map``."""
    for init in body.initializers.values():
        assert init.const_value is not None
        value_map[init] = b.constant(init.const_value.numpy(), f"{init.name}")
    return inline_graph(body, value_map, b, names, "map")


def visit_each_node(model: ir.Model, visit: Callable[[ir.Node, Scope, NameAuthority], bool]) -> bool:
    """Call ``visit(node, scope, names)`` on every node still in its graph, a node's
    subgraphs before the node; whether any call changed the model (a clean-up's walk:
    nothing goes into the report)."""
    names = NameAuthority(model)
    modified = False

    def walk(scope: Scope) -> None:
        nonlocal modified
        for node in list(scope.graph):
            for sub in subgraph_scopes(node, scope):
                walk(sub)
            if node.graph is scope.graph:  # (an earlier visit may have removed it)
                modified |= visit(node, scope, names)

    for scope in walk_scopes(model):
        walk(scope)
    return modified


def rewrite_each_node(
    model: ir.Model, rewrite: Callable[[ir.Node, Scope, NameAuthority], tuple[str, str] | None]
) -> ir.passes.PassResult:
    """Call ``rewrite(node, scope, names)`` on every node of every graph, a node's
    subgraphs before the node; each call that returns ``(into, how)`` rewrote the node
    and is recorded for the report."""
    names = NameAuthority(model)
    records: list[dict[str, str]] = []

    def walk(scope: Scope) -> None:
        for node in list(scope.graph):
            for sub in subgraph_scopes(node, scope):
                walk(sub)
            label = node_label(node)
            done = rewrite(node, scope, names)
            if done is not None:
                records.append(rewrite_record(node, scope, *done, label))

    for scope in walk_scopes(model):
        walk(scope)
    model.meta.setdefault(REPORT_KEY, []).extend(records)
    return ir.passes.PassResult(model, bool(records))
