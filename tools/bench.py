"""Lowering time against sequence length and graph size, and the run time of the
dynamic lowerings (figures, not assertions).

    python tools/bench.py

1. Lowering time. Model: x[n, 8] split into n chunks, each chunk through a 4-node
   SequenceMap body, an insert and an erase, concatenated; plus ``chains`` copies of that
   side by side. The design asks for passes linear in graph size and sequence length: the
   ``per unit`` column should stay roughly flat as n and chains grow.
2. Run time on onnxruntime of a model whose length is known only at run time (x[N, M]
   unbound into rows, each row read at a run-time position, mapped, an element inserted
   and one erased, a loop appending one row per step, everything stacked): the original
   (onnxruntime runs sequences), the Flat lowering and the Stacked one, measured in one
   run, so the ratios are what to read.
"""

from __future__ import annotations

import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from seqlower import LowerOptions, load_model, lower_with_report


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


def main() -> None:
    print(f"{'n':>5} {'chains':>6} {'nodes out':>9} {'seconds':>8} {'ms per unit':>11}")
    for n, chains in ((8, 1), (16, 1), (32, 1), (64, 1), (120, 1), (64, 2), (64, 4), (64, 8)):
        m = build(n, chains)
        start = time.perf_counter()
        out, report = lower_with_report(load_model(m), LowerOptions(max_unroll=128))
        seconds = time.perf_counter() - start
        assert report.tensor_only
        units = n * chains
        print(f"{n:>5} {chains:>6} {len(list(out.graph)):>9} {seconds:>8.3f} {1000 * seconds / units:>11.2f}")


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


def run_time() -> None:
    import onnxruntime as ort

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
    main()
    run_time()
