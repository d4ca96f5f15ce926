"""Exporter-level fuzzing: random PyTorch list programs, exported as users export them,
lowered by ``seqlower lower`` and held to PyTorch's own numbers.

    pip install torch==2.13.0            # a tool dependency, never seqlower's or the suite's
    python tools/fuzz_torch.py [N] [SEED] [-j 2] [--dynamo-every K] [--keep DIR] [--targets]

Each program is a module file written from a seed (``--show SEED`` prints it): a function
over ``x [N, W]`` built from the list idioms real code uses (``split`` with an int and
with a size list, ``chunk``, ``unbind``, comprehensions, ``append``/``insert``/``pop``/
``del``/setitem/``extend``/``reverse``/slicing/``+``, ``for`` over a list, ``enumerate``,
``zip``, ``len``, ``while``, ``if`` on shapes and on values, a choice between two lists,
per-row masks, ``nonzero`` and ``topk``, empty lists, lists returned), optionally with
weights (a float scale, an int64 position) held by a submodule. The truth is PyTorch eager
on at least two input sets of different sizes (0 and 1 included).

Every program is exported with the TorchScript exporter (``torch.jit.script``) at an
opset drawn from 11-20 and flags drawn as users set them (``dynamic_axes`` on every
dim, on the batch only, or none; ``keep_initializers_as_inputs``; ``do_constant_folding``;
``export_modules_as_functions`` from opset 15), and every K-th with the dynamo exporter
(``optimize`` on or off, dynamic shapes or not). An export onnxruntime does not run, or
runs to other numbers than PyTorch, is the exporter's failure and is counted apart; every
other one must lower (``seqlower lower``, the CLI's own path) tensor-only, pass the full
checker, and give PyTorch's numbers on the reference backend and onnxruntime. With
``--targets``, it is also lowered for a target drawn at random and run on that target's
runtime where the executor drives it (openvino, tract).

Prints one line per failure with its seed, exporter and flags; ``--keep DIR`` writes each
failing program's module file and export there. Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import logging
import multiprocessing
import os
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Element kinds of a list: what shape its elements have, relative to x [N, W].
#   rows [r_i, W] (cat on 0)   cols [N, c_i] (cat on 1)   vec [W]   nvec [N]
#   scalar []                  ragged [k_i] (1-D, sizes differ)
KINDS = ("rows", "cols", "vec", "nvec", "scalar", "ragged")
ELEMS = {
    "rows": ["x", "x * 2.0", "x[:1]", "x[1:]", "torch.relu(x)", "x.flip([0])", "x[: x.size(0) // 2]", "x - 1.0"],
    "cols": ["x", "x[:, :1]", "x * 0.5", "x[:, 1:]", "torch.relu(x) + 1.0"],
    "vec": ["x.sum(0)", "x.sum(0) * 2.0", "x.sum(0) - 1.0", "torch.relu(x).sum(0)"],
    "nvec": ["x.sum(1)", "x.sum(1) * 3.0", "torch.relu(x).sum(1)"],
    "scalar": ["x.sum()", "x.sum() * 2.0", "(x * x).sum()"],
    "ragged": ["x.reshape(-1)[x.reshape(-1) > 0]", "x.sum(0)[x.sum(0) > 0]", "x.reshape(-1)[:3]"],
}
MAKERS = {
    "rows": ["list(x.split({k}, 0))", "list(x.chunk({c}, 0))",
             "list(x.split([x.size(0) // 2, x.size(0) - x.size(0) // 2], 0))",
             "[x[i : i + 1] for i in range(x.size(0))]", "[x, x * 2.0]", "[x[i : i + 1] * float(i) for i in range(x.size(0))]"],
    "cols": ["list(x.split({k}, 1))", "list(x.chunk({c}, 1))", "[x[:, j : j + 1] for j in range(x.size(1))]",
             "[x, x[:, :1]]"],
    "vec": ["list(x.unbind(0))", "[x[i] for i in range(x.size(0))]", "[x.sum(0)]", "list(x.split(1, 0)[0].unbind(0))"],
    "nvec": ["list(x.unbind(1))", "[x[:, j] for j in range(x.size(1))]", "[x.sum(1), x.sum(1) * 2.0]"],
    "scalar": ["[x[i].sum() for i in range(x.size(0))]", "[x.sum()]", "[r.max() for r in x.unbind(0)]"],
    "ragged": ["[x[i][x[i] > 0] for i in range(x.size(0))]",
               "[torch.nonzero(x[i] > 0).squeeze(1).float() for i in range(x.size(0))]",
               "[x[i].topk(min(2, x.size(1)))[0] for i in range(x.size(0))]",
               "[x[i][: i + 1] for i in range(x.size(0))]"],
}
# How an element of one kind becomes an element of another (a map over a list).
MAPS = {
    ("rows", "rows"): "{t} * 2.0", ("rows", "vec"): "{t}.sum(0)", ("cols", "cols"): "{t} + 1.0",
    ("cols", "nvec"): "{t}.sum(1)", ("vec", "vec"): "torch.tanh({t})", ("vec", "scalar"): "{t}.sum()",
    ("nvec", "nvec"): "{t} * 0.5", ("nvec", "scalar"): "{t}.sum()", ("scalar", "scalar"): "{t} + 1.0",
    ("ragged", "ragged"): "{t} * 3.0", ("ragged", "scalar"): "{t}.sum()",
}
# The fallback that makes a join of a possibly empty list defined, per kind.
JOINS = {
    "rows": ["torch.cat({l} + [x[:0]], 0)", "torch.cat({l} + [x.sum(0, keepdim=True)], 0)"],
    "cols": ["torch.cat({l} + [x[:, :0]], 1)"],
    "vec": ["torch.stack({l} + [x.sum(0)], 0)", "torch.stack({l} + [x.sum(0)], 1)", "torch.cat({l} + [x.sum(0)], 0)"],
    "nvec": ["torch.stack({l} + [x.sum(1)], 1)", "torch.stack({l} + [x.sum(1)], 0)"],
    "scalar": ["torch.stack({l} + [x.sum()])"],
    "ragged": ["torch.cat({l} + [x.reshape(-1)[:1]], 0)"],
}
SIZES = [(0, 3), (1, 1), (2, 4), (3, 2), (5, 3), (4, 1), (1, 3), (6, 2)]


@dataclass
class Program:
    seed: int
    source: str
    weights: list[str]  # "scale" (float [1]), "pos" (int64 scalar)
    returns_list: bool
    features: list[str] = field(default_factory=list)


class _Writer:
    """Draws a program's body: statements over lists of known element kinds."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.lists: dict[str, str] = {}  # name -> kind
        self.n = 0
        self.features: list[str] = []

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def emit(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def elem(self, kind: str) -> str:
        return self.rng.choice(ELEMS[kind])

    def make(self, kind: str | None = None, depth: int = 1) -> str:
        kind = kind or self.rng.choice(KINDS)
        name = self.fresh("l")
        if self.rng.random() < 0.12:
            self.emit(f"{name}: List[torch.Tensor] = []", depth)
            self.features.append("empty")
        else:
            how = self.rng.choice(MAKERS[kind]).format(k=self.rng.choice([1, 2, 3]), c=self.rng.choice([1, 2, 3]))
            self.emit(f"{name}: List[torch.Tensor] = {how}", depth)
            self.features.append(how.split("(")[0] if "(" in how[:12] else "comprehension" if " for " in how else "literal")
        self.lists[name] = kind
        return name

    def pick(self) -> tuple[str, str]:
        name = self.rng.choice(sorted(self.lists))
        return name, self.lists[name]

    def mutate(self, weights: list[str], depth: int = 1) -> None:
        name, kind = self.pick()
        r = self.rng
        step = r.choice(["append", "insert", "pop", "del", "setitem", "extend", "plus", "slice", "reverse", "map",
                         "enumerate", "index_loop", "zip", "filter", "if_shape", "if_value", "choose", "while",
                         "range_loop", "len"])
        self.features.append(step)
        e = self.elem(kind)
        if step == "append":
            self.emit(f"{name}.append({e})", depth)
        elif step == "insert":
            where = r.choice(["0", "1", "-1", "len({l})", "pos"] if "pos" in weights else ["0", "1", "-1", "len({l})"])
            where = where.format(l=name)
            if where == "pos":
                self.emit(f"{name}.insert(min(int(pos), len({name})), {e})", depth)
            elif where in ("0", f"len({name})"):
                self.emit(f"{name}.insert({where}, {e})", depth)
            else:
                self.emit(f"if len({name}) > 1:", depth)
                self.emit(f"{name}.insert({where}, {e})", depth + 1)
        elif step in ("pop", "del", "setitem"):
            at = r.choice(["0", "-1", "len({l}) - 1"]).format(l=name)
            self.emit(f"if len({name}) > 0:", depth)
            stmt = {"pop": f"{name}.pop({'' if at == '-1' else at})", "del": f"del {name}[{at}]",
                    "setitem": f"{name}[{at}] = {e}"}[step]
            self.emit(stmt, depth + 1)
        elif step in ("extend", "plus"):
            other = self.make(kind, depth)
            self.emit(f"{name}.extend({other})" if step == "extend" else f"{name} = {name} + {other}", depth)
        elif step == "slice":
            self.emit(f"{name} = {name}[{r.choice(['1:', ':-1', ':2', '1:3'])}]", depth)
        elif step == "reverse":
            self.emit(f"{name}.reverse()", depth)
        elif step in ("map", "enumerate", "filter"):
            to = r.choice([b for a, b in MAPS if a == kind])
            out = self.fresh("m")
            f = MAPS[(kind, to)].format(t="t")
            self.emit(f"{out}: List[torch.Tensor] = []", depth)
            if step == "map":
                self.emit(f"for t in {name}:", depth)
                self.emit(f"{out}.append({f})", depth + 1)
            elif step == "enumerate":
                self.emit(f"for i, t in enumerate({name}):", depth)
                self.emit(f"{out}.append({f} * float(i + 1))", depth + 1)
            else:
                self.emit(f"for t in {name}:", depth)
                self.emit("if bool(t.sum() > 0):", depth + 1)
                self.emit(f"{out}.append({f})", depth + 2)
            self.lists[out] = to
        elif step == "index_loop":
            self.emit(f"for i in range(len({name})):", depth)
            self.emit(f"{name}[i] = {name}[i] * 2.0 + float(i)", depth + 1)
        elif step == "zip":
            other, out = self.fresh("z"), self.fresh("m")
            self.emit(f"{other} = [t * 2.0 for t in {name}]", depth)
            self.emit(f"{out}: List[torch.Tensor] = []", depth)
            self.emit(f"for a, b in zip({name}, {other}):", depth)
            self.emit(f"{out}.append(a - b)", depth + 1)
            self.lists[out] = kind
        elif step == "if_shape":
            self.emit(f"if x.size(0) > {r.choice([0, 1, 2])}:", depth)
            self.emit(f"{name}.append({e})", depth + 1)
            self.emit("else:", depth)
            self.emit(f"{name}.insert(0, {self.elem(kind)})", depth + 1)
        elif step == "if_value":
            self.emit("if bool(x.sum() > 0):", depth)
            self.emit(f"{name}.append({e})", depth + 1)
            self.emit("else:", depth)
            self.emit(f"{name} = {name} + [{self.elem(kind)}]", depth + 1)
        elif step == "choose":
            # An if picking between two lists, then a loop over the one chosen.
            a, b, out = self.fresh("a"), self.fresh("b"), self.fresh("m")
            ka = r.choice(["rows", "cols", "vec"])
            how = {"rows": ("list(x.split(1, 0))", "list(x.split(2, 0))"),
                   "cols": ("list(x.split(1, 1))", "list(x.chunk(2, 1))"),
                   "vec": ("list(x.unbind(0))", "[x.sum(0)]")}[ka]
            self.emit(f"if bool(x.sum() > {r.choice(['0', '1.0'])}):", depth)
            self.emit(f"{a}: List[torch.Tensor] = {how[0]}", depth + 1)
            self.emit("else:", depth)
            self.emit(f"{a} = {how[1]}", depth + 1)
            self.emit(f"{out}: List[torch.Tensor] = []", depth)
            self.emit(f"for {b} in {a}:", depth)
            self.emit(f"{out}.append({b} * 2.0)", depth + 1)
            self.lists[out] = ka
        elif step == "while":
            self.emit(f"while len({name}) > {r.choice([1, 2])}:", depth)
            self.emit(f"{name}.pop()", depth + 1)
        elif step == "range_loop":
            if kind == "rows":
                self.emit("for i in range(x.size(0)):", depth)
                self.emit(f"{name}.append(x[i : i + 1] * float(i))", depth + 1)
            elif kind == "vec":
                self.emit("for i in range(x.size(0)):", depth)
                self.emit(f"{name}.append(x[i] + float(i))", depth + 1)
            else:
                self.emit(f"for i in range({r.choice([1, 2, 3])}):", depth)
                self.emit(f"{name}.append({e} * float(i))", depth + 1)
        else:  # len
            self.emit(f"x = x + float(len({name}))", depth)

    def finish(self, returns_list: bool) -> list[str]:
        outs = []
        names = sorted(self.lists)
        for name in self.rng.sample(names, min(len(names), self.rng.choice([1, 2]))):
            kind = self.lists[name]
            outs.append(self.rng.choice(JOINS[kind]).format(l=name))
        if self.rng.random() < 0.2:
            name, kind = self.pick()
            outs.append(f"({name} + [{ELEMS[kind][0]}])[{self.rng.choice(['0', '-1'])}]")
        if returns_list:
            name, _ = self.pick()
            return [name]
        return outs


def generate(seed: int) -> Program:
    rng = random.Random(seed)
    w = _Writer(rng)
    weights = [x for x in ("scale", "pos") if rng.random() < 0.3]
    if "scale" in weights:
        w.emit("x = x * scale")
    for _ in range(rng.choice([1, 1, 2])):
        w.make()
    for _ in range(rng.randint(1, 5)):
        w.mutate(weights)
    returns_list = rng.random() < 0.12
    outs = w.finish(returns_list)
    params = ["x: torch.Tensor"] + [f"{p}: torch.Tensor" for p in weights]
    ret = "List[torch.Tensor]" if returns_list else f"Tuple[{', '.join(['torch.Tensor'] * len(outs))}]"
    body = "\n".join(w.lines)
    result = outs[0] if returns_list else "(" + ", ".join(outs) + ",)"
    source = f'''import torch
from typing import List, Tuple


def body({", ".join(params)}) -> {ret}:
{body}
    return {result}


class Inner(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
{"        self.scale = torch.nn.Parameter(torch.tensor([1.5]))" if "scale" in weights else ""}
{"        self.register_buffer('pos', torch.tensor(1, dtype=torch.int64))" if "pos" in weights else ""}

    def forward(self, x):
        return self.fn({", ".join(["x"] + [f"self.{p}" for p in weights])})


class Outer(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.inner = Inner(fn)

    def forward(self, x):
        return self.inner(x)
'''
    return Program(seed, source, weights, returns_list, w.features)


# -- running a program -------------------------------------------------------------

@dataclass
class Outcome:
    seed: int
    kind: str  # "ok", "invalid" (PyTorch refuses it), "failure"
    exports: Counter = field(default_factory=Counter)  # label -> count, by verdict
    failures: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _load(program: Program, workdir: Path) -> Any:
    path = workdir / f"prog_{program.seed}.py"
    path.write_text(program.source)
    spec = importlib.util.spec_from_file_location(f"prog_{program.seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flat(outs: Any) -> list[Any]:
    """Torch outputs as arrays (a list output stays one list of arrays)."""
    import torch

    if isinstance(outs, list):
        return [[t.detach().numpy() for t in outs]]
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    return [t.detach().numpy() for t in outs]


def _cases(mod: Any, rng: random.Random) -> list[tuple[np.ndarray, list[Any]]]:
    """Input sets PyTorch runs (eager and scripted agree), of different sizes."""
    import torch

    scripted = torch.jit.script(mod.body)
    sizes = rng.sample(SIZES, 4)
    cases = []
    for n, w in sizes:
        x = torch.from_numpy(np.random.default_rng(rng.randrange(1 << 30)).standard_normal((n, w)).astype(np.float32))
        try:
            weights = _weights(mod)
            want = _flat(mod.body(x, *weights))
            again = _flat(scripted(x, *weights))
        except Exception:  # noqa: BLE001 - PyTorch refuses these sizes: not a case
            continue
        if not _same(want, again):
            continue
        cases.append((x.numpy(), want))
    return cases


def _weights(mod: Any) -> list[Any]:
    inner = mod.Inner(None)
    return [getattr(inner, p).detach() for p in ("scale", "pos") if hasattr(inner, p)]


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, list) or isinstance(y, list):
            if not (isinstance(x, list) and isinstance(y, list) and _same(x, y)):
                return False
            continue
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype and not (x.dtype.kind == y.dtype.kind == "f"):
            return False
        if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=1e-4, atol=1e-5, equal_nan=True):
            return False
    return True


def _export_ts(mod: Any, x: np.ndarray, opset: int, flags: dict[str, Any]) -> onnx.ModelProto:
    import torch

    outer = mod.Outer(torch.jit.script(mod.body))
    arg = torch.from_numpy(x)
    outs = outer(arg)
    n_out = 1 if isinstance(outs, (list, torch.Tensor)) else len(outs)
    out_names = [f"y{i}" for i in range(n_out)]
    axes: dict[str, dict[int, str]] = {}
    if flags["dynamic"] == "all":
        axes["x"] = {0: "n", 1: "w"}
    elif flags["dynamic"] == "batch":
        axes["x"] = {0: "n"}
    if axes and not isinstance(outs, list):
        tensors = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        axes |= {o: {a: f"{o}_{a}" for a in range(t.dim())} for o, t in zip(out_names, tensors)}
    buf = io.BytesIO()
    kwargs: dict[str, Any] = {}
    if flags.get("functions"):
        kwargs["export_modules_as_functions"] = {mod.Inner}
    torch.onnx.export(outer, (arg,), buf, dynamo=False, opset_version=opset, input_names=["x"],
                      output_names=out_names, dynamic_axes=axes or None,
                      keep_initializers_as_inputs=flags["keep_initializers_as_inputs"],
                      do_constant_folding=flags["do_constant_folding"], **kwargs)
    return onnx.load_from_string(buf.getvalue())


def _export_dynamo(mod: Any, x: np.ndarray, flags: dict[str, Any]) -> onnx.ModelProto:
    import torch

    outer = mod.Outer(mod.body)
    arg = torch.from_numpy(x)
    shapes = {"x": {0: torch.export.Dim("n", min=0)}} if flags["dynamic"] else None
    prog = torch.onnx.export(outer, (arg,), dynamo=True, optimize=flags["optimize"], opset_version=flags["opset"],
                             dynamic_shapes=shapes, verbose=False)
    proto = prog.model_proto
    _strip(proto.graph)
    return proto


def _strip(graph: onnx.GraphProto) -> None:
    for n in graph.node:
        del n.metadata_props[:]
        for a in n.attribute:
            if a.HasField("g"):
                _strip(a.g)


def _run(model: Any, backend: str, x: np.ndarray) -> list[Any]:
    from seqlower.executor import Executor

    ex = Executor(model, backend=backend)
    names = [p.name for p in ex.inputs]
    res = ex.run({names[0]: x} if names else {})
    return [res.outputs[p.name] for p in ex.outputs]


def _fits(proto: onnx.ModelProto, x: np.ndarray) -> bool:
    """The export was traced at one size: a static export runs only that size. An export
    that folded ``x`` away (seed 4185) takes every case; onnxruntime's run judges."""
    if not proto.graph.input:
        return True
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    return all(not d.HasField("dim_value") or d.dim_value == s for d, s in zip(dims, x.shape))


def _check_export(label: str, proto: onnx.ModelProto, cases: list, workdir: Path, out: Outcome,
                  target: str | None) -> None:
    from seqlower.cli import main as cli

    usable = [(x, want) for x, want in cases if _fits(proto, x)]
    faithful = []
    for x, want in usable:
        try:
            got = _run(proto, "onnxruntime", x)
        except Exception:  # noqa: BLE001 - onnxruntime does not run the export: the exporter's failure
            continue
        if _same(want, got):
            faithful.append((x, want))
    if not faithful:
        out.exports[f"{label}: export not run by onnxruntime or not the framework's numbers"] += 1
        return
    src, dst = workdir / f"{out.seed}_{label}.onnx", workdir / f"{out.seed}_{label}.lowered.onnx"
    onnx.save(proto, src)
    problems = []
    with open(os.devnull, "w") as devnull:
        stderr, stdout, sys.stderr, sys.stdout = sys.stderr, sys.stdout, devnull, devnull
        try:
            code = cli(["lower", str(src), "-o", str(dst), "-q"])
            clean = cli(["check", str(dst)]) if code == 0 else None
        except SystemExit as e:  # noqa: PERF203
            code, clean = e.code, None
        finally:
            sys.stderr, sys.stdout = stderr, stdout
    if code != 0:
        problems.append(f"lower exited {code}: {_first_error(src)}")
    elif clean != 0:
        problems.append("not tensor-only")
    else:
        for backend in ("reference", "onnxruntime"):
            for x, want in faithful:
                try:
                    got = _run(str(dst), backend, x)
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{backend} fails on the lowered model, x{list(x.shape)}: {str(e).splitlines()[0][:160]}")
                    break
                if not _same(want, got):
                    problems.append(f"{backend}: wrong numbers at x{list(x.shape)}")
                    break
    if target and not problems:
        problems += _check_target(src, target, faithful, out)
    if problems:
        out.failures.append(f"seed {out.seed} {label}: " + "; ".join(problems))
        out.exports[f"{label}: FAILED"] += 1
    else:
        out.exports[f"{label}: ok"] += 1
    for p in (src, dst):
        if not problems:
            p.unlink(missing_ok=True)


def _check_target(src: Path, target: str, cases: list, out: Outcome) -> list[str]:
    """Lowered for ``target`` and run on its own runtime (openvino, tract), or its gaps
    named by ``check --target``."""
    from seqlower.cli import main as cli

    dst = src.with_suffix(f".{target}.onnx")
    with open(os.devnull, "w") as devnull:
        stderr, stdout, sys.stderr, sys.stdout = sys.stderr, sys.stdout, devnull, devnull
        try:
            code = cli(["lower", str(src), "-o", str(dst), "-q", "--target", target])
            gaps = cli(["check", str(dst), "--target", target]) if code == 0 else None
        finally:
            sys.stderr, sys.stdout = stderr, stdout
    if code != 0:
        out.exports[f"{target}: lowering failed"] += 1
        return [f"lower --target {target} exited {code}"]
    if gaps != 0:
        dst.unlink(missing_ok=True)
        out.exports[f"{target}: named by check --target"] += 1
        return []  # named before anything runs: not a wrong number
    problems = []
    for x, want in cases:
        try:
            got = _run(str(dst), target, x)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{target} fails on the model check --target passed, x{list(x.shape)}: "
                            f"{str(e).splitlines()[0][:160]}")
            break
        if not _same(want, got):
            problems.append(f"{target}: WRONG NUMBERS at x{list(x.shape)}")
            break
    if not problems:
        dst.unlink(missing_ok=True)
    out.exports[f"{target}: " + ("failed, not named" if problems else "ran right")] += 1
    return problems


def _first_error(src: Path) -> str:
    import subprocess

    r = subprocess.run([sys.executable, "-m", "seqlower", "lower", str(src), "-o", "/dev/null", "-q"],
                       capture_output=True, text=True)
    return (r.stderr.strip().splitlines() or [""])[-1][:200]


def run_one(seed: int, dynamo_every: int = 1, workdir: Path | None = None, targets: bool = False) -> Outcome:
    import torch

    start = time.time()
    out = Outcome(seed, "ok")
    program = generate(seed)
    out.features = program.features
    rng = random.Random(seed * 7919 + 1)
    tmp = workdir or Path(tempfile.mkdtemp(prefix="fuzz_torch_"))
    try:
        mod = _load(program, tmp)
        cases = _cases(mod, rng)
    except Exception:  # noqa: BLE001 - TorchScript refuses the program: not counted
        out.kind = "invalid"
        return out
    if len(cases) < 2 or len({c[0].shape for c in cases}) < 2:
        out.kind = "invalid"
        return out
    target = rng.choice(["openvino", "tract"]) if targets else None
    opset = rng.randint(11, 20)
    flags = {"dynamic": rng.choice(["all", "all", "batch", "none"]),
             "keep_initializers_as_inputs": rng.random() < 0.4, "do_constant_folding": rng.random() < 0.7,
             "functions": opset >= 15 and rng.random() < 0.3}
    label = (f"torchscript-op{opset}-{flags['dynamic']}" + ("-keepinit" if flags["keep_initializers_as_inputs"] else "")
             + ("" if flags["do_constant_folding"] else "-nofold") + ("-functions" if flags["functions"] else ""))
    try:
        proto = _export_ts(mod, cases[0][0], opset, flags)
    except Exception as e:  # noqa: BLE001 - the exporter refuses it
        out.exports[f"torchscript: exporter raised {type(e).__name__}"] += 1
    else:
        _check_export(label, proto, cases, tmp, out, target)
    if dynamo_every and seed % dynamo_every == 0:
        dflags = {"opset": rng.choice([18, 20]), "optimize": rng.random() < 0.5, "dynamic": rng.random() < 0.6}
        dlabel = f"dynamo-op{dflags['opset']}" + ("-opt" if dflags["optimize"] else "") + ("-dyn" if dflags["dynamic"] else "")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dproto = _export_dynamo(mod, cases[0][0], dflags)
        except Exception as e:  # noqa: BLE001
            out.exports[f"dynamo: exporter raised {type(e).__name__}"] += 1
        else:
            _check_export(dlabel, dproto, cases, tmp, out, target)
    if out.failures:
        out.kind = "failure"
        (tmp / f"prog_{seed}.py").rename(tmp / f"failed_prog_{seed}.py")
    else:
        (tmp / f"prog_{seed}.py").unlink(missing_ok=True)
    out.seconds = time.time() - start
    del torch
    return out


def _worker_init() -> None:
    # The exporters print whole graphs when they refuse a program: the parent prints.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def _run_seed(args: tuple[int, int, str, bool]) -> Outcome:
    seed, dynamo_every, workdir, targets = args
    try:
        return run_one(seed, dynamo_every, Path(workdir), targets)
    except Exception as e:  # noqa: BLE001 - the fuzzer itself must go on
        o = Outcome(seed, "failure")
        o.failures.append(f"seed {seed}: fuzzer error {type(e).__name__}: {e}")
        return o


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", nargs="?", type=int, default=200)
    p.add_argument("seed", nargs="?", type=int, default=0)
    p.add_argument("-j", "--jobs", type=int, default=1)
    p.add_argument("--dynamo-every", type=int, default=1, help="export every K-th program with dynamo too (0: never)")
    p.add_argument("--keep", type=Path, help="folder for failing programs and exports (default: a temp folder)")
    p.add_argument("--targets", action="store_true", help="also lower for openvino or tract and run it there")
    p.add_argument("--show", type=int, metavar="SEED", help="print the program of SEED and exit")
    p.add_argument("--seeds", help="these seeds (comma-separated) instead of N from SEED")
    a = p.parse_args(argv)
    if a.show is not None:
        print(generate(a.show).source)
        return 0
    workdir = a.keep or Path(tempfile.mkdtemp(prefix="fuzz_torch_"))
    workdir.mkdir(parents=True, exist_ok=True)
    seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else range(a.seed, a.seed + a.n)
    start = time.time()
    tally: Counter = Counter()
    features: Counter = Counter()
    kinds: Counter = Counter()
    failures: list[str] = []
    jobs = [(s, a.dynamo_every, str(workdir), a.targets) for s in seeds]
    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(a.jobs, initializer=_worker_init, maxtasksperchild=50) as pool:
        for o in pool.imap_unordered(_run_seed, jobs):
            kinds[o.kind] += 1
            tally.update(o.exports)
            features.update(o.features)
            for f in o.failures:
                failures.append(f)
                print(f, flush=True)
        # (closed and joined, not terminated: the workers' exit writes their coverage counts)
        pool.close()
        pool.join()
    valid = kinds["ok"] + kinds["failure"]
    print(f"\n{len(seeds)} seeds from {seeds[0]}: {valid} programs PyTorch runs at >= 2 sizes ({kinds['invalid']} it refuses), "
          f"{kinds['failure']} with failures, {time.time() - start:.0f} s; kept in {workdir}")
    exports_ok = sum(v for k, v in tally.items() if k.endswith(": ok"))
    exports_failed = sum(v for k, v in tally.items() if k.endswith(": FAILED"))
    print(f"exports lowered and checked: {exports_ok + exports_failed}, failed: {exports_failed}")
    by_exporter: Counter = Counter()
    for k, v in tally.items():
        exporter = k.split("-")[0].split(":")[0]
        verdict = k.split(": ", 1)[1] if ": " in k else k
        by_exporter[(exporter, verdict)] += v
    for (exporter, verdict), v in sorted(by_exporter.items()):
        print(f"  {exporter:12s} {verdict}: {v}")
    print("idioms drawn:", dict(features.most_common()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
