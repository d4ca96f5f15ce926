"""How fast seqlower starts: ``--help`` (goal: under 0.3 s on this 2-core machine), and
``lower`` and ``check`` of a one-node model (Stage 11's goals: 0.5 s and 0.4 s), in fresh
processes.

    python tools/startup.py [--runs 5] [--importtime]

Prints the median and best wall time per command, next to a bare ``python -c pass`` for
the interpreter's own start, and a model with one SplitToSequence/ConcatFromSequence pair
for what loading the passes costs. ``--importtime``: the ten slowest imports of each
model command (``python -X importtime``, cumulative).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _models(folder: Path) -> tuple[str, str]:
    import onnx
    from onnx import TensorProto, helper

    def saved(nodes: list, name: str) -> str:
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / name)
        return str(folder / name)

    return (saved([helper.make_node("Relu", ["x"], ["y"])], "one_node.onnx"),
            saved([helper.make_node("SplitToSequence", ["x"], ["s"]),
                   helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "one_list.onnx"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--importtime", action="store_true")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="seqlower-startup."))
    plain, listed = _models(folder)
    out = str(folder / "out.onnx")
    commands = [
        ["-c", "pass"],
        ["-m", "seqlower", "--help"],
        ["-m", "seqlower", "lower", plain, "-o", out, "-q"],
        ["-m", "seqlower", "check", plain],
        ["-m", "seqlower", "check", plain, "--target", "tract"],
        ["-m", "seqlower", "lower", listed, "-o", out, "-q"],
    ]
    print(f"{'command':52} {'median s':>9} {'best s':>7}")
    for argv in commands:
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        label = " ".join(["python", *argv]).replace(str(folder) + "/", "")
        print(f"{label:52} {statistics.median(times):9.3f} {min(times):7.3f}")
    if args.importtime:
        for argv in commands[2:]:
            err = subprocess.run([sys.executable, "-X", "importtime", *argv], check=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True).stderr
            rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:") and "|" in line]
            rows = [(int(r[1]), r[2].rstrip()) for r in rows if r[1].strip().isdigit()]
            print(f"\n{' '.join(argv[2:]).replace(str(folder) + '/', '')}: slowest imports (cumulative us)")
            for us, name in sorted(rows, reverse=True)[:10]:
                print(f"  {us:9d} {name}")


if __name__ == "__main__":
    main()
