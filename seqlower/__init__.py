"""seqlower: lower ONNX sequence ops into tensor-only models, and prove it.

Names are imported on first use: ``seqlower --help`` and ``import seqlower.errors`` do
not load onnx, numpy or the passes.
"""

from __future__ import annotations

import importlib
from typing import Any

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

_HOME = {
    "ExecutionError": "seqlower.errors",
    "ModelError": "seqlower.errors",
    "ModelWarning": "seqlower.errors",
    "SeqlowerError": "seqlower.errors",
    "LowerOptions": "seqlower.options",
    "LowerReport": "seqlower.report",
    "lower": "seqlower.fastpath.job",
    "lower_with_report": "seqlower.fastpath.pipeline",
    "load_model": "seqlower.io.models",
    "read_model_proto": "seqlower.io.models",
    "save_model": "seqlower.io.models",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'seqlower' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
