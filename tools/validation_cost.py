"""What lower's validation (seqlower/fastpath/validate.py) costs against the lowering
itself, over the benchmark families (tools/families.py): for each member, ``seqlower
lower --report`` in a fresh process, the validation's seconds (the report's
``validation.seconds``, part of ``timings.lower``) over the lowering's without them.
Figures, not assertions (Stage 14's goal: at most 20% at 10,000 nodes).

    python tools/validation_cost.py [--members 4] [--sizes 10000] [--only chain,edits,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import FAMILIES  # noqa: E402


def measure(src: Path, folder: Path) -> tuple[float, float, int]:
    """(lowering seconds without the validation, validation seconds, samples compared)."""
    report = folder / "report.json"
    subprocess.run([sys.executable, "-m", "seqlower", "lower", str(src), "-o", str(folder / "out.onnx"),
                    "--report", str(report), "-q"], check=True, capture_output=True)
    doc = json.loads(report.read_text())
    validation = doc.get("validation", {})
    seconds = validation.get("seconds", 0.0)
    return doc["timings"]["lower"] - seconds, seconds, validation.get("compared", 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"{'family':9} {'size':>6} {'members':>7} {'lower s':>8} {'validate s':>10} {'median %':>8} {'worst %':>8}"
          f" {'compared':>8}  worst seed")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for family in args.only.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                rows = []
                for k in range(args.members):
                    member = FAMILIES[family](args.seed + k, size)
                    src = folder / "member.onnx"
                    onnx.save(member.model, src)
                    lower, validate, compared = measure(src, folder)
                    rows.append((validate / lower, lower, validate, compared, member.seed))
                worst = max(rows)
                print(f"{family:9} {size:>6} {len(rows):>7} {worst[1]:8.2f} {worst[2]:10.2f}"
                      f" {100 * statistics.median(r[0] for r in rows):8.1f} {100 * worst[0]:8.1f}"
                      f" {min(r[3] for r in rows):>8}  {worst[4]}", flush=True)


if __name__ == "__main__":
    main()
