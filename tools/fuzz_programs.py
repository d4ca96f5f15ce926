"""Long run of the random-program property test: generate N sequence programs (run-time
positions, dynamic dims, Loops, Ifs), lower each and verify it on both backends.

    python tools/fuzz_programs.py [N] [SEED]

Prints one line per failure (with the seed that reproduces it) and a summary.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqlower import LowerOptions, load_model, lower_with_report  # noqa: E402
from seqlower.executor.verify import verify  # noqa: E402
from seqlower.inventory import take_inventory  # noqa: E402
from seqlower.model_io import to_proto  # noqa: E402
from tests.program_generator import generate  # noqa: E402


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed0 = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    failures, ops, reprs = 0, Counter(), Counter()
    start = time.perf_counter()
    for k in range(count):
        rng = random.Random(seed0 + k)

        def draw(kind, *args, rng=rng):
            return rng.randint(args[0], args[1]) if kind == "int" else rng.choice(args[0])

        m, feeds = generate(draw)
        ops.update(n.op_type for n in m.graph.node)
        try:
            low_ir, report = lower_with_report(load_model(m), LowerOptions())
            reprs.update({r["into"] for r in report.rewrites})
            low = to_proto(low_ir)
            problems = [] if take_inventory(low).clean else ["not tensor-only"]
            for backend in ("reference", "onnxruntime"):
                rep = verify(m, low, inputs=[feeds], backend=backend)
                if not rep.equivalent:
                    problems.append(f"{backend}: not equivalent")
        except Exception as e:  # noqa: BLE001 - a fuzzer reports every failure and goes on
            problems = [f"{type(e).__name__}: {e}"]
        if problems:
            failures += 1
            print(f"seed {seed0 + k}: {'; '.join(problems)}")
    elapsed = time.perf_counter() - start
    print(f"{count} programs, {failures} failures, {elapsed:.1f} s ({1000 * elapsed / max(count, 1):.0f} ms each)")
    print("top-level ops drawn:", dict(ops.most_common()))
    print("programs using each representation:", dict(reprs.most_common()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
