"""Nothing written that the target refuses: the emitter's rules (passes/legalize.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor, verify
from seqlower.io.inventory import walk_graphs
from seqlower.io.models import to_proto
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes.legalize import for_target
from seqlower.targets import load_target, target_gaps

DATA = Path(__file__).resolve().parents[1] / "data"


def _graph_with(x_shape, dtype=ir.DataType.INT64, opset=18, target="onnx2torch"):
    x = ir.Value(name="x", type=ir.TensorType(dtype), shape=ir.Shape(x_shape))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": opset}, name="g")
    model = ir.Model(graph, ir_version=10)
    b = Builder(graph, None, opset, NameAuthority(model), main_graph=True, legalize=for_target(target))
    return model, graph, x, b


def _run(model, graph, out, feeds):
    graph.outputs.append(out)
    return Executor(to_proto(model), backend="reference").run(feeds).outputs[out.name]


def test_a_product_onnx2torch_cannot_reduce_is_written_by_gathers_and_muls():
    model, graph, x, b = _graph_with([3, 4])
    out = b.reduce("ReduceProd", x, [1], "p", keepdims=False)
    assert "ReduceProd" not in [n.op_type for n in graph] and "Mul" in [n.op_type for n in graph]
    value = np.arange(1, 13, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(_run(model, graph, out, {"x": value}), value.prod(axis=1))


def test_a_product_over_a_dim_known_only_at_run_time_is_written_as_it_is():
    model, graph, x, b = _graph_with([3, "r"])
    b.reduce("ReduceProd", x, [1], "p", keepdims=False)
    assert [n.op_type for n in graph] == ["ReduceProd"]


def test_what_the_target_runs_is_written_as_it_is():
    _, graph, x, b = _graph_with([3, 4], opset=17)  # onnx2torch reduces products before 18
    b.reduce("ReduceProd", x, [1], "p", keepdims=False)
    assert [n.op_type for n in graph] == ["ReduceProd"]
    assert for_target("generic") is None


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_a_cumsum_tract_lacks_is_a_masked_sum(exclusive, reverse):
    model, graph, x, b = _graph_with([5], target="tract", opset=17)
    out = b.op("CumSum", [x, b.constant(np.array(0, np.int64), "axis")], "c", exclusive=exclusive, reverse=reverse)
    assert "CumSum" not in [n.op_type for n in graph]
    value = np.array([3, 1, 4, 1, 5], np.int64)
    want = np.cumsum(value[::-1])[::-1] if reverse else np.cumsum(value)
    if exclusive:
        want = want - value
    np.testing.assert_array_equal(_run(model, graph, out, {"x": value}), want)


def _seqlowers_gaps(path: Path, target: str) -> list[str]:
    m = onnx.load(path)
    names = {n.name for _, g, _ in walk_graphs(m) for n in g.node}
    lowered, report = lower_with_report(load_model(m), LowerOptions(target=target))
    low = to_proto(lowered)
    assert verify(m, low, samples=2, backend="reference").equivalent
    ours = [g for g in target_gaps(low, load_target(target), report.kept_loops)
            if (w := g.where.split("'")) and len(w) > 1 and w[1] not in names]
    return [f"{g.where}: {g.why}" for g in ours], low


def test_the_embedding_bag_export_gets_no_product_onnx2torch_refuses():
    gaps, _ = _seqlowers_gaps(DATA / "exported" / "dynamo_embedding_bag_opset18.onnx", "onnx2torch")
    assert not [g for g in gaps if "no-reduce-18" in g], gaps


def test_a_torch_export_lowered_for_tract_gets_no_cumsum_and_runs_there():
    path = DATA / "torch_fuzz" / "19476_torchscript-op13-all-nofold.onnx"
    gaps, low = _seqlowers_gaps(path, "tract")
    assert gaps == []
    assert "CumSum" not in {n.op_type for _, g, _ in walk_graphs(low) for n in g.node}
    assert verify(onnx.load(path), low, samples=2, backend="reference", lowered_backend="tract").equivalent
