"""The lowering pipeline: load, run the passes, check, report.

The passes are onnx_ir passes (``passes/``) composed in an ``onnx_ir.passes``
pipeline, so they mix with onnxscript's and PyTorch's.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from seqlower.errors import ModelError
from seqlower.inventory import take_inventory
from seqlower.model_io import to_proto

__all__ = ["LowerOptions", "LowerReport", "lower", "lower_with_report", "build_passes", "DEFAULT_MAX_UNROLL"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_UNROLL = 64


@dataclass
class LowerOptions:
    max_unroll: int = DEFAULT_MAX_UNROLL
    keepdims_policy: str = "auto"


@dataclass
class LowerReport:
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    remaining: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tensor_only(self) -> bool:
        return not self.remaining

    def to_json(self) -> dict[str, Any]:
        return {"tensor_only": self.tensor_only, **asdict(self)}


def build_passes(options: LowerOptions) -> list[ir.passes.PassBase]:
    """The passes, in order. Stage 1 ships the pipeline and no lowering pass yet."""
    return []


def lower_with_report(model: ir.Model, options: LowerOptions | None = None) -> tuple[ir.Model, LowerReport]:
    options = options or LowerOptions()
    report = LowerReport()
    passes = build_passes(options)
    if passes:
        result = ir.passes.PassManager(passes)(model)
        model = result.model
    proto = to_proto(model)
    _check(proto)
    inventory = take_inventory(proto)
    for op in inventory.ops:
        report.remaining.append(
            {"op": op.op_type, "node": op.node, "graph": op.graph, "reason": "no lowering rule for this op yet"}
        )
        report.notes.extend(op.notes)
    for v in inventory.values:
        if v.role in ("input", "output") and v.graph == "main":
            report.remaining.append(
                {"value": v.name, "type": v.type, "graph": v.graph, "reason": f"sequence-typed graph {v.role}"}
            )
    return model, report


def lower(model: onnx.ModelProto | ir.Model, **kwargs: Any) -> onnx.ModelProto | ir.Model:
    """Lower a model; returns the same kind it was given (ModelProto or onnx_ir.Model)."""
    as_proto = isinstance(model, onnx.ModelProto)
    ir_model = ir.serde.deserialize_model(model) if as_proto else model
    out, _ = lower_with_report(ir_model, LowerOptions(**kwargs))
    return to_proto(out) if as_proto else out


def _check(proto: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "invalid")
        raise ModelError(f"the lowered model fails the ONNX checker: {first}") from None
