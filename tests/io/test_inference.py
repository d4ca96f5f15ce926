"""seqlower.io.inference: windowed inference finds what one run finds."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from seqlower.io.inference import infer_shapes
from seqlower.io.protos import subgraphs_of
from tests.conftest import sequence_backend_cases
from tests.helpers import body, const, model, seq, t

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def _canonical(m: onnx.ModelProto) -> bytes:
    """The model with made-up dim names (``unk__N``) numbered by first appearance."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    names: dict[str, str] = {}
    stack = [m.graph]
    while stack:
        g = stack.pop(0)
        for v in (*g.input, *g.value_info, *g.output):
            tp = v.type
            while tp.WhichOneof("value") in ("sequence_type", "optional_type"):
                tp = getattr(tp, tp.WhichOneof("value")).elem_type
            for d in tp.tensor_type.shape.dim:
                if d.dim_param.startswith("unk__"):
                    d.dim_param = names.setdefault(d.dim_param, f"unk__{len(names)}")
        for n in g.node:
            stack.extend(subgraphs_of(n))
    return m.SerializeToString(deterministic=True)


def _same(m: onnx.ModelProto, window: int, **options) -> None:
    whole = onnx.shape_inference.infer_shapes(m, **options)
    assert _canonical(infer_shapes(m, window=window, **options)) == _canonical(whole)


def _chain(blocks: int) -> onnx.ModelProto:
    """SplitToSequence -> SequenceMap -> ConcatFromSequence blocks over a dynamic dim,
    with a Constant node read by a Reshape far downstream (a constant across windows)."""
    nodes = [helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("v", TensorProto.INT64, [2], [-1, 4]))]
    prev = "x"
    for b in range(blocks):
        fn = body([helper.make_node("Relu", ["e"], ["o"])], [t("e", shape=[None, 4])], [t("o", shape=[None, 4])])
        nodes += [helper.make_node("SplitToSequence", [prev, "two"], [f"s{b}"], axis=0),
                  helper.make_node("SequenceMap", [f"s{b}"], [f"m{b}"], body=fn),
                  helper.make_node("ConcatFromSequence", [f"m{b}"], [f"c{b}"], axis=0),
                  helper.make_node("Shape", [f"c{b}"], [f"n{b}"])]
        prev = f"c{b}"
    nodes.append(helper.make_node("Reshape", [prev, "shape"], ["y"]))
    return model(nodes, [t("x", shape=["batch", 4])], [t("y", shape=[None, None])], initializer=[const("two", np.array(2, np.int64))])


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_a_chain_in_windows_is_inferred_as_in_one_run(window):
    m = _chain(6)
    _same(m, window)
    out = infer_shapes(m, window=window)
    # The Reshape read the Constant node of the first window: its shape is known.
    assert out.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 4


def test_made_up_dims_of_different_windows_never_share_a_name():
    out = infer_shapes(_chain(6), window=2)
    concats = {v.name: v.type.tensor_type.shape.dim[0].dim_param for v in out.graph.value_info if v.name.startswith("c")}
    # onnx makes up one unknown dim per concat: six names, all different.
    assert len(concats) == 6 and len(set(concats.values())) == 6, concats


def test_an_outer_value_read_in_a_subgraph_of_a_later_window_is_typed():
    then = body([helper.make_node("Add", ["a", "a"], ["o"])], [], [t("o")])
    other = body([helper.make_node("Identity", ["a"], ["o"])], [], [t("o")])
    m = model([helper.make_node("Neg", ["x"], ["a"]),
               helper.make_node("Abs", ["a"], ["b"]),
               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [t("x", shape=[3, "n"]), t("c", TensorProto.BOOL, [])], [t("y", shape=[None, None])])
    _same(m, 1)
    y = infer_shapes(m, window=1).graph.output[0].type.tensor_type
    assert [d.dim_value or d.dim_param for d in y.shape.dim] == [3, "n"]


def test_type_errors_are_found_in_windows():
    m = model([helper.make_node("Neg", ["x"], ["a"]), helper.make_node("SplitToSequence", ["a"], ["s"]),
               helper.make_node("Abs", ["s"], ["y"])], [t("x", shape=[2])], [t("y")])
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    with pytest.raises(onnx.shape_inference.InferenceError):
        infer_shapes(m, window=1, check_type=True, strict_mode=True)


def test_declared_value_infos_and_outputs_are_refined_in_place():
    m = model([helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=0),
               helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
               helper.make_node("Neg", ["c"], ["y"])],
              [t("x", shape=[4, 3])], [t("y")], initializer=[const("two", np.array(2, np.int64))])
    m.graph.value_info.append(seq("s"))
    _same(m, 1)
    _same(m, 1, data_prop=True)


@pytest.mark.parametrize("case", sequence_backend_cases(), ids=lambda c: c.name)
def test_backend_cases_in_windows_of_one_node(case):
    _same(case.model, 1)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(DATA, "*", "*.onnx"))), ids=os.path.basename)
def test_exported_models_in_windows(path):
    m = onnx.load(path)
    _same(m, 3)


def test_a_huge_declared_dim_turns_data_propagation_off():
    # tools/fuzz_files.py seed 893 (150 mutants from 777): TorchScript's nested list loops
    # with x declared [n, 2**31]. onnx's data propagation through the Loops its trip
    # counts come from allocated 6 GB and raised bad_alloc; in CI the suite was killed.
    import subprocess
    import sys

    path = os.path.join(DATA, "exported", "ts_nested_list_loops_opset17.onnx")
    code = (
        "import resource, onnx\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from seqlower.io.inference import infer_shapes\n"
        f"m = onnx.load({path!r})\n"
        "m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2**31\n"
        "out = infer_shapes(m, check_type=True, data_prop=True)\n"
        "print(len(out.graph.value_info))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and int(done.stdout) > 0, done.stderr[-400:]


def test_huge_dims_are_found_off_the_bytes_as_by_the_walk():
    """``_huge_dim`` searches the serialized model for a varint of 2**30 or more before it
    walks the value infos: the search may only spare the walk, never change its answer."""
    from onnx import TensorProto, helper

    from seqlower.io import inference

    def m(dim, weight_dim=2):
        w = helper.make_tensor("w", TensorProto.FLOAT, [weight_dim, 0], [])  # a dim of a weight is no value info's
        return helper.make_model(helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w]))

    for dim, weight_dim, huge in [(2**30, 2, False), (2**30 + 1, 2, True), (2**40, 2, True), (-1, 2, False),
                                  (3, 2**33, False), ("n", 2, False)]:
        model = m(dim, weight_dim)
        assert inference._huge_dim(model) is huge, (dim, weight_dim)
        walked = any(d.dim_value > inference._DATA_PROP_DIM_LIMIT for v in inference.value_infos(model)
                     for d in inference._dims(v.type))
        assert walked is huge


def test_types_alone_are_what_the_typed_model_holds(monkeypatch):
    """infer_types: windowed (forced small here) or in one run, every value's type is the one
    infer_shapes writes into the model, made-up dims numbered alike."""
    import seqlower.io.inference as inference
    from seqlower.io.inference import infer_types

    m = _chain(12)
    monkeypatch.setattr(inference, "WINDOW_NODES", 7)
    monkeypatch.setattr(inference, "_WINDOWED_WORK", 0)
    whole = infer_shapes(m, window=7, data_prop=True)
    found = infer_types(m, data_prop=True)
    assert isinstance(found, dict)  # windows ran
    typed = {v.name: v.type for v in (*whole.graph.value_info, *whole.graph.output)}
    assert found.keys() == typed.keys() and len(found) > 40
    assert all(found[k] == typed[k] for k in typed)
    monkeypatch.undo()
    one_run = infer_types(_chain(2), data_prop=True)
    assert not isinstance(one_run, dict)  # small: one run, its value infos
    assert {v.name for v in one_run} == {v.name for v in (*infer_shapes(_chain(2)).graph.value_info,
                                                           *infer_shapes(_chain(2)).graph.output)}


def test_windows_are_cut_short_only_where_no_propagated_value_crosses():
    """A window ends at a quarter of its size or later, at the first place no value a
    propagating op (Shape, Gather, Concat...) made is read across; else at its size."""
    from seqlower.io.inference import _windows

    def relu(i: int) -> onnx.NodeProto:
        return helper.make_node("Relu", [f"v{i - 1}"], [f"v{i}"])

    nodes = [relu(i) for i in range(1, 41)]
    reads = [list(n.input) for n in nodes]
    # Plain float ops: every place is clean, windows are as short as allowed.
    assert list(_windows(nodes, reads, 16)) == [(k, min(k + 4, 40)) for k in range(0, 40, 4)]
    # A Shape (node 2) read by node 13: no cut before node 14.
    nodes[2] = helper.make_node("Shape", ["v2"], ["s"])
    nodes[13] = helper.make_node("Tile", ["v13", "s"], ["v14"])
    reads = [list(n.input) for n in nodes]
    assert list(_windows(nodes, reads, 16))[0] == (0, 14)
    # Read further than a window: cut at the window's size, then after the reader.
    nodes[13] = relu(14)
    nodes[30] = helper.make_node("Tile", ["v30", "s"], ["v31"])
    reads = [list(n.input) for n in nodes]
    assert list(_windows(nodes, reads, 16))[:2] == [(0, 16), (16, 31)]
