"""Comparing outputs: exact for integers, bools and strings; dtype-aware tolerances
for floats (NaN-aware: NaN matches NaN only); shapes and types must match; sequences
element by element; empty optionals match empty optionals only."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqlower.executor.values import describe_value, elem_type_of, type_name

__all__ = ["Tolerance", "OutputReport", "compare_values", "default_tolerance"]


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


# Roughly a few ulps at 1.0 for each type, so that a reordered sum passes and a wrong
# element does not.
_TOLERANCES = {
    "float64": Tolerance(1e-7, 1e-9),
    "complex128": Tolerance(1e-7, 1e-9),
    "float32": Tolerance(1e-5, 1e-6),
    "complex64": Tolerance(1e-5, 1e-6),
    "float16": Tolerance(2e-3, 2e-3),
    "bfloat16": Tolerance(1.6e-2, 1.6e-2),
}
_LOW_PRECISION = Tolerance(0.25, 0.25)  # float8 / float4 kinds


def default_tolerance(dtype: np.dtype) -> Tolerance | None:
    """None for types compared exactly."""
    name = np.dtype(dtype).name
    if name in _TOLERANCES:
        return _TOLERANCES[name]
    if name.startswith(("float8", "float4", "float6")):
        return _LOW_PRECISION
    return None


@dataclass
class OutputReport:
    name: str
    ok: bool
    expected: str
    actual: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare_values(
    name: str, expected: Any, actual: Any, rtol: float | None = None, atol: float | None = None
) -> OutputReport:
    report = OutputReport(name, True, describe_value(expected), describe_value(actual))
    _compare(report, expected, actual, rtol, atol, where="")
    return report


def _fail(report: OutputReport, detail: str) -> None:
    if report.ok:
        report.ok = False
        report.detail = detail


def _compare(report, expected, actual, rtol, atol, where) -> None:
    if expected is None or actual is None:
        if expected is not actual:
            _fail(report, f"{where}expected {describe_value(expected)}, got {describe_value(actual)}")
        return
    if isinstance(expected, dict) or isinstance(actual, dict):
        if not (isinstance(expected, dict) and isinstance(actual, dict)):
            _fail(report, f"{where}expected {describe_value(expected)}, got {describe_value(actual)}")
        elif set(expected) != set(actual):  # a map has no order (onnxruntime sorts its keys)
            _fail(report, f"{where}map keys {sorted(actual, key=str)[:8]}, expected {sorted(expected, key=str)[:8]}")
        else:
            for k in expected:
                _compare(report, expected[k], actual[k], rtol, atol, f"{where}key {k!r}: ")
        return
    if isinstance(expected, list) or isinstance(actual, list):
        if not (isinstance(expected, list) and isinstance(actual, list)):
            _fail(report, f"{where}expected {describe_value(expected)}, got {describe_value(actual)}")
        elif len(expected) != len(actual):
            _fail(report, f"{where}sequence length {len(actual)}, expected {len(expected)}")
        else:
            for i, (e, a) in enumerate(zip(expected, actual)):
                _compare(report, e, a, rtol, atol, f"{where}element {i}: ")
        return
    e, a = np.asarray(expected), np.asarray(actual)
    if elem_type_of(e) != elem_type_of(a):
        _fail(report, f"{where}type {type_name(elem_type_of(a))}, expected {type_name(elem_type_of(e))}")
        return
    if e.shape != a.shape:
        _fail(report, f"{where}shape {list(a.shape)}, expected {list(e.shape)}")
        return
    tol = default_tolerance(e.dtype)
    if tol is None or e.size == 0:
        if e.dtype.kind == "O":
            equal = np.array([x == y for x, y in zip(e.reshape(-1), a.reshape(-1))], dtype=bool)
        else:
            equal = (e == a).reshape(-1)
        if not equal.all():
            i = int(np.argmin(equal))
            _fail(report, f"{where}{int((~equal).sum())} of {e.size} values differ; first at flat index {i}: "
                  f"{a.reshape(-1)[i]!r} vs expected {e.reshape(-1)[i]!r}")
        return
    rtol = tol.rtol if rtol is None else rtol
    atol = tol.atol if atol is None else atol
    wide = np.complex128 if e.dtype.kind == "c" else np.float64
    ev = e.astype(np.float32).astype(wide) if e.dtype.kind not in "fc" else e.astype(wide)
    av = a.astype(np.float32).astype(wide) if a.dtype.kind not in "fc" else a.astype(wide)
    e_nan, a_nan = np.isnan(ev), np.isnan(av)
    finite = np.isfinite(ev) & np.isfinite(av)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(av - ev), 0.0)
        rel = np.where(finite & (ev != 0), diff / np.where(ev != 0, np.abs(ev), 1.0), 0.0)
    report.max_abs = max(report.max_abs, float(diff.max(initial=0.0)))
    report.max_rel = max(report.max_rel, float(rel.max(initial=0.0)))
    bad = (e_nan != a_nan) | (~finite & ~e_nan & ~a_nan & (ev != av)) | (finite & (diff > atol + rtol * np.abs(ev)))
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        _fail(report, f"{where}{int(bad.sum())} of {e.size} values outside rtol={rtol:g} atol={atol:g}; "
              f"first at flat index {i}: {av.reshape(-1)[i]} vs expected {ev.reshape(-1)[i]}")
