"""What lowering costs against reading and writing the model, and what the lowered model
costs to run (figures, not assertions; Stage 8's goals are read off this table).

    python tools/bench.py [--quick] [--only sparse,chain,edits] [--folder /tmp/seqlower-bench]
    python tools/bench.py --flat-vs-stacked   # run time of the Flat and Stacked lowerings

Models (built here, written to --folder):

- sparse N: residual MLP blocks (MatMul, Relu, MatMul, Add: 4 nodes, two 46 x 46 weights
  each) with one SplitToSequence -> ConcatFromSequence pair in the middle: N nodes, almost
  none of them about sequences (10k and 40k nodes; 40k is 168 MB).
- chain B: B blocks of SplitToSequence(x[64, 50], 4 rows each) -> SequenceMap(MatMul by a
  50 x 50 weight, Relu) -> ConcatFromSequence (1,000 and 5,000 blocks).
- edits E: the rows of x[64, 8] as a sequence, E SequenceInsert / SequenceErase at constant
  positions (inserted rows are constants), stacked back (1,000 and 10,000 edits).

For each model, every measurement in a fresh process (wall time of the work, peak RSS of
the process): onnx.load + onnx.save (the baseline any tool pays); onnxscript's optimizer
(load, optimize, save); ``seqlower lower`` (the CLI, as a user runs it). load+save and
seqlower run in turn ``--repeat`` times (3), each after os.sync(); the medians are shown
(peak RSS: the highest). Then onnxruntime
latency of the original, the lowered model and a hand-written tensor-only equivalent
(the limit: what a person would write for the same numbers), run in turn; each ratio is the
median of the two models' ratio round by round (drift between rounds does not move it).

Printed per model: seconds and the ratio to load + save; peak RSS over (model size +
the interpreter's own RSS with seqlower imported); nodes in and out; latencies and ratios.
The last lines put each Stage 8 goal next to its figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
OPSET = 18

# -- models ---------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)


def sparse(nodes: int, *, hand_written: bool = False) -> onnx.ModelProto:
    """Residual MLP blocks, one Split/Concat sequence pair in the middle."""
    dim, blocks = 46, max(1, (nodes - 2) // 4)
    rng = np.random.default_rng(0)
    body, inits, prev = [], [], "x"
    for b in range(blocks):
        w1, w2 = f"w1_{b}", f"w2_{b}"
        inits += [numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w1),
                  numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w2)]
        body += [helper.make_node("MatMul", [prev, w1], [f"h{b}"]), helper.make_node("Relu", [f"h{b}"], [f"r{b}"]),
                 helper.make_node("MatMul", [f"r{b}", w2], [f"g{b}"]),
                 helper.make_node("Add", [prev, f"g{b}"], [f"y{b}"])]
        prev = f"y{b}"
        if b == blocks // 2:
            if hand_written:
                continue
            inits.append(numpy_helper.from_array(np.array([20, 26], np.int64), "halves"))
            body += [helper.make_node("SplitToSequence", [prev, "halves"], ["parts"], axis=1),
                     helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1)]
            prev = "joined"
    body.append(helper.make_node("Identity", [prev], ["out"]))
    return _model(body, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", dim])],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", dim])], inits, "sparse")


CHAIN_ROWS, CHAIN_STEP, CHAIN_DIM = 64, 4, 50


def chain(blocks: int, *, hand_written: bool = False) -> onnx.ModelProto:
    """SplitToSequence -> SequenceMap(MatMul, Relu) -> ConcatFromSequence, ``blocks`` times;
    hand-written: Reshape to [16, 4, 50] -> MatMul -> Relu -> Reshape, per block."""
    rng = np.random.default_rng(1)
    inits = ([numpy_helper.from_array(np.array([CHAIN_ROWS // CHAIN_STEP, CHAIN_STEP, CHAIN_DIM], np.int64), "stacked"),
              numpy_helper.from_array(np.array([CHAIN_ROWS, CHAIN_DIM], np.int64), "flat")] if hand_written
             else [numpy_helper.from_array(np.array(CHAIN_STEP, np.int64), "step")])
    nodes, prev = [], "x"
    elem = [CHAIN_STEP, CHAIN_DIM]
    for b in range(blocks):
        w = f"w{b}"
        inits.append(numpy_helper.from_array((rng.standard_normal((CHAIN_DIM, CHAIN_DIM)) / 8).astype(np.float32), w))
        if hand_written:
            nodes += [helper.make_node("Reshape", [prev, "stacked"], [f"s{b}"]),
                      helper.make_node("MatMul", [f"s{b}", w], [f"m{b}"]),
                      helper.make_node("Relu", [f"m{b}"], [f"r{b}"]),
                      helper.make_node("Reshape", [f"r{b}", "flat"], [f"y{b}"])]
        else:
            fn = helper.make_graph(
                [helper.make_node("MatMul", ["e", w], ["m"]), helper.make_node("Relu", ["m"], ["o"])], f"block{b}",
                [helper.make_tensor_value_info("e", TensorProto.FLOAT, elem)],
                [helper.make_tensor_value_info("o", TensorProto.FLOAT, elem)])
            nodes += [helper.make_node("SplitToSequence", [prev, "step"], [f"s{b}"], axis=0),
                      helper.make_node("SequenceMap", [f"s{b}"], [f"m{b}"], body=fn),
                      helper.make_node("ConcatFromSequence", [f"m{b}"], [f"y{b}"], axis=0)]
        prev = f"y{b}"
    nodes.append(helper.make_node("Identity", [prev], ["out"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [CHAIN_ROWS, CHAIN_DIM])],
                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, [CHAIN_ROWS, CHAIN_DIM])], inits, "chain")


EDIT_ROWS, EDIT_WIDTH, EDIT_EXTRAS = 64, 8, 16


def _edit_plan(edits: int) -> list[tuple[str, int, int]]:
    """(insert, position, extra row k) | (erase, position, 0) | (move, from, to) per edit:
    inserted rows are erased again and rows of x are moved, so the output is a static
    permutation of x's rows with some inserted rows, and its length stays near EDIT_ROWS."""
    rng = np.random.default_rng(2)
    plan, rows = [], list(range(EDIT_ROWS))  # where each current element comes from (>= EDIT_ROWS: an extra)
    for _ in range(edits):
        extras = [i for i, r in enumerate(rows) if r >= EDIT_ROWS]
        pick = rng.random()
        if extras and (len(rows) > EDIT_ROWS + 8 or pick < 0.4):
            pos = int(rng.choice(extras))
            pos -= len(rows) if rng.random() < 0.5 else 0
            plan.append(("erase", pos, 0))
            del rows[pos]
        elif pick < 0.8:
            pos, k = int(rng.integers(-len(rows), len(rows) + 1)), int(rng.integers(EDIT_EXTRAS))
            plan.append(("insert", pos, k))
            rows.insert(pos if pos >= 0 else len(rows) + pos, EDIT_ROWS + k)
        else:
            a, b = int(rng.integers(len(rows))), int(rng.integers(len(rows)))
            plan.append(("move", a, b))
            rows.insert(b, rows.pop(a))
    return plan


def _replay(plan: list[tuple[str, int, int]]) -> list[int]:
    rows = list(range(EDIT_ROWS))
    for op, a, b in plan:
        if op == "erase":
            del rows[a]
        elif op == "insert":
            rows.insert(a if a >= 0 else len(rows) + a, EDIT_ROWS + b)
        else:
            rows.insert(b, rows.pop(a))
    return rows


def edits(count: int, *, hand_written: bool = False) -> onnx.ModelProto:
    """``count`` edits (a move is SequenceAt + SequenceErase + SequenceInsert); by hand:
    Concat(x, extras) -> one Gather with a constant index."""
    rng = np.random.default_rng(3)
    extras = rng.standard_normal((EDIT_EXTRAS, EDIT_WIDTH)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [EDIT_ROWS, EDIT_WIDTH])
    plan = _edit_plan(count)
    if hand_written:
        rows = _replay(plan)
        inits = [numpy_helper.from_array(extras, "extras"), numpy_helper.from_array(np.array(rows, np.int64), "index")]
        nodes = [helper.make_node("Concat", ["x", "extras"], ["all"], axis=0),
                 helper.make_node("Gather", ["all", "index"], ["out"], axis=0)]
        return _model(nodes, [x], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [len(rows), EDIT_WIDTH])],
                      inits, "edits")
    inits = [numpy_helper.from_array(extras[k], f"extra{k}") for k in range(EDIT_EXTRAS)]
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s0"], axis=0, keepdims=0)]
    positions: dict[int, str] = {}

    def position(p: int) -> str:
        if p not in positions:
            positions[p] = f"p{len(positions)}"
            inits.append(numpy_helper.from_array(np.array(p, np.int64), positions[p]))
        return positions[p]

    for i, (op, a, b) in enumerate(plan):
        s, t = f"s{i}", f"s{i + 1}"
        if op == "erase":
            nodes.append(helper.make_node("SequenceErase", [s, position(a)], [t]))
        elif op == "insert":
            nodes.append(helper.make_node("SequenceInsert", [s, f"extra{b}", position(a)], [t]))
        else:
            nodes += [helper.make_node("SequenceAt", [s, position(a)], [f"moved{i}"]),
                      helper.make_node("SequenceErase", [s, position(a)], [f"without{i}"]),
                      helper.make_node("SequenceInsert", [f"without{i}", f"moved{i}", position(b)], [t])]
    nodes.append(helper.make_node("ConcatFromSequence", [f"s{len(plan)}"], ["out"], axis=0, new_axis=1))
    used = {i for n in nodes for i in n.input}
    inits = [t for t in inits if t.name in used]
    return _model(nodes, [x], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, EDIT_WIDTH])], inits,
                  "edits")


FAMILIES = {"sparse": sparse, "chain": chain, "edits": edits}
SIZES = {"sparse": (10_002, 40_002), "chain": (1_000, 5_000), "edits": (1_000, 10_000)}
QUICK = {"sparse": (2_002, 10_002), "chain": (200, 1_000), "edits": (100, 1_000)}
LATENCY_SIZES = {"chain": (100, 1_000), "edits": (100, 1_000, 10_000), "sparse": (2_002,)}
QUICK_LATENCY = {"chain": (100, 1_000), "edits": (100, 1_000), "sparse": (2_002,)}

# -- measurement in a fresh process ---------------------------------------------------------

CHILD = {
    "idle": "import onnx, onnx_ir, onnxscript, seqlower.pipeline",
    # What the imports hoisted out of the "seqlower" child cost (timed, not hoisted).
    "startup": ("for m in ('seqlower.cli', 'seqlower.cli.lower', 'seqlower.cli.verify', 'seqlower.pipeline',"
                " 'onnxscript.optimizer'): __import__(m)"),
    "load+save": "import onnx\nm = onnx.load(SRC)\nonnx.save(m, DST)",
    "onnxscript": ("import onnx, onnxscript.optimizer\nm = onnx.load(SRC)\n"
                   "m = onnxscript.optimizer.optimize(m)\nonnx.save(m, DST)"),
    # The modules ``lower`` imports when it runs, imported before the clock starts as the
    # other children import theirs: the work, not the interpreter's start-up, is measured
    # (start-up is its own row).
    "seqlower": ("from seqlower.cli import main\n"
                 "import onnxscript.optimizer, seqlower.cli.lower, seqlower.cli.verify, seqlower.pipeline\n"
                 "assert main(['lower', SRC, '-o', DST, '-q']) == 0"),
}


def isolated(kind: str, src: str = "", dst: str = "", timeout: float | None = None) -> tuple[float, float]:
    """Seconds of the work (imports excluded) and peak RSS (MiB: VmHWM, which exec resets,
    unlike ru_maxrss, which a child inherits from this process) of a fresh process; past
    ``timeout`` seconds, (inf, nan)."""
    code = (f"import time\nSRC, DST = {src!r}, {dst!r}\n"
            + "\n".join(line for line in CHILD[kind].splitlines() if line.startswith("import")
                        or line.startswith("from"))
            + "\nt = time.perf_counter()\n"
            + "\n".join(line for line in CHILD[kind].splitlines() if not (line.startswith("import")
                                                                          or line.startswith("from")))
            + "\nprint(time.perf_counter() - t, next(int(line.split()[1]) for line in open('/proc/self/status')"
            + " if line.startswith('VmHWM:')))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env,
                             timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return float("inf"), float("nan")
    seconds, kib = out.split()[-2:]
    return float(seconds), int(kib) / 1024


def latencies_ms(paths: list[str], feeds: dict[str, np.ndarray], budget: float = 3.0,
                 ) -> tuple[list[tuple[float, list]], list[list[float]]]:
    """Median onnxruntime latency (one thread) of each model, and its outputs; and each
    model's time in every round. The models run in turn, one run each a round, so drift
    on the machine hits them alike: compare two by the median of their ratio round by
    round (``paired``), which drift between rounds does not move."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sessions = [ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for p in paths]
    outs = [s.run(None, feeds) for s in sessions]
    for _ in range(5):  # warm up: first runs allocate
        for s in sessions:
            s.run(None, feeds)
    times: list[list[float]] = [[] for _ in sessions]
    start = time.perf_counter()
    while len(times[0]) < 5 or (time.perf_counter() - start < budget and len(times[0]) < 300):
        for k, s in enumerate(sessions):
            t = time.perf_counter()
            s.run(None, feeds)
            times[k].append(time.perf_counter() - t)
    return [(1000 * float(np.median(ts)), out) for ts, out in zip(times, outs)], times


def paired(a: list[float], b: list[float]) -> float:
    """How many times longer ``a`` took than ``b``: the median of their ratio by round."""
    return float(np.median(np.asarray(a) / np.asarray(b)))


def feeds_for(family: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    shape = {"sparse": (32, 46), "chain": (CHAIN_ROWS, CHAIN_DIM), "edits": (EDIT_ROWS, EDIT_WIDTH)}[family]
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def nodes_of(path: str) -> int:
    m = onnx.load(path, load_external_data=False)
    count, stack = 0, [m.graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            count += 1
            for a in n.attribute:
                stack.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--only", default="sparse,chain,edits")
    ap.add_argument("--folder", type=Path, default=Path("/tmp/seqlower-bench"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of load+save and of seqlower per model, in turn; their medians are shown (default: 3)")
    ap.add_argument("--optimizer-timeout", type=float, default=300,
                    help="stop onnxscript's optimizer after this many seconds (shown as inf; default: 300)")
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    families = args.only.split(",")
    sizes = QUICK if args.quick else SIZES
    idle = isolated("idle")[1]
    startup = isolated("startup")[0]
    print(f"interpreter with seqlower imported: {idle:.0f} MiB peak RSS; seqlower's imports: {startup:.2f} s"
          " (paid once per process, not counted below)\n")
    rows: list[dict] = []
    print(f"{'model':14} {'MB':>6} {'nodes':>7} {'out':>7} {'load+save s':>11} {'onnxscript':>10} {'seqlower s':>10}"
          f" {'x l+s':>6} {'x opt':>6} {'RSS MiB':>8} {'RSS/(MB+idle)':>13}")
    for family in families:
        for size in sizes[family]:
            src = str(args.folder / f"{family}{size}.onnx")
            onnx.save(FAMILIES[family](size), src)
            mb = os.path.getsize(src) / 2**20
            opt, _ = isolated("onnxscript", src, str(args.folder / "optimized.onnx"), timeout=args.optimizer_timeout)
            # load+save and seqlower in turn, ``--repeat`` times each, the median of each:
            # one run of either swings by a tenth or more with what the disk still writes
            # back of the run before it (both start after os.sync(), so neither pays for
            # the other's output; seqlower's own fsync stays in its time).
            bases, lows, rsss = [], [], []
            for _ in range(args.repeat):
                os.sync()
                bases.append(isolated("load+save", src, str(args.folder / "copy.onnx"))[0])
                os.sync()
                low, rss = isolated("seqlower", src, str(args.folder / f"{family}{size}.lowered.onnx"))
                lows.append(low)
                rsss.append(rss)
            base, low, rss = statistics.median(bases), statistics.median(lows), max(rsss)
            n_in, n_out = nodes_of(src), nodes_of(str(args.folder / f"{family}{size}.lowered.onnx"))
            row = {"model": f"{family} {size}", "family": family, "size": size, "mb": mb, "nodes": n_in,
                   "nodes_out": n_out, "load_save": base, "onnxscript": opt, "seqlower": low, "rss": rss,
                   "rss_ratio": rss / (mb + idle)}
            rows.append(row)
            print(f"{row['model']:14} {mb:6.1f} {n_in:7} {n_out:7} {base:11.2f} {opt:10.2f} {low:10.2f}"
                  f" {low / base:6.1f} {low / opt:6.2f} {rss:8.0f} {row['rss_ratio']:13.2f}", flush=True)

    print(f"\n{'onnxruntime ms':14} {'original':>9} {'lowered':>9} {'by hand':>9} {'orig/low':>9} {'low/hand':>9}")
    latencies: list[dict] = []
    for family in families:
        for size in (QUICK_LATENCY if args.quick else LATENCY_SIZES)[family]:
            src = str(args.folder / f"{family}{size}.lat.onnx")
            hand = str(args.folder / f"{family}{size}.hand.onnx")
            dst = str(args.folder / f"{family}{size}.lat.lowered.onnx")
            onnx.save(FAMILIES[family](size), src)
            onnx.save(FAMILIES[family](size, hand_written=True), hand)
            isolated("seqlower", src, dst)
            feeds = feeds_for(family)
            ((ms_o, out_o), (ms_l, out_l), (ms_h, out_h)), (t_o, t_l, t_h) = latencies_ms([src, dst, hand], feeds)
            for a, b, c in zip(out_o, out_l, out_h):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(c, a, rtol=1e-5, atol=1e-5)
            latencies.append({"model": f"{family} {size}", "family": family, "size": size, "original": ms_o,
                              "lowered": ms_l, "hand": ms_h, "speedup": paired(t_o, t_l), "off": paired(t_l, t_h)})
            print(f"{family + ' ' + str(size):14} {ms_o:9.3f} {ms_l:9.3f} {ms_h:9.3f} {latencies[-1]['speedup']:9.2f}"
                  f" {latencies[-1]['off']:9.2f}", flush=True)
    goals(rows, latencies)
    if args.json:
        args.json.write_text(json.dumps({"idle_rss": idle, "lowering": rows, "latency": latencies}, indent=1))


def goals(rows: list[dict], latencies: list[dict]) -> None:
    """Each Stage 8 goal next to what was measured."""
    print("\ngoals")
    by = {(r["family"], r["size"]): r for r in rows}

    def show(text: str, figure: str, ok: bool) -> None:
        print(f"  [{'met' if ok else 'NOT met'}] {text}: {figure}")

    for (family, size), limit in ((("sparse", 40_002), 2.0), (("chain", 5_000), 3.0)):
        if (r := by.get((family, size))) is not None:
            ratio = r["seqlower"] / r["load_save"]
            show(f"{family} {size}: lowering <= {limit:g}x load+save", f"{ratio:.2f}x", ratio <= limit)
    if (r := by.get(("edits", 10_000))) is not None:
        show("edits 10000: lowering <= 5 s", f"{r['seqlower']:.2f} s", r["seqlower"] <= 5)
    for family in ("sparse", "chain", "edits"):
        small, big = [by[(f, s)] for (f, s) in sorted(by) if f == family][:1], [by[(f, s)] for (f, s) in sorted(by) if f == family][-1:]
        if small and big and small[0] is not big[0]:
            a, b = small[0], big[0]
            growth = (b["seqlower"] / a["seqlower"]) / (b["nodes"] / a["nodes"])
            show(f"{family}: time grows <= 1.1x per size step (time ratio / node ratio)", f"{growth:.2f}", growth <= 1.1)
    worst = max(rows, key=lambda r: r["rss_ratio"], default=None)
    if worst is not None:
        show("peak RSS <= 3x (model + interpreter)", f"worst {worst['rss_ratio']:.2f} ({worst['model']})",
             worst["rss_ratio"] <= 3)
    for lat in latencies:
        speedup = lat["speedup"]
        need = {"chain": 2.0, "edits": 100.0 if lat["size"] >= 10_000 else 1.0}.get(lat["family"], 1.0)
        show(f"{lat['model']}: lowered >= {need:g}x faster than the original on onnxruntime", f"{speedup:.2f}x",
             speedup >= need)
        if lat["family"] == "chain":
            off = lat["off"]
            show(f"{lat['model']}: within 1.1x of hand-written", f"{off:.2f}x", off <= 1.1)
    for r in rows:
        if r["family"] in ("sparse", "edits"):
            show(f"{r['model']}: nodes out <= nodes in (static web)", f"{r['nodes_out']} <= {r['nodes']}",
                 r["nodes_out"] <= r["nodes"])


# tools/memory.py's model: x[n, 8] split, mapped, inserted into, erased from and
# concatenated, ``chains`` copies side by side.
def build(n: int, chains: int):
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["e", "w"], ["m"]),
            helper.make_node("Add", ["m", "w"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Neg", ["r"], ["o"]),
        ],
        "body",
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, 8])],
    )
    nodes, outputs = [], []
    for c in range(chains):
        nodes += [
            helper.make_node("SplitToSequence", ["x"], [f"s{c}"], axis=0),
            helper.make_node("SequenceMap", [f"s{c}"], [f"m{c}"], body=body),
            helper.make_node("SequenceInsert", [f"m{c}", "extra", "zero"], [f"i{c}"]),
            helper.make_node("SequenceErase", [f"i{c}", "minus1"], [f"d{c}"]),
            helper.make_node("ConcatFromSequence", [f"d{c}"], [f"y{c}"], axis=0),
        ]
        outputs.append(helper.make_tensor_value_info(f"y{c}", TensorProto.FLOAT, [n, 8]))
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 8])], outputs,
        initializer=[
            numpy_helper.from_array(np.ones(8, np.float32), "w"),
            numpy_helper.from_array(np.zeros((1, 8), np.float32), "extra"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array(-1, np.int64), "minus1"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)



# --flat-vs-stacked: x[N, M] unbound into rows, each row read at a run-time position,
# mapped, an element inserted and one erased, a loop appending one row per step,
# everything stacked; lowered Flat and Stacked.
def build_dynamic():
    body = helper.make_graph(
        [helper.make_node("Mul", ["e", "w"], ["m"]), helper.make_node("Relu", ["m"], ["o"])],
        "map", [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["M"]), helper.make_tensor_value_info("w", TensorProto.FLOAT, ["M"])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, ["M"])],
    )
    loop = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
         helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"])],
        "collect", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                    helper.make_tensor_sequence_value_info("acc", TensorProto.FLOAT, ["M"])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_sequence_value_info("acc_out", TensorProto.FLOAT, ["M"])],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["rows", "p"], ["picked"]),
        helper.make_node("SequenceMap", ["rows", "w"], ["mapped"], body=body),
        helper.make_node("SequenceInsert", ["mapped", "picked", "p"], ["more"]),
        helper.make_node("SequenceErase", ["more", "zero"], ["fewer"]),
        helper.make_node("ConcatFromSequence", ["fewer"], ["y"], axis=0, new_axis=1),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "zero"], ["trips"], axis=0),
        helper.make_node("Loop", ["trips", "", "empty"], ["collected"], body=loop),
        helper.make_node("ConcatFromSequence", ["collected"], ["z"], axis=0, new_axis=1),
    ]
    graph = helper.make_graph(
        nodes, "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "M"]), helper.make_tensor_value_info("w", TensorProto.FLOAT, ["M"]),
         helper.make_tensor_value_info("p", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, "M"]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, "M"])],
        initializer=[numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def flat_vs_stacked() -> None:
    """Run time on onnxruntime of a model whose length is known only at run time, lowered
    Flat and Stacked, against the original (README, step 5)."""
    import onnxruntime as ort

    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.model_io import to_proto

    m = build_dynamic()
    models = {"original": m}
    for label, stacked in (("flat", False), ("stacked", True)):
        low, report = lower_with_report(load_model(m), LowerOptions(packed=stacked))
        assert report.tensor_only and {r["into"] for r in report.rewrites} <= {label, "constant"}, report.rewrites
        models[label] = to_proto(low)
    sessions = {k: ort.InferenceSession(v.SerializeToString(), providers=["CPUExecutionProvider"]) for k, v in models.items()}
    print(f"\n{'N':>6} {'M':>4} " + " ".join(f"{k + ' ms':>12}" for k in sessions) + f" {'flat/stacked':>12}")
    rng = np.random.default_rng(0)
    for n, width in ((10, 64), (100, 64), (1000, 64), (4000, 16)):
        feeds = {"x": rng.standard_normal((n, width)).astype(np.float32), "w": rng.standard_normal(width).astype(np.float32),
                 "p": np.array(-1, np.int64)}
        ms = {}
        results = {}
        for k, sess in sessions.items():
            results[k] = sess.run(None, feeds)
            reps = 20 if n <= 1000 else 5
            start = time.perf_counter()
            for _ in range(reps):
                sess.run(None, feeds)
            ms[k] = 1000 * (time.perf_counter() - start) / reps
        for k in ("flat", "stacked"):
            for a, b in zip(results["original"], results[k]):
                np.testing.assert_allclose(a, b, rtol=1e-6)
        nodes = {k: len(v.graph.node) for k, v in models.items()}
        print(f"{n:>6} {width:>4} " + " ".join(f"{ms[k]:>12.2f}" for k in sessions) + f" {ms['flat'] / ms['stacked']:>12.1f}")
    print("top-level nodes:", nodes)


if __name__ == "__main__":
    if "--flat-vs-stacked" in sys.argv:
        sys.path.insert(0, str(ROOT))
        flat_vs_stacked()
    else:
        main()
