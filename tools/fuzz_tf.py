"""Exporter-level fuzzing for TensorFlow: random list programs, converted by tf2onnx, lowered
by ``seqlower lower`` and held to TensorFlow's own numbers.

    python -m venv /tmp/tfenv                                           # tf2onnx pins protobuf 3.20,
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1   # so its own venv
    /tmp/tfenv/bin/python tools/fuzz_tf.py export [N] [SEED] --out DIR  # programs -> exports + TF's outputs
    python tools/fuzz_tf.py check DIR [--targets] [-j 2]                # seqlower's side, in its own env

Each program is a function of ``x [n, w]`` (float32, both dims dynamic) drawn from a seed
out of the list idioms TensorFlow code uses and tf2onnx exports as sequences or Loops:
``tf.map_fn`` with a dense result and with a ragged one (a per-row ``boolean_mask``, a
``range``, a prefix: tf2onnx 1.16 leaves these as RaggedTensorFromVariant, counted as the
exporter's), ``tf.map_fn`` over a ragged tensor (each row's values past a threshold),
``TensorArray`` loops (``stack``, running sums), ``tf.split`` with run-time sizes, and a ``while_loop`` that grows
a tensor, one to three of them in a program, each with random constants. It is traced
with a dynamic signature and converted at an opset drawn from 13-18. The truth is
TensorFlow eager at several sizes (0 and 1 included; sizes TensorFlow itself refuses are
left out, and a program needs two).

``check`` holds each export to what ``tools/fuzz_torch.py`` holds PyTorch's: onnxruntime
must run the export to TensorFlow's numbers (else it is counted as the exporter's), and
then ``seqlower lower`` must give a tensor-only, checker-valid model with TensorFlow's
numbers on the reference backend and onnxruntime; with ``--targets``, lowered for
OpenVINO or tract too and run there, or its gaps named by ``check --target``. Prints one
line per failure; exit 1 on any.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

SIZES = [(0, 3), (1, 1), (2, 4), (5, 3), (3, 0), (1, 3), (4, 2)]


# -- export (in the TensorFlow venv) ---------------------------------------------------------

def _pieces(rng: random.Random) -> list[tuple[str, Callable[[Any], list[Any]]]]:
    """The idioms, each a function of x giving a list of outputs, with its constants drawn."""
    import tensorflow as tf

    thr = rng.choice([0.0, 0.5, -0.5])
    scale = rng.choice([1.0, 2.0, -1.5])
    dense = rng.choice(["sum", "sort", "cumsum", "reverse", "square"])

    def map_dense(x):
        ops = {"sum": lambda r: r * scale + tf.reduce_sum(r), "sort": lambda r: tf.sort(r) * scale,
               "cumsum": lambda r: tf.math.cumsum(r), "reverse": lambda r: tf.reverse(r, [0]) + scale,
               "square": lambda r: r * r}
        return [tf.map_fn(ops[dense], x)]

    def ragged(x, fn, dtype):
        r = tf.map_fn(lambda row: tf.RaggedTensor.from_tensor(tf.expand_dims(fn(row), 0)), x,
                      fn_output_signature=tf.RaggedTensorSpec([1, None], dtype, ragged_rank=1))
        return r.merge_dims(1, 2) if r.shape.rank == 3 else r

    to_tensor = rng.random() < 0.4

    def ragged_out(r, default):
        return [r.to_tensor(default_value=default)] if to_tensor else [r.flat_values, r.row_lengths()]

    def map_ragged_mask(x):
        return ragged_out(ragged(x, lambda row: tf.boolean_mask(row * scale, row > thr), tf.float32), 0.0)

    def map_ragged_range(x):
        return ragged_out(ragged(x, lambda row: tf.range(tf.reduce_sum(tf.cast(row > thr, tf.int64))), tf.int64),
                          tf.constant(-1, tf.int64))

    def map_ragged_prefix(x):
        return ragged_out(ragged(x, lambda row: row[: tf.minimum(2, tf.size(row))] * scale, tf.float32), 0.0)

    def ta_stack(x):
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=tf.TensorShape([None]))
        _, ta = tf.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x[i] * tf.cast(i + 1, tf.float32) * scale)),
                              (tf.constant(0), ta))
        return [ta.stack()]

    rows_fn = rng.choice(["square", "cumsum", "scale", "sort"])

    def ragged_rows_map(x):
        # A ragged tensor of each row's values past thr, mapped row by row: tf2onnx builds
        # the result in its Loop as a sequence (SequenceInsert, ConcatFromSequence).
        mask = x > thr
        rt = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(x, mask), tf.reduce_sum(tf.cast(mask, tf.int64), axis=1))
        fns = {"square": lambda row: row * row + 1.0, "cumsum": lambda row: tf.math.cumsum(row),
               "scale": lambda row: row * scale, "sort": lambda row: tf.sort(row)}
        y = tf.map_fn(fns[rows_fn], rt)
        return [y.to_tensor(default_value=-9.0)] if to_tensor else [y.flat_values, y.row_splits]

    def ta_prefix_sums(x):
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=n, element_shape=tf.TensorShape([None]))

        def body(i, acc, ta):
            acc = acc + x[i] * scale
            return i + 1, acc, ta.write(i, acc)

        _, _, ta = tf.while_loop(lambda i, acc, ta: i < n, body, (tf.constant(0), tf.zeros_like(x[0]), ta))
        return [ta.stack()]

    def split_halves(x):
        w = tf.shape(x, out_type=tf.int64)[1]
        a, b = tf.split(x, tf.stack([w // 2, w - w // 2]), axis=1, num=2)
        return [tf.concat([b * scale, a], axis=1)]

    def while_grow(x):
        n = tf.shape(x)[0]
        _, acc = tf.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, tf.concat([acc, x[i : i + 1] * scale], 0)),
                               (tf.constant(0), x[:0]), shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None])))
        return [acc]

    return [("map_dense", map_dense), ("map_ragged_mask", map_ragged_mask), ("map_ragged_range", map_ragged_range),
            ("map_ragged_prefix", map_ragged_prefix), ("ta_stack", ta_stack), ("ragged_rows_map", ragged_rows_map),
            ("ta_prefix_sums", ta_prefix_sums), ("split_halves", split_halves), ("while_grow", while_grow)]


def export_one(seed: int, out: Path) -> str:
    """Write ``<seed>.onnx``, ``<seed>.npz`` (k/in, k/out/i) and ``<seed>.json``; the verdict."""
    import tensorflow as tf
    import tf2onnx

    rng = random.Random(seed)
    pieces = _pieces(rng)
    # tf2onnx 1.16 exports no map_fn with a ragged result (RaggedTensorFromVariant): one
    # program in five draws from them, so that most exports are ones it converts.
    if rng.random() < 0.8:
        pieces = [(name, f) for name, f in pieces if not name.startswith("map_ragged")]
    chosen = rng.sample(pieces, rng.randint(1, 3))
    opset = rng.randint(13, 18)

    def fn(x):
        outs = []
        for _, piece in chosen:
            outs += piece(x)
        return tuple(tf.identity(o, name=f"out{k}") for k, o in enumerate(outs))

    spec = [tf.TensorSpec([None, None], tf.float32, name="x")]
    traced = tf.function(fn, input_signature=spec)
    arrays: dict[str, np.ndarray] = {}
    k = 0
    for i, (n, w) in enumerate(SIZES):
        x = np.random.default_rng(seed * 31 + i).standard_normal((n, w)).astype(np.float32)
        try:
            outs = [o.numpy() for o in traced(tf.constant(x))]
        except Exception:  # noqa: BLE001 - TensorFlow refuses this size: left out
            continue
        arrays[f"{k}/in"] = x
        arrays |= {f"{k}/out/{j}": o for j, o in enumerate(outs)}
        k += 1
    if k < 2:
        return "invalid"
    try:
        proto, _ = tf2onnx.convert.from_function(traced, input_signature=spec, opset=opset)
    except Exception as e:  # noqa: BLE001 - the exporter refuses it
        return f"tf2onnx raised {type(e).__name__}"
    (out / f"{seed}.onnx").write_bytes(proto.SerializeToString())
    np.savez(out / f"{seed}.npz", **arrays)
    (out / f"{seed}.json").write_text(json.dumps({"opset": opset, "idioms": [name for name, _ in chosen]}))
    return "exported"


def export(n: int, seed: int, out: Path) -> int:
    import logging
    import os
    import warnings

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    verdicts: Counter = Counter()
    start = time.time()
    for s in range(seed, seed + n):
        verdicts[export_one(s, out)] += 1
    print(f"{n} seeds from {seed}, {time.time() - start:.0f} s: {dict(verdicts)}; in {out}")
    return 0


# -- check (in seqlower's env) ----------------------------------------------------------------

def _check_seed(args: tuple[str, int, bool]) -> Any:
    folder, seed, targets = args
    import onnx

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fuzz_torch

    folder_p = Path(folder)
    meta = json.loads((folder_p / f"{seed}.json").read_text())
    data = np.load(folder_p / f"{seed}.npz")
    cases = []
    k = 0
    while f"{k}/in" in data.files:
        outs = [data[f"{k}/out/{j}"] for j in range(sum(1 for f in data.files if f.startswith(f"{k}/out/")))]
        cases.append((data[f"{k}/in"], outs))
        k += 1
    out = fuzz_torch.Outcome(seed, "ok", features=meta["idioms"])
    rng = random.Random(seed * 7919 + 1)
    target = rng.choice(["openvino", "tract"]) if targets else None
    proto = onnx.load(folder_p / f"{seed}.onnx")
    label = f"tf2onnx-op{meta['opset']}"
    try:
        fuzz_torch._check_export(label, proto, cases, folder_p, out, target)
    except Exception as e:  # noqa: BLE001 - the fuzzer itself must go on
        out.failures.append(f"seed {seed}: fuzzer error {type(e).__name__}: {e}")
    if out.failures:
        out.kind = "failure"
    return out


def check(folder: Path, targets: bool, jobs: int) -> int:
    seeds = sorted(int(p.stem) for p in folder.glob("*.onnx") if p.stem.isdigit())
    start = time.time()
    tally: Counter = Counter()
    idioms: Counter = Counter()
    failures = []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fuzz_torch

    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(jobs, initializer=fuzz_torch._worker_init, maxtasksperchild=50) as pool:
        for o in pool.imap_unordered(_check_seed, [(str(folder), s, targets) for s in seeds]):
            tally.update(o.exports)
            idioms.update(o.features)
            for f in o.failures:
                failures.append(f)
                print(f, flush=True)
        # (closed and joined, not terminated: the workers' exit writes their coverage counts)
        pool.close()
        pool.join()
    ok = sum(v for k, v in tally.items() if k.endswith(": ok"))
    failed = sum(v for k, v in tally.items() if k.endswith(": FAILED"))
    print(f"\n{len(seeds)} exports in {folder}, {time.time() - start:.0f} s")
    print(f"exports lowered and checked: {ok + failed}, failed: {failed}")
    for k, v in sorted(tally.items()):
        print(f"  {k}: {v}")
    print("idioms drawn:", dict(idioms.most_common()))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="(TensorFlow venv) draw programs, convert them, record TensorFlow's outputs")
    e.add_argument("n", nargs="?", type=int, default=100)
    e.add_argument("seed", nargs="?", type=int, default=0)
    e.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fuzz_tf")
    c = sub.add_parser("check", help="(seqlower's env) lower every export and hold it to TensorFlow's outputs")
    c.add_argument("folder", type=Path)
    c.add_argument("--targets", action="store_true", help="also lower for openvino or tract and run it there")
    c.add_argument("-j", "--jobs", type=int, default=1)
    a = p.parse_args(argv)
    if a.cmd == "export":
        return export(a.n, a.seed, a.out)
    return check(a.folder, a.targets, a.jobs)


if __name__ == "__main__":
    sys.exit(main())
