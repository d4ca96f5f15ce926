"""Which decision points of the lowering the fuzzers reached, and how often, in which
context (seqlower/coverage.py: transfer functions, rules per representation,
representations chosen, quirk rewrites and detectors; main graph, Loop body, If branch,
SequenceMap body, two deep, model-local function).

A fuzz run writes its counts when the environment names a folder:

    SEQLOWER_COVERAGE=/tmp/cov python tools/fuzz_programs.py 1000 0 --shapes v3
    SEQLOWER_COVERAGE=/tmp/cov python tools/fuzz_torch.py 200 0 -j 2
    python tools/coverage.py /tmp/cov [--min 20] [--json out.json]

Prints, per point, the count in each context it can be reached in, then the cells below
``--min`` (those never reached first). Exit 0 always (a report, not a gate).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqlower import coverage  # noqa: E402
from seqlower.fastpath.coverage_universe import universe  # noqa: E402


def load(folders: list[Path]) -> Counter:
    """The counts in every file the runs wrote under ``folders``."""
    counts: Counter = Counter()
    for folder in folders:
        for f in sorted(folder.glob("*.json")):
            for point, where, n in json.loads(f.read_text()):
                counts[point, where] += n
    return counts


def table(counts: Counter, minimum: int) -> tuple[list[str], list[tuple[str, str, int]]]:
    """The report's lines, and the (point, context, count) cells below ``minimum``."""
    points = universe()
    contexts = [*coverage.CONTEXTS, "model"]
    lines = [f"{'point':46} " + " ".join(f"{c:>8}" for c in contexts)]
    low: list[tuple[str, str, int]] = []
    for point, where in points.items():
        cells = []
        for c in contexts:
            if c not in where:
                cells.append(f"{'':>8}")
                continue
            n = counts[point, c]
            cells.append(f"{n:>8}")
            if n < minimum:
                low.append((point, c, n))
        lines.append(f"{point:46} " + " ".join(cells))
    for point, why in coverage.UNREACHABLE.items():
        lines.append(f"{point:46} unreachable: {why}")
    unknown = sorted({p for p, _ in counts} - points.keys() - coverage.UNREACHABLE.keys())
    if unknown:
        lines.append(f"reached but not in the universe: {', '.join(unknown)}")
    return lines, low


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path, help="folders the runs wrote their counts in")
    ap.add_argument("--min", type=int, default=20, help="the count every cell should reach (default 20)")
    ap.add_argument("--json", type=Path, help="write the counts and the cells below --min here")
    args = ap.parse_args(argv)
    counts = load(args.folders)
    lines, low = table(counts, args.min)
    print("\n".join(lines))
    cells = sum(len(c) for c in universe().values())
    never = [c for c in low if c[2] == 0]
    print(f"\n{cells} cells (point x context): {cells - len(low)} reached >= {args.min} times, "
          f"{len(low) - len(never)} reached fewer, {len(never)} never")
    for point, where, n in sorted(low, key=lambda c: (c[2], c[0], c[1])):
        print(f"  {n:>5}  {point} in {where}")
    if args.json:
        args.json.write_text(json.dumps({"counts": [[p, w, n] for (p, w), n in sorted(counts.items())],
                                         "below": low}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
