"""Model inputs declared with a dim of 0 declared with a named dim instead, for OpenVINO
(quirk "static-empty-input").

A TorchScript export traced with an empty example and no dynamic axes declares its input
[0, 3]. OpenVINO 2026.4 then folds everything that depends on it, and two of its folds
go wrong: a ``Gather`` at an axis other than 0 of data with a 0 elsewhere kills the
process (SIGFPE: ``Gather(x, 0, axis=1)`` of an [0, 3] x), and a Reshape whose target
is a Concat of folded dims with a 0 fails shape inference ("'0' dimension is out of
range": its ONNX frontend reads every Reshape as special_zero, allowzero or not). Torch
fuzz seeds 14824, 15849, 16273. The same models with the dim named run right on the
empty input, and compute the same on it as the original: the lowered model accepts
more shapes than the export declared, never fewer. Intermediate shapes stay as inferred.

A model lowered at fixed shapes (``--input-shape``) is folded whole first, and its dims
named after (the ABI's "fixed" says the shapes it runs at). Its folds leave Reshapes of
their own: a Reshape with ``allowzero`` to a constant shape with a 0 (an empty list's
data, grouped). Its output is empty, so its shape says everything: it becomes the
``ConstantOfShape`` of that shape, which OpenVINO reads right (quirk "empty-constant").
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.ir.builder import NameAuthority
from seqlower.ir.helpers import const_array
from seqlower.passes._rewrite import REPORT_KEY, Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops

__all__ = ["EmptyInputsAsSymbolicPass", "empty_inputs", "empty_inputs_again"]


def empty_inputs(options, target) -> list[ir.passes.PassBase]:  # noqa: ANN001 - LowerOptions, Target
    """The rewrite's first run: a model lowered at fixed shapes (--input-shape) and folded
    whole after (not --no-optimize) keeps its dims until that fold has read them."""
    return [EmptyInputsAsSymbolicPass(rename=not (options.specialized and options.optimize))]


def empty_inputs_again(options, target) -> list[ir.passes.PassBase]:  # noqa: ANN001
    return [EmptyInputsAsSymbolicPass()]


class EmptyInputsAsSymbolicPass(ir.passes.InPlacePass):
    def __init__(self, rename: bool = True) -> None:
        super().__init__()
        self.rename = rename

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        records = []
        for v in model.graph.inputs if self.rename else []:
            dims = list(v.shape.dims) if v.shape is not None else []
            if not any(isinstance(d, int) and d == 0 for d in dims):
                continue
            v.shape = ir.Shape([f"{v.name}_dim{k}" if isinstance(d, int) and d == 0 else d for k, d in enumerate(dims)])
            before = str(dims)
            records.append({"op": "input", "node": v.name or "", "graph": "main", "into": "input",
                            "how": f"declared {before} with its dims of 0 named, which OpenVINO otherwise folds wrong "
                                   "(OpenVINO)"})
        model.meta.setdefault(REPORT_KEY, []).extend(records)
        reshaped = rewrite_each_node(model, _empty_reshape)
        return ir.passes.PassResult(model, bool(records) or reshaped.modified)


def _empty_reshape(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    allowzero = node.attributes.get("allowzero")
    dims = const_array(node.inputs[1])
    data = node.inputs[0]
    if allowzero is None or allowzero.as_int() != 1 or dims is None or 0 not in dims or data is None \
            or data.dtype is None or data.dtype == ir.DataType.STRING:
        return None
    o = Ops(scope.builder(node, names))
    value = ir.tensor(np.zeros(1, dtype=data.dtype.numpy()), dtype=data.dtype)
    empty = o.op("ConstantOfShape", [node.inputs[1]], f"{node.name or 'reshape'}_empty", dtype=data.dtype,
                 shape=[int(d) for d in dims], value=value)
    replace_output(node.outputs[0], empty, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "ConstantOfShape", "a Reshape to a constant empty shape made by ConstantOfShape of it (OpenVINO)"
