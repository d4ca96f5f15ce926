"""Quirks a model can be checked for before it runs: for each quirk id of a target
profile that no lowering rewrites around, a detector that names the nodes it would hit.
``target_gaps`` reports what they find with the ops the target lacks, so ``check
--target`` and ``lower --target`` say it (and ``--strict`` fails) before anything runs.

Each detector was bisected from a runtime failure to a minimal model; the tests hold
the detector and the runtime's failure side by side (tests/test_quirks.py), so when
the runtime is fixed the test says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx

from seqlower.errors import describe_node
from seqlower.inference import infer_shapes
from seqlower.inventory import walk_graphs

__all__ = ["DETECTORS", "quirk_findings"]

Dim = int | str | None


def _dims(v: onnx.ValueInfoProto) -> list[Dim] | None:
    t = v.type.tensor_type
    if v.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


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


def _if_branch_facts(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If whose branches give outputs of different shapes fails its analysis."""
    if not any(n.op_type == "If" for _, g, _ in walk_graphs(model) for n in g.node):
        return
    try:
        inferred = infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - no inference, nothing proven
        return
    for path, graph, _ in walk_graphs(inferred):
        for node in graph.node:
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
            if len(branches) != 2:
                continue
            then, other = branches["then_branch"], branches["else_branch"]
            for k, (a, b) in enumerate(zip(then.output, other.output)):
                da, db = _dims(a), _dims(b)
                if _differ(da, db):
                    where = describe_node(node.op_type, node.name, list(node.output))
                    yield where, path, (f"its branches give output {k} as {_show(da)} and {_show(db)}; "
                                        "tract needs one shape from both (quirk if-branch-facts)")
                    break


def _show(dims: list[Dim] | None) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims or []) + "]"


# Inputs a runtime that plans every shape before it runs must know as dims.
_SHAPE_INPUTS = {"Reshape": (1,), "Range": (0, 1, 2), "Split": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,),
                 "Slice": (1, 2)}


def _data_dependent_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Reshape, Range, Split, Expand, ConstantOfShape or Tile whose shape
    input is computed from tensor values (not from dims: ``Shape`` and ``Size`` turn a
    tensor into dims) has no shape its analysis can know ('shape input is variable').
    Inside a subgraph, the subgraph's inputs (iteration number, state, slices) are values."""
    inits = {i.name for i in model.graph.initializer}
    yield from _data_shapes(model.graph, "main", {i.name for i in model.graph.input if i.name not in inits})


def _data_shapes(graph: onnx.GraphProto, path: str, outer: set[str]) -> Iterator[tuple[str, str, str]]:
    data = set(outer) | {i.name for i in graph.input}
    data -= {i.name for i in graph.initializer}
    for node in graph.node:
        where = describe_node(node.op_type, node.name, list(node.output))
        subgraphs = [(a.name, a.g) for a in node.attribute if a.HasField("g")]
        subgraphs += [(f"{a.name}[{i}]", g) for a in node.attribute for i, g in enumerate(a.graphs)]
        reads = set(node.input)
        for name, sub in subgraphs:
            yield from _data_shapes(sub, f"{path} > {where}.{name}", data)
            reads |= _names_read(sub)
        if node.domain in ("", "ai.onnx") and node.op_type in _SHAPE_INPUTS:
            bad = [node.input[k] for k in _SHAPE_INPUTS[node.op_type] if k < len(node.input) and node.input[k] in data]
            if bad:
                yield where, path, (f"its input '{bad[0]}' is computed from tensor values, not dims; tract plans every "
                                    "shape before it runs and fails it: 'shape input is variable' (quirk data-dependent-shape)")
        if node.op_type not in ("Shape", "Size") and reads & data:
            data.update(o for o in node.output if o)


def _names_read(graph: onnx.GraphProto) -> set[str]:
    read: set[str] = set()
    for node in graph.node:
        read.update(x for x in node.input if x)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= _names_read(g)
    return read


# Quirk id -> detector: (node, graph path, why) for every node the quirk hits.
DETECTORS: dict[str, Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]] = {
    "if-branch-facts": _if_branch_facts,
    "data-dependent-shape": _data_dependent_shapes,
}


def quirk_findings(model: onnx.ModelProto, quirk_ids: list[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for quirk in quirk_ids:
        if quirk in DETECTORS:
            found.extend(DETECTORS[quirk](model))
    return found
