"""Quirks a model can be checked for before it runs: for each quirk id of a target
profile that no lowering rewrites around, a detector that names the nodes it would hit.
``target_gaps`` reports what they find with the ops the target lacks, so ``check
--target`` and ``lower --target`` say it (and ``--strict`` fails) before anything runs.

The detectors live by what they look at: ``branches`` (Ifs), ``shapes`` (shapes computed
at run time), ``tvm`` (TVM Relax's shape expressions), ``values`` (reductions, strings,
empty constants, Loops), on what ``facts`` gives them all. Which function detects which
quirk is the registry's (``seqlower.targets.registry``: ``detector="module:function"``).

Each detector was bisected from a runtime failure to a minimal model; the tests hold
the detector and the runtime's failure side by side (tests/test_quirks.py), so when
the runtime is fixed the test says so.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping

import onnx

from seqlower import coverage
from seqlower.targets.quirks.facts import INFERRED_CACHE, KNOWN_CACHE
from seqlower.targets.registry import QUIRKS

__all__ = ["DETECTORS", "quirk_findings"]


Detector = Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]


class _Detectors(Mapping[str, Detector]):
    """Quirk id -> detector: (node, graph path, why) for every node the quirk hits. Each
    detector's module is imported when a quirk of it is first asked for: checking for one
    target's quirks loads none of the others' detectors (40 ms of a small model's lowering)."""

    def __init__(self) -> None:
        self._refs = {q.id: q.detector for q in QUIRKS.values() if q.detector}
        self._found: dict[str, Detector] = {}

    def __getitem__(self, quirk: str) -> Detector:
        if quirk not in self._found:
            module, name = self._refs[quirk].split(":")
            self._found[quirk] = getattr(importlib.import_module(f"seqlower.targets.quirks.{module}"), name)
        return self._found[quirk]

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)


DETECTORS = _Detectors()


def quirk_findings(model: onnx.ModelProto, quirk_ids: list[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    try:
        for quirk in quirk_ids:
            if quirk in DETECTORS:
                named = DETECTORS[quirk](model)
                found.extend(named)
                if named:
                    coverage.hit(f"detector:{quirk}", "model")
    finally:
        INFERRED_CACHE.pop(id(model), None)
        KNOWN_CACHE.pop(id(model), None)
    return found
