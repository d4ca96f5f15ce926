"""The choices the CLI and the API share, in a module that imports nothing heavy, so
``seqlower --help`` starts without loading onnx, numpy or the passes."""

from __future__ import annotations

from pathlib import Path

__all__ = ["BACKENDS", "DEFAULT_MAX_UNROLL", "KEEPDIMS_POLICIES", "OPT_LEVELS", "TARGETS"]

BACKENDS = ("reference", "onnxruntime", "openvino", "tract")
KEEPDIMS_POLICIES = ("auto", "spec", "onnxruntime")
OPT_LEVELS = ("disable", "basic", "extended", "all")
DEFAULT_MAX_UNROLL = 64
TARGETS: tuple[str, ...] = tuple(sorted(p.stem for p in (Path(__file__).parent / "targets").glob("*.toml")))
