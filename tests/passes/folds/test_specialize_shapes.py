"""lower --input-shape / --fix-dim: the model lowered for fixed input shapes, what that
makes static folded, and verify run at those shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.cli import main
from seqlower.executor import Executor, verify
from seqlower.executor.abi import read_abi
from seqlower.io.models import to_proto
from seqlower.passes.folds.fold_tensor_constants import fold_tensor_constants
from seqlower.targets import load_target, target_gaps
from tests.helpers import FLOAT, INT64, model, ops_of, seq, t

DATA = Path(__file__).resolve().parents[2] / "data"


def _rows_model() -> onnx.ModelProto:
    """Rows of x as a list, its length, x's shape, and the rows joined back."""
    return model([
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1),
    ], [t("x", FLOAT, ["N", 3])], [t("y", FLOAT, ["N", 3]), t("n", INT64, []), t("shape", INT64, [2])])


def _lower(m: onnx.ModelProto, **options) -> tuple[onnx.ModelProto, object]:
    lowered, report = lower_with_report(load_model(m), LowerOptions(**options))
    return to_proto(lowered), report


def test_fixed_rows_fold_to_constants_and_the_abi_says_what_was_fixed():
    low, report = _lower(_rows_model(), input_shapes={"x": (4, 3)})
    # Unspecialized, the rows' count is known only at run time and lowers dynamic.
    dynamic, _ = _lower(_rows_model())
    assert "Shape" in ops_of(dynamic) and "Shape" not in ops_of(low)
    assert not any("Sequence" in op for op in ops_of(low))
    assert [d.dim_value for d in low.graph.input[0].type.tensor_type.shape.dim] == [4, 3]
    assert report.fixed == {"shapes": {"x": [4, 3]}, "dims": {}}
    assert read_abi(low).fixed == {"shapes": {"x": [4, 3]}, "dims": {}}
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    got = Executor(low, backend="onnxruntime").run({"x": x}).outputs
    np.testing.assert_array_equal(got["y"], x)
    assert int(got["n"]) == 4 and got["shape"].tolist() == [4, 3]


def test_verify_draws_its_samples_at_the_fixed_shapes():
    m = _rows_model()
    low, _ = _lower(m, input_shapes={"x": (2, 3)})
    # The default draw gives N another size, which the lowered model does not take.
    report = verify(m, low, samples=2, dims={"N": 5})
    assert report.equivalent, report.reason()
    assert all(s.status == "equal" for s in report.samples)


def test_fix_dim_fixes_a_symbolic_dim_in_every_input_and_output_that_has_it():
    m = model([
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1),
        helper.make_node("Shape", ["y"], ["shape"]),
    ], [t("a", FLOAT, ["B", 2]), t("b", FLOAT, ["B", 3])], [t("y", FLOAT, ["B", 5]), t("shape", INT64, [2])])
    low, report = _lower(m, fixed_dims={"B": 7})
    dims = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
            for v in [*low.graph.input, *low.graph.output]}
    assert dims == {"a": [7, 2], "b": [7, 3], "y": [7, 5], "shape": [2]}
    assert "Shape" not in ops_of(low) and report.fixed["dims"] == {"B": 7}
    assert verify(m, low, samples=2).equivalent


def test_a_sequence_input_is_fixed_by_its_elements_shape():
    m = model([
        helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
        helper.make_node("Shape", ["first"], ["shape"]),
    ], [seq("s", FLOAT, ["R", "C"])], [t("shape", INT64, [2])],
        initializer=[helper.make_tensor("zero", INT64, [], [0])])
    low, report = _lower(m, input_shapes={"s": (2, 5)})
    assert report.fixed["shapes"] == {"s": [2, 5]}
    assert read_abi(low).inputs["s"].elem_shape == [2, 5]
    assert verify(m, low, samples=2, backend="onnxruntime").equivalent


def test_a_tensorflow_while_loop_over_a_fixed_dim_is_unrolled_and_runs_on_tract():
    """tf2onnx's TensorArray loop compares its counter with a dim it carries: fixed, the
    comparison folds to constants, the loop is proven counted and unrolled, and tract
    (no Loop) runs it; unspecialized it is named."""
    path = DATA / "tensorflow" / "tf_tensor_array_while_opset17.onnx"
    m = onnx.load(path)
    with np.load(str(path)[: -len(".onnx")] + ".cases.npz") as z:
        x, want = z["0/in/x"], z["0/out/Identity:0"]
    plain, rep = _lower(m, target="tract")
    assert any(g.where.startswith("Loop") for g in target_gaps(plain, load_target("tract"), rep.kept_loops))
    low, rep = _lower(m, target="tract", input_shapes={"x": x.shape})
    assert "Loop" not in ops_of(low) and not target_gaps(low, load_target("tract"), rep.kept_loops)
    got = Executor(low, backend="tract").run({"x": x}).outputs["Identity:0"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_folder_leaves_sequence_ops_to_seqlower():
    """onnxscript's folder turns a SplitToSequence into Split(num_outputs=...), an
    attribute opset 13 lacks: the tensor folding leaves every sequence op alone."""
    m = model([helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=0),
               helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
              [t("x", FLOAT, [4, 3])], [t("y", FLOAT, [4, 3])], opset=13,
              initializer=[helper.make_tensor("two", INT64, [], [2])])
    ir_model = load_model(m)
    fold_tensor_constants(ir_model)
    assert [n.op_type for n in ir_model.graph] == ["SplitToSequence", "ConcatFromSequence"]


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, *capsys.readouterr()


def test_the_cli_specializes_verifies_and_reports(tmp_path, capsys):
    src, dst, rep = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(_rows_model(), src)
    code, out, err = _cli(capsys, "lower", src, "-o", dst, "--input-shape", "x=3,3", "--verify", "--report", rep)
    assert code == 0, out + err
    assert "specialized: x=[3,3]" in out and "EQUIVALENT" in out
    assert json.loads(rep.read_text())["fixed"] == {"shapes": {"x": [3, 3]}, "dims": {}}
    code, out, err = _cli(capsys, "verify", src, dst)
    assert code == 0, out + err


@pytest.mark.parametrize("flag, message", [
    (["--input-shape", "z=4,3"], "--input-shape z=4,3: the model has no graph input 'z' (its inputs: x)"),
    (["--input-shape", "x=4"], "--input-shape x=4: it has rank 2 ([N, 3]), not 1"),
    (["--input-shape", "x=4,2"], "--input-shape x=4,2: dim 1 of 'x' is 3 ([N, 3])"),
    (["--fix-dim", "M=4"], "--fix-dim M=4: no graph input has a dim named 'M' (symbolic dims of the inputs: N)"),
])
def test_a_shape_the_model_cannot_take_is_one_line_and_exit_2(tmp_path, capsys, flag, message):
    src, dst = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_rows_model(), src)
    before = src.read_bytes()
    code, out, err = _cli(capsys, "lower", src, "-o", dst, *flag)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not dst.exists() and src.read_bytes() == before


def test_a_malformed_shape_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_rows_model(), src)
    with pytest.raises(SystemExit) as e:
        main(["lower", str(src), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x=4,,3"])
    assert e.value.code == 2 and "expected NAME=D0,D1,..." in capsys.readouterr().err


def _case(path: Path, k: int) -> tuple[dict, dict]:
    from tests.test_exported_models import load_cases

    return load_cases(path)[k]


@pytest.mark.parametrize("name, k", [
    # dynamo's embedding_bag: a while loop over a bound read from outside its body, which
    # the fixed shapes make a constant; counted, it unrolls (OpenVINO failed it compiled static).
    ("dynamo_embedding_bag_opset18", 4),
    # an input of shape [3, 0]: the lowering's Reshape of the empty data to [3, 0, 0] is a
    # ConstantOfShape for OpenVINO, which reads a folded Reshape's 0 as "copy the input's dim".
    ("ts_split_or_chunk_then_loop_1070_opset17", 4),
    # an input of shape [0, 3]: folded at its shape, then its 0 named for OpenVINO (which
    # otherwise gave a Loop's growing [0, ?] state as [0, 0]); verify still draws [0, 3].
    ("ts_split_or_chunk_then_loop_1070_opset17", 0),
])
def test_exports_lowered_at_their_shapes_run_on_openvino(name, k):
    path = DATA / "exported" / f"{name}.onnx"
    feeds, want = _case(path, k)
    low, report = _lower(onnx.load(path), target="openvino", input_shapes={n: v.shape for n, v in feeds.items()})
    assert not target_gaps(low, load_target("openvino"), report.kept_loops)
    got = Executor(low, backend="openvino").run(feeds).outputs
    for out, value in want.items():
        np.testing.assert_allclose(got[out], value, rtol=1e-5, atol=1e-6)
    assert verify(onnx.load(path), low, samples=1, lowered_backend="openvino").equivalent


def test_check_names_a_loop_from_empty_constants_for_openvino():
    """The same loop left in place (no lowering): its trip count, condition and empty
    initial state all constants, which OpenVINO fails to convert."""
    body = helper.make_graph(
        [helper.make_node("Add", ["i", "one"], ["i_next"]),
         helper.make_node("Less", ["i_next", "three"], ["go"]),
         helper.make_node("Concat", ["acc", "row"], ["acc_next"], axis=0)],
        "body", [t("it", INT64, []), helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
                 t("acc", FLOAT, [None]), t("i", INT64, [])],
        [helper.make_tensor_value_info("go", onnx.TensorProto.BOOL, []), t("acc_next", FLOAT, [None]),
         t("i_next", INT64, [])],
        [helper.make_tensor("one", INT64, [], [1]), helper.make_tensor("row", FLOAT, [1], [2.0])])
    m = model([helper.make_node("ConstantOfShape", ["dims"], ["empty"]),
               helper.make_node("Loop", ["", "true", "empty", "zero"], ["acc_out", "i_out"], body=body)],
              [t("x", FLOAT, [1])], [t("acc_out", FLOAT, [None])],
              initializer=[helper.make_tensor("dims", INT64, [1], [0]),
                           helper.make_tensor("true", onnx.TensorProto.BOOL, [], [True]),
                           helper.make_tensor("zero", INT64, [], [0]),
                           helper.make_tensor("three", INT64, [], [3])])
    gaps = target_gaps(m, load_target("openvino"))
    assert [g.where for g in gaps] == ["Loop node (output 'acc_out')"] \
        and "quirk empty-constant-loop-state" in gaps[0].why
