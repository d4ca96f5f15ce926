"""seqlower.targets.registry: every quirk a profile names is registered once, with a
rewrite, a detector or a word on how else it is handled; and every road that acts on
quirks (the schedule, the re-run after folding, the region way, check --target) reads
that one table."""

from __future__ import annotations

import importlib

import onnx_ir as ir
import pytest

from seqlower.options import LowerOptions
from seqlower.targets import TARGETS, load_target
from seqlower.targets.registry import PHASES, QUIRKS


def _profiled() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name in TARGETS:
        for q, _ in load_target(name).quirks:
            found.setdefault(q, []).append(name)
    return found


def test_every_quirk_a_profile_names_is_registered_and_acted_on():
    profiled = _profiled()
    assert set(profiled) <= set(QUIRKS), sorted(set(profiled) - set(QUIRKS))
    for q in QUIRKS.values():
        assert q.rewrite or q.detector or q.handled, f"{q.id}: no rewrite, no detector, nothing said"
        if q.handled:
            assert q.handled.split(":")[0] in ("lowering", "executor", "values"), q
        assert q.phase in PHASES, q
        assert not (q.ops or q.whole_model or q.again) or q.rewrite, f"{q.id}: ops or runs with no rewrite"


def test_every_registered_quirk_is_some_profiles():
    # (a quirk no runtime has is dead knowledge: removed, or given to its runtime)
    assert set(QUIRKS) <= set(_profiled()), sorted(set(QUIRKS) - set(_profiled()))


def test_every_rewrite_and_detector_the_registry_names_exists():
    from seqlower.targets import quirks as detectors

    for q in QUIRKS.values():
        for ref in (q.rewrite, q.again):
            if ref is None:
                continue
            module, name = ref.split(":")
            make = getattr(importlib.import_module(f"seqlower.passes.{module}"), name)
            made = [make()] if isinstance(make, type) else make(LowerOptions(), load_target(_profiled()[q.id][0]))
            assert made and all(isinstance(p, ir.passes.PassBase) for p in made), ref
        if q.detector:
            module, name = q.detector.split(":")
            found = getattr(importlib.import_module(f"seqlower.targets.quirks.{module}"), name)
            assert callable(found) and detectors.DETECTORS[q.id] is found, q.detector
    assert set(detectors.DETECTORS) == {q.id for q in QUIRKS.values() if q.detector}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_the_schedule_runs_each_rewrite_of_the_targets_quirks_once_in_the_registrys_order(name):
    from seqlower.passes.schedule import build_passes, quirk_rewrites

    target = load_target(name)
    passes = build_passes(LowerOptions(target=name))
    names = [type(p).__name__ for p in passes]
    for phase in PHASES:
        for made in quirk_rewrites(target, LowerOptions(target=name), phase):
            assert type(made).__name__ in names, (name, phase, type(made).__name__)
    # The ones with a rewrite, in the registry's order, each where its phase puts it.
    want = [type(p).__name__ for phase in PHASES for p in quirk_rewrites(target, LowerOptions(target=name), phase)]
    at = [names.index(w, names.index(want[k - 1]) + 1 if k else 0) for k, w in enumerate(want)]
    assert at == sorted(at), (name, want)


def test_the_region_way_takes_in_every_node_a_quirk_rewrites():
    from seqlower.fastpath.regions import _WHOLE_MODEL_OPS, _WHOLE_MODEL_QUIRKS
    from seqlower.targets.registry import QUIRK_OPS, relevant_ops

    for q in QUIRKS.values():
        if not q.rewrite:
            continue
        if q.whole_model:
            assert q.id in _WHOLE_MODEL_QUIRKS and (not q.ops or set(_WHOLE_MODEL_OPS[q.id]) == set(q.ops))
        elif q.ops:
            assert set(QUIRK_OPS[q.id]) == set(q.ops) and set(q.ops) <= relevant_ops((), [q.id])


def test_the_run_again_after_folding_is_the_registrys():
    from seqlower.passes.schedule import after_folding

    again = {name: [type(p).__name__ for p in after_folding(LowerOptions(target=name))] for name in TARGETS}
    assert "PadEmptyConcatOperandsPass" in again["openvino"] and "NarrowInt64SentinelsPass" in again["tract"]
    # (every target's: folding makes a row's position constant, which onnxruntime miscomputes)
    assert again["generic"] == ["FoldRowGathersPass"] and again["onnxruntime"] == ["FoldRowGathersPass"]
