"""The API on protobuf: ``lower`` and ``lower_proto_with_report`` read what a model needs
(regions, weights held out, repeated blocks), hand each part with work to the lowering
core (``seqlower.lowering``: the passes on an onnx_ir model) and splice the results back.

Layers import one way (DESIGN.md, Core v2). The core is loaded where a model has work,
in one place (``_core``): a model with nothing to lower is read, checked and written with
protobuf alone, without onnx_ir or the passes (Stage 11's start-up; tests/test_layers.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import onnx
from seqlower._deferred import onnx_ir as ir

from seqlower.fastpath import copies, repeats, validate
from seqlower.errors import SeqlowerError
from seqlower.io.check import InferredTypes, check_types
from seqlower.io.models import from_proto, to_proto
from seqlower.options import DEFAULT_MAX_UNROLL, LowerOptions
from seqlower.io.protos import own_names
from seqlower.keys import RESERVED_NAMES_KEY
from seqlower.fastpath.regions import Found, Region, find, has_work, node_kinds
from seqlower.fastpath.submodel import build
from seqlower.fastpath.splice import splice
from seqlower.report import LowerReport, overridable_notes
from seqlower.targets import lacking_ops, load_target, target_gaps
from seqlower.targets.registry import FIXED_SHAPE_LOOPS
from seqlower.io.weights import Weights, is_stub

__all__ = ["LowerOptions", "LowerReport", "lower_with_report", "lower_proto_with_report", "DEFAULT_MAX_UNROLL"]

logger = logging.getLogger(__name__)


def _core() -> ModuleType:
    """The lowering core, loaded on first use (the one place this module reaches it)."""
    import seqlower.lowering

    return seqlower.lowering


def __getattr__(name: str) -> Any:
    # The core's names, re-exported (``build_passes``, ``optimize_region``, ...).
    if name in ("build_passes", "optimize_region", "check_nesting", "MAX_SUBGRAPH_DEPTH"):
        return getattr(_core(), name)
    raise AttributeError(f"module 'seqlower.fastpath.pipeline' has no attribute {name!r}")


def lower_with_report(model: ir.Model, options: LowerOptions | None = None, *,
                      optimize: bool = False) -> tuple[ir.Model, LowerReport]:
    """Lower an onnx_ir model in place (``seqlower.lowering.lower_with_report``)."""
    return _core().lower_with_report(model, options, optimize=optimize)


def describe_sequences(model: ir.Model, options: LowerOptions | None = None) -> list[dict[str, Any]]:
    """Every sequence value's SeqInfo and what the lowering will do with it (for
    ``seqlower inspect``; ``seqlower.lowering.describe_sequences``)."""
    return _core().describe_sequences(model, options)


def kept_loop_reasons(model: ir.Model, target_name: str, max_unroll: int = DEFAULT_MAX_UNROLL) -> dict[str, str]:
    """Why each Loop of ``model`` stays for a target without Loop (``seqlower.lowering.kept_loop_reasons``)."""
    return _core().kept_loop_reasons(model, target_name, max_unroll)


def lower_proto_with_report(proto: onnx.ModelProto, options: LowerOptions | None = None, *,
                            base_dir: str | None = None, label: str = "<model>",
                            inferred: Mapping[str, onnx.TypeProto] | None = None,
                            weights: Weights | None = None) -> tuple[onnx.ModelProto | ir.Model, LowerReport]:
    """Lower a checked ModelProto, touching only its sequence region (``seqlower.fastpath.regions``):
    a model no pass has work in comes back as it is, and a model whose region can be cut
    out has only that region converted, lowered and spliced back (``proto`` is changed in
    place). Otherwise the whole model is lowered and an ``ir.Model`` comes back.
    ``inferred``: value types inference found while checking the model (``read_model_proto``'s
    ``types``), which spare the region its own inference. ``weights``: what
    ``read_model_held`` held out of ``proto`` (a ModelProto that comes back still has its
    stubs: write it with them)."""
    options = options or LowerOptions()
    target = load_target(options.target)
    nodes = list(proto.graph.node)
    kinds = node_kinds(nodes)
    if not options.specialized and not has_work(proto, target.lacks, dict(target.quirks), kinds):
        report = LowerReport()
        report.gaps = target_gaps(proto, target)
        return proto, report
    # A Loop rewritten for a target without Loop is proven counted (passes/counted_loops)
    # or bounded by --dim-max by tracing its trip count and initial values back to what
    # computes them, which a region cut off from the rest of the model cannot do.
    # So is one unrolled or bounded for a target that runs only Loops of fixed shapes.
    rewrites_loops = "Loop" in target.lacks or bool(FIXED_SHAPE_LOOPS & dict(target.quirks).keys())
    loops_traced = rewrites_loops and any(op == "Loop" for op, _, _ in kinds)
    # Specialized shapes change what the whole model computes statically.
    found = None if options.dim_max or loops_traced or options.specialized \
        else find(proto, target.lacks, dict(target.quirks), weights, kinds, nodes)
    region, templates = None, []
    # The model's inference deferred (``InferredTypes``): each sub-model is checked as it is
    # lowered, in its place.
    unchecked = isinstance(inferred, InferredTypes) and inferred.pending
    if found is not None:
        region, templates = _cut_repeats(found, inferred, weights, label, options, unchecked)
    if isinstance(inferred, InferredTypes):
        unchecked = inferred.pending
        inferred.release()  # the region took its types; the whole model's inference result goes
    if region is not None:
        report = _region_way(proto, found, region, templates, label, options, target, unchecked, weights)
        if report is not None:
            return proto, report
        logger.info("the region does not splice back; lowering the whole model")
    if unchecked and isinstance(inferred, InferredTypes):
        inferred.resolve()  # the checks the reader deferred, on the whole model
        inferred.release()
    if weights is not None:
        weights.restore(proto)
    model = from_proto(proto, label)
    if base_dir is not None:
        ir.external_data.set_base_dir(model.graph, base_dir)
    return lower_with_report(model, options)


def _region_way(proto: onnx.ModelProto, found: Found, region: Region, templates: list[_Template], label: str,
                options: LowerOptions, target: Any, unchecked: bool, weights: Weights | None = None) -> LowerReport | None:
    """The region lowered (its repeated webs as copies of their templates) and spliced
    back into ``proto``; None when it does not splice back (``proto`` is unchanged)."""
    if region.model.graph.node:
        # What the rest of the region makes must not take a name the copies keep.
        kept_names = {o for group, _, _ in templates for m in group.members for o in m.values}
        if unchecked:
            check_types(region.model, label)
        before = _validated_alone(region, options, weights)
        rest, report = _lower_region(region, label, options, region.reserved | kept_names)
        report.validation = _region_validation(before, rest, options)
        if report.validation:
            # (the region is all but the model: where it proved nothing, so would the model)
            report.validation["whole"] = len(region.nodes) >= 0.9 * len(proto.graph.node)
    else:
        rest, report = None, LowerReport()
        report.validation = {"scope": "region", "compared": 1} if options.validate else {}
    if report.validation and templates:
        # Each template was validated alone (it stands for its copies, which are it renamed).
        report.validation = _joined([report.validation, *(t[2].validation for t in templates)])
    report.notes.extend(overridable_notes([x for x in region.inputs if x in found.index.overridable]))
    lowered, lowered_nodes, copied_infos = _with_copies(found, region, rest, report, templates) if templates \
        else (rest, None, [])
    # The region's gaps are the lowered sub-model's; outside it there is no sequence,
    # only ops the target may lack.
    inside = set(region.nodes)
    outside = lacking_ops([n for i, n in enumerate(proto.graph.node) if i not in inside], target) \
        if target.lacks else []
    if splice(proto, region, lowered, lowered_nodes, copied_infos) is None:
        return None
    report.gaps = [*report.gaps, *outside]
    return report


def _region_validation(before: onnx.ModelProto | None, lowered: onnx.ModelProto, options: LowerOptions) -> dict:
    """The region's lowering run against its sub-model as it was (validate.run_validation)."""
    if before is None:
        return {}
    start = time.perf_counter()
    found = validate.run_validation(before, lowered, options).to_json(scope="region")
    found["region_seconds"] = round(time.perf_counter() - start, 4)
    return found


def _joined(parts: list[dict]) -> dict:
    """Validations of the region's parts as one: the first failure, the fewest samples
    compared (a part that proved nothing leaves it to the whole model's), their seconds."""
    if not all(parts):
        return {}
    joined = {**parts[0], "compared": min(p.get("compared", 0) for p in parts),
              "region_seconds": round(sum(p.get("region_seconds", 0.0) for p in parts), 4)}
    failure = next((p["failure"] for p in parts if p.get("failure")), None)
    if failure:
        joined["failure"] = failure
    return joined


def _validated_alone(region: Region, options: LowerOptions, weights: Weights | None) -> onnx.ModelProto | None:
    """A copy of the region's sub-model (its held weights put back), to validate its
    lowering alone: the rest of the model is not touched, and running it twice is what
    made whole-model validation cost several lowerings on big models. None where the
    whole model is validated instead: validation off."""
    if not options.validate:
        return None
    copy = onnx.ModelProto()
    copy.CopyFrom(region.model)
    held = [t.name for t in copy.graph.initializer if is_stub(t)]
    if held:
        if weights is None or weights.held_bytes(held) > validate.MAX_WEIGHT_BYTES:
            return None
        weights.restore(copy)
    return copy


# A group's template: its members, its lowered sub-model and what lowering it reported.
_Template = tuple[repeats.Group, onnx.ModelProto, LowerReport]


def _cut_repeats(found: Found, inferred: Mapping[str, onnx.TypeProto] | None, weights: Weights | None,
                 label: str, options: LowerOptions, check: bool = False) -> tuple[Region, list[_Template]]:
    """The region, with its repeated webs lowered apart (``seqlower.fastpath.repeats``): each group's
    template lowered, and the region that is left, whose sub-model leaves the members out.
    ``check``: check each template's types first, as the reader checks a model's
    (``model_check.check_types``; ModelError: invalid)."""
    plan = repeats.Plan(found, inferred, weights)
    made: dict[bytes, _Template | None] = {}
    for m in plan.candidates:
        key = plan.key(m)
        if key is None:
            continue
        if key not in made:
            if not plan.may_make_template(m):
                continue
            template = build(found, set(m.nodes), inferred, weights, lowered=plan.known,
                             output_types=plan.output_types(m), weights_typed=True)
            if check:
                check_types(template.model, label)  # (not lowered in place: invalid anywhere)
            before = _validated_alone(template, options, weights)
            try:
                lowered, rep = _lower_region(template, label, options)
                rep.validation = _region_validation(before, lowered, options)
            except SeqlowerError as e:
                # Lowered in place, with what the rest of the region tells it, or refused there.
                logger.info("a repeated web is lowered in place: %s", e)
                made[key] = None
                continue
            # What stays is reported node by node, and a template copies whole outputs.
            # (a template whose lowering fails validation is lowered in place instead)
            clean = not (rep.remaining or rep.gaps or rep.kept_loops or rep.validation.get("failure")) \
                and repeats.fits(m, lowered) and plan.outputs_fit(m, lowered)
            made[key] = (repeats.Group(key), lowered, rep) if clean else None
        got = made[key]
        if got is None:
            continue
        got[0].members.append(m)
        plan.learn(m, got[0], got[1])
    templates = [t for t in made.values() if t is not None]
    apart = {i for group, _, _ in templates for m in group.members for i in m.nodes}
    return build(found, found.region, inferred, weights, apart, lowered=plan.known), templates


def _with_copies(found: Found, region: Region, rest: onnx.ModelProto | None, report: LowerReport,
                 templates: list[_Template]) -> tuple[onnx.ModelProto, list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """The region's lowering: ``rest`` (what was lowered in place) and each group's copies of
    its template, under names nothing else in the model has (its nodes and the copies'
    value infos apart, as ``copies.assemble`` gives them); their rewrites and notes join
    ``report``."""
    taken = set(region.reserved) | {o for i in region.nodes for o in found.outs[i]}
    inside = set(region.nodes)
    node_names = {n.name for i, n in enumerate(found.nodes) if i not in inside}
    if rest is not None:
        taken.update(own_names([rest.graph]))
        node_names.update(n.name for n in rest.graph.node)
    instances = [copies.instantiate(group, lowered, rep.rewrites, rep.notes, taken, node_names)
                 for group, lowered, rep in templates]
    for c in instances:
        report.rewrites.extend(c.rewrites)
        report.notes.extend(n for n in dict.fromkeys(c.notes) if n not in report.notes)
    apart = {i for group, _, _ in templates for m in group.members for i in m.nodes}
    rest_at = next((i for i in region.nodes if i not in apart), None)
    return copies.assemble(region, rest, instances, rest_at)


def _lower_region(region: Region, label: str, options: LowerOptions,
                  reserved: set[str] | None = None) -> tuple[onnx.ModelProto, LowerReport]:
    """A region's sub-model lowered (and optimized, unless ``--no-optimize``) and checked.
    ``reserved``: names the lowering must not take (else the region's)."""
    sub = from_proto(region.model, label)
    region.model = onnx.ModelProto()  # converted: its protobuf copy of the region goes
    sub.meta[RESERVED_NAMES_KEY] = region.reserved if reserved is None else reserved
    lowered, report = lower_with_report(sub, options, optimize=True)
    return to_proto(lowered), report
