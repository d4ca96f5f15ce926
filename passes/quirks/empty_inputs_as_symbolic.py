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
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.passes._rewrite import REPORT_KEY

__all__ = ["EmptyInputsAsSymbolicPass"]


class EmptyInputsAsSymbolicPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        records = []
        for v in model.graph.inputs:
            dims = list(v.shape.dims) if v.shape is not None else []
            if not any(isinstance(d, int) and d == 0 for d in dims):
                continue
            v.shape = ir.Shape([f"{v.name}_dim{k}" if isinstance(d, int) and d == 0 else d for k, d in enumerate(dims)])
            before = str(dims)
            records.append({"op": "input", "node": v.name or "", "graph": "main", "into": "input",
                            "how": f"declared {before} with its dims of 0 named, which OpenVINO otherwise folds wrong "
                                   "(OpenVINO)"})
        model.meta.setdefault(REPORT_KEY, []).extend(records)
        return ir.passes.PassResult(model, bool(records))
