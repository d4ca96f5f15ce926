"""Lowering time against sequence length and graph size (figures, not assertions).

    python tools/bench.py

Model: x[n, 8] split into n chunks, each chunk through a 4-node SequenceMap body, an
insert and an erase, concatenated; plus ``chains`` copies of that side by side. The
design asks for passes linear in graph size and sequence length: the ``per unit`` column
should stay roughly flat as n and chains grow.
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


if __name__ == "__main__":
    main()
