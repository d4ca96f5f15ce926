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


# Quirk id -> detector: (node, graph path, why) for every node the quirk hits.
DETECTORS: dict[str, Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]] = {
    "if-branch-facts": _if_branch_facts,
}


def quirk_findings(model: onnx.ModelProto, quirk_ids: list[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for quirk in quirk_ids:
        if quirk in DETECTORS:
            found.extend(DETECTORS[quirk](model))
    return found
