"""Long run of the random-program property test: generate sequence programs (run-time
positions, dynamic dims, Loops, Ifs; every opset from 11 to 26; float32, float16,
int64, bool and string elements), lower each and verify it on both backends.

    python tools/fuzz_programs.py [N] [SEED]      N programs from SEED (default 1000, 0)
    python tools/fuzz_programs.py --long          4 seeds x 2500 programs (about 15 min)
    python tools/fuzz_programs.py --long --seeds 0,100000 --per-seed 5000
    python tools/fuzz_programs.py 1000 0 --targets     each lowered for a target drawn at random

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
from seqlower.targets import TARGETS  # noqa: E402
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

    m, feeds = generate(draw, shapes=shapes, unknown_rank=unknown_rank)
    target = random.Random(-seed).choice(TARGETS) if targets else "generic"
    tally["target"][target] += 1
    tally["opset"][m.opset_import[0].version] += 1
    tally["element"][TensorProto.DataType.Name(m.graph.input[0].type.tensor_type.elem_type)] += 1
    tally["op"].update(n.op_type for n in m.graph.node)
    try:
        low_ir, report = lower_with_report(load_model(m), LowerOptions(target=target, check_each_pass=check_passes))
        tally["representation"].update({r["into"] for r in report.rewrites})
        low = to_proto(low_ir)
        clean = take_inventory(low).clean or target == "onnxruntime"
        problems = [] if clean else ["not tensor-only: " + "; ".join(r["reason"] for r in report.remaining[:1])]
        for backend in ("reference", "onnxruntime"):
            rep = verify(m, low, inputs=[feeds], backend=backend)
            if not rep.equivalent:
                problems.append(f"{backend}: not equivalent")
    except Exception as e:  # noqa: BLE001 - a fuzzer reports every failure and goes on
        return "crash", f"--target {target}: {type(e).__name__}: {e}"
    return ("mismatch", f"--target {target}: " + "; ".join(problems)) if problems else None


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
    args = p.parse_args(argv)
    if args.long:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(LONG_SEEDS)
        runs = [(s, args.per_seed) for s in seeds]
    else:
        runs = [(args.seed, args.count)]
    tally: dict[str, Counter] = {k: Counter() for k in ("target", "opset", "element", "op", "representation")}
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
