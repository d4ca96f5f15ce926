"""Which runtimes run each exported fixture, before and after lowering for them.

    python tools/runtimes.py

For every model in tests/data/exported/ and every runtime the executor has (onnxruntime,
openvino, tract), lowers the model with ``--target`` that runtime and runs every stored
case, comparing with PyTorch's outputs. Prints a runtime x model table: ``k/n`` cases
equal, and the first error. Runtimes that are not installed are reported as such.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seqlower import LowerOptions, load_model, lower_with_report  # noqa: E402
from seqlower.executor import Executor  # noqa: E402
from seqlower.model_io import to_proto  # noqa: E402
from tests.test_exported_models import MODELS, load_cases  # noqa: E402

RUNTIMES = ("onnxruntime", "openvino", "tract")


def score(low: onnx.ModelProto, backend: str, path: Path) -> str:
    cases = load_cases(path)
    ok, first = 0, ""
    for feeds, expected in cases:
        try:
            out = Executor(low, backend=backend).run(feeds).outputs
            good = all(out[k].shape == v.shape and np.allclose(out[k], v, rtol=1e-5, atol=1e-5) for k, v in expected.items())
            ok += good
            first = first or ("" if good else "numbers differ")
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            first = first or str(e).split(":", 2)[-1].strip()[:48]
    return f"{ok}/{len(cases)} {first}".strip()


def main() -> None:
    available = [r for r in RUNTIMES if importlib.util.find_spec(r) is not None]
    for r in RUNTIMES:
        if r not in available:
            print(f"{r}: not installed")
    width = max(len(p.stem) for p in MODELS)
    print(f"{'model':<{width}}  " + "  ".join(f"{r:<56}" for r in available))
    for path in MODELS:
        m = onnx.load(path)
        cells = []
        for r in available:
            low = to_proto(lower_with_report(load_model(m), LowerOptions(target=r))[0])
            cells.append(f"{score(low, r, path):<56}")
        print(f"{path.stem:<{width}}  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
