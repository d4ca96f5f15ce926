"""Peak memory of a lowering against model size (figures, not assertions).

    python tools/memory.py

1. Graph size: tools/bench.py's model (x[64, 8] split, mapped, inserted into, erased
   from and concatenated) with 1 to 16 copies side by side. Peak memory per node of the
   lowered model should stay flat as the graph grows.
2. Weight size: a small sequence program next to one float initializer of 16 to 256 MB
   (in memory, not external). Peak memory over the weight bytes should stay a small
   constant: the passes never copy weights; the model is serialized for the checker.

Peaks are Python allocations traced by tracemalloc (numpy buffers included).
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import build  # noqa: E402

from seqlower import LowerOptions, load_model, lower_with_report  # noqa: E402


def _peak(model) -> tuple[float, int]:
    """Peak MB while loading and lowering ``model`` (a ModelProto), and nodes out."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    out, _ = lower_with_report(load_model(model), LowerOptions())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, len(list(out.graph))


def with_weight(mb: int):
    w = np.ones(mb * 2**20 // 4, np.float32)
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["s", "p"], ["row"]),
        helper.make_node("ReduceSum", ["w"], ["total"], keepdims=0),
        helper.make_node("Mul", ["row", "total"], ["y"]),
    ]
    g = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                                             helper.make_tensor_value_info("p", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    _peak(build(8, 1))  # imports and caches first, so they are not counted
    print("1. graph size")
    print(f"{'chains':>6} {'nodes out':>9} {'peak MB':>8} {'KB per node':>11}")
    for chains in (1, 2, 4, 8, 16):
        peak, nodes = _peak(build(64, chains))
        print(f"{chains:>6} {nodes:>9} {peak:>8.1f} {1024 * peak / nodes:>11.1f}")
    print("2. weight size")
    print(f"{'weight MB':>9} {'peak MB':>8} {'peak / weight':>13}")
    for mb in (16, 64, 256):
        peak, _ = _peak(with_weight(mb))
        print(f"{mb:>9} {peak:>8.1f} {peak / mb:>13.2f}")


if __name__ == "__main__":
    main()
