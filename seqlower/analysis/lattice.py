"""The sequence lattice's values: what is known about one sequence value (``SeqInfo``:
element dtype, length, per-element shapes and constants, merged element shape,
uniformity) and the join of two of them. The transfer functions that compute them are
in ``seqlower.analysis.analyzer``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from seqlower.ir.helpers import merge_shapes
from seqlower.analysis.plist import PList

__all__ = ["Elements", "SeqInfo", "join", "shape_json", "shifted", "symbolic_length_text"]


class Elements(PList[tuple["ir.Shape | None", "np.ndarray | None"]]):
    """The elements of a sequence of known length, ``(shape, constant)`` each (either may
    be None: not known), shared between the values of an edited list (``PList``). Beside
    them, a census: each distinct shape (by dims) and how many elements have it, and how
    many constants are unknown; an edit updates it in O(distinct shapes), so the merged
    shape and uniformity of any value are read without walking its elements."""

    __slots__ = ("census", "unknown")

    def __init__(self, root: Any = None, census: dict | None = None, unknown: int = 0) -> None:
        super().__init__(root)
        self.census: dict[Any, tuple[ir.Shape | None, int]] = census or {}
        self.unknown = unknown

    @classmethod
    def of(cls, items: Iterable[tuple[ir.Shape | None, np.ndarray | None]]) -> Elements:
        items = list(items)
        made = cls(PList.of(items)._root)
        for shape, const in items:
            made._count(shape, const, 1)
        return made

    @classmethod
    def repeat(cls, item: tuple[ir.Shape | None, np.ndarray | None], n: int) -> Elements:
        made = cls(PList.repeat(item, n)._root)
        if n:
            made._count(item[0], item[1], n)
        return made

    def insert(self, i: int, item: tuple[ir.Shape | None, np.ndarray | None]) -> Elements:
        made = type(self)(PList.insert(self, i, item)._root, dict(self.census), self.unknown)
        made._count(item[0], item[1], 1)
        return made

    def delete(self, i: int) -> Elements:
        shape, const = self[i]
        made = type(self)(PList.delete(self, i)._root, dict(self.census), self.unknown)
        made._count(shape, const, -1)
        return made

    def _count(self, shape: ir.Shape | None, const: np.ndarray | None, by: int) -> None:
        key = None if shape is None else tuple(shape.dims)
        seen, count = self.census.get(key, (shape, 0))
        if count + by:
            self.census[key] = (seen, count + by)
        else:
            del self.census[key]
        self.unknown += by if const is None else 0

    @property
    def shapes(self) -> list[ir.Shape | None]:
        """The distinct shapes."""
        return [shape for shape, _ in self.census.values()]

    @classmethod
    def _same(cls, a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
        return a is b or a[0] == b[0] and (a[1] is b[1] or a[1] is not None and b[1] is not None and _same_array(a[1], b[1]))


class _Column(Sequence[Any]):
    """One column of ``Elements`` (the shapes, or the constants), read as a sequence."""

    __slots__ = ("elements", "k")

    def __init__(self, elements: Elements, k: int) -> None:
        self.elements, self.k = elements, k

    def __len__(self) -> int:
        return len(self.elements)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [pair[self.k] for pair in self.elements][i]
        return self.elements[i][self.k]

    def __iter__(self) -> Iterator[Any]:
        return (pair[self.k] for pair in self.elements)

    def __eq__(self, other: object) -> bool:
        """Element by element, as a tuple compares (shapes; constants are arrays)."""
        if not isinstance(other, (Sequence, _Column)) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a is b or a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=True)
class SeqInfo:
    """What is known about one sequence value. ``elements`` (a shape and a constant per
    element) is present only when ``length`` is known; ``elem_shape`` is the merged
    element shape (dims that differ or are unknown are None), and ``uniform`` says all
    elements provably have exactly that shape. ``length_sym``, when the length is only
    known at run time: it is a model input's dim plus a constant, ``(name, offset)`` (one
    size for the whole run, so it can name the length in declared shapes)."""

    dtype: ir.DataType | None
    length: int | None = None
    elements: Elements | None = None
    elem_shape: ir.Shape | None = None
    uniform: bool = False
    length_sym: tuple[str, int] | None = None

    __hash__ = None  # type: ignore[assignment]

    @property
    def shapes(self) -> Sequence[ir.Shape | None] | None:
        return None if self.elements is None else _Column(self.elements, 0)

    @property
    def consts(self) -> Sequence[np.ndarray | None] | None:
        return None if self.elements is None else _Column(self.elements, 1)

    @property
    def rank(self) -> int | None:
        return None if self.elem_shape is None else self.elem_shape.rank()

    @property
    def all_const(self) -> bool:
        return self.elements is not None and self.elements.unknown == 0

    @staticmethod
    def of_elements(
        dtype: ir.DataType | None, shapes: Sequence[ir.Shape | None], consts: Sequence[np.ndarray | None]
    ) -> SeqInfo:
        return SeqInfo.from_elements(dtype, Elements.of(zip(shapes, consts)))

    @staticmethod
    def from_elements(dtype: ir.DataType | None, elements: Elements) -> SeqInfo:
        """The info of these elements: their shapes merged (each distinct shape once)."""
        distinct = elements.shapes
        merged = merge_shapes(distinct) if distinct else None
        uniform = bool(distinct) and merged is not None and all(s == merged for s in distinct) and fully_known(merged)
        return SeqInfo(dtype, len(elements), elements, merged, uniform)

    @staticmethod
    def repeated(dtype: ir.DataType | None, n: int, shape: ir.Shape | None, uniform: bool = False) -> SeqInfo:
        """``n`` elements, each of at least ``shape`` (none constant); ``uniform`` as given."""
        return SeqInfo(dtype, n, Elements.repeat((shape, None), n), shape, uniform)

    @staticmethod
    def empty(dtype: ir.DataType | None, elem_shape: ir.Shape | None = None) -> SeqInfo:
        return SeqInfo(dtype, 0, Elements(), elem_shape, False)

    @staticmethod
    def unknown(dtype: ir.DataType | None, elem_shape: ir.Shape | None = None, uniform: bool = False) -> SeqInfo:
        return SeqInfo(dtype, None, None, elem_shape, uniform and fully_known(elem_shape))

    def element(self, i: int) -> tuple[ir.Shape | None, np.ndarray | None]:
        assert self.elements is not None
        return self.elements[i]

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


def fully_known(shape: ir.Shape | None) -> bool:
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
        if a.elements is b.elements or a.elements == b.elements:
            return SeqInfo.from_elements(dtype, a.elements)
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
