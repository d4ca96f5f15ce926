"""ZipMap (ai.onnx.ml) out of model outputs, for targets without sequences.

scikit-learn classifiers converted by skl2onnx end in ``ZipMap``: the probabilities
``X`` (float ``[N, C]``) become a ``seq(map(label, float))``, one map per row. No
runtime but onnxruntime has ZipMap, and no tensor-only model can return a map. So:

1. A ZipMap whose output is a model output and is read by nothing else becomes its
   input: the model output ``<name>_values`` is ``X`` itself (reshaped to ``[-1, C]``
   when its rank is not known to be 2, so the output declares its rank), and the ABI records
   ``kind: "zipmap"`` with the key type and the labels, so the executor (and a user)
   turns the tensor back into the maps::

       before: probs = ai.onnx.ml::ZipMap<classlabels_int64s=[0, 1, 2]>(X)   -> output probs
       after:  probs_values = Identity(X)                                    -> output probs_values
               metadata seqlower.abi: {"name": "probs", "kind": "zipmap", "key_type": "INT64",
                                       "labels": [0, 1, 2], "tensors": {"values": "probs_values"}}

2. Any other ZipMap stays, and the report says why.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from seqlower.analysis.analyzer import node_label
from seqlower.ir.builder import Builder, NameAuthority, default_opset
from seqlower.passes._rewrite import write_abi
from seqlower.passes.keys import KEPT_ZIPMAPS_KEY, REPORT_KEY

__all__ = ["LowerZipMapPass", "KEPT_ZIPMAPS_KEY"]

logger = logging.getLogger(__name__)



def _is_zip_map(node: ir.Node) -> bool:
    return node.op_type == "ZipMap" and node.domain == "ai.onnx.ml"


def _imports_ai_onnx(model: ir.Model) -> bool:
    return "" in model.opset_imports or "ai.onnx" in model.opset_imports


# ai.onnx.ml classifiers whose second output (the scores) the spec makes [N, E]; onnx has
# no inference function for some of them (TreeEnsembleClassifier).
_SCORES_2D = frozenset({"LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"})


def _infer_shape(model: ir.Model, x: ir.Value) -> None:
    """``x``'s shape as onnx's inference finds it (the ml ops have inference functions;
    an ml-only model, which the other passes leave alone, is small), else as the spec of
    the classifier making it says."""
    p = x.producer()
    if p is not None and p.domain == "ai.onnx.ml" and p.op_type in _SCORES_2D and x.index() == 1:
        x.shape, x.type = ir.Shape([None, None]), ir.TensorType(ir.DataType.FLOAT)
    proto = onnx.shape_inference.infer_shapes(ir.serde.serialize_model(model))
    for vi in proto.graph.value_info:
        if vi.name == x.name and vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.HasField("shape"):
            x.shape = ir.serde.deserialize_type_proto_for_shape(vi.type)
            return


class LowerZipMapPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        kept: dict[str, str] = model.meta.setdefault(KEPT_ZIPMAPS_KEY, {})
        names: NameAuthority | None = None  # made once, and only when there is work
        modified = False
        for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
            if _is_zip_map(node):
                why = self._why_not(model, node)
                if why:
                    kept[node_label(node)] = why
                else:
                    names = names or NameAuthority(model)
                    self._lower(model, node, names)
                    modified = True
        for function in model.functions.values():
            for node in function:
                if _is_zip_map(node):
                    kept[node_label(node)] = "it is inside a model-local function, whose output cannot carry the ABI"
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _why_not(model: ir.Model, node: ir.Node) -> str:
        out = node.outputs[0]
        if node.graph is not model.graph:
            return "it is inside a subgraph: only a ZipMap that gives a model output becomes its input"
        if not out.is_graph_output():
            users = ", ".join(sorted({node_label(u.node) for u in out.uses()})) or "nothing"
            return f"its maps are read by {users}, not returned: only a ZipMap that gives a model output lowers"
        if out.uses():
            return "its maps are also read inside the model: only a ZipMap read by nothing else lowers"
        attrs = node.attributes
        if ("classlabels_int64s" in attrs) == ("classlabels_strings" in attrs):
            return "it has both or neither of classlabels_int64s and classlabels_strings"
        x = node.inputs[0]
        if not _imports_ai_onnx(model) and x.shape is None:
            _infer_shape(model, x)
        if not _imports_ai_onnx(model) and (x.shape is None or x.shape.rank() != 2 or x.is_graph_output()
                                            or x.is_graph_input()):
            return ("the model imports no ai.onnx opset, and its input is not a rank-2 value of its own"
                    " that could be returned as it is (a Reshape or an Identity would need one)")
        return ""

    @staticmethod
    def _lower(model: ir.Model, node: ir.Node, names: NameAuthority) -> None:
        graph = model.graph
        out = node.outputs[0]
        name = out.name or "zipmap"
        attrs = node.attributes
        if "classlabels_int64s" in attrs:
            key_type, labels = "INT64", [int(k) for k in attrs["classlabels_int64s"].as_ints()]
        else:
            key_type, labels = "STRING", list(attrs["classlabels_strings"].as_strings())
        x = node.inputs[0]
        if not _imports_ai_onnx(model):
            # No op can be emitted (IR 3 ml-only models, onnxmltools' output): the scores
            # are returned as they are, under their own name.
            values = x
        elif x.shape is not None and x.shape.rank() == 2:
            b = Builder(graph, None, default_opset(model), names, main_graph=True, after=node)
            values = b.identity(x, f"{name}_values")
            values.shape = x.shape
        else:
            b = Builder(graph, None, default_opset(model), names, main_graph=True, after=node)
            # A [C] input is one row; an input of unknown rank (what inference knows of
            # the ml ops before it) is still rank 1 or 2: [N, C] either way, so the model
            # output declares its rank.
            values = b.reshape(x, [-1, len(labels)], f"{name}_values", ir.Shape([None, len(labels)]))
        values.type = ir.TensorType(ir.DataType.FLOAT)
        outputs = graph.outputs
        outputs[outputs.index(out)] = values
        graph.remove(node, safe=True)
        write_abi(model, "outputs", [{"name": name, "kind": "zipmap", "key_type": key_type, "labels": labels,
                                      "tensors": {"values": values.name}}])
        model.meta.setdefault(REPORT_KEY, []).append(
            {"op": "ZipMap", "node": node_label(node), "graph": "main", "into": "tensor",
             "how": f"its input ({len(labels)} {key_type.lower()} labels in the ABI)"})
