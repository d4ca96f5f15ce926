"""seqlower: lower ONNX sequence ops into tensor-only models, and prove it."""

from __future__ import annotations

from seqlower.errors import ExecutionError, ModelError, ModelWarning, SeqlowerError
from seqlower.model_io import load_model, read_model_proto, save_model
from seqlower.pipeline import LowerOptions, LowerReport, lower, lower_with_report

__all__ = [
    "ExecutionError",
    "ModelError",
    "ModelWarning",
    "SeqlowerError",
    "__version__",
    "LowerOptions",
    "LowerReport",
    "load_model",
    "lower",
    "lower_with_report",
    "read_model_proto",
    "save_model",
]

__version__ = "0.1.0"
