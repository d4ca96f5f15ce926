"""Long run of the random-program property test: generate sequence programs (run-time
positions, dynamic dims, Loops, Ifs; every opset from 11 to 26; float32, float16,
int64, bool and string elements), lower each and verify it on both backends.

    python tools/fuzz_programs.py [N] [SEED]      N programs from SEED (default 1000, 0)
    python tools/fuzz_programs.py --long          4 seeds x 2500 programs (about 15 min)
    python tools/fuzz_programs.py --long --seeds 0,100000 --per-seed 5000
    python tools/fuzz_programs.py 1000 0 --targets     each lowered for a target drawn at random
    python tools/fuzz_programs.py 2000 0 --shapes v4 --guided --targets --failures DIR
                                                  coverage-guided (see guided()); --replay FILE

Prints one line per failure with the seed that reproduces it, then the counts: programs,
seeds, mismatches (a lowering that is not tensor-only or not equal on a backend) and
crashes (an exception while lowering or verifying). Exit 1 when either is not zero.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx import TensorProto  # noqa: E402

from seqlower import LowerOptions, load_model, lower_with_report  # noqa: E402
from seqlower.executor.verify import verify  # noqa: E402
from seqlower.io.inventory import take_inventory  # noqa: E402
from seqlower.io.models import to_proto  # noqa: E402
from seqlower.targets import TARGETS, load_target, target_gaps  # noqa: E402
from tests.program_generator import generate  # noqa: E402

LONG_SEEDS = (0, 1_000_000, 2_000_000, 3_000_000)
LONG_PER_SEED = 2500


def run_one(seed: int, tally: dict[str, Counter], targets: bool = False, check_passes: bool = False,
            shapes: str = "v1", unknown_rank: bool = True) -> tuple[str, str] | None:
    """Generate, lower and verify program ``seed`` (for a target drawn from every target
    with ``targets``); None when it is right, else the kind ("mismatch" or "crash") and
    what went wrong."""
    rng = random.Random(seed)

    def draw(kind, *args):
        return rng.randint(args[0], args[1]) if kind == "int" else rng.choice(args[0])

    target = random.Random(-seed).choice(TARGETS) if targets else "generic"
    return run_drawn(draw, target, tally, check_passes, shapes, unknown_rank)


def _onnxruntime_excused(m, low, feeds, target: str, rep) -> bool:
    """Whether onnxruntime's verdict says nothing of the lowering (the reference, the
    spec, found it equal first): onnxruntime computes the original otherwise than the
    reference (its string copies in nested Loops gave empty strings), or, for another
    target, it has no kernel for an op the lowered model uses there (a bool Where)."""
    from seqlower.executor import Executor, compare_values

    if not rep.samples:
        why = (rep.not_run or "") + (rep.interface_error or "")
        return target not in ("generic", "onnxruntime") and "NOT_IMPLEMENTED" in why
    try:
        ours = Executor(m, backend="onnxruntime").run(feeds).outputs
    except Exception:  # noqa: BLE001 - onnxruntime cannot run the original: nothing to compare
        return True
    spec = Executor(m, backend="reference").run(feeds).outputs
    return not all(compare_values(k, v, ours[k]).ok for k, v in spec.items() if k in ours)


def run_drawn(draw, target: str, tally: dict[str, Counter], check_passes: bool = False, shapes: str = "v1",
              unknown_rank: bool = True) -> tuple[str, str] | None:
    """``run_one`` for the program ``draw`` makes."""
    m, feeds = generate(draw, shapes=shapes, unknown_rank=unknown_rank)
    tally["target"][target] += 1
    tally["opset"][m.opset_import[0].version] += 1
    tally["element"][TensorProto.DataType.Name(m.graph.input[0].type.tensor_type.elem_type)] += 1
    tally["op"].update(n.op_type for n in m.graph.node)
    try:
        low_ir, report = lower_with_report(load_model(m), LowerOptions(target=target, check_each_pass=check_passes))
        tally["representation"].update({r["into"] for r in report.rewrites})
        low = to_proto(low_ir)
        if target != "generic":
            # what `check --target` says of it (its detectors are decision points too)
            tally["gap"].update(g.why.split(":")[0][:40] for g in target_gaps(low, load_target(target), report.kept_loops))
        clean = take_inventory(low).clean or target == "onnxruntime"
        problems = [] if clean else ["not tensor-only: " + "; ".join(r["reason"] for r in report.remaining[:1])]
        for backend in ("reference", "onnxruntime"):
            rep = verify(m, low, inputs=[feeds], backend=backend)
            if not rep.equivalent and not (backend == "onnxruntime" and _onnxruntime_excused(m, low, feeds, target, rep)):
                problems.append(f"{backend}: not equivalent")
    except Exception as e:  # noqa: BLE001 - a fuzzer reports every failure and goes on
        return "crash", f"--target {target}: {type(e).__name__}: {e}"
    return ("mismatch", f"--target {target}: " + "; ".join(problems)) if problems else None


class Draws:
    """The generator's choices, recorded: fresh from ``rng``, or ``replay``ed from
    another program's record except at the positions in ``redraw`` (and where a replayed
    value no longer fits what is asked, once an earlier change made the program differ)."""

    def __init__(self, rng: random.Random, replay: list | None = None, redraw: frozenset[int] = frozenset()) -> None:
        self.rng, self.replay, self.redraw, self.log = rng, replay or [], redraw, []

    def __call__(self, kind: str, *args):
        k = len(self.log)
        value = self.replay[k] if k < len(self.replay) and k not in self.redraw else None
        if kind == "int":
            fits = type(value) is int and args[0] <= value <= args[1]
        else:
            fits = value is not None and any(type(value) is type(o) and value == o for o in args[0])
        if not fits:
            value = self.rng.randint(args[0], args[1]) if kind == "int" else self.rng.choice(args[0])
        self.log.append(value)
        return value


def guided(count: int, seed: int, minimum: int, targets: bool, shapes: str, out: Path | None) -> int:
    """Coverage-guided generation (seqlower/coverage.py): every program's decision points
    are counted; a program that reached a (point, context) cell still below ``minimum``
    joins the corpus, and half the programs after it are corpus programs with one to
    three choices drawn again, the parent chosen by the rarity of the cells it reached.
    Failures are written to ``out`` (their choices as JSON: ``--replay FILE``)."""
    import json

    from seqlower import coverage

    coverage.enable()
    rng = random.Random(seed)
    tally: dict[str, Counter] = {k: Counter() for k in ("target", "opset", "element", "op", "representation", "gap")}
    counts: Counter = Counter()
    corpus: list[tuple[list, set]] = []
    failures: Counter = Counter()
    start = time.perf_counter()
    for k in range(count):
        if corpus and rng.random() < 0.5:
            weights = [sum(1 / (1 + counts[c]) for c in cells) for _, cells in corpus]
            parent, _ = rng.choices(corpus, weights)[0]
            redraw = frozenset(rng.sample(range(len(parent)), min(len(parent), rng.randint(1, 3))))
            draw = Draws(rng, parent, redraw)
        else:
            draw = Draws(rng)
        target = draw("choice", TARGETS) if targets else "generic"
        coverage.reset()
        outcome = run_drawn(draw, target, tally, shapes=shapes)
        reached = coverage.hits()
        if any(counts[c] < minimum for c in reached):
            corpus.append((draw.log, set(reached)))
        counts.update(reached)
        if outcome is not None:
            failures[outcome[0]] += 1
            where = ""
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                path = out / f"failure-{seed}-{k}.json"
                path.write_text(json.dumps({"targets": targets, "shapes": shapes, "draws": draw.log}))
                where = f" ({path})"
            print(f"program {k}: {outcome[0]}: {outcome[1]}{where}", flush=True)
    elapsed = time.perf_counter() - start
    _write_counts(counts)
    coverage.reset()  # (written: the exit writes nothing more)
    from seqlower.fastpath.coverage_universe import universe as all_points

    universe = all_points()
    cells = [(p, w) for p, ws in universe.items() for w in ws]
    below = [c for c in cells if counts[c] < minimum]
    print(f"{count} programs (guided, seed {seed}, corpus {len(corpus)}): {failures['mismatch']} mismatches, "
          f"{failures['crash']} crashes, {elapsed:.0f} s; {len(cells) - len(below)} of {len(cells)} cells reached "
          f">= {minimum} times, {sum(1 for c in below if not counts[c])} never")
    return 1 if failures else 0


def _write_counts(counts: Counter) -> None:
    """The counts where SEQLOWER_COVERAGE names a folder (tools/coverage.py reads them),
    as the process's exit would (each program's were reset after they were read)."""
    import json
    import os
    import uuid

    from seqlower.coverage import ENV

    folder = os.environ.get(ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        rows = [[p, w, n] for (p, w), n in sorted(counts.items())]
        (Path(folder) / f"guided-{uuid.uuid4().hex[:8]}.json").write_text(json.dumps(rows))


def replay(path: Path) -> int:
    """Run the program whose choices ``path`` holds (written by ``--guided``)."""
    import json

    doc = json.loads(path.read_text())
    draw = Draws(random.Random(0), doc["draws"])
    target = draw("choice", TARGETS) if doc["targets"] else "generic"
    tally: dict[str, Counter] = {k: Counter() for k in ("target", "opset", "element", "op", "representation", "gap")}
    outcome = run_drawn(draw, target, tally, shapes=doc["shapes"])
    print("right" if outcome is None else f"{outcome[0]}: {outcome[1]}")
    return 0 if outcome is None else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("count", nargs="?", type=int, default=1000, help="programs (one seed)")
    p.add_argument("seed", nargs="?", type=int, default=0, help="first seed")
    p.add_argument("--long", action="store_true", help=f"{len(LONG_SEEDS)} seeds x {LONG_PER_SEED} programs")
    p.add_argument("--seeds", help="comma-separated first seeds (with --long)")
    p.add_argument("--per-seed", type=int, default=LONG_PER_SEED, help="programs per seed (with --long)")
    p.add_argument("--targets", action="store_true", help="lower each program for a target drawn from every target")
    p.add_argument("--check-passes", action="store_true",
                   help="onnx's full checker after every pass: a failure names the pass that broke the model")
    p.add_argument("--shapes", choices=("v1", "v2", "v3", "v4"), default="v1",
                   help="v2 adds the Stage 7 program shapes, v3 those of Stage 10 too (tests/program_generator.py)")
    p.add_argument("--no-unknown-rank", action="store_true", help="with --shapes v2: every input's rank declared")
    p.add_argument("--guided", action="store_true",
                   help="coverage-guided: programs that reached rare decision points are mutated (see guided())")
    p.add_argument("--min", type=int, default=20, help="with --guided: the count every cell should reach")
    p.add_argument("--failures", type=Path, help="with --guided: write each failing program's choices here")
    p.add_argument("--replay", type=Path, help="run the program a --guided failure file holds")
    args = p.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    if args.guided:
        return guided(args.count, args.seed, args.min, args.targets, args.shapes, args.failures)
    if args.long:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(LONG_SEEDS)
        runs = [(s, args.per_seed) for s in seeds]
    else:
        runs = [(args.seed, args.count)]
    tally: dict[str, Counter] = {k: Counter() for k in ("target", "opset", "element", "op", "representation", "gap")}
    failures: Counter = Counter()
    total = 0
    start = time.perf_counter()
    for first, count in runs:
        seed_failures = 0
        for k in range(count):
            outcome = run_one(first + k, tally, args.targets, args.check_passes, args.shapes, not args.no_unknown_rank)
            total += 1
            if outcome is not None:
                failures[outcome[0]] += 1
                seed_failures += 1
                print(f"seed {first + k}: {outcome[0]}: {outcome[1]}", flush=True)
        print(f"seeds {first}..{first + count - 1}: {count} programs, {seed_failures} failures", flush=True)
    elapsed = time.perf_counter() - start
    print(f"{total} programs over {len(runs)} seed(s): {failures['mismatch']} mismatches, {failures['crash']} crashes, "
          f"{elapsed:.0f} s ({1000 * elapsed / max(total, 1):.0f} ms each)")
    for key in ("target", "opset", "element", "representation", "op"):
        print(f"  {key}: {dict(sorted(tally[key].items(), key=lambda kv: -kv[1]))}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
