"""Where the elements of an Unrolled list come from, so that joining them back is one
node, as a person would write it (Stage 8, "minimal output").

An element cut from a tensor (a chunk of a Split, a row of a batched SequenceMap's
result) remembers its ``Src``: the tensor, the axis, the range it covers and whether
the axis was squeezed away. A ConcatFromSequence of such elements is then a static
selection of ranges of a few tensors: nothing (the elements put the tensor back
together), one Slice, or one Gather with a constant index over the Concat of the
tensors involved (elements of no known source join that pool as they are). And a
SequenceMap over elements of one shape gets its inputs stacked in one node (Reshape
or Gather) for its body to run once on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx_ir as ir

from seqlower.ir.builder import Builder

__all__ = ["Src", "gather_rows", "stack_rows", "static_dims", "take_rows"]


@dataclass(frozen=True)
class Src:
    """The element is ``value[start:stop]`` along ``axis`` (the axis squeezed away when
    ``squeezed``, then stop == start + 1); ``size`` is ``value``'s static dim there."""

    value: ir.Value
    axis: int
    start: int
    stop: int
    squeezed: bool
    size: int


class _Elem(Protocol):
    value: ir.Value | None
    const: np.ndarray | None
    shape: ir.Shape | None
    src: Src | None


def take_rows(b: Builder, x: ir.Value, index: int | list[int], axis: int, rank: int, name: str) -> ir.Value:
    """``x``'s rows at ``index`` along ``axis`` (an int: that row, the axis gone), as
    Gather does. Strings by Slice, or by GatherND along the front: onnxruntime 1.31's
    Gather copies one string per row and leaves the rest empty (quirk
    "string-gather-rows", every target: the lowered model must run there too)."""
    if x.dtype != ir.DataType.STRING:
        return b.op("Gather", [x, b.constant(np.array(index, np.int64), f"{name}_at")], name, axis=axis)
    if isinstance(index, int) or index == list(range(index[0], index[0] + len(index))):
        first = index if isinstance(index, int) else index[0]
        stop = first + (1 if isinstance(index, int) else len(index))
        rows = b.slice(x, b.ints([first], f"{name}_start"), b.ints([stop], f"{name}_stop"), [axis], f"{name}_rows")
        return b.squeeze(rows, [axis], name) if isinstance(index, int) else rows
    front = x if axis == 0 else b.op("Transpose", [x], f"{name}_front", perm=_moved(rank, axis, 0))
    picked = b.op("GatherND", [front, b.constant(np.array(index, np.int64)[:, None], f"{name}_at")], f"{name}_picked")
    return picked if axis == 0 else b.op("Transpose", [picked], name, perm=_moved(rank, 0, axis))


def static_dims(shape: ir.Shape | None) -> tuple[int, ...] | None:
    """The dims of ``shape`` when every one is a number, else None."""
    if shape is None or not all(isinstance(d, int) for d in shape.dims):
        return None
    return tuple(int(d) for d in shape.dims)  # type: ignore[arg-type]


def gather_rows(items: list[_Elem], axis: int, new_axis: bool, b: Builder, name: str,
                materialize: Callable[[_Elem], ir.Value]) -> ir.Value | None:
    """ConcatFromSequence(axis, new_axis) of ``items`` as a selection of ranges of the
    tensors they come from, or None when they do not line up (then the caller concats).
    ``materialize(e)`` gives an element without a source as a tensor."""
    srcs = [e.src for e in items if e.src is not None]
    if not srcs:
        return None
    k, squeezed = srcs[0].axis, srcs[0].squeezed
    if any(s.axis != k or s.squeezed != squeezed for s in srcs):
        return None
    rank = srcs[0].value.shape.rank() if srcs[0].value.shape is not None else None
    if rank is None:
        return None
    # Where the sources' axis k goes in the output: rows of the sources (k squeezed) are
    # joined along the element's axis ``axis``: move k there, then merge it with the next
    # axis (an axis-1 concat of a batched map's rows: Transpose + Reshape, no Gathers);
    # stacked (new_axis) at ``axis``: move k there.
    merge = False
    to = k
    if squeezed:
        if new_axis:
            to = axis % rank
        elif rank >= 2:
            to, merge = axis % (rank - 1), True
        else:
            return None
    elif new_axis or axis % rank != k:
        return None
    if merge and not _mergeable(srcs[0].value.shape, k, to):
        return None
    pooled = _pool(items, k, squeezed, rank)
    if pooled is None:
        return None
    pool, index, whole = pooled
    source = _pool_tensor(pool, k, squeezed, b, name, materialize)
    if index == list(range(whole)):
        picked = source
    elif index == list(range(index[0], index[0] + len(index))):
        picked = b.slice(source, b.ints([index[0]], f"{name}_start"), b.ints([index[-1] + 1], f"{name}_stop"), [k],
                         f"{name}_slice")
    else:
        picked = take_rows(b, source, index, k, rank, f"{name}_gather")
    if to != k:
        picked = b.op("Transpose", [picked], f"{name}_moved", perm=_moved(rank, k, to))
    if not merge:
        return picked
    dims = [d for i, d in enumerate(srcs[0].value.shape.dims) if i != k]
    dims.insert(to, len(index))
    return b.op("Reshape", [picked, b.ints(_merged_target(dims, to), f"{name}_shape")], name)


_Pooled = list[ir.Value | np.ndarray | _Elem]


def _pool(items: list[_Elem], k: int, squeezed: bool, rank: int) -> tuple[_Pooled, list[int], int] | None:
    """The pool, in order of first use: each source once, each loose element (an element
    of no known source) as it comes, each constant value once; where each output row is
    in the pool; the pool's rows. None: an element's shape is not known."""
    pool: _Pooled = []
    offsets: dict[int, int] = {}
    loose: dict[int, int] = {}  # a loose element's tensor: where its rows are
    consts: dict[tuple, int] = {}  # a constant element's value: where its rows are
    index: list[int] = []
    whole = 0
    row = _row_dims(items, k, squeezed)
    if row is None:
        return None
    for e in items:
        s = e.src
        if s is not None:
            if id(s.value) not in offsets:
                offsets[id(s.value)] = whole
                pool.append(s.value)
                whole += s.size
            index.extend(range(offsets[id(s.value)] + s.start, offsets[id(s.value)] + s.stop))
            continue
        shape = static_dims(e.shape)
        if shape is None or len(shape) != (rank - 1 if squeezed else rank):
            return None
        if not squeezed and any(d != row[i] for i, d in enumerate(shape) if i != k):
            return None
        if squeezed and list(shape) != row:
            return None
        size = 1 if squeezed else shape[k]
        if e.const is None and e.value is not None and id(e.value) in loose:
            # A tensor inserted again: its rows are in the pool once (5,000 inserts of
            # one mean were 5,000 Unsqueezes of it that CSE then merged, each merge
            # rewriting the 10,000-input Concat: quadratic).
            index.extend(range(loose[id(e.value)], loose[id(e.value)] + size))
            continue
        if e.const is not None:
            # The same constant inserted again: its rows are in the pool once too (an
            # initializer inserted at 200 places was 200 rows for onnxruntime to copy).
            key = (e.const.dtype.str, e.const.shape, e.const.tobytes())
            if key in consts:
                index.extend(range(consts[key], consts[key] + size))
                continue
            consts[key] = whole
        index.extend(range(whole, whole + size))
        if e.const is None and e.value is not None:
            loose[id(e.value)] = whole
        whole += size
        if e.const is None:
            pool.append(e)
        else:
            pool.append(np.expand_dims(e.const, k) if squeezed else e.const)
    return pool, index, whole


def _row_dims(items: list[_Elem], k: int, squeezed: bool) -> list | None:
    """The dims every row of the pool has (a source's dims, axis k dropped when squeezed):
    the pool is one Concat along k, so every source and every loose element must agree
    on the other dims. None when two sources may differ there (a dim not known as the
    same on both) or when a loose element's dims cannot be compared (a source dim not
    known as a number)."""
    row: list | None = None
    for e in items:
        if e.src is None:
            continue
        shape = e.src.value.shape
        if shape is None:
            return None
        dims = [d for i, d in enumerate(shape.dims) if not (squeezed and i == k)]
        if row is None:
            row = dims
        elif len(dims) != len(row) or any(i != (k if not squeezed else -1) and not _same_dim(a, b)
                                          for i, (a, b) in enumerate(zip(dims, row))):
            return None
    assert row is not None
    loose = any(e.src is None for e in items)
    if loose and any(not isinstance(d, int) for i, d in enumerate(row) if squeezed or i != k):
        return None
    return row


def _same_dim(a: object, b: object) -> bool:
    """Whether two dims are provably equal: equal numbers, or one named symbol."""
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return getattr(a, "value", None) is not None and getattr(a, "value", None) == getattr(b, "value", None)


def _pool_tensor(pool: _Pooled, k: int, squeezed: bool, b: Builder, name: str,
                 materialize: Callable[[_Elem], ir.Value]) -> ir.Value:
    """The pool as one tensor: constants next to each other in it are one constant block."""
    tensors: list[ir.Value] = []
    run: list[np.ndarray] = []
    for item in [*pool, None]:
        if isinstance(item, np.ndarray):
            run.append(item)
            continue
        if run:
            tensors.append(b.constant(np.concatenate(run, axis=k), f"{name}_rows"))
            run = []
        if isinstance(item, ir.Value):
            tensors.append(item)
        elif item is not None:
            v = materialize(item)
            tensors.append(b.unsqueeze(v, [k], f"{name}_row") if squeezed else v)
    return tensors[0] if len(tensors) == 1 else b.concat(tensors, k, f"{name}_pool", None)


def _moved(rank: int, k: int, to: int) -> list[int]:
    """The perm that moves axis ``k`` to ``to``, the others keeping their order."""
    perm = [i for i in range(rank) if i != k]
    perm.insert(to, k)
    return perm


def _mergeable(shape: ir.Shape | None, k: int, to: int) -> bool:
    """Whether the dims of a source (axis k the rows) are known well enough to merge the
    rows, moved to ``to``, with the axis after them by a constant Reshape target."""
    if shape is None:
        return False
    dims = [d for i, d in enumerate(shape.dims) if i != k]
    return isinstance(dims[to], int) and _merged_target([*dims[:to], 1, *dims[to:]], to) is not None


def _merged_target(dims: list, at: int) -> list[int] | None:
    """The Reshape target merging axes ``at`` and ``at + 1`` of a tensor of ``dims``:
    a dim not known before them copied by 0 (the same index), after them only known dims
    (a 0 there would copy the wrong one); None when that cannot be said."""
    if not isinstance(dims[at], int) or not isinstance(dims[at + 1], int):
        return None
    after = dims[at + 2:]
    if not all(isinstance(d, int) for d in after):
        return None
    if 0 in (dims[at], dims[at + 1], *after) or 0 in dims[:at]:
        return None  # (without allowzero a 0 copies a dim: empty tensors keep the Concat)
    before = [d if isinstance(d, int) else 0 for d in dims[:at]]
    return [*before, dims[at] * dims[at + 1], *after]


def stack_rows(items: list[_Elem], b: Builder, name: str) -> ir.Value | None:
    """The elements stacked on a new leading axis in one node, when they are the rows or
    equal chunks of one tensor along any one axis (None otherwise): a Gather or Reshape,
    then a Transpose bringing that axis to the front when it is not there already (the
    Transposes that a batched body then carries to its results cancel there:
    passes/folds/sink_transposes.py)."""
    srcs = [e.src for e in items]
    if not items or any(s is None for s in srcs):
        return None
    first = srcs[0]
    assert first is not None
    k = first.axis
    if any(s.value is not first.value or s.axis != k or s.squeezed != first.squeezed for s in srcs):  # type: ignore[union-attr]
        return None
    x = first.value
    if x.shape is None:
        return None
    rank = x.shape.rank()
    if first.squeezed:
        rows = [s.start for s in srcs]  # type: ignore[union-attr]
        if rows != list(range(first.size)):
            x = take_rows(b, x, rows, k, rank, f"{name}_picked")
        return x if k == 0 else b.op("Transpose", [x], f"{name}_stack", perm=_moved(rank, k, 0))
    step = first.stop - first.start
    starts = [s.start for s in srcs]  # type: ignore[union-attr]
    if any(s.stop - s.start != step for s in srcs) or starts != list(  # type: ignore[union-attr]
            range(first.start, first.start + step * len(items), step)):
        return None
    dims = list(x.shape.dims)
    dims[k] = step * len(items)
    target = _split_target(dims, k, len(items))
    if target is None:
        return None
    if first.start != 0 or first.start + step * len(items) != x.shape.dims[k]:
        x = b.slice(x, b.ints([first.start], f"{name}_start"), b.ints([first.start + step * len(items)], f"{name}_stop"),
                    [k], f"{name}_chunks")
    grouped = b.op("Reshape", [x, b.ints(target, f"{name}_shape")], f"{name}_grouped" if k else f"{name}_stack")
    return grouped if k == 0 else b.op("Transpose", [grouped], f"{name}_stack", perm=_moved(rank + 1, k, 0))


def _split_target(dims: list, k: int, n: int) -> list[int] | None:
    """The Reshape target cutting axis ``k`` of a tensor of ``dims`` into ``n`` equal
    chunks (the inverse of :func:`_merged_target`, with its conditions)."""
    if not isinstance(dims[k], int) or dims[k] % n:
        return None
    merged = _merged_target([*dims[:k], n, dims[k] // n, *dims[k + 1:]], k)
    return None if merged is None else [*merged[:k], n, dims[k] // n, *merged[k + 1:]]
