"""Which of the lowering's decisions a run reached, and where: a count per decision point
and context, for the fuzzers' coverage report (``tools/coverage.py``).

A decision point is a transfer function of the analysis (``transfer:Op``), a lowering
rule (``rule:representation:Op``), a representation chosen for a web (``repr:unrolled``,
``repr:stacked``, ``repr:ragged``, ``repr:flat``, ``repr:kept``), a quirk's rewrite that
changed a model (``quirk:id``) and a quirk's detector that named a node
(``detector:id``), and a model-local function holding lists inlined or kept whole
(``inline:function``, ``inline:kept``). Its context is the graph it was reached in: ``main``, ``loop`` (a Loop
or Scan body), ``if`` (a branch), ``map`` (a SequenceMap body), ``nested`` (two deep or
more), ``function`` (a model-local function); the quirks' points are ``model``-wide.

Off unless the environment names a folder in ``SEQLOWER_COVERAGE`` (each process then
writes its counts there as it exits) or ``enable()`` is called: a lowering pays one test
of a flag per point reached.
"""

from __future__ import annotations

import atexit
import json
import os
import uuid
from collections import Counter
from pathlib import Path

__all__ = ["CONTEXTS", "ENV", "UNREACHABLE", "context_of", "enable", "enabled", "hit", "hits", "reset", "universe"]

ENV = "SEQLOWER_COVERAGE"
CONTEXTS = ("main", "loop", "if", "map", "nested", "function")
REPRESENTATIONS = ("unrolled", "stacked", "ragged", "flat", "kept")

# Points no model reaches, and why: the universe leaves them out (the rule stays, a
# fallback should a fold ever not run first).
UNREACHABLE = {
    "rule:unrolled:SequenceLength": "an Unrolled list's length is a constant, folded before any rule runs "
                                    "(passes/folds/fold_sequence_constants.py)",
}

_HITS: Counter = Counter()
_ON = bool(os.environ.get(ENV))


def enabled() -> bool:
    return _ON


def enable(on: bool = True) -> None:
    """Count from now on (in this process), whatever the environment says."""
    global _ON
    _ON = on


def hit(point: str, where: str = "main") -> None:
    """Count ``point`` reached in the graph labelled ``where`` (a scope label such as
    ``main > Loop node 'l'.body``, or a context)."""
    if _ON:
        _HITS[point, where if where in CONTEXTS or where == "model" else context_of(where)] += 1


def hits() -> Counter:
    """The counts so far, by (point, context)."""
    return Counter(_HITS)


def reset() -> None:
    _HITS.clear()


def context_of(label: str) -> str:
    """The context of a graph from its label: the main graph, a function, or the subgraph
    of the op it is an attribute of (``main > If node 'c'.then_branch``); two deep or more
    is ``nested``."""
    if label.startswith("function "):
        return "function"
    parts = label.split(" > ")[1:]
    if not parts:
        return "main"
    if len(parts) > 1:
        return "nested"
    op = parts[0].split(" ", 1)[0]
    return {"If": "if", "Loop": "loop", "Scan": "loop", "SequenceMap": "map"}.get(op, "nested")


def universe() -> dict[str, tuple[str, ...]]:
    """Every decision point, with the contexts it can be reached in."""
    import seqlower.analysis.analyzer  # noqa: F401 - registers the transfer functions
    from seqlower.ops import TRANSFERS
    from seqlower.passes.lowering import convert
    from seqlower.targets.registry import QUIRKS

    for module in ("lower_unrolled_sequences", "lower_packed_sequences", "lower_flat_sequences", "lower_optionals"):
        __import__(f"seqlower.passes.lowering.{module}")
    # A function holding lists is inlined first (passes/lowering/inline_sequence_functions.py),
    # its lists then lowered where it was called; one onnx_ir cannot inline (it imports
    # another opset, or takes a graph attribute) is kept whole, every value in it "kept".
    # The points of a function are those two decisions.
    in_graphs = tuple(c for c in CONTEXTS if c != "function")
    points: dict[str, tuple[str, ...]] = {}
    points.update({f"transfer:{op}": in_graphs for op in sorted(TRANSFERS)})
    for into in sorted(convert._RULES):
        points.update({f"rule:{into}:{op}": in_graphs for op in sorted(convert.rules(into))})
    points.update({f"repr:{r}": in_graphs for r in REPRESENTATIONS})
    points.update({"inline:function": ("model",), "inline:kept": ("model",)})
    for point in UNREACHABLE:
        points.pop(point, None)
    for quirk in QUIRKS.values():
        if quirk.rewrite:
            points[f"quirk:{quirk.id}"] = ("model",)
        if quirk.detector:
            points[f"detector:{quirk.id}"] = ("model",)
    return points


def _write() -> None:
    folder = os.environ.get(ENV)
    if not folder or not _HITS:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    rows = [[point, where, n] for (point, where), n in sorted(_HITS.items())]
    (path / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json").write_text(json.dumps(rows))
    _HITS.clear()  # (written once: the exit and multiprocessing's finalizers both call this)


atexit.register(_write)
if _ON:
    # A multiprocessing worker (the fuzzers' pools) leaves by os._exit, past atexit; its
    # finalizers still run.
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _write, exitpriority=10)
