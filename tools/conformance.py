"""Run every ONNX backend node case that touches sequences on both backends; print a table.

    python tools/conformance.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqlower.errors import SeqlowerError  # noqa: E402
from seqlower.executor import Executor, compare_values  # noqa: E402
from tests.conftest import sequence_backend_cases  # noqa: E402


def main() -> int:
    cases = sequence_backend_cases()
    print(f"{'case':55} {'reference':>10} {'onnxruntime':>12}")
    totals = {"reference": 0, "onnxruntime": 0}
    start = time.perf_counter()
    for case in cases:
        row = []
        for backend in ("reference", "onnxruntime"):
            try:
                ex = Executor(case.model, backend=backend)
                ok = True
                for inputs, expected in case.data_sets:
                    got = ex.run({p.name: v for p, v in zip(ex.inputs, inputs)}).outputs
                    ok &= all(compare_values(p.name, e, got[p.name], case.rtol, case.atol).ok
                              for p, e in zip(ex.outputs, expected))
                verdict = "ok" if ok else "DIFFERENT"
            except SeqlowerError as e:
                verdict = "error"
                print(f"  {case.name} on {backend}: {e}", file=sys.stderr)
            totals[backend] += verdict == "ok"
            row.append(verdict)
        print(f"{case.name:55} {row[0]:>10} {row[1]:>12}")
    print(f"{len(cases)} cases: reference {totals['reference']} ok, onnxruntime {totals['onnxruntime']} ok "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
