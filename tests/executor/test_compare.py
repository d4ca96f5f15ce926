from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from seqlower.executor import compare_values, default_tolerance


def test_exact_types_are_exact():
    assert compare_values("y", np.array([1, 2]), np.array([1, 2])).ok
    r = compare_values("y", np.array([1, 2]), np.array([1, 3]))
    assert not r.ok and "1 of 2 values differ" in r.detail
    assert not compare_values("y", np.array([True]), np.array([False])).ok
    assert not compare_values("y", np.array(["a"], object), np.array(["b"], object)).ok
    assert compare_values("y", np.array(["a"], object), np.array(["a"], object)).ok


@pytest.mark.parametrize(
    "dtype, small, large",
    [(np.float64, 1e-9, 1e-5), (np.float32, 1e-6, 1e-3), (np.float16, 1e-3, 1e-1), (ml_dtypes.bfloat16, 1e-2, 2e-1)],
)
def test_float_tolerances_follow_the_dtype(dtype, small, large):
    e = np.array([1.0, -2.0, 4.0]).astype(dtype)
    near = (e.astype(np.float64) * (1 + small)).astype(dtype)
    far = (e.astype(np.float64) * (1 + large)).astype(dtype)
    assert compare_values("y", e, near).ok
    r = compare_values("y", e, far)
    assert not r.ok and r.max_rel > 0


def test_nan_and_inf():
    e = np.array([np.nan, np.inf, 1.0], np.float32)
    assert compare_values("y", e, e.copy()).ok
    assert not compare_values("y", e, np.array([0.0, np.inf, 1.0], np.float32)).ok
    assert not compare_values("y", e, np.array([np.nan, -np.inf, 1.0], np.float32)).ok
    assert not compare_values("y", np.array([1.0], np.float32), np.array([np.nan], np.float32)).ok


def test_shape_type_sequence_optional_mismatches():
    a = np.zeros((2, 3), np.float32)
    assert "shape [3, 2]" in compare_values("y", a, np.zeros((3, 2), np.float32)).detail
    assert "type float16" in compare_values("y", a, a.astype(np.float16)).detail
    assert "length 1" in compare_values("s", [a, a], [a]).detail
    assert "element 1" in compare_values("s", [a, a], [a, a + 1]).detail
    assert compare_values("o", None, None).ok
    assert not compare_values("o", None, a).ok
    assert not compare_values("o", [a], a).ok


def test_user_tolerance_overrides_default():
    e, a = np.array([1.0], np.float32), np.array([1.01], np.float32)
    assert not compare_values("y", e, a).ok
    assert compare_values("y", e, a, rtol=0.02).ok
    assert default_tolerance(np.dtype(np.int64)) is None
