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
from typing import Any

__all__ = ["CONTEXTS", "ENV", "REPRESENTATIONS", "UNREACHABLE", "context_of", "count_representations", "enable",
           "enabled", "hit", "hits", "reset"]

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


def count_representations(analysis: Any) -> None:
    """The representation each web of ``analysis`` (seqlower.analysis.choose.Analysis) got,
    in each context it spans."""
    for web in analysis.webs:
        kind = web.repr
        if kind == "packed":
            kind = "ragged" if any(v in analysis.ragged for v in web.values) else "stacked"
        for where in {context_of(analysis.graph_of.get(v, "main")) for v in web.values}:
            hit(f"repr:{kind}", where)


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
