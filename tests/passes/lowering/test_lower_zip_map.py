"""LowerZipMapPass: a ZipMap giving a model output becomes its input plus an ABI entry;
every other ZipMap stays, with the reason. Numbers checked through the executor's ABI on
both backends; the ZipMap kernel of the reference backend against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.errors import ExecutionError
from seqlower.executor import Executor
from seqlower.io.models import check_model, from_proto, to_proto
from seqlower.passes.lowering.lower_zip_map import KEPT_ZIPMAPS_KEY, LowerZipMapPass
from tests.conftest import requires_ort
from tests.helpers import BOOL, FLOAT, body, t

ML = helper.make_opsetid("ai.onnx.ml", 3)


def _maps(name: str, key=onnx.TensorProto.INT64) -> onnx.ValueInfoProto:
    value = helper.make_tensor_type_proto(FLOAT, None)
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_map_type_proto(key, value)))


def _model(nodes, inputs, outputs, functions=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), ML, helper.make_opsetid("local", 1)],
                             ir_version=8, functions=list(functions))


def _zip(x: str, out: str, labels, name="zm") -> onnx.NodeProto:
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    return helper.make_node("ZipMap", [x], [out], domain="ai.onnx.ml", name=name, **{key: labels})


@pytest.mark.parametrize("labels, shape", [([3, 1, 2], ["n", 3]), (["a", "b"], ["n", 2]), ([7, 8], [2]),
                                           ([5], None)])
def test_a_zipmap_model_output_becomes_its_input(labels, shape):
    key = onnx.TensorProto.STRING if isinstance(labels[0], str) else onnx.TensorProto.INT64
    x = t("x", FLOAT, shape)
    if shape is None:  # no shape at all: the rank of ZipMap's input is unknown
        x.type.tensor_type.ClearField("shape")
    nodes = [helper.make_node("Softmax", ["x"], ["p"]), _zip("p", "probs", labels)]
    original = _model(nodes, [x], [_maps("probs", key)])
    model = from_proto(original)
    result = LowerZipMapPass()(model)
    assert result.modified
    lowered = to_proto(result.model)
    check_model(lowered, "lowered")
    assert "ZipMap" not in {n.op_type for n in lowered.graph.node}
    [out] = lowered.graph.output
    assert len(out.type.tensor_type.shape.dim) == 2  # the rank is declared, always
    [entry] = json.loads(next(p.value for p in lowered.metadata_props if p.key == "seqlower.abi"))["outputs"]
    assert entry == {"name": "probs", "kind": "zipmap", "key_type": onnx.TensorProto.DataType.Name(key),
                     "labels": labels, "tensors": {"values": out.name}}
    rows = 4 if shape is None or len(shape) == 2 else 1
    feed = np.random.default_rng(0).standard_normal((rows, len(labels)) if shape != [2] else (2,)).astype(np.float32)
    for backend in ("reference", "onnxruntime"):
        want = Executor(original, backend=backend).run({"x": feed}).outputs["probs"]
        got = Executor(lowered, backend=backend).run({"x": feed}).outputs["probs"]
        assert len(got) == len(want) == (1 if feed.ndim == 1 else rows)
        for w, g in zip(want, got):
            # onnxruntime's maps come out with their keys sorted; maps have no order.
            assert sorted(w, key=str) == sorted(g, key=str) == sorted(labels, key=str)
            assert all(np.isclose(float(w[k]), float(g[k])) for k in w)


def test_zipmaps_that_are_not_model_outputs_stay_with_the_reason():
    branch = body([_zip("p", "m", [0, 1], name="inner"), helper.make_node("Identity", ["p"], ["o"])], [],
                  [t("o", FLOAT, [2, 2])])
    fn = helper.make_function("local", "f", ["a"], ["b"], [_zip("a", "b", [0, 1], name="in_fn")],
                              opset_imports=[helper.make_opsetid("", 17), ML])
    nodes = [helper.make_node("Softmax", ["x"], ["p"]),
             helper.make_node("If", ["c"], ["from_if"], then_branch=branch, else_branch=branch, name="branchy"),
             _zip("p", "read", [0, 1], name="read_inside"),
             helper.make_node("Identity", ["read"], ["again"], name="copy"),
             helper.make_node("f", ["p"], ["from_fn"], domain="local", name="call")]
    model = from_proto(_model(nodes, [t("x", FLOAT, [2, 2]), t("c", BOOL, [])],
                              [t("from_if", FLOAT, [2, 2]), _maps("again"), _maps("from_fn")], functions=[fn]))
    assert not LowerZipMapPass()(model).modified
    kept = model.meta[KEPT_ZIPMAPS_KEY]
    assert "inside a subgraph" in kept["ZipMap node 'inner'"]
    assert "read by Identity node 'copy', not returned" in kept["ZipMap node 'read_inside'"]
    assert "model-local function" in kept["ZipMap node 'in_fn'"]
    # Map types are written back (onnx's inference has no Identity of maps: no full check).
    onnx.checker.check_model(to_proto(model))
    assert to_proto(model).graph.output[1].type.sequence_type.elem_type.HasField("map_type")


def test_nothing_to_do_without_zipmap():
    model = ir.serde.deserialize_model(_model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, [2])],
                                              [t("y", FLOAT, [2])]))
    assert not LowerZipMapPass()(model).modified


@requires_ort
@pytest.mark.parametrize("feed, labels, message", [
    (np.ones((2, 2, 2), np.float32), [0, 1], "rank 1 or 2"),
    (np.ones((2, 3), np.float32), [0, 1], "3 columns for 2 class labels"),
])
def test_zipmap_kernel_refuses_what_onnxruntime_refuses(feed, labels, message):
    m = _model([_zip("x", "m", labels)], [t("x", FLOAT, ["any"] * feed.ndim)], [_maps("m")])
    with pytest.raises(ExecutionError, match=message):
        Executor(m).run({"x": feed})
    with pytest.raises(ExecutionError):
        Executor(m, backend="onnxruntime").run({"x": feed})


def _ml_only(labels, zipmap: bool = True, tree: bool = False) -> onnx.ModelProto:
    """A classifier as onnxmltools writes one: IR 3, only ai.onnx.ml imported (no ai.onnx
    opset), nothing declaring the scores' shape."""
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_ints"
    if tree:
        clf = helper.make_node(
            "TreeEnsembleClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", post_transform="NONE",
            nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0], nodes_values=[0.3, 0, 0],
            nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
            nodes_hitrates=[1.0] * 3, nodes_missing_value_tracks_true=[0] * 3,
            class_treeids=[0] * 2 * len(labels), class_nodeids=[1] * len(labels) + [2] * len(labels),
            class_ids=list(range(len(labels))) * 2, class_weights=[0.7, 0.3, 0.1, 0.9][: 2 * len(labels)],
            **{key.replace("ints", "int64s"): labels})
    else:
        clf = helper.make_node(
            "LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", post_transform="SOFTMAX",
            coefficients=[0.5, -1, 2, -0.5, 1, -2], intercepts=[0.1, -0.1], **{key: labels})
    label_type = onnx.TensorProto.STRING if isinstance(labels[0], str) else onnx.TensorProto.INT64
    outputs = [helper.make_tensor_value_info("label", label_type, ["N"])]
    nodes = [clf]
    if zipmap:
        zkey = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
        nodes.append(helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml", **{zkey: labels}))
        outputs.append(_maps("probabilities", label_type))
    else:
        outputs.append(helper.make_tensor_value_info("scores", FLOAT, ["N", len(labels)]))
    g = helper.make_graph(nodes, "ml_only", [helper.make_tensor_value_info("X", FLOAT, ["N", 3])], outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)], ir_version=3)
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("labels, tree", [([0, 1], False), (["no", "yes"], False), ([4, 9], True)])
def test_a_model_importing_only_ai_onnx_ml_lowers_its_zipmap(labels, tree):
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.executor.verify import verify

    m = _ml_only(labels, tree=tree)
    low_ir, report = lower_with_report(load_model(m), LowerOptions())
    low = to_proto(low_ir)
    onnx.checker.check_model(low, full_check=True)
    assert report.tensor_only and [n.op_type for n in low.graph.node] == [m.graph.node[0].op_type]
    # Nothing emitted: no opset is added, the IR version stays.
    assert [(o.domain, o.version) for o in low.opset_import] == [("ai.onnx.ml", 1)] and low.ir_version == 3
    feed = {"X": np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)}
    for backend in ("reference", "onnxruntime"):
        assert verify(m, low, inputs=[feed], backend=backend).equivalent


def test_a_model_importing_only_ai_onnx_ml_passes_through_where_nothing_lowers():
    from seqlower import LowerOptions, load_model, lower_with_report

    # No ZipMap: nothing to do. A target with sequences: the ZipMap stays, with the reason.
    for m, target in [(_ml_only([0, 1], zipmap=False), "generic"), (_ml_only([0, 1]), "onnxruntime")]:
        low_ir, report = lower_with_report(load_model(m), LowerOptions(target=target))
        low = to_proto(low_ir)
        assert [n.op_type for n in low.graph.node] == [n.op_type for n in m.graph.node]
        assert [(o.domain, o.version) for o in low.opset_import] == [("ai.onnx.ml", 1)]
        assert all("internal" not in r.get("reason", "") for r in report.remaining)
