"""tract quirk "one-if-per-graph": tract loads every If under the name "If", so a second
If in one graph fails ("Duplicate node name: If"). Lowered for tract, each If past a
graph's first runs alone in a Scan of one iteration (passes/quirks/ifs_in_scans.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.cli import main
from seqlower.executor import Executor
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, const, lowered_for, model, t


def _branch(name: str, op: str, x: str, extra: list | None = None) -> onnx.GraphProto:
    nodes = [helper.make_node(op, [x, "one"], [f"{name}_o"]), *(extra or [])]
    return helper.make_graph(nodes, name, [], [t(f"{name}_o", FLOAT, ["n"])])


def _ifs(opset: int = 17) -> onnx.ModelProto:
    """Three Ifs in the main graph, the last a model output, and two in a branch."""
    inner = helper.make_graph(
        [helper.make_node("If", ["c1"], ["i1"], then_branch=_branch("it1", "Add", "a"), else_branch=_branch("ie1", "Sub", "a"), name="inner1"),
         helper.make_node("If", ["c2"], ["i2"], then_branch=_branch("it2", "Mul", "i1"), else_branch=_branch("ie2", "Add", "i1"), name="inner2")],
        "outer_then", [], [t("i2", FLOAT, ["n"])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c1"]),
             helper.make_node("Greater", ["s", "one"], ["c2"]),
             helper.make_node("If", ["c1"], ["a"], then_branch=_branch("t1", "Add", "x"), else_branch=_branch("e1", "Sub", "x"), name="first"),
             helper.make_node("If", ["c2"], ["b"], then_branch=inner, else_branch=_branch("e2", "Div", "a"), name="second"),
             helper.make_node("If", ["c1"], ["y"], then_branch=_branch("t3", "Mul", "b"), else_branch=_branch("e3", "Sub", "b"), name="third")]
    return model(nodes, [t("x", FLOAT, ["n"])], [t("y", FLOAT, ["n"]), t("b", FLOAT, ["n"])], opset=opset,
                 initializer=[const("zero", np.array(0, np.float32)), const("one", np.array(1, np.float32))])


def _ifs_per_graph(m: onnx.ModelProto) -> list[int]:
    counts, stack = [], [m.graph]
    while stack:
        g = stack.pop()
        counts.append(sum(n.op_type == "If" for n in g.node))
        stack += [a.g for n in g.node for a in n.attribute if a.HasField("g")]
    return counts


_INPUTS = [np.array(v, np.float32) for v in ([1.0, 2.0], [-1.0, 0.5], [0.25, 0.25], [], [3.0])]


def test_tract_fails_a_second_if_in_a_graph_and_check_names_it(tmp_path):
    # The quirk itself: when tract names Ifs by their node, this fails and the rewrite can go.
    m = _ifs()
    with pytest.raises(Exception, match="Duplicate node name: If"):
        Executor(m, backend="tract").run({"x": _INPUTS[0]})
    gaps = target_gaps(m, load_target("tract"))
    named = sorted(g.where for g in gaps if "one-if-per-graph" in g.why)
    assert named == ["If node 'inner2'", "If node 'second'", "If node 'third'"]
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    assert main(["check", str(path), "--target", "tract"]) == 1


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_lowered_for_tract_each_graph_has_one_if_and_tract_gives_onnx_numbers(opset):
    m = _ifs(opset)
    low = lowered_for(m, "tract")
    assert max(_ifs_per_graph(low)) == 1 and _ifs_per_graph(m) != _ifs_per_graph(low)
    assert [o.name for o in low.graph.output] == ["y", "b"]
    assert not [g for g in target_gaps(low, load_target("tract")) if "one-if-per-graph" in g.why]
    for x in _INPUTS:
        want = Executor(m, backend="onnxruntime").run({"x": x}).outputs
        got = Executor(low, backend="tract").run({"x": x}).outputs
        for name in ("y", "b"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


def test_other_targets_keep_their_ifs():
    m = _ifs()
    assert _ifs_per_graph(lowered_for(m, "generic")) == _ifs_per_graph(m)


def test_an_if_of_unknown_rank_stays_where_onnxruntime_runs_it_and_check_names_it():
    # Graph program 47704: onnxruntime's Scan takes each stacked output's rank from the
    # body's declared output ("Subgraph must have the shape set for all outputs"). A
    # Reshape to a run-time shape has no rank onnx can infer.
    def branch(name: str, op: str) -> onnx.GraphProto:
        node = helper.make_node(op, ["x", "dims"] if op == "Reshape" else ["x"], [f"{name}_o"])
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_o", onnx.TensorProto.FLOAT, None)])

    nodes = [helper.make_node("If", ["c1"], ["a"], then_branch=branch("t1", "Reshape"), else_branch=branch("e1", "Identity"), name="first"),
             helper.make_node("If", ["c2"], ["b"], then_branch=branch("t2", "Reshape"), else_branch=branch("e2", "Identity"), name="second"),
             helper.make_node("Shape", ["a"], ["a_dims"]), helper.make_node("Shape", ["b"], ["b_dims"])]
    m = model(nodes, [t("x", FLOAT, ["n"]), t("dims", onnx.TensorProto.INT64, ["r"]), t("c1", onnx.TensorProto.BOOL, []),
                      t("c2", onnx.TensorProto.BOOL, [])],
              [t("a_dims", onnx.TensorProto.INT64, ["ra"]), t("b_dims", onnx.TensorProto.INT64, ["rb"])])
    low = lowered_for(m, "tract")
    assert _ifs_per_graph(low)[0] == 2
    feeds = {"x": np.ones(6, np.float32), "dims": np.array([2, 3]), "c1": np.array(True), "c2": np.array(False)}
    got = Executor(low, backend="onnxruntime").run(feeds).outputs
    assert got["a_dims"].tolist() == [2, 3] and got["b_dims"].tolist() == [6]
    assert [g.where for g in target_gaps(low, load_target("tract")) if "one-if-per-graph" in g.why] == ["If node 'second'"]
