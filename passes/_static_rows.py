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

from seqlower.builder import Builder

__all__ = ["Src", "gather_rows", "stack_rows", "static_dims"]


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
    merge = False  # rows of the sources joined along their next axis: merge axes k, k + 1
    if squeezed:
        if new_axis and axis % rank == k:
            pass
        elif not new_axis and rank >= 2 and axis % (rank - 1) == k:
            merge = True
        else:
            return None
    elif new_axis or axis % rank != k:
        return None
    if merge and static_dims(srcs[0].value.shape) is None:
        return None
    # The pool, in order of first use: each source once, each loose element (an element
    # of no known source) as it comes; index: where each output row is in the pool.
    pool: list[ir.Value | np.ndarray | _Elem] = []
    offsets: dict[int, int] = {}
    loose: dict[int, int] = {}  # a loose element's tensor: where its rows are
    index: list[int] = []
    whole = 0
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
        size = 1 if squeezed else shape[k]
        if e.const is None and e.value is not None and id(e.value) in loose:
            # A tensor inserted again: its rows are in the pool once (5,000 inserts of
            # one mean were 5,000 Unsqueezes of it that CSE then merged, each merge
            # rewriting the 10,000-input Concat: quadratic).
            index.extend(range(loose[id(e.value)], loose[id(e.value)] + size))
            continue
        index.extend(range(whole, whole + size))
        if e.const is None and e.value is not None:
            loose[id(e.value)] = whole
        whole += size
        if e.const is None:
            pool.append(e)
        else:
            pool.append(np.expand_dims(e.const, k) if squeezed else e.const)
    # Constants next to each other in the pool are one constant block.
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
    source = tensors[0] if len(tensors) == 1 else b.concat(tensors, k, f"{name}_pool", None)
    if index == list(range(whole)):
        picked = source
    elif index == list(range(index[0], index[0] + len(index))):
        picked = b.slice(source, b.ints([index[0]], f"{name}_start"), b.ints([index[-1] + 1], f"{name}_stop"), [k],
                         f"{name}_slice")
    else:
        picked = b.op("Gather", [source, b.ints(index, f"{name}_index")], f"{name}_gather", axis=k)
    if not merge:
        return picked
    dims = static_dims(srcs[0].value.shape)
    assert dims is not None  # checked before anything was emitted
    target = [*dims[:k], len(index) * dims[k + 1], *dims[k + 2:]]
    return b.op("Reshape", [picked, b.ints(target, f"{name}_shape")], name)


def stack_rows(items: list[_Elem], b: Builder, name: str) -> ir.Value | None:
    """The elements stacked on a new leading axis in one node, when they are the rows or
    equal chunks of one tensor along its first axis (None otherwise)."""
    srcs = [e.src for e in items]
    if not items or any(s is None for s in srcs):
        return None
    first = srcs[0]
    assert first is not None
    if any(s.value is not first.value or s.axis != 0 or s.squeezed != first.squeezed for s in srcs):  # type: ignore[union-attr]
        return None
    x = first.value
    if first.squeezed:
        rows = [s.start for s in srcs]  # type: ignore[union-attr]
        if rows == list(range(first.size)):
            return x
        return b.op("Gather", [x, b.ints(rows, f"{name}_rows")], f"{name}_stack", axis=0)
    dims = static_dims(x.shape)
    step = first.stop - first.start
    starts = [s.start for s in srcs]  # type: ignore[union-attr]
    if dims is None or any(s.stop - s.start != step for s in srcs) or starts != list(  # type: ignore[union-attr]
            range(first.start, first.start + step * len(items), step)):
        return None
    if first.start != 0 or first.start + step * len(items) != dims[0]:
        x = b.slice(x, b.ints([first.start], f"{name}_start"), b.ints([first.start + step * len(items)], f"{name}_stop"),
                    [0], f"{name}_chunks")
    return b.op("Reshape", [x, b.ints([len(items), step, *dims[1:]], f"{name}_shape")], f"{name}_stack")
