"""Structural fuzzer: mutate model files and feed them to the CLI.

    python tools/fuzz_files.py [N] [SEED]     N mutants from SEED (default 500, 0)

Each mutant starts from a model the suite knows (the exported fixtures, the demo) and
gets one mutation: flipped bytes, a truncation, or a protobuf field changed (an op type,
an input dropped or renamed, an attribute's value, a dim, an element type, a node
removed or repeated, the opset). ``seqlower lower --target T`` (T drawn from every
target) then runs on it in this process.
The acceptable outcomes:

- exit 0, and the lowered model equals the mutant on the reference backend wherever the
  mutant runs at all (a mutant that rejects its own inputs proves nothing either way);
- exit 2 with one line ``seqlower: error: ...`` (no internal error), nothing written,
  the mutant file untouched.

Anything else is printed with the seed that reproduces it; exit 1 if there was any.
Each mutant gets 20 s (a mutated trip count can make the check run forever: that mutant
is counted as "slow", not as a failure, when the lowering itself finished).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from seqlower.cli import main as cli  # noqa: E402
from seqlower.errors import SeqlowerError  # noqa: E402
from seqlower.targets import TARGETS  # noqa: E402
from seqlower.executor.verify import verify  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEQUENCE_OPS = ["SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength", "SequenceConstruct",
                "SequenceEmpty", "ConcatFromSequence", "SequenceMap", "Loop", "If", "Identity", "Concat", "Gather"]
LIMIT_S = 20


class _Slow(Exception):
    pass


def _alarm(*_):
    raise _Slow


def bases() -> list[onnx.ModelProto]:
    from seqlower.demo import build_demo_model

    models = [onnx.load(p) for p in sorted((ROOT / "tests" / "data" / "exported").glob("*.onnx"))]
    demo = build_demo_model()
    return [*models, demo if isinstance(demo, onnx.ModelProto) else onnx.load_from_string(demo.SerializeToString())]


def _messages(m: onnx.ModelProto):
    """Every node, value info and tensor of the model, subgraphs included."""
    stack = [m.graph]
    while stack:
        g = stack.pop()
        yield from (("node", n) for n in g.node)
        yield from (("value", v) for v in [*g.input, *g.output, *g.value_info])
        yield from (("tensor", t) for t in g.initializer)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    kind = rng.choice(["flip", "flip", "truncate", "field", "field", "field", "field"])
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), "flipped bytes"
    if kind == "truncate":
        return data[: rng.randrange(len(data))], "truncated"
    m = onnx.load_from_string(data)
    items = list(_messages(m))
    what, msg = rng.choice(items)
    if what == "node":
        n = msg
        choice = rng.choice(["op", "drop_input", "rename_input", "attr", "repeat", "remove", "domain"])
        if choice == "op":
            n.op_type = rng.choice(SEQUENCE_OPS)
        elif choice == "drop_input" and n.input:
            del n.input[rng.randrange(len(n.input))]
        elif choice == "rename_input" and n.input:
            n.input[rng.randrange(len(n.input))] = rng.choice(["", "nowhere", n.output[0] if n.output else "x"])
        elif choice == "attr" and n.attribute:
            a = n.attribute[rng.randrange(len(n.attribute))]
            if a.type == onnx.AttributeProto.INT:
                a.i = rng.choice([-1, 0, 1, 2, 7, -(2 ** 40), 2 ** 40])
            elif a.type == onnx.AttributeProto.INTS and a.ints:
                a.ints[rng.randrange(len(a.ints))] = rng.choice([-1, 0, 5, 2 ** 40])
            else:
                n.attribute.remove(a)
        elif choice == "repeat":
            n.output.append(n.output[0] if n.output else "dup")
        elif choice == "remove":
            n.ClearField("input")
            n.ClearField("output")
        else:
            n.domain = rng.choice(["", "ai.onnx", "com.nowhere"])
        return m.SerializeToString(), f"node {choice}"
    if what == "value":
        tt = msg.type.tensor_type if msg.type.HasField("tensor_type") else None
        if tt is not None and tt.HasField("shape") and tt.shape.dim and rng.random() < 0.6:
            d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
            d.dim_value = rng.choice([0, 1, 3, 2 ** 31, 2 ** 62])
            return m.SerializeToString(), "dim"
        if tt is not None:
            tt.elem_type = rng.choice([1, 6, 7, 8, 9, 10, 16, 0, 99])
            return m.SerializeToString(), "element type"
        msg.ClearField("type")
        return m.SerializeToString(), "type removed"
    t = msg
    choice = rng.choice(["dims", "type", "data"])
    if choice == "dims":
        t.dims.append(rng.choice([0, 2, 2 ** 40]))
    elif choice == "type":
        t.data_type = rng.choice([1, 6, 7, 9, 8, 0])
    else:
        t.raw_data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 16)))
    if rng.random() < 0.2:
        m.opset_import[0].version = rng.choice([1, 10, 11, 13, 26, 99])
    return m.SerializeToString(), f"tensor {choice}"


def check_one(seed: int, base_models: list[onnx.ModelProto], folder: Path) -> tuple[str, str]:
    """("ok" | "slow" | "failure", detail) for mutant ``seed``."""
    rng = random.Random(seed)
    base = rng.choice(base_models).SerializeToString()
    data, how = mutate(base, rng)
    target = rng.choice(TARGETS)
    how = f"{how} (--target {target})"
    src, dst = folder / f"m{seed}.onnx", folder / f"m{seed}.lowered.onnx"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    err = io.StringIO()
    signal.alarm(LIMIT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli(["lower", str(src), "-o", str(dst), "--target", target])
    except _Slow:
        return "failure", f"{how}: the lowering took over {LIMIT_S} s"
    except BaseException as e:  # noqa: BLE001 - anything escaping the CLI is a failure
        signal.alarm(0)
        return "failure", f"{how}: {type(e).__name__} escaped the CLI: {e}"
    if hashlib.sha256(src.read_bytes()).hexdigest() != digest:
        signal.alarm(0)
        return "failure", f"{how}: the input was modified"
    lines = err.getvalue().strip().splitlines()
    if code == 2:
        signal.alarm(0)
        if dst.exists():
            return "failure", f"{how}: exit 2 but {dst.name} was written"
        if len(lines) != 1 or not lines[0].startswith("seqlower: error: ") or "internal error" in lines[0]:
            return "failure", f"{how}: exit 2 with {lines!r}"
        return "ok", "refused"
    if code != 0:
        signal.alarm(0)
        return "failure", f"{how}: exit {code}: {lines!r}"
    try:
        rep = verify(str(src), onnx.load(dst), samples=2, seed=seed)
        signal.alarm(0)
    except _Slow:
        return "slow", how
    except SeqlowerError:  # no samples can be made up for it (a dim of 2**62, say)
        signal.alarm(0)
        return "ok", "lowered (no samples)"
    except Exception as e:  # noqa: BLE001
        signal.alarm(0)
        return "failure", f"{how}: lowered, then verify raised {type(e).__name__}: {e}"
    ran = [s for s in rep.samples if s.status in ("equal", "different")]
    if any(s.status == "different" for s in ran) or any(s.status == "lowered failed" for s in rep.samples):
        return "failure", f"{how}: lowered model differs: {[(s.status, s.error[:120]) for s in rep.samples]}"
    return "ok", "lowered" if ran else "lowered (the mutant rejects its samples)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    count = int(argv[0]) if argv else 500
    seed0 = int(argv[1]) if len(argv) > 1 else 0
    signal.signal(signal.SIGALRM, _alarm)
    base_models = bases()
    outcomes: Counter = Counter()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="seqlower-fuzz-") as tmp:
        for k in range(count):
            kind, detail = check_one(seed0 + k, base_models, Path(tmp))
            outcomes[kind if kind != "ok" else detail] += 1
            if kind == "failure":
                print(f"seed {seed0 + k}: {detail}", flush=True)
            for p in Path(tmp).iterdir():
                p.unlink()
    elapsed = time.perf_counter() - start
    print(f"{count} mutants from seed {seed0}: {dict(outcomes)}; {elapsed:.0f} s")
    return 1 if outcomes["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
