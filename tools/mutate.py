"""Is ``verify`` a strict judge? Mutants of lowered fixtures that compute other numbers
must be called not equivalent.

    python tools/mutate.py [--per-model 4] [--seed 0]

For every exported fixture (tests/data/exported/), lower it, then make up to
``--per-model`` mutants of the lowered model, each with one change: one element of a
constant (initializer or Constant node, any graph) nudged (floats +0.5, integers +1,
bools flipped), or one integer attribute moved (+1, or 0 <-> 1 for flags). Each mutant
is run on the fixture's stored inputs on the reference backend and on onnxruntime. A
mutant that a backend refuses, or whose outputs differ on any backend from the
original's there, must be reported not equivalent by ``verify`` as ``seqlower verify``
runs it by default (both backends); a mutant that changes nothing may go either way.

Prints one line per missed mutant and the counts.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seqlower import lower  # noqa: E402
from seqlower.errors import SeqlowerError  # noqa: E402
from seqlower.executor import Executor, compare_values, verify  # noqa: E402
from tests.test_exported_models import MODELS, load_cases  # noqa: E402

BACKENDS = ("reference", "onnxruntime")
_FLAGS = {"keepdims", "new_axis", "exclusive", "reverse", "allowzero", "noop_with_empty_axes", "select_last_index"}


def _sites(m: onnx.ModelProto) -> list[tuple[str, object]]:
    """(kind, proto) for every mutable constant and integer attribute."""
    sites: list[tuple[str, object]] = []
    graphs = [m.graph]
    while graphs:
        g = graphs.pop()
        sites += [("tensor", t) for t in g.initializer if np.prod(t.dims, dtype=np.int64) > 0]
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and np.prod(a.t.dims, dtype=np.int64) > 0:
                    sites.append(("tensor", a.t))
                elif a.type == onnx.AttributeProto.INT and a.name not in ("to", "dtype"):
                    sites.append(("attr", a))
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    return sites


def _mutate(proto: object, kind: str, rng: random.Random) -> str:
    if kind == "attr":
        old = proto.i
        proto.i = 1 - old if proto.name in _FLAGS else old + 1
        return f"attribute {proto.name} {old} -> {proto.i}"
    arr = numpy_helper.to_array(proto).copy()
    if arr.dtype.kind in "OUS":
        flat = arr.reshape(-1)
        flat[rng.randrange(flat.size)] = "mutant"
    else:
        flat = arr.reshape(-1)
        i = rng.randrange(flat.size)
        flat[i] = (not flat[i]) if arr.dtype == bool else flat[i] + (0.5 if arr.dtype.kind == "f" else 1)
    proto.CopyFrom(numpy_helper.from_array(arr, proto.name))
    return f"tensor {proto.name!r} element nudged"


def _outputs(m: onnx.ModelProto | Path, backend: str, feeds: dict) -> dict | str:
    try:
        return Executor(m, backend=backend).run(feeds).outputs
    except SeqlowerError as e:
        return str(e).splitlines()[0]


def _changed(original: Path, mutant: onnx.ModelProto, cases: list) -> str:
    """Why the mutant computes something else ('' when it does not, as far as seen)."""
    for backend in BACKENDS:
        for feeds, _ in cases:
            want = _outputs(original, backend, feeds)
            got = _outputs(mutant, backend, feeds)
            if isinstance(want, str):
                continue
            if isinstance(got, str):
                return f"{backend} refuses it: {got[:80]}"
            for k, v in want.items():
                if k not in got or not compare_values(k, v, got[k]).ok:
                    return f"{backend}: output {k!r} differs"
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-model", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    total = changed = caught = 0
    for path in MODELS:
        cases = load_cases(path)[:2]
        lowered = lower(onnx.load(str(path)))
        sites = _sites(lowered)
        for index in rng.sample(range(len(sites)), min(args.per_model, len(sites))):
            mutant = onnx.ModelProto()
            mutant.CopyFrom(lowered)
            kind, proto = _sites(mutant)[index]
            what = _mutate(proto, kind, rng)
            total += 1
            why = _changed(path, mutant, cases)
            if not why:
                continue
            changed += 1
            verdicts = []
            for backend in BACKENDS:
                try:
                    verdicts.append(verify(path, mutant, inputs=[f for f, _ in cases], backend=backend).equivalent)
                except SeqlowerError:
                    verdicts.append(False)
            if all(verdicts):
                print(f"MISSED {path.stem}: {what} ({why}) was called EQUIVALENT")
            else:
                caught += 1
    print(f"{total} mutants of {len(MODELS)} lowered fixtures; {changed} compute other numbers or are refused; "
          f"verify (both backends) called {caught} of them not equivalent, missed {changed - caught}")


if __name__ == "__main__":
    main()
