"""Which runtimes run each exported fixture (or random program), after lowering for them.

    python tools/runtimes.py [RUNTIME ...] [--max-trips N]
    python tools/runtimes.py [RUNTIME ...] --programs N [--seed S]

For every model in tests/data/exported/ (TorchScript, dynamo) and tests/data/tensorflow/
(tf2onnx), and every runtime, lowers the model with
``--target`` that runtime and runs every stored case, comparing with PyTorch's outputs.
Prints a runtime x model table: ``k/n`` cases equal (of the cases the export itself runs
on the reference backend), ``WRONG w`` when w cases ran to other numbers, and the first error, or, when the
lowering leaves something the target lacks, the first node ``seqlower check --target``
names and why. Runtimes: the executor's backends (onnxruntime, openvino, tract) and, run
in this process, onnx2torch, tinygrad and TVM Relax when they are installed (none is a
dependency of seqlower: ``pip install onnx2torch tinygrad apache-tvm apache-tvm-ffi``;
tinygrad's CPU device compiles with clang: ``apt-get install clang``). Runtimes that are
not installed are reported as such. With ``--max-trips N``, Loops a target without Loop
cannot otherwise run are unrolled into N predicated steps (``seqlower lower --max-trips``);
a case that needs more steps raises the model's ``seqlower_trips_exceeded`` output and is
counted as ``over N`` (it is not a wrong number: the model said so).

With ``--specialize``, each case is lowered for its own input shapes first (``seqlower
lower --input-shape``, every graph input at the case's sizes) and run on that lowering: a
cell is the cases that ran and matched, named gaps counted apart.

With ``--programs N``, the cells are N random programs of the graph fuzzer instead
(tests/program_generator.py, ``--shapes v3``, seeds from ``--seed``): each is lowered for
each runtime and, unless ``check --target`` names a gap before anything runs, run there on
its feeds and held to the original on the reference backend. Per runtime: programs that
ran right, that were named, that ran to WRONG numbers, that failed unnamed, and where the
original runs there and the lowered model does not ("worse": must stay 0; each of the
last three listed with its seed: ``seqlower reduce`` cuts one down). A fixture's cell
says ``WORSE`` where its original runs on the runtime and the lowering does not run all
its cases.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seqlower import LowerOptions  # noqa: E402
from seqlower.executor import Executor  # noqa: E402
from seqlower.executor.abi import read_abi  # noqa: E402
from seqlower.fastpath.job import Job  # noqa: E402
from seqlower.fastpath.validate import original_runs_on_target  # noqa: E402
from seqlower.options import TRIPS_EXCEEDED_KEY  # noqa: E402
from seqlower.targets import load_target, target_gaps  # noqa: E402
from tests.test_exported_models import MODELS as EXPORTED, load_cases  # noqa: E402
from tests.test_tensorflow_models import MODELS as TENSORFLOW  # noqa: E402

MODELS = [*EXPORTED, *TENSORFLOW]

EXECUTOR_RUNTIMES = ("onnxruntime", "openvino", "tract")
RUNTIMES = (*EXECUTOR_RUNTIMES, "onnx2torch", "tinygrad", "tvm")
MODULE = {"onnxruntime": "onnxruntime", "openvino": "openvino", "tract": "tract", "onnx2torch": "onnx2torch",
          "tinygrad": "tinygrad", "tvm": "tvm"}


def _inputs(proto: onnx.ModelProto) -> list[str]:
    inits = {i.name for i in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]


def _stub_torchvision() -> None:
    """onnx2torch imports torchvision for its NonMaxSuppression converter only; PyPI's
    torchvision does not load beside this machine's torch build, and no fixture needs it."""
    import types

    class _Missing(types.ModuleType):
        def __getattr__(self, name: str):
            if name.startswith("__"):
                raise AttributeError(name)

            def missing(*args, **kwargs):
                raise NotImplementedError(f"torchvision.ops.{name}: torchvision is not installed")
            return missing

    if importlib.util.find_spec("torchvision") is None and "torchvision" not in sys.modules:
        from importlib.machinery import ModuleSpec

        stub = types.ModuleType("torchvision")
        stub.__version__ = "0+missing"  # type: ignore[attr-defined]
        stub.__spec__ = ModuleSpec("torchvision", None)
        stub.ops = _Missing("torchvision.ops")  # type: ignore[attr-defined]
        stub.ops.__spec__ = ModuleSpec("torchvision.ops", None)
        sys.modules["torchvision"] = stub
        sys.modules["torchvision.ops"] = stub.ops  # type: ignore[attr-defined]


def run_onnx2torch(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    _stub_torchvision()
    import onnx2torch
    import torch

    module = onnx2torch.convert(proto)
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.asarray(feeds[n], order="C")) for n in _inputs(proto)])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return {o.name: np.asarray(v.numpy()) for o, v in zip(proto.graph.output, outs)}


def run_tinygrad(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tempfile

    from tinygrad.nn.onnx import OnnxRunner

    # One runner per call: it binds the symbolic dims to the first inputs it sees.
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
        f.write(proto.SerializeToString())
        f.flush()
        runner = OnnxRunner(f.name)
    out = runner({n: np.asarray(feeds[n], order="C") for n in _inputs(proto)})
    return {k: np.asarray(v.numpy()) for k, v in out.items()}


def run_tvm(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    names = _inputs(proto)
    dtypes = {n: str(feeds[n].dtype) for n in names}
    shapes = {n: list(feeds[n].shape) for n in names}
    mod = from_onnx(proto, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    exe = tvm.compile(relax.get_pipeline("zero")(mod), target="llvm")
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.asarray(feeds[n], order="C")) for n in names])
    outs = list(out) if isinstance(out, (tuple, list)) or type(out).__name__ == "Array" else [out]
    # (a model output TVM folds to a dim comes back as a Python int, a shape as a tuple)
    return {o.name: np.asarray(v.numpy() if hasattr(v, "numpy") else list(v) if type(v).__name__ == "ShapeTuple" else v)
            for o, v in zip(proto.graph.output, outs)}


IN_PROCESS = {"onnx2torch": run_onnx2torch, "tinygrad": run_tinygrad, "tvm": run_tvm}


def run(low: onnx.ModelProto, runtime: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if runtime in IN_PROCESS:
        return IN_PROCESS[runtime](low, feeds)
    return Executor(low, backend=runtime).run(feeds).outputs


def _original_runs(path: Path, feeds: dict[str, np.ndarray]) -> bool:
    """Whether the exported model itself runs this case (on the reference backend): where
    the export fails (tf2onnx's ragged ops with no rows), no lowering promises anything."""
    try:
        Executor(path).run(feeds)
        return True
    except Exception:  # noqa: BLE001
        return False


def _matches(out: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> bool:
    """The framework's outputs, shapes and values (the cases' own tolerance)."""
    return all(out[k].shape == v.shape and np.allclose(out[k], v, rtol=1e-5, atol=1e-5) for k, v in expected.items())


def score(low: onnx.ModelProto, backend: str, path: Path) -> tuple[int, int, int, int, str]:
    """Cases equal, cases with wrong numbers (ran, but other values or shapes), cases past
    the --max-trips bound (the model's flag raised), cases the export itself runs, and the
    first error."""
    cases = [c for c in load_cases(path) if _original_runs(path, c[0])]
    flag = next((p.value for p in low.metadata_props if p.key == TRIPS_EXCEEDED_KEY), None)
    ok, wrong, over, first = 0, 0, 0, ""
    for feeds, expected in cases:
        try:
            out = run(low, backend, feeds)
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            first = first or str(e).split(":", 2)[-1].strip()[:48]
            continue
        if flag is not None and bool(np.asarray(out[flag]).any()):
            over += 1
            continue
        good = _matches(out, expected)
        ok += good
        wrong += not good
    return ok, wrong, over, len(cases), first


def lowered_for(m: onnx.ModelProto, options: LowerOptions) -> tuple[onnx.ModelProto, list]:
    """The model as ``seqlower lower`` writes it (the Job's road: the region, the
    validation, on the target's runtime too) and the gaps named for the target: what
    ``check --target`` finds in it and what the validation on the target found."""
    job = Job.read(m)
    job.lower(options)
    low = job.model()
    return low, [*job.report.gaps, *target_gaps(low, load_target(options.target), job.report.kept_loops)]


def cell(m: onnx.ModelProto, runtime: str, path: Path, max_trips: int | None = None) -> tuple[str, bool, bool]:
    """The table cell, whether every case ran and was equal, and whether any case ran to
    wrong numbers (the failure that must never be silent)."""
    low, gaps = lowered_for(m, LowerOptions(target=runtime, max_trips=max_trips))
    cases = load_cases(path)
    worse = " WORSE (the original runs)" if cases and original_runs_on(m, runtime, *cases[0]) else ""
    if worse and any(g.what == "model" and "validation on" in g.why for g in gaps) \
            and not original_runs_on_target(m, LowerOptions(target=runtime)):
        # (validation on the target named what the original gets wrong there too, on its
        # samples: OpenVINO at dims 0 after a run at other sizes)
        worse = ""
    if gaps:
        return (worse + f"gap: {gaps[0].where}: {gaps[0].why}")[:56], False, False
    ok, wrong, over, n, first = score(low, runtime, path)
    text = f"{ok}/{n}" + (f" WRONG {wrong}" if wrong else "") + (f" over {max_trips}: {over}" if over else "") \
        + (f" {first}" if first else "") + (worse if ok < n else "")
    return text, ok == n, wrong > 0


def specialized_cell(m: onnx.ModelProto, runtime: str, path: Path) -> tuple[str, int, int, int, int]:
    """Each case lowered at its own input shapes (``--input-shape``) and run: the cell, and
    the cases that ran right, that were named before running, that ran to wrong numbers,
    of the cases the export itself runs."""
    cases = [c for c in load_cases(path) if _original_runs(path, c[0])]
    ok = named = wrong = 0
    first = ""
    for feeds, expected in cases:
        shapes = {k: tuple(np.asarray(v).shape) for k, v in feeds.items()}
        try:
            low, gaps = lowered_for(m, LowerOptions(target=runtime, input_shapes=shapes))
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            first = first or f"lowering: {str(e).splitlines()[0]}"[:48]
            continue
        if gaps:
            named += 1
            first = first or f"gap: {gaps[0].where}: {gaps[0].why}"[:48]
            continue
        try:
            out = run(low, runtime, feeds)
        except Exception as e:  # noqa: BLE001
            first = first or str(e).split(":", 2)[-1].strip()[:48]
            continue
        good = _matches(out, expected)
        ok += good
        wrong += not good
    text = f"{ok}/{len(cases)}" + (f" named {named}" if named else "") + (f" WRONG {wrong}" if wrong else "") \
        + (f" {first}" if first and ok < len(cases) else "")
    return text, ok, named, wrong, len(cases)


def specialized(available: list[str]) -> None:
    width = max(len(p.stem) for p in MODELS)
    print(f"{'model':<{width}}  " + "  ".join(f"{r:<56}" for r in available))
    totals = {r: [0, 0, 0, 0] for r in available}
    for path in MODELS:
        m = onnx.load(path)
        cells = []
        for r in available:
            text, *counts = specialized_cell(m, r, path)
            totals[r] = [a + b for a, b in zip(totals[r], counts)]
            cells.append(f"{text:<56}")
        print(f"{path.stem:<{width}}  " + "  ".join(cells), flush=True)
    for r in available:
        ok, named, wrong, n = totals[r]
        print(f"{r}: {n} cases at their own shapes: {ok} ran and matched ({100 * ok / max(n, 1):.1f}%),"
              f" {named} named by check --target, {wrong} WRONG numbers, {n - ok - named - wrong} failed unnamed")


def program(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Random program ``seed`` of the graph fuzzer and its feeds (tools/fuzz_programs.py)."""
    import random

    from tests.program_generator import generate

    rng = random.Random(seed)
    return generate(lambda kind, *a: rng.randint(a[0], a[1]) if kind == "int" else rng.choice(a[0]), shapes="v3")


def original_runs_on(m: onnx.ModelProto, runtime: str, feeds: dict, want: dict) -> bool:
    """Whether the original model itself runs right on ``runtime`` (the column "original
    runs, lowered fails" counts the lowerings that made a model worse there: it must stay
    0). Right: ``want``'s outputs (onnxruntime runs a string Gather, wrongly)."""
    import warnings

    from seqlower.executor import compare_values

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = Executor(m, backend=runtime).run(feeds).outputs if runtime not in IN_PROCESS else run(m, runtime, feeds)
        except Exception:  # noqa: BLE001
            return False
    return all(k in got and compare_values(k, v, got[k]).ok for k, v in want.items())


def program_cell(seed: int, runtime: str) -> str:
    """"ran right", "named", "WRONG", "worse: ..." (the original runs there, the lowered
    model does not) or "failed: ..." for program ``seed`` on ``runtime``."""
    verdict = _program_verdict(seed, runtime)
    if verdict == "named" and _program_verdict(seed, runtime, run_named=True) == "ran right":
        return verdict  # (named, and runs right all the same: a conservative detector)
    if verdict == "named" or verdict.startswith("failed"):
        m, feeds = program(seed)
        if original_runs_on(m, runtime, feeds, Executor(m, backend="reference").run(feeds).outputs):
            return f"worse: the original runs on {runtime}; the lowered model: {verdict}"
    return verdict


def _program_verdict(seed: int, runtime: str, run_named: bool = False) -> str:
    import warnings

    from seqlower.executor import compare_values

    m, feeds = program(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            low, gaps = lowered_for(m, LowerOptions(target=runtime))
        except Exception as e:  # noqa: BLE001
            return f"failed: lowering: {str(e).splitlines()[0][:100]}"
        if not run_named and gaps:
            return "named"
        want = Executor(m, backend="reference").run(feeds).outputs
        try:
            if runtime in IN_PROCESS:
                # The lowered model's sequence ports through its ABI, as the executor does.
                abi = read_abi(low)
                physical: dict[str, np.ndarray] = {}
                for n, v in feeds.items():
                    physical.update(abi.inputs[n].pack(v) if abi and n in abi.inputs else {n: np.asarray(v)})
                raw = run(low, runtime, physical)
                got = {k: abi.outputs[k].unpack(raw) if abi and k in abi.outputs else raw.get(k) for k in want}
            else:
                got = Executor(low, backend=runtime).run(feeds).outputs
        except Exception as e:  # noqa: BLE001
            return f"failed: {str(e).splitlines()[0][:120]}"
    if all(k in got and compare_values(k, v, got[k]).ok for k, v in want.items()):
        return "ran right"
    return "WRONG"


def programs(available: list[str], count: int, first: int) -> None:
    from collections import Counter

    tally = {r: Counter() for r in available}
    for seed in range(first, first + count):
        for r in available:
            verdict = program_cell(seed, r)
            tally[r][verdict.split(":")[0]] += 1
            if verdict not in ("ran right", "named"):
                print(f"seed {seed} {r}: {verdict}", flush=True)
    for r in available:
        t = tally[r]
        print(f"{r}: {count} programs: {t['ran right']} ran right, {t['named']} named by check --target, "
              f"{t['WRONG']} WRONG numbers, {t['failed']} failed unnamed, {t['worse']} where the original runs"
              " and the lowered model does not")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runtimes", nargs="*", metavar="RUNTIME")
    ap.add_argument("--max-trips", type=int, help="as for seqlower lower")
    ap.add_argument("--programs", type=int, metavar="N", help="N random programs instead of the fixtures")
    ap.add_argument("--seed", type=int, default=0, help="the first program's seed (with --programs)")
    ap.add_argument("--specialize", action="store_true", help="each case lowered at its own input shapes")
    args = ap.parse_args()
    asked = args.runtimes or list(RUNTIMES)
    unknown = [r for r in asked if r not in RUNTIMES]
    if unknown:
        sys.exit(f"unknown runtime(s) {unknown}; known: {', '.join(RUNTIMES)}")
    available = [r for r in asked if importlib.util.find_spec(MODULE[r]) is not None]
    for r in asked:
        if r not in available:
            print(f"{r}: not installed")
    if args.programs:
        programs(available, args.programs, args.seed)
        return
    if args.specialize:
        specialized(available)
        return
    width = max(len(p.stem) for p in MODELS)
    print(f"{'model':<{width}}  " + "  ".join(f"{r:<56}" for r in available))
    runs = dict.fromkeys(available, 0)
    wrongs = dict.fromkeys(available, 0)
    for path in MODELS:
        m = onnx.load(path)
        cells = []
        for r in available:
            text, ok, wrong = cell(m, r, path, args.max_trips)
            runs[r] += ok
            wrongs[r] += wrong
            cells.append(f"{text:<56}")
        print(f"{path.stem:<{width}}  " + "  ".join(cells), flush=True)
    print(f"{'runs every case':<{width}}  " + "  ".join(f"{f'{runs[r]}/{len(MODELS)}':<56}" for r in available))
    print(f"{'wrong numbers':<{width}}  " + "  ".join(f"{f'{wrongs[r]} models':<56}" for r in available))


if __name__ == "__main__":
    main()
