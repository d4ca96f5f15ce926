"""``seqlower verify`` and ``seqlower run``, and the comparison ``lower --verify`` makes."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable
from typing import Any

from seqlower.cli._common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Console, Progress, nulls, print_table
from seqlower.errors import SeqlowerError




def backends_of(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str]]:
    """The (original's, lowered's) backends to compare on, and notes: ``--backend`` picks
    one; by default the reference backend and onnxruntime (a model either refuses is not
    equivalent), and for ``lower --target X`` the lowered model on X's own runtime too
    (against the original on the reference backend), where it is installed."""
    if args.backend:
        return [(args.backend, args.backend)], []
    notes: list[str] = []
    if importlib.util.find_spec("onnxruntime") is None:
        pairs = [("reference", "reference")]
        notes.append("onnxruntime is not installed: compared on the reference backend only")
    else:
        pairs = [("reference", "reference"), ("onnxruntime", "onnxruntime")]
    target = getattr(args, "target", None)
    if target and target not in ("generic", "onnxruntime"):
        from seqlower.fastpath.validate import TARGET_RUNTIMES  # (lower --target X --verify runs it there)

        runtime = TARGET_RUNTIMES.get(target)
        if runtime is None:
            notes.append(f"{target}'s own runtime is not one the executor drives: the lowered model was not run there")
        elif importlib.util.find_spec(runtime) is None:
            notes.append(f"{runtime} is not installed: the lowered model was not run on {target}'s own runtime")
        else:
            pairs.append(("reference", runtime))
    return pairs, notes


def load_given_inputs(model: str, paths: list[str] | None) -> list[dict[str, Any]] | None:
    """``--inputs`` files read against ``model``'s inputs, before anything is written: a
    missing or unreadable file is exit 2."""
    if not paths:
        return None
    from seqlower.executor import Executor, load_inputs

    ports = Executor(model, backend="reference").inputs
    return [load_inputs(x, ports) for x in paths]


class Verdict:
    """One comparison per backend. A backend that could not run the original on any
    sample proves nothing either way: it is *not run*, with its reason. Equivalent when
    no backend found a difference (an output that differs, or a lowered model that fails
    where the original ran) and at least one compared a sample; exit 1 only for a real
    difference, exit 2 when no backend could compare."""

    def __init__(self, reports: list[Any], notes: list[str]) -> None:
        self.reports, self.notes = reports, notes

    @property
    def differs(self) -> bool:
        return any(r.interface_error or any(s.status in ("different", "lowered failed") for s in r.samples)
                   for r in self.reports)

    @property
    def equivalent(self) -> bool:
        return not self.differs and any(r.compared for r in self.reports)

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.differs else EXIT_OK if self.equivalent else EXIT_USAGE

    @property
    def compared(self) -> int:
        return max((r.compared for r in self.reports), default=0)

    def summary(self) -> str:
        ran = [f"{r.backend} ({r.compared} of {len(r.samples)} samples compared)" for r in self.reports if r.compared
               or r.interface_error]
        word = "EQUIVALENT" if self.equivalent else "NOT EQUIVALENT" if self.differs else "NOT PROVEN"
        text = f"{word} on {' and '.join(ran)}" if ran else f"{word}: no backend could run the original"
        not_run = [f"{r.backend} ({_not_run_reason(r)})" for r in self.reports if not r.compared and not r.interface_error]
        return text + (f"; not run on {', '.join(not_run)}" if not_run else "")

    def reason(self) -> str:
        """Why not equivalent, in one line."""
        for r in self.reports:
            if r.interface_error:
                return f"not equivalent on {r.backend}: {r.interface_error}"
            bad = next((s for s in r.samples if s.status in ("different", "lowered failed")), None)
            if bad is not None:
                what = bad.error or ", ".join(o.name for o in bad.outputs if not o.ok)
                return f"not equivalent on {r.backend}: sample {bad.index} ({bad.source}) {bad.status}: {what}"
        if not self.equivalent:
            return "not proven: no backend could run the original on any sample; give inputs with --inputs"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {"equivalent": self.equivalent, "differs": self.differs, "compared": self.compared,
                "not_run": {r.backend: _not_run_reason(r) for r in self.reports if not r.compared and not r.interface_error},
                "notes": self.notes, "backends": [r.to_json() for r in self.reports]}


def _not_run_reason(report: Any) -> str:
    if report.not_run:
        return report.not_run
    first = next((s.error for s in report.samples if s.status == "original failed" and s.error), "")
    return f"the original failed: {first}" if first else "no sample"


def compare(original: Any, lowered: Any, args: argparse.Namespace, given: list[dict[str, Any]] | None) -> Verdict:
    from seqlower.executor import parse_dims, verify

    backends, notes = backends_of(args)
    reports = []
    total = len(given) if given else args.samples
    bar = Progress(total * len(backends), "verifying")
    for backend, lowered_backend in backends:
        reports.append(verify(original, lowered, inputs=given, samples=args.samples, seed=args.seed,
                              dims=parse_dims(args.dim), seq_len=args.seq_len, backend=backend,
                              lowered_backend=lowered_backend,
                              rtol=getattr(args, "rtol", None), atol=getattr(args, "atol", None),
                              keepdims_policy=args.keepdims_policy, ort_opt_level=args.ort_opt_level,
                              progress=lambda i, n, b=lowered_backend: bar.step(f"{b} sample {i + 1} of {n}"),
                              keep=getattr(args, "save_failures", None) is not None))
    bar.close()
    return Verdict(reports, notes)


def cmd_verify(args: argparse.Namespace) -> int:
    from seqlower import __version__

    verdict = compare(args.original, args.lowered, args, load_given_inputs(args.original, args.inputs))
    saved = save_failures(verdict, args.save_failures) if args.save_failures else []
    if args.json:
        doc = {"seqlower_version": __version__, "original": args.original, "lowered": args.lowered,
               **verdict.to_json(), **({"saved_failures": saved} if args.save_failures else {})}
        print(json.dumps(nulls(doc), indent=2))
    else:
        print_verdict(verdict, args.original, args.lowered, Console())
        if args.save_failures:
            print(f"saved {len(saved)} failing sample(s) in {args.save_failures}")
    return verdict.exit_code


def save_failures(verdict: Verdict, folder: str) -> list[str]:
    """Each kept sample (one that differs, or that the lowered model fails) as a backend
    test-data folder, ``folder/BACKEND/sample_K/``: what a runtime's own tests, or
    ``seqlower run --inputs``, read back. Gives the folders written."""
    from pathlib import Path

    from seqlower.executor import save_values

    written = []
    for report in verdict.reports:
        if report.ports is None:
            continue
        inputs, original_outputs, lowered_outputs = report.ports
        for s in report.samples:
            if s.feeds is None:
                continue
            where = Path(folder) / report.backend.replace(" ", "_") / f"sample_{s.index}"
            try:
                save_values(where, "input", inputs, [s.feeds[p.name] for p in inputs])
                if s.expected is not None:
                    save_values(where, "output", original_outputs, [s.expected[p.name] for p in original_outputs])
                if s.actual is not None:
                    save_values(where, "lowered_output", lowered_outputs,
                                [s.actual[p.name] for p in lowered_outputs])
            except OSError as e:
                raise SeqlowerError(f"{folder}: cannot write the failing samples ({e.strerror or e})") from None
            written.append(str(where))
    return written


def print_verdict(verdict: Verdict, a: str, b: str, out: Callable[[str], None]) -> None:
    for report in verdict.reports:
        out(f"verify {a} vs {b} on {report.backend}")
        if report.interface_error:
            out(f"NOT EQUIVALENT: {report.interface_error}")
            continue
        for s in report.samples:
            out(f"sample {s.index} ({s.source}): {s.status}" + (f": {s.error}" if s.error else ""))
            if s.outputs:
                rows = [("output", "expected", "actual", "max abs", "max rel", "verdict")]
                for o in s.outputs:
                    rows.append((o.name, o.expected, o.actual, f"{o.max_abs:.3g}", f"{o.max_rel:.3g}",
                                 "ok" if o.ok else "DIFFERENT"))
                print_table(rows, indent="  ", out=out)
                for o in s.outputs:
                    if not o.ok:
                        out(f"  {o.name}: {o.detail}")
        for n in report.notes:
            out(f"note: {n}")
        if report.compared == 0 and not report.interface_error:
            out(f"NOT RUN on {report.backend}: {_not_run_reason(report)}")
    for n in verdict.notes:
        out(f"note: {n}")
    out(verdict.summary())


# -- run ----------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from seqlower.executor import Executor, describe_value, load_inputs, parse_dims, save_values, synthesize_inputs

    ex = Executor(args.model, backend=args.backend or "reference", keepdims_policy=args.keepdims_policy,
                  ort_opt_level=args.ort_opt_level, use_abi=not args.raw)
    if args.inputs and len(args.inputs) > 1:
        raise SeqlowerError("run takes one --inputs")
    feeds = (load_inputs(args.inputs[0], ex.inputs) if args.inputs
             else synthesize_inputs(ex.inputs, args.seed, parse_dims(args.dim), args.seq_len))
    result = ex.run(feeds)
    if args.save:
        save_values(args.save, "input", ex.inputs, [feeds[p.name] for p in ex.inputs])
        save_values(args.save, "output", ex.outputs, [result.outputs[p.name] for p in ex.outputs])
    if args.json:
        from seqlower import __version__

        print(json.dumps({"seqlower_version": __version__, "input": args.model, "backend": ex.backend_name,
                          "outputs": {k: _jsonable(v, np) for k, v in result.outputs.items()}, "notes": result.notes},
                         indent=2))
    else:
        for name, value in result.outputs.items():
            print(f"{name}: {describe_value(value)}")
            for line in _format_value(value, np).splitlines():
                print(f"  {line}")
        for n in result.notes:
            print(f"note: {n}")
        if args.save:
            print(f"saved input_*.pb and output_*.pb in {args.save}")
    return EXIT_OK


def _format_value(value: Any, np: Any) -> str:
    if value is None:
        return "(empty optional)"
    if isinstance(value, dict):
        return ", ".join(f"{k!r}: {v}" for k, v in value.items()) or "(empty map)"
    if isinstance(value, list):
        return "\n".join(f"[{i}] {_format_value(v, np)}" for i, v in enumerate(value)) or "(empty)"
    return np.array2string(np.asarray(value), threshold=40)


def _jsonable(value: Any, np: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v, np) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v, np) for v in value]
    arr = np.asarray(value)
    data = arr.astype(np.float64) if arr.dtype.kind not in "biufcOUS" else arr
    return {"dtype": str(arr.dtype), "shape": list(arr.shape), "data": data.tolist() if arr.dtype.kind != "c" else str(arr)}
