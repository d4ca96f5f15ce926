"""The sequence lattice's values: what is known about one sequence value (``SeqInfo``:
element dtype, length, per-element shapes and constants, merged element shape,
uniformity) and the join of two of them. The transfer functions that compute them are
in ``seqlower.analysis``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from seqlower.builder import merge_shapes

__all__ = ["SeqInfo", "join", "shape_json", "shifted", "symbolic_length_text"]


@dataclass(frozen=True)
class SeqInfo:
    """What is known about one sequence value. ``shapes``/``consts`` are per element and
    present only when ``length`` is known; ``elem_shape`` is the merged element shape
    (dims that differ or are unknown are None), and ``uniform`` says all elements
    provably have exactly that shape. ``length_sym``, when the length is only known at
    run time: it is a model input's dim plus a constant, ``(name, offset)`` (one size
    for the whole run, so it can name the length in declared shapes)."""

    dtype: ir.DataType | None
    length: int | None = None
    shapes: tuple[ir.Shape | None, ...] | None = None
    elem_shape: ir.Shape | None = None
    uniform: bool = False
    consts: tuple[np.ndarray | None, ...] | None = None
    length_sym: tuple[str, int] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.elem_shape is None else self.elem_shape.rank()

    @property
    def all_const(self) -> bool:
        return self.consts is not None and all(c is not None for c in self.consts)

    @staticmethod
    def of_elements(
        dtype: ir.DataType | None, shapes: Sequence[ir.Shape | None], consts: Sequence[np.ndarray | None]
    ) -> SeqInfo:
        shapes = tuple(shapes)
        # Merge each distinct shape once: a list of 70 rows of one shape edited 10,000
        # times is 10,000 merges of one shape, not of 70.
        # (by object first: the elements of an edited list share a few Shape objects)
        objects = {id(s): s for s in shapes}.values()
        distinct = list({None if s is None else s.dims: s for s in objects}.values())
        merged = merge_shapes(distinct) if shapes else None
        uniform = bool(shapes) and merged is not None and all(s == merged for s in distinct) and _fully_known(merged)
        return SeqInfo(dtype, len(shapes), shapes, merged, uniform, tuple(consts))

    @staticmethod
    def unknown(dtype: ir.DataType | None, elem_shape: ir.Shape | None = None, uniform: bool = False) -> SeqInfo:
        return SeqInfo(dtype, None, None, elem_shape, uniform and _fully_known(elem_shape), None)

    def element(self, i: int) -> tuple[ir.Shape | None, np.ndarray | None]:
        assert self.shapes is not None and self.consts is not None
        return self.shapes[i], self.consts[i]

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype.name if self.dtype is not None else None,
            "rank": self.rank,
            "length": self.length,
            "shapes": None if self.shapes is None else [shape_json(s) for s in self.shapes],
            "elem_shape": shape_json(self.elem_shape),
            "uniform": self.uniform,
            "constant": self.all_const if self.length is not None else False,
            "symbolic_length": None if self.length_sym is None else symbolic_length_text(self.length_sym),
        }

    def with_length_sym(self, sym: tuple[str, int] | None) -> SeqInfo:
        """This info, with the symbolic length ``sym`` where the length is unknown."""
        return dataclasses.replace(self, length_sym=sym if self.length is None else None)


def symbolic_length_text(sym: tuple[str, int]) -> str:
    name, offset = sym
    return name if offset == 0 else f"{name}{offset:+d}"


def shifted(sym: tuple[str, int] | None, by: int) -> tuple[str, int] | None:
    """A symbolic length after ``by`` elements are added (or removed)."""
    return None if sym is None else (sym[0], sym[1] + by)


def _fully_known(shape: ir.Shape | None) -> bool:
    return shape is not None and all(isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value) for d in shape.dims)


def shape_json(shape: ir.Shape | None) -> list[Any] | None:
    if shape is None:
        return None
    return [d if isinstance(d, int) else (d.value if isinstance(d, ir.SymbolicDim) else None) for d in shape.dims]


def join(a: SeqInfo, b: SeqInfo) -> SeqInfo:
    """The least SeqInfo both may be (If branches, Loop iterations)."""
    dtype = a.dtype if a.dtype == b.dtype else (a.dtype or b.dtype)
    if a.length is not None and a.length == b.length:
        assert a.shapes is not None and b.shapes is not None and a.consts is not None and b.consts is not None
        shapes = [merge_shapes([x, y]) for x, y in zip(a.shapes, b.shapes)]
        consts = [x if x is not None and y is not None and _same_array(x, y) else None for x, y in zip(a.consts, b.consts)]
        return SeqInfo.of_elements(dtype, shapes, consts)
    if a.length == 0:
        return SeqInfo.unknown(dtype, b.elem_shape, b.uniform)
    if b.length == 0:
        return SeqInfo.unknown(dtype, a.elem_shape, a.uniform)
    merged = merge_shapes([a.elem_shape, b.elem_shape])
    joined = SeqInfo.unknown(dtype, merged, a.uniform and b.uniform and a.elem_shape == b.elem_shape)
    return joined.with_length_sym(a.length_sym if a.length_sym == b.length_sym else None)


def _same_array(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and bool(np.all((x == y) | ((x != x) & (y != y))))
