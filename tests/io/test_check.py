"""What exporters write and onnxruntime runs although onnx's checker refuses it: graph
inputs/outputs without a shape (tf2onnx), nodes out of topological order. Each is one
warning line in every subcommand (``seqlower.ModelWarning`` in Python), never a refusal;
what seqlower writes stays strict."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import seqlower
from seqlower.cli import main
from tests.conftest import requires_ort
from tests.helpers import FLOAT, t


def _shapeless_model() -> onnx.ModelProto:
    """What tf2onnx writes when it does not know a rank: graph inputs and outputs with an
    element type and no shape field at all."""
    x, y = onnx.ValueInfoProto(), onnx.ValueInfoProto()
    x.name, y.name = "x", "y"
    x.type.tensor_type.elem_type = y.type.tensor_type.elem_type = FLOAT
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["r"]),
             helper.make_node("SplitToSequence", ["r"], ["s"], axis=0),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
             helper.make_node("Relu", ["c"], ["y"])]
    rows = numpy_helper.from_array(np.array([-1, 3], np.int64), "rows")
    g = helper.make_graph(nodes, "g", [x], [y], initializer=[rows])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _each_warns_once(capsys, warning: str, runs: list) -> None:
    """Each CLI run exits as wanted and prints ``warning`` on exactly one warning line."""
    for argv, want in runs:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert code == want, (argv, out, err)
        lines = [ln for ln in err.splitlines() if ln.startswith("seqlower: warning:")]
        assert len([ln for ln in lines if warning in ln]) == 1, (argv, err)


@requires_ort
def test_shapeless_graph_inputs_are_one_warning_in_every_subcommand(tmp_path, capsys):
    src = tmp_path / "tf.onnx"
    onnx.save(_shapeless_model(), src)
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(str(src))
    dst = tmp_path / "l.onnx"
    np.savez(tmp_path / "x.npz", x=np.arange(6, dtype=np.float32).reshape(2, 3) - 2)
    _each_warns_once(capsys, "tf.onnx: graph inputs/outputs 'x', 'y' declare no shape", [
        (["lower", src, "-o", dst, "--verify", "--inputs", tmp_path / "x.npz"], 0),
        (["run", src, "--inputs", tmp_path / "x.npz", "--backend", "onnxruntime"], 0),
        (["inspect", src], 0),
        (["check", src], 1),
        (["verify", src, dst, "--inputs", tmp_path / "x.npz", "--backend", "onnxruntime"], 0),
    ])
    lowered = onnx.load(str(dst))
    assert {n.op_type for n in lowered.graph.node} == {"Reshape", "Relu"}
    # Only the sequence region is rewritten: x and y, outside it, stay as given.
    assert lowered.graph.input[0] == _shapeless_model().graph.input[0]
    assert lowered.graph.output[0] == _shapeless_model().graph.output[0]
    assert {v.name for v in lowered.graph.value_info} <= {"r"}
    assert not lowered.graph.input[0].type.tensor_type.HasField("shape")


def test_the_api_warns_once_per_read_and_still_refuses_real_errors(tmp_path):
    src = tmp_path / "tf.onnx"
    onnx.save(_shapeless_model(), src)
    with pytest.warns(seqlower.ModelWarning, match="declare no shape"):
        seqlower.load_model(src)
    broken = _shapeless_model()
    broken.graph.node[3].input[0] = "nowhere"
    onnx.save(broken, src)
    with pytest.raises(seqlower.ModelError, match="nowhere"):
        seqlower.load_model(src)


def _unsorted_model() -> onnx.ModelProto:
    """Nodes out of order, as hand-edited and merged graphs have them: the Loop's body
    reads 'scale', whose producer comes after the Loop; the split comes last."""
    from tests.helpers import BOOL, INT64, body

    loop_body = body([helper.make_node("Identity", ["c_in"], ["c_out"]),
                      helper.make_node("Mul", ["acc_in", "scale"], ["acc_out"])],
                     [t("i", INT64, []), t("c_in", BOOL, []), t("acc_in", FLOAT, [2])],
                     [t("c_out", BOOL, []), t("acc_out", FLOAT, [2])])
    nodes = [
        helper.make_node("ConcatFromSequence", ["s"], ["joined"], axis=0),
        helper.make_node("Loop", ["n", "", "x"], ["scaled"], body=loop_body),
        helper.make_node("Neg", ["x"], ["scale"]),
        helper.make_node("SplitToSequence", ["scaled"], ["s"], axis=0, keepdims=1),
    ]
    g = helper.make_graph(nodes, "g", [t("x", FLOAT, [2]), t("n", INT64, [])], [t("joined", FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@requires_ort
def test_nodes_out_of_order_are_one_warning_and_get_sorted(tmp_path, capsys):
    src = tmp_path / "unsorted.onnx"
    onnx.save(_unsorted_model(), src)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(str(src))
    np.savez(tmp_path / "x.npz", x=np.array([1.5, -2], np.float32), n=np.array(3))
    _each_warns_once(capsys, "unsorted.onnx: nodes are not in topological order; accepted", [
        (["lower", src, "-o", tmp_path / "l.onnx", "--verify", "--inputs", tmp_path / "x.npz"], 0),
        (["run", src, "--inputs", tmp_path / "x.npz", "--backend", "onnxruntime"], 0),
        (["check", src], 1),
        (["inspect", src], 0),
    ])
    onnx.checker.check_model(str(tmp_path / "l.onnx"), full_check=True)


def test_a_cycle_is_still_refused_naming_a_node(tmp_path, capsys):
    m = _unsorted_model()
    m.graph.node[2].input[0] = "joined"  # scale = Neg(joined): joined <- s <- scaled <- scale
    src = tmp_path / "cycle.onnx"
    onnx.save(m, src)
    code = main(["lower", str(src), "-o", str(tmp_path / "l.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "has a cycle through" in err and "node" in err and err.count("\n") == 1
    assert not (tmp_path / "l.onnx").exists()


def _wrongly_declared(opset: int) -> onnx.ModelProto:
    """TorchScript's static export of ``(l1 + [x])[0]``, ``l1`` appended in a Loop with
    ``x[:, 1:] * i`` of a [4, 1] x: the output is declared [4, 1] and is [4, 0] (torch fuzz
    seed 14088; its own export is in tests/test_torch_fuzz_exports.py)."""
    body = helper.make_graph(
        [helper.make_node("Slice", ["x", "one", "big", "one"], ["rest"]),
         helper.make_node("Cast", ["i"], ["f"], to=FLOAT), helper.make_node("Mul", ["rest", "f"], ["scaled"]),
         helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [t("i", onnx.TensorProto.INT64, []), t("c", onnx.TensorProto.BOOL, []),
                 helper.make_tensor_sequence_value_info("acc", FLOAT, None)],
        [t("c_out", onnx.TensorProto.BOOL, []), helper.make_tensor_sequence_value_info("acc_out", FLOAT, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
             helper.make_node("Loop", ["two", "yes", "empty"], ["pieces"], body=body),
             helper.make_node("SequenceInsert", ["pieces", "x"], ["all"]),
             helper.make_node("SequenceAt", ["all", "zero"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([2**62], np.int64), "big"), numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(True), "yes")]
    g = helper.make_graph(nodes, "g", [t("x", FLOAT, [4, 1])], [t("y", FLOAT, [4, 1])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=6 if opset == 11 else 8)


@requires_ort
@pytest.mark.parametrize("opset", [11, 19])
def test_an_output_declared_with_dims_its_computation_contradicts_lowers_to_the_computed_ones(opset, tmp_path):
    from seqlower.executor import Executor

    m = _wrongly_declared(opset)
    onnx.save(m, tmp_path / "m.onnx")
    assert main(["lower", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "low.onnx")]) == 0
    proto = onnx.load(tmp_path / "low.onnx")
    onnx.checker.check_model(proto, full_check=True)
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    original = Executor(m).run({"x": x}).outputs["y"]
    assert original.shape == (4, 0)
    for backend in ("reference", "onnxruntime"):
        np.testing.assert_array_equal(Executor(proto, backend=backend).run({"x": x}).outputs["y"], original)
