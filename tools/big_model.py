"""A model over protobuf's 2 GiB, with external data, lowered against onnx.load + onnx.save.

    python tools/big_model.py [--gib 2.25] [--folder /tmp/seqlower-big]

Builds ``model.onnx`` + ``model.onnx.data`` (float32 weights, written in chunks, never
whole in memory): x[B, 1024] goes through a chain of MatMuls by 1024 x 1024 weights,
is split into a sequence of rows, each row gets a bias (SequenceMap), and the rows are
concatenated. Then, each in a fresh process, measures wall time and peak RSS of:

1. ``onnx.load`` + ``onnx.save(..., save_as_external_data=True)`` (the baseline: any
   tool that reads and writes the model pays this);
2. ``seqlower lower model.onnx -o out/lowered.onnx``;
3. ``seqlower verify`` would load both models' weights into memory: it is not run here.

Prints one row each and the ratios. Not part of the test suite (it writes ~2.3 GiB twice).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
DIM = 1024


def build(folder: Path, gib: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    layers = int(gib * 2**30 // (DIM * DIM * 4)) + 1
    data = folder / "model.onnx.data"
    initializers = []
    rng = np.random.default_rng(0)
    with open(data, "wb") as f:
        for i in range(layers):
            offset = f.tell()
            # Small weights keep the chain's values finite.
            f.write((rng.standard_normal((DIM, DIM), dtype=np.float32) / 32).tobytes())
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[DIM, DIM])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(DIM * DIM * 4))):
                e = t.external_data.add()
                e.key, e.value = k, v
            initializers.append(t)
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [DIM], np.full(DIM, 0.5, np.float32))
    nodes, prev = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    add = helper.make_graph([helper.make_node("Add", ["row", "bias"], ["out"])], "add_bias",
                            [helper.make_tensor_value_info("row", TensorProto.FLOAT, None)],
                            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    nodes += [
        helper.make_node("SplitToSequence", [prev], ["rows"], axis=0, keepdims=1),
        helper.make_node("SequenceMap", ["rows"], ["biased"], body=add),
        helper.make_node("ConcatFromSequence", ["biased"], ["y"], axis=0),
    ]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", DIM])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", DIM])],
                              initializer=[*initializers, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "model.onnx"
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


BASELINE = """
import onnx, sys
m = onnx.load(sys.argv[1])
onnx.save(m, sys.argv[2], save_as_external_data=True, location="copy.onnx.data")
"""


def isolated(argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` under a wrapper that reports its own child's peak RSS."""
    wrapper = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
               "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", wrapper, *argv], check=True, capture_output=True, text=True).stdout
    seconds, kib = out.split()
    return float(seconds), int(kib) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.25)
    ap.add_argument("--folder", type=Path, default=Path("/tmp/seqlower-big"))
    ap.add_argument("--keep", action="store_true", help="keep the files")
    args = ap.parse_args()
    shutil.rmtree(args.folder, ignore_errors=True)
    t = time.perf_counter()
    src = build(args.folder, args.gib)
    size = (args.folder / "model.onnx.data").stat().st_size
    print(f"built {src}: {size / 2**30:.2f} GiB of weights in {time.perf_counter() - t:.1f} s")
    out = args.folder / "out"
    out.mkdir()
    rows = [
        ("onnx.load + onnx.save", isolated([sys.executable, "-c", BASELINE, str(src), str(out / "copy.onnx")])),
        ("seqlower lower", isolated([sys.executable, "-m", "seqlower", "lower", str(src), "-o", str(out / "lowered.onnx")])),
    ]
    base_s, base_mb = rows[0][1]
    print(f"{'':24} {'seconds':>8} {'peak RSS MiB':>13} {'x time':>7} {'x RSS':>6}")
    for name, (s, mb) in rows:
        print(f"{name:24} {s:8.1f} {mb:13.0f} {s / base_s:7.2f} {mb / base_mb:6.2f}")
    lowered = onnx.load(str(out / "lowered.onnx"), load_external_data=False)
    ops = sorted({n.op_type for n in lowered.graph.node})
    print(f"lowered: {len(lowered.graph.node)} nodes ({', '.join(ops)}); "
          f"{(out / 'lowered.onnx.data').stat().st_size / 2**30:.2f} GiB in lowered.onnx.data; weights "
          f"{size / 2**20:.0f} MiB")
    if not args.keep:
        shutil.rmtree(args.folder, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
