"""Quirks of If: branches tract cannot hold as one fact, its one If per graph, OpenVINO's If outputs
of run-time shape, TVM's Shape of an If output."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from seqlower.keys import SHAPE_HIDDEN
from seqlower.errors import describe_node
from seqlower.io.inventory import walk_graphs
from seqlower.targets.quirks.facts import Dim, data_sized_values, dims_of, inferred_model, names_read, show_dims


def _differ(a: list[Dim] | None, b: list[Dim] | None) -> bool:
    """Provably different shapes: other ranks, or a dim known on both sides (a number or
    a name the model gave, not one inference made up) that is not the same."""
    if a is None or b is None:
        return False
    if len(a) != len(b):
        return True
    for x, y in zip(a, b):
        known = [d for d in (x, y) if d is not None and not (isinstance(d, str) and d.startswith("unk__"))]
        if len(known) == 2 and x != y:
            return True
    return False


def _unknown(d: Dim) -> bool:
    """Not found: no dim, or a name onnx's inference made up."""
    return d is None or (isinstance(d, str) and d.startswith("unk__"))


def _unproven(a: list[Dim] | None, b: list[Dim] | None) -> bool:
    """Same rank, but a dim inference could not find on one side that the other side
    has (a number, or a name the model gave)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return any(_unknown(x) != _unknown(y) for x, y in zip(a, b))


def _inferred_if_any_if(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model inferred, when it has an If (None: no If, or no inference)."""
    if not any(n.op_type == "If" for _, g, _ in walk_graphs(model) for n in g.node):
        return None
    return inferred_model(model)


def _if_branch_facts(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If whose branches give outputs of different shapes fails its analysis."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    for path, node, then, other in _ifs(inferred):
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = dims_of(a), dims_of(b)
            # Provably different, or one side's dims unknown where the other's are named:
            # tract unifies the branches' facts and fails unless they are the same (a
            # branch slicing a column, [?, ?], against one passing [n, w] on: seed 4438).
            if _differ(da, db) or _unproven(da, db):
                where = describe_node(node.op_type, node.name, list(node.output))
                yield where, path, (f"its branches give output {k} as {show_dims(da)} and {show_dims(db)}; "
                                    "tract needs one shape from both (quirk if-branch-facts)")
                break


def _both_unknown(a: list[Dim] | None, b: list[Dim] | None, name_a: str, name_b: str) -> bool:
    """A dim inference finds on neither side, of two outputs computed apart: tract,
    which knows every dim from the input's, finds them and they may differ (a list mapped
    by two bodies, one doubling each element: graph program 20409, 'Unifying shapes 4,3
    and 8,3'). One value passed out of both branches is one shape."""
    if a is None or b is None or len(a) != len(b) or name_a == name_b:
        return False
    return any(_unknown(x) and _unknown(y) for x, y in zip(a, b))


def _if_branch_unknown_dims(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If output whose dims inference finds on neither side (the least
    specific reason, so last)."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    for path, node, then, other in _ifs(inferred):
        if any(_runs_a_loop(g) for g in (then, other)):
            continue  # a zero-trip guard: its empty branch is built from the Scan's dims
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = dims_of(a), dims_of(b)
            if _both_unknown(da, db, a.name, b.name):
                where = describe_node(node.op_type, node.name, list(node.output))
                yield where, path, (f"its branches give output {k} as {show_dims(da)} and {show_dims(db)}, computed apart; "
                                    "tract needs one shape from both (quirk if-branch-facts)")
                break


def _runs_a_loop(branch: onnx.GraphProto) -> bool:
    """A branch that returns what a Scan or Loop in it gives (loops_to_scans' zero-trip
    guard; every fixture tract runs through one)."""
    made = _producers(branch)
    return any(o.name in made and made[o.name].op_type in ("Scan", "Loop") for o in branch.output)


def _if_branch_data_sizes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If output a NonZero (or Compress, Unique) sizes, in a branch or outside
    it, where the branches do not give the same value: tract gives each such size its
    own symbol in each branch, or none to an outer one a branch reads ('x,F32 vs
    x_0,F32': fuzz seed 10395, a masked row appended to a list under an ``if`` on values;
    'Source node without a determined fact': seed 9088)."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    outer: dict[int, set[str]] = {}
    for path, graph, node, then, other in _ifs_in_graphs(inferred):
        if id(graph) not in outer:
            outer[id(graph)] = data_sized_values(graph)
        sized = (data_sized_values(then, outer[id(graph)]), data_sized_values(other, outer[id(graph)]))
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = dims_of(a), dims_of(b)
            if a.name == b.name or not (a.name in sized[0] or b.name in sized[1]):
                continue
            if da is not None and db is not None and len(da) == len(db) and all(
                    isinstance(x, int) and x == y for x, y in zip(da, db)):
                continue  # (one static shape: one fact)
            where = describe_node(node.op_type, node.name, list(node.output))
            yield where, path, (f"output {k} is sized by what a NonZero (or Compress, Unique) finds; tract "
                                "gives such a size its own symbol in each branch and needs one shape from "
                                "both (quirk if-branch-facts)")
            break


def _ifs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto, onnx.GraphProto, onnx.GraphProto]]:
    """Every If with both branches: (graph path, node, then branch, else branch)."""
    for path, _, node, then, other in _ifs_in_graphs(model):
        yield path, node, then, other


def _ifs_in_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto, onnx.NodeProto, onnx.GraphProto, onnx.GraphProto]]:
    """Every If with both branches, with the graph holding it."""
    for path, graph, _ in walk_graphs(model):
        for node in graph.node:
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
            if len(branches) == 2:
                yield path, graph, node, branches["then_branch"], branches["else_branch"]


def _if_branch_growth(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If where one branch passes an outer tensor through and the other
    concatenates to it or slices it (TorchScript's list append, insert or pop under an
    ``if``) gives two shapes, whatever inference can prove about the dims."""
    for path, node, then, other in _ifs(model):
        sides = [(then, _producers(then)), (other, _producers(other))]
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            for ((pg, pm), po), ((_, om), oo) in (((sides[0], a.name), (sides[1], b.name)), ((sides[1], b.name), (sides[0], a.name))):
                source = _passed_through(pg, po, pm)
                if source is not None and _resizes(oo, source, om):
                    where = describe_node(node.op_type, node.name, list(node.output))
                    yield where, path, (f"one branch passes '{source}' through as output {k} and the other "
                                        "concatenates to it or slices it; tract needs one shape from both "
                                        "(quirk if-branch-facts)")
                    break
            else:
                continue
            break


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in graph.node for o in n.output}


def _passed_through(graph: onnx.GraphProto, name: str, made: dict[str, onnx.NodeProto]) -> str | None:
    while name in made and made[name].op_type == "Identity":
        name = made[name].input[0]
    return None if name in made or name in {i.name for i in graph.initializer} else name


def _resizes(name: str, source: str, made: dict[str, onnx.NodeProto]) -> bool:
    p = made.get(name)
    while p is not None and p.op_type == "Identity":
        p = made.get(p.input[0])
    if p is None or p.op_type not in ("Concat", "Slice"):
        return False
    stack, seen = list(p.input), set()
    while stack:
        x = stack.pop()
        if x == source:
            return True
        if x in seen or x not in made:
            continue
        seen.add(x)
        stack.extend(made[x].input)
    return False


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each name a node of ``graph`` reads (its subgraphs' outer reads included), and the
    nodes that read it: read once per graph, not per value asked about."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        read = {x for x in n.input if x}
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= names_read(g)
        for x in read:
            readers.setdefault(x, []).append(n)
    return readers


def _read_twice(readers: dict[str, list[onnx.NodeProto]], name: str) -> bool:
    """Whether a node reads ``name`` and another node reads what that one makes (a no-op
    Slice that hides the shape, passes/quirks/hide_if_output_shapes.py, reads it right)."""
    return any(o in readers for n in readers.get(name, ()) if not _shape_hiding(n) for o in n.output if o)


def _shape_hiding(node: onnx.NodeProto) -> bool:
    # (its Shape, Size and Slice of the output: Ops.shape_hidden names them STEM_in...)
    return bool(node.output) and f"{SHAPE_HIDDEN}_in" in node.output[0]


def _if_run_time_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: an If whose branches give an output of a shape known only at run time
    that two ops in a row read. ``lower --target openvino`` runs each as a select
    (passes/loops/ifs_to_selects.py), or reads it through a no-op Slice
    (passes/quirks/hide_if_output_shapes.py). A zero-trip guard's If is read right."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    graphs = {path: g for path, g, _ in walk_graphs(inferred)}
    indexed: dict[str, dict[str, list[onnx.NodeProto]]] = {}
    for path, node, then, other in _ifs(inferred):
        if then.node and then.node[-1].op_type == "Loop" and list(then.output) and \
                [o.name for o in then.output] == list(then.node[-1].output):
            continue  # a zero-trip guard
        if path not in indexed and path in graphs:
            indexed[path] = _readers(graphs[path])
        readers = indexed.get(path)
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = dims_of(a), dims_of(b)
            if a.type.WhichOneof("value") != "tensor_type" or k >= len(node.output):
                continue
            if readers is not None and not _read_twice(readers, node.output[k]):
                continue  # (read by one op at most, or only returned: read right)
            # As measured: a 1-D output of a run-time length (lengths and sizes read wrong;
            # the lowering also runs Ifs of other run-time shapes as selects: one of
            # [?, W] failed to compile, one of [2, n, 1] read as garbage (torch fuzz
            # 20561), but others run right, dynamo's embedding_bag's [1, ?] in a Loop:
            # not named).
            # Of any rank, where the branches' dims are not the same numbers: a [2, 1] bool
            # read as [N, ?] by Or and then Shape and Reshape came out with garbage Trues on
            # the first run (random program 240290: the branches give [N, 2M] and [N, M]).
            if da is None or db is None or (da == db and all(isinstance(d, int) for d in da)):
                continue
            where = describe_node(node.op_type, node.name, list(node.output))
            yield where, path, (f"its branches give output {k} as {show_dims(da)} and {show_dims(db)}, a length known only at "
                                "run time, which OpenVINO reads wrong two ops further on (quirk if-run-time-shape); "
                                "lower --target openvino runs such an If as a select, or reads it through a no-op Slice")
            break


def _ifs_past_the_first(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: every If of a graph that has one before it ('Duplicate node name: If')."""
    for path, g, _ in walk_graphs(model):
        ifs = [n for n in g.node if n.op_type == "If" and n.domain in ("", "ai.onnx")]
        for n in ifs[1:]:
            yield (describe_node(n.op_type, n.name, list(n.output)), path,
                   f"tract names every If it loads 'If', and {describe_node(ifs[0].op_type, ifs[0].name, list(ifs[0].output))} "
                   "has that name in this graph already (quirk one-if-per-graph)")


def _if_branch_facts_all(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If whose branches give what it cannot hold as one fact, every way found."""
    return _unique([*_if_branch_facts(model), *_if_branch_growth(model), *_if_branch_data_sizes(model),
                    *_if_branch_unknown_dims(model)])


def _unique(found: list[tuple[str, str, str]]) -> Iterator[tuple[str, str, str]]:
    """One finding per node (the first reason)."""
    seen = set()
    for where, path, why in found:
        if (where, path) not in seen:
            seen.add((where, path))
            yield where, path, why
