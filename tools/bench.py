"""What lowering costs against reading and writing the model, and what the lowered model
costs to run, over families of models drawn from seeds (tools/families.py), each family
reported by its worst member with that member's seed (Stage 11: figures, not
assertions; the goals are read off the last lines).

    python tools/bench.py [--members 20] [--sizes 1000,10000] [--only chain,edits,...]
    python tools/bench.py --quick                    # 4 members, sizes 300 and 3000
    python tools/bench.py --flat-vs-stacked          # run time of the Flat and Stacked lowerings

For each family and size, ``--members`` members (seeds ``--seed`` on), each measured once
in a fresh process (wall time of the work, imports excluded; peak RSS): onnx.load +
onnx.save of the member (the baseline any tool pays) and ``seqlower lower`` (the CLI, as
a user runs it). The worst member (highest seqlower / load+save) is then measured
``--repeat`` times in turn (after os.sync()), and the medians shown: one run of either
swings by a tenth or more with what the disk still writes back of the run before.
Growth: per seed, (time at the larger size / time at the smaller) / (nodes at the larger /
nodes at the smaller), the worst seed shown. Peak RSS is over (model size + the
interpreter's own RSS with seqlower imported).

Latency (members with a hand-written model: chain, edits, sparse; ``--latency-nodes``
nodes each): onnxruntime (one thread) runs the original, the lowered model and the
hand-written one in turn; each ratio is the median of the two models' ratio round by
round (drift between rounds does not move it); the worst member per family is shown.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import FAMILIES, Member  # noqa: E402

# -- measurement in a fresh process ---------------------------------------------------------

CHILD = {
    "idle": "import onnx, onnx_ir, onnxscript, seqlower.fastpath.pipeline",
    # What the imports hoisted out of the "seqlower" child cost (timed, not hoisted).
    "startup": ("for m in ('seqlower.cli', 'seqlower.cli.lower', 'seqlower.cli.verify', 'seqlower.fastpath.pipeline',"
                " 'onnxscript.optimizer'): __import__(m)"),
    "load+save": "import onnx\nm = onnx.load(SRC)\nonnx.save(m, DST)",
    # The modules ``lower`` imports when it runs, imported before the clock starts as the
    # other children import theirs: the work, not the interpreter's start-up, is measured
    # (start-up is tools/startup.py's).
    # (The passes, the analysis and networkx load when a lowering first runs: imported
    # here too, or each member's time would carry half a second of imports.)
    "seqlower": ("from seqlower.cli import main\n"
                 "import onnxscript.optimizer, seqlower.cli.lower, seqlower.cli.verify, seqlower.fastpath.pipeline\n"
                 "import seqlower.lowering, seqlower.fastpath.regions, seqlower.fastpath.repeats, networkx\n"
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


def latencies_ms(paths: list[str], feeds: dict[str, np.ndarray], budget: float = 2.0,
                 ) -> tuple[list[tuple[float, list]], list[list[float]]]:
    """Median onnxruntime latency (one thread) of each model, and its outputs; and each
    model's time in every round. The models run in turn, one run each a round, so drift
    on the machine hits them alike: compare two by the median of their ratio round by
    round (``paired``), which drift between rounds does not move."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sessions = [ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for p in paths]
    fed = [{i.name: feeds[i.name] for i in s.get_inputs()} for s in sessions]
    outs = [s.run(None, f) for s, f in zip(sessions, fed)]
    once = []
    for s, f in zip(sessions, fed):  # warm up (first runs allocate), and time one run
        for _ in range(5):
            t = time.perf_counter()
            s.run(None, f)
        once.append(time.perf_counter() - t)
    # Each model runs for about a millisecond a round, and its time is the mean of those
    # runs: a model of microseconds right after one of milliseconds (the original) finds
    # the caches cold, and one run of it measured 2.8x a hand-written twin it equals.
    reps = [max(1, int(1e-3 / max(o, 1e-7))) for o in once]
    times: list[list[float]] = [[] for _ in sessions]
    start = time.perf_counter()
    while len(times[0]) < 5 or (time.perf_counter() - start < budget and len(times[0]) < 300):
        for k, (s, f) in enumerate(zip(sessions, fed)):
            t = time.perf_counter()
            for _ in range(reps[k]):
                s.run(None, f)
            times[k].append((time.perf_counter() - t) / reps[k])
    return [(1000 * float(np.median(ts)), out) for ts, out in zip(times, outs)], times


def paired(a: list[float], b: list[float]) -> float:
    """How many times longer ``a`` took than ``b``: the median of their ratio by round."""
    return float(np.median(np.asarray(a) / np.asarray(b)))


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


def measure(member: Member, folder: Path, repeat: int, timeout: float) -> dict:
    """load+save and seqlower on one member, ``repeat`` times in turn (medians)."""
    tag = f"{member.family}{member.seed}"
    src, dst = str(folder / f"{tag}.onnx"), str(folder / f"{tag}.lowered.onnx")
    onnx.save(member.model, src)
    bases, lows, rsss = [], [], []
    for _ in range(repeat):
        os.sync()
        bases.append(isolated("load+save", src, str(folder / "copy.onnx"))[0])
        os.sync()
        low, rss = isolated("seqlower", src, dst, timeout=timeout)
        lows.append(low)
        rsss.append(rss)
    mb = os.path.getsize(src) / 2**20
    row = {"family": member.family, "seed": member.seed, "what": member.what, "mb": mb, "nodes": nodes_of(src),
           "nodes_out": nodes_of(dst) if os.path.exists(dst) and lows[0] != float("inf") else -1,
           "load_save": statistics.median(bases), "seqlower": statistics.median(lows), "rss": max(rsss)}
    row["ratio"] = row["seqlower"] / row["load_save"]
    return row


def lowering_table(args, families: list[str], sizes: list[int], idle: float) -> list[dict]:
    print(f"{'family':9} {'size':>6} {'members':>7} {'median x':>8} {'worst x':>8} {'seed':>6} {'nodes':>7} {'out':>7}"
          f" {'l+s s':>7} {'lower s':>8} {'RSS/(MB+idle)':>13}  worst member")
    rows: list[dict] = []
    for family in families:
        for size in sizes:
            screened = []
            for k in range(args.members):
                member = FAMILIES[family](args.seed + k, size)
                row = measure(member, args.folder, 1, args.timeout)
                row["size"] = size
                row["rss_ratio"] = row["rss"] / (row["mb"] + idle)
                screened.append(row)
            worst = max(screened, key=lambda r: r["ratio"])
            confirmed = measure(FAMILIES[family](worst["seed"], size), args.folder, args.repeat, args.timeout)
            confirmed.update(size=size, rss_ratio=confirmed["rss"] / (confirmed["mb"] + idle), worst=True,
                             median_ratio=statistics.median(r["ratio"] for r in screened),
                             worst_rss_ratio=max(r["rss_ratio"] for r in screened),
                             worst_edits_seconds=max(r["seqlower"] for r in screened))
            rows += screened
            rows.append(confirmed)
            print(f"{family:9} {size:>6} {len(screened):>7} {confirmed['median_ratio']:8.2f} {confirmed['ratio']:8.2f}"
                  f" {worst['seed']:>6} {confirmed['nodes']:>7} {confirmed['nodes_out']:>7} {confirmed['load_save']:7.3f}"
                  f" {confirmed['seqlower']:8.2f} {confirmed['worst_rss_ratio']:13.2f}  {confirmed['what']}", flush=True)
    return rows


def latency_table(args, families: list[str]) -> list[dict]:
    from seqlower import lower

    print(f"\n{'onnxruntime':11} {'members':>7} {'orig/low worst':>14} {'seed':>6} {'low/hand worst':>14} {'seed':>6}"
          f" {'low/hand median':>15}  worst member (low/hand)")
    out: list[dict] = []
    for family in families:
        rows = []
        for k in range(args.latency_members):
            member = FAMILIES[family](args.seed + k, args.latency_nodes)
            if member.hand is None:
                continue
            tag = f"{family}{member.seed}.lat"
            paths = [str(args.folder / f"{tag}.{kind}.onnx") for kind in ("orig", "low", "hand")]
            onnx.save(member.model, paths[0])
            onnx.save(lower(member.model), paths[1])
            onnx.save(member.hand, paths[2])
            ((_, o), (_, lo), (_, h)), (t_o, t_l, t_h) = latencies_ms(paths, member.feeds, budget=args.budget)
            for a, b, c in zip(o, lo, h):
                np.testing.assert_allclose(b, a, rtol=member.tolerance, atol=member.tolerance)
                np.testing.assert_allclose(c, a, rtol=member.tolerance, atol=member.tolerance)
            rows.append({"family": family, "seed": member.seed, "what": member.what,
                         "speedup": paired(t_o, t_l), "off": paired(t_l, t_h), "ceiling": paired(t_o, t_h)})
        if not rows:
            continue
        slow, off = min(rows, key=lambda r: r["speedup"]), max(rows, key=lambda r: r["off"])
        print(f"{family:11} {len(rows):>7} {slow['speedup']:14.2f} {slow['seed']:>6} {off['off']:14.2f} {off['seed']:>6}"
              f" {statistics.median(r['off'] for r in rows):15.2f}  {off['what']}", flush=True)
        out += rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 members, sizes 300 and 3000 (a smoke run)")
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--members", type=int, default=20, help="members per family and size (default: 20)")
    ap.add_argument("--sizes", default="1000,10000", help="nodes of each member, comma-separated (default: 1000,10000)")
    ap.add_argument("--seed", type=int, default=0, help="the first member's seed (default: 0)")
    ap.add_argument("--latency-members", type=int, default=20)
    ap.add_argument("--latency-nodes", type=int, default=400)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of onnxruntime runs per member")
    ap.add_argument("--folder", type=Path, default=Path("/tmp/seqlower-bench"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of load+save and of seqlower on each worst member, in turn; medians shown (default: 3)")
    ap.add_argument("--timeout", type=float, default=600, help="a lowering past this many seconds counts as inf")
    args = ap.parse_args()
    if args.quick:
        args.members, args.latency_members, args.sizes, args.repeat = 4, 4, "300,3000", 1
    args.folder.mkdir(parents=True, exist_ok=True)
    families = args.only.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    idle = isolated("idle")[1]
    print(f"interpreter with seqlower imported: {idle:.0f} MiB peak RSS (start-up: tools/startup.py)\n")
    rows = lowering_table(args, families, sizes, idle) if args.members else []  # (--members 0: latency only)
    latencies = latency_table(args, [f for f in families if f in ("chain", "edits", "sparse")])
    goals(rows, latencies, sizes)
    if args.json:
        args.json.write_text(json.dumps({"idle_rss": idle, "lowering": rows, "latency": latencies}, indent=1))


def goals(rows: list[dict], latencies: list[dict], sizes: list[int]) -> None:
    """Each Stage 11 goal next to what was measured (worst members, with their seeds)."""
    print("\ngoals")

    def show(text: str, figure: str, ok: bool) -> None:
        print(f"  [{'met' if ok else 'NOT met'}] {text}: {figure}")

    worst = [r for r in rows if r.get("worst")]
    big = max(sizes)
    for r in worst:
        if r["size"] == big and big >= 10_000:  # (a member's nodes are its size, within a block)
            show(f"{r['family']} {big}: worst member <= 2x load+save", f"{r['ratio']:.2f}x (seed {r['seed']})", r["ratio"] <= 2)
    if len(sizes) > 1:
        small = min(sizes)
        for family in dict.fromkeys(r["family"] for r in rows):
            by_seed = {}
            for r in rows:
                if r["family"] == family and not r.get("worst"):
                    by_seed.setdefault(r["seed"], {})[r["size"]] = r
            growths = [(((d[big]["seqlower"] / d[small]["seqlower"]) / (d[big]["nodes"] / d[small]["nodes"])) ** (1 / np.log10(big / small)), seed)
                       for seed, d in by_seed.items() if small in d and big in d]
            if growths:
                g, seed = max(growths)
                show(f"{family}: time grows <= 1.1x per 10x size (time ratio / node ratio)", f"worst {g:.2f} (seed {seed})", g <= 1.1)
    rss = max(rows, key=lambda r: r["rss_ratio"], default=None)
    if rss is not None:
        show("peak RSS <= 3x (model + interpreter)", f"worst {rss['rss_ratio']:.2f} ({rss['family']} seed {rss['seed']})",
             rss["rss_ratio"] <= 3)
    edits = [r for r in rows if r["family"] == "edits" and r["nodes"] >= 10_000 and not r.get("worst")]
    if edits:
        e = max(edits, key=lambda r: r["seqlower"])
        show("edits at 10^4: lowering <= 2 s", f"worst {e['seqlower']:.2f} s (seed {e['seed']}: {e['what']})", e["seqlower"] <= 2)
    chains = [r for r in latencies if r["family"] == "chain"]
    if chains:
        off = max(chains, key=lambda r: r["off"])
        show("chain: lowered <= 1.1x hand-written on onnxruntime", f"worst {off['off']:.2f}x (seed {off['seed']})", off["off"] <= 1.1)
        slow = min(chains, key=lambda r: r["speedup"])
        # (with what the hand-written model gains on that member: no lowering beats it)
        show("chain: lowered >= 2x faster than the original",
             f"worst {slow['speedup']:.2f}x (seed {slow['seed']}; hand-written {slow['ceiling']:.2f}x)", slow["speedup"] >= 2)


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
    Flat and Stacked, against the original (docs/how-it-works.md, step 5)."""
    import onnxruntime as ort

    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.io.models import to_proto

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
