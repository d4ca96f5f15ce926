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
from collections.abc import Callable, Iterator

import onnx

from seqlower.targets.quirks.facts import INFERRED_CACHE, KNOWN_CACHE
from seqlower.targets.registry import QUIRKS

__all__ = ["DETECTORS", "quirk_findings"]


def _detector(ref: str) -> Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]:
    module, name = ref.split(":")
    return getattr(importlib.import_module(f"seqlower.targets.quirks.{module}"), name)


# Quirk id -> detector: (node, graph path, why) for every node the quirk hits.
DETECTORS: dict[str, Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]] = {
    q.id: _detector(q.detector) for q in QUIRKS.values() if q.detector
}


def quirk_findings(model: onnx.ModelProto, quirk_ids: list[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    try:
        for quirk in quirk_ids:
            if quirk in DETECTORS:
                found.extend(DETECTORS[quirk](model))
    finally:
        INFERRED_CACHE.pop(id(model), None)
        KNOWN_CACHE.pop(id(model), None)
    return found
