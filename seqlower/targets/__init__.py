"""Target profiles: what each runtime cannot run, as data (one TOML file per target).

A profile says whether the runtime runs sequence and optional ops and types
(``sequences``), which other ops it lacks (``lacks``: Loop, Scan, ReverseSequence, ...),
and the quirks measured on it. :func:`target_gaps` lists every node and value of a model
the target cannot run, with the reason; ``seqlower check --target`` and ``lower --target``
report them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import onnx

from seqlower.errors import ModelError, describe_node
from seqlower.ops import REDUCE_OPS
from seqlower.io.inventory import SEQUENCE_OPS, take_inventory, walk_graphs

__all__ = ["Gap", "Target", "TARGETS", "lacking_ops", "load_target", "quirk_gaps", "schema_version", "target_gaps"]

_HERE = Path(__file__).parent
from seqlower.options import TARGETS  # noqa: E402 - one list, read without onnx


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    sequences: bool
    lacks: frozenset[str]
    quirks: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # The default domain's opsets it reads (None: any), and, where its documentation lists
    # them, the element types each op runs on (TensorProto names).
    opsets: tuple[int, int] | None = None
    types: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False)
    # Where its converters are looked up by schema version (onnx2torch), the versions each
    # op has one for; an op not listed has none.
    converters: Mapping[str, tuple[int, ...]] = field(default_factory=dict, compare=False, hash=False)

    def refuses(self, op: str, opset: int, dtype: str | None) -> bool:
        """Whether the target cannot run a default-domain ``op`` at ``opset`` on elements of
        ``dtype`` (a TensorProto name; None: unknown): what seqlower must not write."""
        if op in self.lacks:
            return True
        if dtype is not None and op in self.types and dtype not in self.types[op]:
            return True
        return not self.converts(op, opset)

    def converts(self, op: str, opset: int) -> bool:
        """Whether a converter table (``converters``) has ``op`` at the version ``opset``
        gives it (True where the target has no table, or onnx knows no such op)."""
        if not self.converters:
            return True
        since = schema_version(op, opset)
        return since is None or since in self.converters.get(op, ())


@cache
def schema_version(op: str, opset: int) -> int | None:
    """The version of default-domain ``op``'s schema at ``opset`` (None: no such op)."""
    try:
        return onnx.defs.get_schema(op, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


# The reductions onnx2torch has no converter for from opset 18, where their axes became an
# input (quirk no-reduce-18: its rewrite writes some with ReduceSum, its detector names the rest).
NO_REDUCE_18_OPS = REDUCE_OPS - {"ReduceSum"}


@dataclass(frozen=True)
class Gap:
    """Something in a model the target cannot run."""

    what: str  # "op" or "value"
    where: str  # node or value description
    graph: str
    why: str
    sequence: bool = False  # a sequence/optional op or value (not an op the target lacks)

    def to_json(self) -> dict[str, str]:
        return {"what": self.what, "where": self.where, "graph": self.graph, "why": self.why}


@cache
def load_target(name: str) -> Target:
    path = _HERE / f"{name}.toml"
    if name not in TARGETS:
        raise ModelError(f"unknown target '{name}' (known: {', '.join(TARGETS)})")
    doc = tomllib.loads(path.read_text())
    return Target(
        name=doc["name"],
        description=doc["description"],
        sequences=bool(doc["sequences"]),
        lacks=frozenset(doc.get("lacks", [])),
        quirks=tuple((q["id"], q["text"]) for q in doc.get("quirks", [])),
        opsets=tuple(doc["opsets"]) if "opsets" in doc else None,
        types={op: tuple(ts) for op, ts in doc.get("types", {}).items()},
        converters={op: tuple(vs) for op, vs in doc.get("converters", {}).items()},
    )


def target_gaps(model: onnx.ModelProto, target: Target, kept_loops: Mapping[str, str] | None = None) -> list[Gap]:
    """Every node whose op ``target`` lacks and, for a target without sequences, every
    sequence or optional op and value, subgraphs and functions included. ``kept_loops``
    (from a lowering's report) says why a Loop could not be unrolled or become a Scan."""
    gaps: list[Gap] = []
    if not target.sequences:
        inv = take_inventory(model)
        gaps += [Gap("op", op.node, op.graph, f"{target.name} runs no sequence or optional op", True) for op in inv.ops]
        gaps += [Gap("value", f"{v.name}: {v.type}", v.graph, f"{target.name} has no sequence or optional type", True) for v in inv.values]
    for path, graph, _ in walk_graphs(model):
        gaps += _lacking(graph.node, path, target, kept_loops)
    gaps += quirk_gaps(model, target)
    return gaps


def quirk_gaps(model: onnx.ModelProto, target: Target) -> list[Gap]:
    """The nodes a quirk of ``target`` that seqlower cannot rewrite around would hit
    (``seqlower.targets.quirks``)."""
    if not target.quirks:
        return []  # (no detector module to load)
    from seqlower.targets.quirks import quirk_findings

    return [Gap("op", where, path, why) for where, path, why in quirk_findings(model, [q for q, _ in target.quirks])]


def lacking_ops(nodes: list[onnx.NodeProto], target: Target, path: str = "main") -> list[Gap]:
    """The gaps of main-graph ``nodes`` (with their subgraphs) that hold no sequence: the
    ops ``target`` lacks."""
    gaps = _lacking(nodes, path, target, None)
    for node in nodes:
        if node.attribute and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            holder = onnx.ModelProto()
            holder.graph.node.append(node)
            gaps += [g for sub_path, graph, _ in walk_graphs(holder) if sub_path != "main"
                     for g in _lacking(graph.node, sub_path.replace("main", path, 1), target, None)]
    return gaps


def _lacking(nodes, path: str, target: Target, kept_loops: Mapping[str, str] | None) -> list[Gap]:
    gaps = []
    for node in nodes:
        if node.op_type not in target.lacks or node.domain not in ("", "ai.onnx"):
            continue
        if not target.sequences and node.op_type in SEQUENCE_OPS:
            continue  # counted with the sequences
        where = describe_node(node.op_type, node.name, list(node.output))
        why = f"{target.name} has no {node.op_type}"
        if kept_loops and where in kept_loops:
            why += f", and {kept_loops[where]}"
        gaps.append(Gap("op", where, path, why))
    return gaps
