"""How fast ``seqlower --help`` starts (the goal: under 0.3 s on this 2-core machine).

    python tools/startup.py [--runs 10]

Runs the console script's entry point in fresh processes and prints the median and best
wall time per command, next to a bare ``python -c pass`` for the interpreter's own start.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["-c", "pass"],
    ["-m", "seqlower", "--help"],
    ["-m", "seqlower", "lower", "--help"],
    ["-m", "seqlower", "check", "--help"],
    ["-m", "seqlower", "--version"],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    print(f"{'command':34} {'median s':>9} {'best s':>7}")
    script = shutil.which("seqlower")
    runs = [[sys.executable, *argv] for argv in COMMANDS] + ([[script, "--help"]] if script else [])
    for argv in runs:
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        label = " ".join(["python", *argv[1:]] if argv[0] == sys.executable else ["seqlower", *argv[1:]])
        print(f"{label:34} {statistics.median(times):9.3f} {min(times):7.3f}")


if __name__ == "__main__":
    main()
