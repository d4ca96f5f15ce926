"""``lower``'s validation: what it writes ran against the original first (translation
validation, as CompCert checks each output of an untrusted pass).

The lowered model is run beside the original on the executor, on inputs synthesized from
the declared types at two sizes of every symbolic dim (the second with empty lists where
an input is a sequence). It fails when it fails onnx's checker, fails to run, or gives
other outputs on a sample the original runs; a sample the original itself fails proves
nothing and is not counted. A failing lowering is not written: the job lowers again with
the failing web kept as it was (``seqlower.keys.KEEP_KEY`` on its ops, which the analysis
reads), and that web is reported with the reason; if no web alone explains it, every web
is kept. The backend is the fastest installed: onnxruntime, else the reference.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from typing import Any

import onnx

from seqlower.errors import ModelWarning, SeqlowerError
from seqlower.keys import KEEP_KEY
from seqlower.options import LowerOptions
from seqlower.report import LowerReport

__all__ = ["MAX_WEBS_TRIED", "MAX_WEIGHT_BYTES", "TARGET_RUNTIMES", "Validation", "backend", "mark_kept", "on_target",
           "original_runs_on_target", "prepare", "run_validation",
           "sequence_webs", "unchanged_report"]

# Samples: (seed, size of every symbolic dim, length of every sequence input, integers
# drawn below this).
_SAMPLES = ((0, 3, 3, 4), (1, 2, 0, 4))
# Where the original rejects every sample (a position past a list's end, a Reshape to a
# size only some dims give), these are tried in turn until one runs: small dims and lists,
# then integers all zero (a position valid in any list, a Loop of no trips).
_FALLBACKS = ((2, 1, 1, 4), (3, 2, 2, 1), (4, 1, 0, 1))
# On the target's runtime, also zero-size dims, and integers all zero at other sizes: a
# runtime sizes empty tensors its own way (OpenVINO after a Loop), and runs a Loop of no
# trips its own way (OpenVINO reshaped such a Loop's stack to [4, 0]: program 9400316);
# only samples that have them show it.
_TARGET_SAMPLES = (*_SAMPLES, (5, 0, 0, 1), (6, 2, 1, 1))
# Past this many webs, a failure keeps them all at once instead of trying each alone.
MAX_WEBS_TRIED = 8
_OVER_BOUND = "needed more steps than its bound"
# onnxruntime without its optimizer: validation checks the lowering, not onnxruntime's
# rewrites of it, and the sessions cost least (the original of 10,000 list edits: 0.63 s
# against 1.42 s with the basic optimizations, and its run 1.4 s against 1.9 s; "all" made
# a 3,000-node chain's sessions in twice the time of "basic").
_ORT_LEVEL = "disable"
# Float tolerance: a lowering that batches a map's body sums in another order (a 64-term
# dot product moved 5e-6 on a value of 0.057); validation looks for wrong computations,
# not rounding (verify keeps its own, tighter tolerances).
_TOL = 1e-4
# Weights past this are not loaded to validate (a 2 GiB model lowers in seconds without
# reading them): the report says validation was skipped.
MAX_WEIGHT_BYTES = 256 << 20


@dataclass
class Validation:
    """What one validation found: ``failure`` (None: the lowered model ran and matched),
    how many samples were compared, on which backend."""

    backend: str
    compared: int = 0
    samples: int = 0
    failure: str | None = None
    notes: list[str] = field(default_factory=list)
    feeds: list[dict[str, Any]] | None = field(default=None, repr=False)  # the samples run (not at fixed shapes)

    def to_json(self, scope: str = "model") -> dict[str, Any]:
        """What the report says; ``scope``: what ran (the whole model, or the sequence
        region alone, its inputs synthesized at its boundary)."""
        return {"scope": scope, "backend": self.backend, "samples": self.samples, "compared": self.compared,
                **({"failure": self.failure} if self.failure else {})}


def backend() -> str:
    return "onnxruntime" if importlib.util.find_spec("onnxruntime") is not None else "reference"


def prepare() -> None:
    """Start the backend's worker now: its import overlaps the lowering."""
    if backend() == "onnxruntime":
        from seqlower.executor.onnxruntime_backend import prestart

        prestart()


def run_validation(original: onnx.ModelProto, lowered: onnx.ModelProto, options: LowerOptions) -> Validation:
    """The lowered model against the original, on ``backend()`` (see the module)."""
    name = backend()
    result = Validation(name)
    with warnings.catch_warnings():
        # (what the models' readers warn of was said when the input was read)
        warnings.simplefilter("ignore", ModelWarning)
        report = _verify(original, lowered, options, name, result)
    if report is None:
        return result
    result.samples, result.compared = len(report.samples), report.compared
    if report.interface_error:
        result.failure = report.interface_error
        return result
    # A Loop bounded by --max-trips / --dim-max that a sample needed more steps of says so
    # at run time (the user chose the bound): such a sample proves nothing.
    over = [s for s in report.samples if s.status == "lowered failed" and _OVER_BOUND in s.error]
    result.compared -= len(over)
    bad = None
    for k, sample in enumerate(report.samples):
        if sample.status not in ("different", "lowered failed") or sample in over:
            continue
        feeds = result.feeds[k] if result.feeds else None
        verdict = _reference_verdict(original, lowered, options, feeds) if name != "reference" else None
        if verdict == "equal" and sample.status == "different":
            # onnxruntime's numbers for the original are its own (its Gather of string
            # rows copies one string a row): the reference, the spec, confirms the lowering.
            result.notes.append(f"validation: {name} computes the original otherwise than the reference, which"
                                " agrees with the lowering")
        elif verdict == "original failed":
            # A sample the spec rejects, which onnxruntime ran anyway (a region's input
            # synthesized [2, 2] where the model gives [0, 0]: its ConcatFromSequence of
            # rows that disagree): it proves nothing.
            result.compared -= 1
        else:
            bad = sample
            break
    if bad is not None:
        result.failure = f"on {name}, {bad.source} ({bad.status}): {_what(bad)}"
    elif not result.compared:
        why = report.not_run or next((s.error for s in report.samples if s.error), "")
        result.notes.append(f"validation proved nothing: the original does not run on {name} ({why})")
    return result


def _what(sample: Any) -> str:
    """What went wrong on a sample: its error, or which outputs differ."""
    return sample.error or "outputs " + ", ".join(o.name for o in sample.outputs if not o.ok) + " differ"


def _reference_verdict(original: onnx.ModelProto, lowered: onnx.ModelProto, options: LowerOptions,
                       feeds: dict[str, Any] | None) -> str | None:
    """The reference backend's verdict on the sample ``feeds`` ("equal", "different",
    "original failed", ...), or None where it could not say."""
    from seqlower.executor import verify

    if feeds is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)
        report = verify(original, lowered, inputs=[feeds], backend="reference", keepdims_policy=options.keepdims_policy,
                        check=False, rtol=_TOL, atol=_TOL)
    return report.samples[0].status if report.samples else None


def _verify(original: onnx.ModelProto, lowered: onnx.ModelProto, options: LowerOptions, name: str,
            result: Validation) -> Any:
    from seqlower.executor import read_abi, verify

    policy = options.keepdims_policy
    level = dict(backend=name, keepdims_policy=policy, check=False, ort_opt_level=_ORT_LEVEL, rtol=_TOL, atol=_TOL)
    try:
        fixed = getattr(read_abi(lowered), "fixed", None)
        # (fixed: no samples, drawn at the fixed shapes, as verify does for a specialized model)
        return _compared(original, lowered, options, result, None if fixed else _SAMPLES, **level)
    except SeqlowerError as e:
        result.notes.append(f"validation did not run: {e}")
        return None


def _compared(original: onnx.ModelProto, lowered: onnx.ModelProto, options: LowerOptions, result: Validation,
              plan: tuple | None, **level: Any) -> Any:
    """verify's report on the samples of ``plan``; where the original rejects them all
    (they prove nothing), on the first of ``_FALLBACKS`` it runs."""
    from seqlower.executor import verify

    samples = None if plan is None else _samples(original, options, plan)
    report = verify(original, lowered, inputs=samples, samples=len(_SAMPLES), **level)
    result.feeds = samples
    for fallback in _FALLBACKS if samples else ():
        if report.compared or report.not_run or report.interface_error:
            break
        one = _samples(original, options, [fallback])
        report = verify(original, lowered, inputs=one, **level)
        result.feeds = one
    return report


def _samples(original: onnx.ModelProto, options: LowerOptions,
             plan: tuple | list = _SAMPLES) -> list[dict[str, Any]] | None:
    """Synthesized inputs, one per (seed, dim, list length, integer bound) of ``plan``; None for a model
    lowered at fixed shapes (verify draws those itself)."""
    from seqlower.executor.inputs import synthesize_inputs
    from seqlower.executor.runner import ports_of

    if options.specialized:
        return None
    ports = ports_of(original, check=False)
    samples, seen = [], set()
    for seed, dim, seq_len, high in plan:
        feeds = synthesize_inputs(ports, seed, _within(options, dim), seq_len, default_dim=dim, int_high=high)
        if (key := _signature(feeds)) not in seen:
            seen.add(key)
            samples.append(feeds)
    return samples


def _signature(feeds: dict[str, Any]) -> tuple:
    """What a sample decides of the models' run: every shape, every list's length, and
    the values of integer and boolean inputs (positions, counts, conditions). Two samples
    alike in it differ in float values only, and the second proves nothing the first did
    not (a model of static shapes: the original of 10,000 list edits took 1.4 s a sample
    on onnxruntime, the lowering's validation 125% of the lowering)."""
    import numpy as np

    def sig(v: Any) -> tuple:
        if isinstance(v, list | tuple):
            return ("list", tuple(sig(e) for e in v))
        a = np.asarray(v)
        if a.dtype == object:  # strings: their values decide (a Gather of rows, an Equal)
            return (a.shape, "object", tuple(a.reshape(-1)))
        return (a.shape, str(a.dtype), a.tobytes() if a.dtype.kind in "biu" else None)

    return tuple((name, sig(v)) for name, v in sorted(feeds.items()))


# Targets whose own runtime the executor drives: validation runs the lowered model there too.
TARGET_RUNTIMES = {"openvino": "openvino", "tract": "tract"}


def on_target(original: onnx.ModelProto, lowered: onnx.ModelProto, options: LowerOptions) -> Validation | None:
    """The lowered model on the target's own runtime, where the executor drives it and it
    is installed, against the original on ``backend()`` (the original may not run on the
    target: it has sequences); None where there is no such runtime. A failure here is not
    a web to keep (the target runs no sequence either): it is named, as ``check --target``
    names a gap."""
    got = _on_target_runtime(original, lowered, options)
    if got is None:
        return None
    result, report = got
    if report is None:
        return result
    result.samples, result.compared = len(report.samples), report.compared
    bad = next((s for s in report.samples if s.status in ("different", "lowered failed")
                and _OVER_BOUND not in s.error), None)
    if report.interface_error:
        result.failure = report.interface_error
    elif bad is not None:
        result.failure = f"{bad.source} ({bad.status} on {result.backend}): {_what(bad)}"
    return result


def original_runs_on_target(original: onnx.ModelProto, options: LowerOptions) -> bool:
    """Whether the original itself runs on the target's runtime (some run sequence ops),
    to ``backend()``'s numbers, on the samples ``on_target`` uses: where it does, a
    lowered model that fails there would be worse than no lowering."""
    got = _on_target_runtime(original, original, options)
    report = got[1] if got is not None else None
    return report is not None and bool(report.compared) and all(
        s.status == "equal" for s in report.samples if s.status != "original failed")


def _on_target_runtime(original: onnx.ModelProto, model: onnx.ModelProto, options: LowerOptions) -> Any:
    """``model`` on the target's runtime against ``original`` on ``backend()``, on
    ``_TARGET_SAMPLES``: (the Validation, verify's report or None where it could not run),
    or None where the target has no runtime here."""
    from seqlower.executor import read_abi

    runtime = TARGET_RUNTIMES.get(options.target)
    if runtime is None or importlib.util.find_spec(runtime) is None:
        return None
    result = Validation(runtime)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)
        try:
            fixed = getattr(read_abi(model), "fixed", None)
            report = _compared(original, model, options, result, None if fixed else _TARGET_SAMPLES,
                               backend=backend(), lowered_backend=runtime, keepdims_policy=options.keepdims_policy,
                               check=False, rtol=_TOL, atol=_TOL)
        except SeqlowerError as e:
            result.notes.append(f"validation on {runtime} did not run: {e}")
            return result, None
    return result, report


def _within(options: LowerOptions, dim: int) -> dict[str, int]:
    """The dims --dim-max bounds, drawn within their bound."""
    return {name: min(dim, bound) for name, bound in options.dim_max.items()}


def unchanged_report(original: onnx.ModelProto, why: str) -> LowerReport:
    """The report of a model left as it was: every sequence op in it stays, for ``why``."""
    from seqlower.io.inventory import take_inventory

    report = LowerReport(notes=[why], validation={"backend": backend(), "kept": why})
    inventory = take_inventory(original)
    report.remaining = [{"op": op.op_type, "node": op.node, "graph": op.graph, "reason": why} for op in inventory.ops]
    report.remaining += [{"value": v.name, "type": v.type, "graph": v.graph, "reason": why}
                         for v in inventory.values if v.role in ("input", "output") and v.graph == "main"]
    return report


def sequence_webs(proto: onnx.ModelProto) -> list[set[str]]:
    """The webs of the original's sequence values (seqlower.analysis), each as the names
    of its values; in the order the analysis found them."""
    from seqlower.analysis.analyzer import analyze
    from seqlower.io.models import from_proto

    try:
        analysis = analyze(from_proto(proto, "<validation>"), max_unroll=0)
    except Exception:  # noqa: BLE001 - a model the analysis cannot read has no webs to try alone
        return []
    return [{v.name for v in web.values if v.name} for web in analysis.webs]


def mark_kept(proto: onnx.ModelProto, values: set[str] | None, why: str) -> int:
    """Mark the ops making or reading ``values`` (None: every sequence op) so the web
    stays as it is, with ``why``; the count of ops marked."""
    marked = 0
    for node in _walk(proto.graph):
        names = {*node.input, *node.output}
        touches = bool(values & names) if values is not None else _is_sequence_op(node)
        if touches:
            entry = next((p for p in node.metadata_props if p.key == KEEP_KEY), None)
            if entry is None:
                node.metadata_props.add(key=KEEP_KEY, value=why)
            marked += 1
    return marked


def _walk(graph: onnx.GraphProto):
    from seqlower.io.protos import subgraphs_of

    for node in graph.node:
        yield node
        for sub in subgraphs_of(node):
            yield from _walk(sub)


def _is_sequence_op(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and (node.op_type.startswith("Sequence") or node.op_type in (
        "SplitToSequence", "ConcatFromSequence"))
