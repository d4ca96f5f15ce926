"""``seqlower lower``: one model, several, or every model below a folder."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqlower.cli._common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    STDOUT,
    Console,
    Progress,
    commit_text,
    find_models,
    nulls,
    print_table,
    stage_text,
    unlink_quietly,
    worst,
)
from seqlower.collector import fewer_collections
from seqlower.errors import ModelWarning, SeqlowerError

# The ops a lowering removes, listed first in the op table, before what replaced them.
_SEQUENCE_FAMILY = ("SplitToSequence", "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                    "SequenceAt", "SequenceLength", "SequenceMap", "ConcatFromSequence", "ReverseSequence",
                    "Optional", "OptionalHasElement", "OptionalGetElement", "ai.onnx.ml::ZipMap")


@dataclass
class Outcome:
    """What lowering one model came to; picklable, so pool workers return it."""

    input: str
    output: str | None
    code: int = EXIT_OK
    reason: str = ""  # one line when code != 0
    lines: list[str] = field(default_factory=list)  # the human report
    seconds: float = 0.0

    def summary(self) -> str:
        if self.code == EXIT_OK:
            return f"ok     {self.input} -> {self.output}  ({self.seconds:.2f} s)"
        return f"{'FAIL ' if self.code == EXIT_FAIL else 'ERROR'}  {self.input}: {self.reason}"


def cmd_lower(args: argparse.Namespace) -> int:
    if args.output == STDOUT and args.report == STDOUT:
        raise SeqlowerError("-o - and --report - would both write to stdout; give one of them a file")
    batch = len(args.models) > 1 or Path(args.models[0]).is_dir()
    if not batch and args.output != STDOUT and Path(args.output).is_dir():
        # One model into an existing folder keeps its name there, as in a batch.
        args.output = str(Path(args.output) / Path(args.models[0]).name)
    if batch:
        return _lower_batch(args)
    out = Console(stdout_taken=STDOUT in (args.output, args.report), quiet=args.quiet)
    outcome = lower_one(args.models[0], args.output, args)
    if outcome.code == EXIT_USAGE and not outcome.lines:
        raise SeqlowerError(outcome.reason)
    for line in outcome.lines:
        out(line)
    if args.junit:
        from seqlower.cli.junit import Case, write_junit

        write_junit(Path(args.junit), "seqlower lower",
                    [Case(outcome.input, outcome.code, outcome.reason, outcome.seconds, "\n".join(outcome.lines))])
    return outcome.code


def count_ops(model: Any) -> Counter[str]:
    """Op types of every node, subgraphs and functions included (``domain::op`` outside
    the default domain), of an onnx_ir model or a ModelProto."""
    import onnx
    import onnx_ir as ir

    counts: Counter[str] = Counter()
    if isinstance(model, onnx.ModelProto):
        from seqlower.io.inventory import walk_graphs

        for _, g, _ in walk_graphs(model):
            for node in g.node:
                counts[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"] += 1
        return counts
    graphs = [model.graph, *model.functions.values()]
    for g in graphs:
        for node in ir.traversal.RecursiveGraphIterator(g):
            counts[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"] += 1
    return counts


def op_table(before: Counter[str], after: Counter[str]) -> list[tuple[str, str, str]]:
    """onnxsim's table: the sequence ops first, then what replaced them (counts that
    changed), then the rest."""
    names = set(before) | set(after)
    seq = [n for n in _SEQUENCE_FAMILY if n in names]
    changed = sorted(n for n in names - set(seq) if before[n] != after[n])
    same = sorted(n for n in names - set(seq) - set(changed))
    rows = [("op", "before", "after")]
    rows += [(n, str(before[n]), str(after[n])) for n in [*seq, *changed, *same]]
    rows.append(("total", str(sum(before.values())), str(sum(after.values()))))
    return rows


def lower_one(src_name: str, dst_name: str, args: argparse.Namespace) -> Outcome:
    """Lower one model and write it (and its report); every expected failure becomes the
    outcome's code and one-line reason, so a batch goes on with the next model."""
    start = time.perf_counter()
    outcome = Outcome(src_name, dst_name)
    try:
        with fewer_collections():
            _lower_one(Path(src_name), dst_name, args, outcome, start)
    except SeqlowerError as e:
        outcome.code, outcome.reason = EXIT_USAGE, str(e)
    outcome.seconds = time.perf_counter() - start
    return outcome


def _lower_one(src: Path, dst_name: str, args: argparse.Namespace, outcome: Outcome, start: float) -> None:
    from seqlower.cli.verify import compare, load_given_inputs
    from seqlower.io.models import check_model, read_model_proto
    from seqlower.targets import load_target

    to_stdout = dst_name == STDOUT
    dst = Path(dst_name)
    if not to_stdout and dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise SeqlowerError(f"{dst}: the output path is the input model; choose another")
    timings: dict[str, float] = {}
    given = load_given_inputs(str(src), args.inputs) if args.verify else None
    job, report, before, after = _read_and_lower(src, args, timings)
    lowered, weights = job.lowered, job.weights
    target = load_target(args.target)
    gaps = report.gaps
    t = time.perf_counter()
    staged = None if to_stdout else job.stage(dst)
    try:
        if staged is not None and staged.external_data:
            # The final check, against the output's own folder, as a user will load it.
            check_model(read_model_proto(staged.path, load_external_data=False, check=False), str(dst),
                        base_dir=str(staged.folder), what="fails the ONNX checker")
        payload = _stdout_bytes(lowered, src, weights) if to_stdout else None
        timings["write"] = time.perf_counter() - t
        verdict = None
        if args.verify:
            t = time.perf_counter()
            with warnings.catch_warnings():
                # The source warned when it was loaded; the staged copy inherits the same.
                warnings.simplefilter("ignore", ModelWarning)
                verdict = compare(str(src), payload if to_stdout else str(staged.path), args, given)
            timings["verify"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - start
        equivalent = verdict is None or verdict.equivalent
        # The report only when asked for: 10,000 rewrites are 0.3 s of JSON.
        text = _report_text(src, dst, to_stdout, equivalent, timings, before, after, report, target, gaps, verdict) \
            if args.report else ""
        _commit(staged if equivalent else None, args.report, text, dst, to_stdout)
    finally:
        if staged is not None:
            staged.discard()
    if equivalent and payload is not None:
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
    if args.report == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
    _describe(outcome, report, verdict, gaps, target.name, before, after, src, dst_name, timings["total"], args)


def _read_and_lower(src: Path, args: argparse.Namespace, timings: dict[str, float]) -> tuple[Any, Any, Counter[str], Counter[str]]:
    """The job read and lowered, its report, and the op counts before and after (when
    the output says them)."""
    from seqlower.fastpath.job import Job
    from seqlower.fastpath.pipeline import LowerOptions

    t = time.perf_counter()
    job = Job.read(src)
    counting = _counting(args)
    before = count_ops(job.proto) if counting else Counter()
    timings["load"] = time.perf_counter() - t
    t = time.perf_counter()
    options = LowerOptions(max_unroll=args.max_unroll, keepdims_policy=args.keepdims_policy, target=args.target,
                           optimize=args.optimize, max_trips=args.max_trips, dim_max=dict(args.dim_max or []),
                           input_shapes=dict(args.input_shape or []), fixed_dims=dict(args.fix_dim or []),
                           validate=args.validate)
    report = job.lower(options)
    after = count_ops(job.lowered) if counting else Counter()
    timings["lower"] = time.perf_counter() - t
    if "seconds" in report.validation:
        timings["validate"] = report.validation["seconds"]  # (part of "lower")
    return job, report, before, after


def _commit(staged: Any, report_path: str | None, text: str, dst: Path, to_stdout: bool) -> None:
    """The staged output (None: not to be written: not equivalent, or to stdout) and the
    report file put in place together: when one fails, neither is left behind."""
    staged_report = stage_text(Path(report_path), text, "the report") if report_path and report_path != STDOUT else None
    existed = not to_stdout and dst.exists()
    try:
        if staged is not None:
            staged.commit()
        if staged_report is not None:
            commit_text(Path(report_path), staged_report, "the report")
    except BaseException:
        if staged_report is not None:
            unlink_quietly(staged_report)
        if not existed and staged is not None:
            unlink_quietly(dst)
        raise


def _report_text(src: Path, dst: Path, to_stdout: bool, equivalent: bool, timings: dict[str, float], before: Counter[str],
                 after: Counter[str], report: Any, target: Any, gaps: list[Any], verdict: Any) -> str:
    from seqlower import __version__

    doc = {
        "seqlower_version": __version__,
        "input": str(src),
        "output": (None if to_stdout else str(dst)) if equivalent else None,
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "ops": {"before": dict(sorted(before.items())), "after": dict(sorted(after.items()))},
        **report.to_json(),
        "target": {"name": target.name, "gaps": [g.to_json() for g in gaps]},
        "verify": verdict.to_json() if verdict is not None else None,
    }
    return json.dumps(nulls(doc), indent=2) + "\n"


def _stdout_bytes(lowered: Any, src: Path, weights: Any = None) -> bytes:
    """The model as one protobuf message: external weights read in, when they fit
    (``weights``: what the reader held out of a ModelProto)."""
    import onnx
    import onnx_ir as ir

    from seqlower.ir.helpers import graphs_of
    from seqlower.io.models import PROTOBUF_LIMIT, to_proto

    if isinstance(lowered, onnx.ModelProto):  # lowered by region: no external data
        if weights is not None:
            return b"".join(weights.serialized(lowered))
        return lowered.SerializeToString(deterministic=True)
    total = sum(v.const_value.nbytes for g in graphs_of(lowered) for v in g.initializers.values()
                if v.const_value is not None)
    if total > PROTOBUF_LIMIT:
        raise SeqlowerError(f"{src}: its weights ({total / 2**30:.1f} GiB) do not fit one protobuf message;"
                            " -o - cannot write them: give an output file (weights go to <file>.data)")
    ir.external_data.load_to_model(lowered)
    return to_proto(lowered).SerializeToString(deterministic=True)


def _counting(args: argparse.Namespace) -> bool:
    """Whether the op table is shown, reported or put in the JUnit file: with --quiet
    alone it is nowhere, and not counted (two walks of every node: a tenth of a second
    on a 20,000-node model)."""
    return not args.quiet or bool(args.report) or bool(getattr(args, "junit", None))


def _describe(outcome: Outcome, report: Any, verdict: Any, gaps: list[Any], target: str, before: Counter[str],
              after: Counter[str], src: Path, dst: str, seconds: float, args: argparse.Namespace) -> None:
    from seqlower.cli.verify import print_verdict

    lines = outcome.lines
    shown = "stdout" if dst == STDOUT else dst
    if verdict is None or verdict.equivalent:
        lines.append(f"lowered {src} -> {shown} in {seconds:.2f} s")
    elif verdict.differs:
        lines.append(f"{src}: the lowered model is NOT equivalent; nothing written")
        outcome.code, outcome.reason = EXIT_FAIL, verdict.reason()
    else:
        lines.append(f"{src}: the lowered model could not be verified; nothing written")
        outcome.code, outcome.reason = verdict.exit_code, verdict.reason()
    if _counting(args):
        print_table(op_table(before, after), indent="  ", out=lines.append, right=(1, 2))
    if report.remaining:
        lines.append(f"  left as is: {len(report.remaining)}")
        for r in report.remaining:
            what = r.get("node") or f"value {r.get('value')!r}"
            lines.append(f"    {what} in {r['graph']}: {r['reason']}")
    else:
        lines.append("  tensor-only: yes")
    if report.fixed:
        fixed = [f"{k}=[{','.join(map(str, v))}]" for k, v in report.fixed.get("shapes", {}).items()]
        fixed += [f"{k}={v}" for k, v in report.fixed.get("dims", {}).items()]
        lines.append(f"  specialized: {' '.join(fixed)} (the lowered model runs at these shapes only)")
    for n in report.notes:
        lines.append(f"  note: {n}")
    if verdict is not None:
        if not verdict.equivalent:
            print_verdict(verdict, str(src), "the lowered model", lines.append)
        lines.append(f"  verify: {verdict.summary()}")
        lines.extend(f"  note: {n}" for n in verdict.notes)
    if outcome.code != EXIT_OK:
        return
    lacking = [g for g in gaps if not g.sequence]
    if lacking:
        lines.append(f"  target {target}: {len(lacking)} node(s) it cannot run")
        for g in lacking:
            lines.append(f"    {g.where}  in {g.graph}: {g.why}")
    if args.strict and gaps:
        lines.append(f"  strict: {len(gaps)} op(s) or value(s) {target} cannot run; exit {EXIT_FAIL}")
        outcome.code = EXIT_FAIL
        outcome.reason = f"strict: {len(gaps)} op(s) or value(s) {target} cannot run, first {gaps[0].where}"


# -- batch ----------------------------------------------------------------------------------


def _lower_batch(args: argparse.Namespace) -> int:
    if args.output == STDOUT or args.report == STDOUT:
        raise SeqlowerError("lowering several models needs an output folder (-o DIR), and --report DIR")
    out_dir = Path(args.output)
    if out_dir.exists() and not out_dir.is_dir():
        raise SeqlowerError(f"{out_dir}: lowering several models needs -o to be a folder")
    for p in args.models:
        if not Path(p).exists():
            raise SeqlowerError(f"{p}: no such file or folder")
    models = find_models(args.models, exclude=out_dir)
    if not models:
        raise SeqlowerError(f"no .onnx model in {', '.join(args.models)}")
    report_dir = Path(args.report) if args.report else None
    jobs = []
    for src, rel in models:
        dst = out_dir / rel
        report = str((report_dir / rel).with_suffix(".json")) if report_dir else None
        jobs.append((str(src), str(dst), report))
    for _, dst, report in jobs:
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        if report:
            Path(report).parent.mkdir(parents=True, exist_ok=True)
    out = Console(quiet=args.quiet)
    progress = Progress(len(jobs), "lowering")
    outcomes: list[Outcome] = []
    workers = args.jobs or 1
    if workers == 1:
        for job in jobs:
            outcomes.append(_batch_job(job, args))
            progress.step(job[0])
            out(outcomes[-1].summary())
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_batch_job, job, args) for job in jobs]
            for f in futures:
                outcomes.append(f.result())
                progress.step(outcomes[-1].input)
                out(outcomes[-1].summary())
    progress.close()
    counts = Counter(o.code for o in outcomes)
    out(f"{len(outcomes)} model(s): {counts[EXIT_OK]} lowered, {counts[EXIT_FAIL]} failed, "
        f"{len(outcomes) - counts[EXIT_OK] - counts[EXIT_FAIL]} refused")
    if args.junit:
        from seqlower.cli.junit import Case, write_junit

        write_junit(Path(args.junit), "seqlower lower",
                    [Case(o.input, o.code, o.reason, o.seconds, "\n".join(o.lines)) for o in outcomes])
    return worst(o.code for o in outcomes)


def _batch_job(job: tuple[str, str, str | None], args: argparse.Namespace) -> Outcome:
    src, dst, report = job
    one = argparse.Namespace(**{**vars(args), "report": report})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)
        try:
            return lower_one(src, dst, one)
        except Exception as e:  # noqa: BLE001 - one model's internal error must not stop the batch
            first = str(e).splitlines()[0] if str(e) else ""
            return Outcome(src, dst, EXIT_USAGE, f"internal error: {type(e).__name__}: {first}")
