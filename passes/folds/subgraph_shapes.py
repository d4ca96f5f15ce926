"""Shapes across subgraphs and functions, for ``InferSequenceShapesPass``: what onnx's
inference may take as declared, Loop-carried lists forgotten so the Loop's fixpoint proves
them again, the dims a keepdims policy squeezed reset, the shapes of If, Loop and Scan
outputs joined back, and model-local functions inferred per call site."""

from __future__ import annotations

import logging

from collections.abc import Callable

import onnx
import onnx_ir as ir

from seqlower.passes._rewrite import NOTES_KEY
from seqlower.analysis.analyzer import Analysis, SeqInfo, analyze, const_array, dynamic_split_squeezes, is_default_domain, model_input_dims
from seqlower.ir.helpers import anchored_shape
from seqlower.ir.helpers import concat_shape, merge_shapes
from seqlower.ir.helpers import graphs_of, subgraphs
from seqlower.io.protos import GENERATED_DIM, innermost_type

__all__ = ["concat_dims", "control_flow_shapes", "declarable", "forget_body_output_names", "forget_carried_list_shapes",
           "infer_function", "input_dim_names", "join_back", "refine_shape", "reset_after_policy_squeezes", "sanitize",
           "take_type"]

logger = logging.getLogger(__name__)


def sanitize(shape: ir.Shape | None) -> ir.Shape | None:
    """onnx names the dims it cannot infer ``unk__N``; they promise nothing (two such
    dims with one name need not be equal), so they become unknown."""
    if shape is None:
        return None
    return ir.Shape(
        [None if isinstance(d, ir.SymbolicDim) and d.value and GENERATED_DIM.fullmatch(d.value) else d for d in shape.dims]
    )


def refine_shape(old: ir.Shape | None, new: ir.Shape | None, anchored: frozenset[str] = frozenset()) -> ir.Shape | None:
    """``new`` where it knows more, ``old`` where it knows more; None if they disagree on rank.

    A dim named after a model input's dim (``anchored``) knows more than another name:
    it is one value for the whole run, where an exporter's name for a Loop body's output
    dim promises nothing across iterations (what append-once loops need to know).
    """
    if new is None:
        return old
    if old is None:
        return new
    if old.rank() != new.rank():
        return old
    dims = []
    for a, b in zip(old.dims, new.dims):
        if isinstance(a, int):
            dims.append(a)
        elif isinstance(b, int):
            dims.append(b)
        elif isinstance(b, ir.SymbolicDim) and b.value in anchored and not (isinstance(a, ir.SymbolicDim) and a.value in anchored):
            dims.append(b)
        elif isinstance(a, ir.SymbolicDim) and a.value is not None:
            dims.append(a)
        else:
            dims.append(b)
    return ir.Shape(dims)


def declarable(shape: ir.Shape, anchored: frozenset[str]) -> ir.Shape:
    """A shape a body input can declare for every iteration: numbers and model-input
    dims stay; a symbolic dim of the body's own (one size per iteration) is unknown."""
    return ir.Shape([d if isinstance(d, int) or (d is not None and anchored_shape(ir.Shape([d]), anchored)) else None
                     for d in shape.dims])


def forget_body_output_names(model: ir.Model) -> bool:
    """Exporters name each dim of a subgraph output (TorchScript: ``Tanhh.3_dim_0``), and
    a declared graph output keeps its name through onnx's inference. Such a name promises
    nothing (not even one value across iterations), and it hides what inference knows
    (that the dim is the model input's ``w``), so it is forgotten; dims named after a
    model input's dims are kept."""
    anchored = input_dim_names(model)
    modified = False
    for graph in graphs_of(model):
        if graph is model.graph:
            continue
        for v in graph.outputs:
            if v.shape is None or isinstance(v.type, ir.SequenceType):
                continue
            dims = [None if isinstance(d, ir.SymbolicDim) and d.value not in anchored else d for d in v.shape.dims]
            if dims != list(v.shape.dims):
                v.shape = ir.Shape(dims)
                modified = True
    return modified


def forget_carried_list_shapes(model: ir.Model) -> bool:
    """A subgraph's declared element shape of a list it carries in or out promises
    nothing: TorchScript declares the shape of the element its trace inserted last
    (a Loop body's ``seq(float[0, 3])`` for a list of ``[0, 1]`` columns and one
    ``[0, 3]``, fuzz seed 4845; If branches' ``seq(float[1, 2])`` for a list of
    ``[6, 2]``, ``[3, 2]`` and ``[1, 2]`` rows, seed 4773), and onnx's inference keeps a
    declared dim against an unknown one. The element shapes are proven instead: the
    analysis follows the branches, and the Loop fixpoint (``_loop_invariant_elements``)
    starts from the initial list and joins what the body inserts."""
    modified = False
    for graph in graphs_of(model):
        for node in graph:
            if node.op_type not in ("Loop", "If") or not is_default_domain(node):
                continue
            for attr in node.attributes.values():
                if attr.type != ir.AttributeType.GRAPH:
                    continue
                sub = attr.as_graph()
                for v in (*sub.inputs, *sub.outputs):
                    if isinstance(v.type, ir.SequenceType) and v.shape is not None:
                        v.shape = None
                        modified = True
    return modified


def input_dim_names(model: ir.Model) -> frozenset[str]:
    """The symbolic dims of the model's tensor inputs: each is one size for the whole run."""
    return frozenset(model_input_dims(model))


def control_flow_shapes(node: ir.Node) -> bool:
    """Tensor outputs of Loop and If that onnx leaves without a shape get the merge of
    what flows into them. onnx drops the whole shape of a carried value whose body output
    shape differs in a dim (TorchScript's recurrent state), which loses the rank an
    element inserted into a sequence needs."""
    if node.op_type == "If":
        branches = [node.attributes[b].as_graph() for b in ("then_branch", "else_branch") if b in node.attributes]
        if len(branches) != 2:
            return False
        sources = [[g.outputs[i] for g in branches] for i in range(len(node.outputs))]
        scan = [False] * len(node.outputs)
    else:
        body = node.attributes["body"].as_graph() if "body" in node.attributes else None
        if body is None:
            return False
        carried = len(node.inputs) - 2
        sources = [[node.inputs[2 + i], body.outputs[1 + i]] for i in range(carried)]
        sources += [[body.outputs[1 + i]] for i in range(carried, len(body.outputs) - 1)]
        scan = [False] * carried + [True] * (len(body.outputs) - 1 - carried)
    modified = False
    for out, srcs, is_scan in zip(node.outputs, sources, scan):
        if out.shape is not None or isinstance(out.type, ir.SequenceType):
            continue
        if any(v is None or v.shape is None or isinstance(v.type, ir.SequenceType) for v in srcs):
            continue
        shape = merge_shapes([sanitize(v.shape) for v in srcs])
        if shape is None:
            continue
        if is_scan:
            shape = ir.Shape([None, *shape.dims])
        if out.type is None and srcs[0].type is not None:
            out.type = srcs[0].type
        out.shape = shape
        modified = True
    return modified


def reset_after_policy_squeezes(model: ir.Model, policy: str) -> bool:
    """Where the keepdims policy squeezes a SplitToSequence that onnx's inference (which
    follows the spec) does not, give the sequence its squeezed element shape and forget
    the shapes onnx derived from the unsqueezed one downstream, so they are re-inferred.
    A model output's declared shape derived that way (exporters copy onnx's inference)
    is wrong under the policy too: it is re-inferred, and the report says so.
    """
    if not any(n.op_type == "SplitToSequence" and len(n.inputs) > 1 and n.inputs[1] is not None
               and "keepdims" in n.attributes and not n.attributes["keepdims"].as_int()
               for g in (*graphs_of(model), *model.functions.values()) for n in g):
        return False  # no split the policy could squeeze: nothing to analyse
    analysis = analyze(model, max_unroll=0, keepdims_policy=policy)
    seeds = [value for value, info in analysis.info.items() if _squeezed_by_policy(value, info, policy)]
    if not seeds:
        return False
    _forget_downstream(model, seeds, policy)
    return True


def _squeezed_by_policy(value: ir.Value, info: SeqInfo, policy: str) -> bool:
    """Whether ``value`` is a SplitToSequence's list the policy squeezes where onnx does
    not; if so, it is given the policy's element shape (or written in the spec's form
    that onnx infers as the policy does)."""
    node = value.producer()
    if node is None or node.op_type != "SplitToSequence" or not is_default_domain(node):
        return False
    has_split = len(node.inputs) > 1 and node.inputs[1] is not None
    keepdims = node.attributes["keepdims"].as_int() if "keepdims" in node.attributes else 1
    if not has_split or keepdims:
        return False
    split = const_array(node.inputs[1])
    # Chunks of one, squeezed: what the spec's form without a split means, so that onnx's
    # own inference (run again) agrees with the policy.
    ones = policy != "spec" and split is not None and split.ndim == 0 and int(split) == 1
    if info.elem_shape is None:
        # The input's shape not known yet (no value info: onnx infers it next), but the
        # squeeze is: written in the spec's form, onnx infers the policy's rank.
        if ones and dynamic_split_squeezes(node, policy):
            node.resize_inputs(1)
            value.shape = None
            return True
        return False
    if value.shape == info.elem_shape:
        return False
    if value.shape is not None and value.shape.rank() == info.elem_shape.rank():
        return False
    if value.type is None and info.dtype is not None:
        value.type = ir.SequenceType(ir.TensorType(info.dtype))
    if value.type is not None:
        value.shape = info.elem_shape
    if ones:
        node.resize_inputs(1)
    return True


def _forget_downstream(model: ir.Model, seeds: list[ir.Value], policy: str) -> None:
    """Forget the shapes of everything computed from ``seeds``, through subgraphs both
    ways (a body's inputs, the owner nodes' outputs)."""
    owners = _subgraph_owners(model)
    seen: set[ir.Value] = set(seeds)
    stack = list(seeds)

    def forget(out: ir.Value) -> None:
        if out not in seen:
            seen.add(out)
            _forget_shape(model, out, policy)
            stack.append(out)

    def forget_owners(graph: ir.Graph | ir.Function | None) -> None:
        """What the nodes owning ``graph`` (and theirs, outwards) return."""
        owner = owners.get(id(graph))
        while owner is not None:
            for out in owner.outputs:
                forget(out)
            owner = owners.get(id(owner.graph))

    while stack:
        v = stack.pop()
        # A subgraph's output (an If branch's list) is what its owner node returns.
        p = v.producer()
        if v.is_graph_output() and p is not None:
            forget_owners(p.graph)
        for use in v.uses():
            # A value a Loop carries or a map takes is its body's input there too.
            for inner in _body_inputs_of(use.node, use.idx):
                if inner not in seen:
                    seen.add(inner)
                    inner.shape = None
                    stack.append(inner)
            for out in use.node.outputs:
                forget(out)
            # A read inside a subgraph changes what its owner node computes.
            forget_owners(use.node.graph)


def _body_inputs_of(node: ir.Node, index: int) -> list[ir.Value]:
    """The body inputs that take ``node``'s input ``index`` (Loop's carried values, Scan's
    states and scanned inputs, SequenceMap's inputs)."""
    body = node.attributes.get("body")
    if body is None or body.type != ir.AttributeType.GRAPH or not is_default_domain(node):
        return []
    inputs = body.as_graph().inputs
    if node.op_type == "Loop":
        return [inputs[index]] if index >= 2 and index < len(inputs) else []
    if node.op_type in ("Scan", "SequenceMap"):
        return [inputs[index]] if index < len(inputs) else []
    return []


def _forget_shape(model: ir.Model, v: ir.Value, policy: str) -> None:
    if v.shape is None:
        return
    if v.is_graph_output() and v in model.graph.outputs:
        model.meta.setdefault(NOTES_KEY, []).append(
            f"output '{v.name}': the declared shape {v.shape} follows the spec's keepdims rule; "
            f"under the keepdims policy '{policy}' it was re-inferred"
        )
    v.shape = None


def _subgraph_owners(model: ir.Model) -> dict[int, ir.Node]:
    owners: dict[int, ir.Node] = {}
    for g in (model.graph, *model.functions.values()):
        for node in ir.traversal.RecursiveGraphIterator(g):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    owners[id(attr.as_graph())] = node
                elif attr.type == ir.AttributeType.GRAPHS:
                    for sub in attr.as_graphs():
                        owners[id(sub)] = node
    return owners



def join_back(candidates: list[list], after: Analysis, anchored: frozenset[str]) -> bool | None:
    """Join what each body gives back into its declared shape; whether one widened, or
    None when a body changes the rank or gives back elements of unknown rank."""
    widened = False
    for cand in candidates:
        out = after.info.get(cand[1])
        if out is not None and out.length == 0:
            continue
        back = None if out is None or out.elem_shape is None else declarable(out.elem_shape, anchored)
        joined = merge_shapes([cand[2], back])
        if joined is None:
            return None
        if joined != cand[2]:
            cand[2], widened = joined, True
    return widened


def infer_function(model: ir.Model, function: ir.Function, infer) -> bool:
    """Shapes inside a model-local function, from the types its call sites pass.

    onnx infers nothing inside functions; typing the body as a graph with the call
    sites' merged input types gives its values the shapes every call agrees on, which
    is what lets a split inside a function unroll.
    """
    input_types = _call_site_types(model, function)
    if input_types is None:
        return False
    fproto = ir.serde.serialize_function(function)
    graph = onnx.helper.make_graph(
        list(fproto.node),
        "function_body",
        [onnx.helper.make_value_info(name, tp) for name, tp in zip(fproto.input, input_types)],
        [onnx.ValueInfoProto(name=name) for name in fproto.output],
    )
    imports = {**{k: v for k, v in model.opset_imports.items()}, **{o.domain: o.version for o in fproto.opset_import}}
    proto = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
        ir_version=model.ir_version,
        functions=[ir.serde.serialize_function(f) for f in model.functions.values() if f is not function],
    )
    try:
        inferred = infer(proto)
    except Exception as e:  # noqa: BLE001 - best effort, as for the main graph
        logger.info("shape inference inside %s failed (%s)", function.name, e)
        return False
    found = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    found.update((v.name, tp) for v, tp in zip(function.inputs, input_types) if v.name)
    modified = False
    values = [v for node in ir.traversal.RecursiveGraphIterator(function) for v in node.outputs]
    for v in [*function.inputs, *values]:
        tp = found.get(v.name or "")
        if tp is not None and tp.WhichOneof("value"):
            modified |= take_type(v, tp)
    return modified


def _call_site_types(model: ir.Model, function: ir.Function) -> list[onnx.TypeProto] | None:
    """The type of each input of ``function`` as every call site passes it (shapes
    merged), or None when there is no call or the calls disagree on a type."""
    calls = [
        node
        for g in (model.graph, *model.functions.values())
        for node in ir.traversal.RecursiveGraphIterator(g)
        if node.op_identifier() == function.identifier()
    ]
    if not calls:
        return None
    input_types: list[onnx.TypeProto] = []
    for i in range(len(function.inputs)):
        args = [c.inputs[i] if i < len(c.inputs) else None for c in calls]
        if any(a is None or a.type is None for a in args) or len({str(a.type) for a in args}) != 1:
            return None
        merged = merge_shapes([a.shape for a in args])
        tp = onnx.TypeProto()
        ir.serde.serialize_type_into(tp, args[0].type)
        if merged is not None:
            ir.serde.serialize_shape_into(tp, merged)
        input_types.append(tp)
    return input_types


def take_type(v: ir.Value, tp: onnx.TypeProto, anchored: frozenset[str] = frozenset(), shape: bool | None = True) -> bool:
    """Give ``v`` the type (if it has none) and the refined shape ``tp`` says (``shape``
    None: its rank only; False: nothing of it)."""
    if not tp.WhichOneof("value") or innermost_type(tp).WhichOneof("value") == "map_type":
        return False  # nothing found; maps have no IR type (seqlower.io.map_types)
    if isinstance(v.type, ir.TensorType) and v.shape is not None and all(isinstance(d, int) for d in v.shape.dims):
        return False  # nothing to learn: a static tensor (the common case, and cheap to see)
    new_type = ir.serde.deserialize_type_proto_for_type(tp)
    new_shape = sanitize(ir.serde.deserialize_type_proto_for_shape(tp))
    modified = False
    if v.type is None and new_type is not None:
        v.type = new_type
        modified = True
    if shape is False or (v.type is not None and new_type is not None
                          and isinstance(v.type, ir.SequenceType) != isinstance(new_type, ir.SequenceType)):
        return modified
    if shape is None and new_shape is not None:
        new_shape = ir.Shape([None] * new_shape.rank())
    refined = refine_shape(v.shape, new_shape, anchored)
    if refined != v.shape:
        v.shape = refined
        modified = True
    return modified


def concat_dims(node: ir.Node, info: SeqInfo) -> ir.Shape | None:
    if info.shapes is None or "axis" not in node.attributes:
        return None
    new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
    return concat_shape(list(info.shapes), node.attributes["axis"].as_int(), bool(new_axis))


def unproven_by_onnx(model: ir.Model, policy: str, inferred: Callable[[ir.Value], onnx.TypeProto | None],
                     within: set[ir.Node] | None = None) -> dict[ir.Value, bool]:
    """The values whose shapes onnx's inference derives from a premise that does not hold,
    each with whether its rank still holds:

    1. onnx types a Loop's sequence output as its initial value (the body's output is
       not read), so a list whose elements change shape comes out with the first one's
       dims: unless the body gives that shape back (``inferred``: what onnx inferred of
       a value), the claim is unproven; its rank holds where the body's has it too;
    2. onnx gives a SplitToSequence with a split and keepdims=0 the spec's rank, where
       the keepdims policy decides it only at run time (a run-time scalar split);

    and everything computed from them (a SequenceAt, a map's body, a Reshape, a model
    output): nodes reading them, the subgraphs of such nodes, the owners of subgraphs
    holding one. Only nodes in ``within`` (what one inference ran on; None: every node)
    are sources."""
    ranked: set[ir.Value] = set()
    unranked: set[ir.Value] = set()
    for graph in graphs_of(model):
        for node in graph:
            if not is_default_domain(node) or (within is not None and node not in within):
                continue
            if node.op_type == "Loop":
                for out, rank_holds in _carried_lists(node, inferred):
                    (ranked if rank_holds else unranked).add(out)
            elif node.op_type == "SplitToSequence" and dynamic_split_squeezes(node, policy) is None:
                unranked.add(node.outputs[0])
    found = dict.fromkeys(_reached(model, ranked), True)
    found.update(dict.fromkeys(_reached(model, unranked), False))
    return found


def _reached(model: ir.Model, sources: set[ir.Value]) -> set[ir.Value]:
    """``sources`` and what is computed from them, through subgraphs both ways."""
    tainted = set(sources)
    if not tainted:
        return tainted
    nodes = [node for graph in graphs_of(model) for node in graph]
    # Each node's subgraphs, nested ones included: found once, not once a round.
    inners = {node: [g for sub in subgraphs(node)
                     for g in (sub, *(s for n in ir.traversal.RecursiveGraphIterator(sub) for s in subgraphs(n)))]
              for node in nodes if node.attributes}
    changed = True
    while changed:  # (a few rounds: each carries the taint into or out of one subgraph level)
        changed = False
        for node in nodes:
            if any(v in tainted for v in node.outputs):
                continue
            inner = inners.get(node, [])
            reads = any(v is not None and v in tainted for v in node.inputs) or any(
                v is not None and v in tainted for g in inner for n in g for v in n.inputs)
            if not reads and not any(v in tainted for g in inner for v in g.outputs):
                continue
            tainted.update(node.outputs)
            for g in inner:
                tainted.update(g.inputs)
                tainted.update(v for n in g for v in n.outputs)
            changed = True
    return tainted


def _carried_lists(loop: ir.Node, inferred: Callable[[ir.Value], onnx.TypeProto | None]) -> list[tuple[ir.Value, bool]]:
    """The Loop's carried outputs that are (or, not typed yet, may be) sequences and
    whose inferred element shape the body's inferred output does not repeat; with
    whether the body's output has that rank."""
    body = loop.attributes["body"].as_graph() if "body" in loop.attributes else None
    if body is None:
        return []
    found = []
    for k, out in enumerate(loop.outputs[:max(0, len(loop.inputs) - 2)]):
        bi = body.inputs[2 + k] if 2 + k < len(body.inputs) else None
        init = loop.inputs[2 + k]
        kinds = [v.type for v in (out, bi, init) if v is not None and v.type is not None]
        if kinds and not any(isinstance(t, ir.SequenceType) for t in kinds):
            continue
        claim = inferred(out)
        back = inferred(body.outputs[1 + k]) if 1 + k < len(body.outputs) else None
        if claim is None or _shape_of(claim) is None:
            continue  # onnx claims no shape: nothing to refuse
        claimed, given = _shape_of(claim), (_shape_of(back) if back is not None else None)
        if given != claimed:
            found.append((out, given is not None and claimed is not None and given.rank() == claimed.rank()))
    return found


def _shape_of(tp: onnx.TypeProto) -> ir.Shape | None:
    return sanitize(ir.serde.deserialize_type_proto_for_shape(tp))
