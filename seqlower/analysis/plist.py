"""A persistent list: the elements of a sequence as every value of an edited list keeps
them, sharing what the edits did not touch.

10,000 SequenceInsert/SequenceErase on a 10,000-element list gave each of the 10,000
values its own copy of the elements: 10^8 element copies in the analysis and again in
the Unrolled lowering, 1.7 GB, time growing as n^1.5 to n^2 (Stage 11). Here a list is a
treap of runs (an element and how many times it repeats), each node shared by every list
that holds it: an insert, erase or read at a position costs O(log n) expected, a list of
n copies of one element is one node, and iterating is O(n). (What a whole list needs
summarized, its shapes' census, ``lattice.Elements`` keeps beside the tree.)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["PList"]

T = TypeVar("T")
# (The shapes of the trees differ with the draws; the lists they hold never do.)
_DRAW = random.Random(0).random


class _Node:
    __slots__ = ("left", "right", "item", "count", "size", "prio")

    def __init__(self, left: _Node | None, right: _Node | None, item: Any, count: int, prio: float) -> None:
        self.left, self.right, self.item, self.count, self.prio = left, right, item, count, prio
        self.size = count + (left.size if left is not None else 0) + (right.size if right is not None else 0)


class PList(Generic[T]):
    """An immutable list; the edits return new lists."""

    __slots__ = ("_root",)

    def __init__(self, root: _Node | None = None) -> None:
        self._root = root

    # -- building ----------------------------------------------------------------------

    @classmethod
    def of(cls, items: Iterable[T]) -> PList[T]:
        """The list of ``items`` (equal neighbours, by identity, share a run), built in
        O(n) as a Cartesian tree of random priorities."""
        runs: list[list[Any]] = []
        for x in items:
            if runs and runs[-1][0] is x:
                runs[-1][1] += 1
            else:
                runs.append([x, 1])
        prios = [_DRAW() for _ in runs]
        lefts, rights = [-1] * len(runs), [-1] * len(runs)
        stack: list[int] = []
        for i, p in enumerate(prios):
            last = -1
            while stack and prios[stack[-1]] < p:
                last = stack.pop()
            lefts[i] = last
            if stack:
                rights[stack[-1]] = i
            stack.append(i)

        def build(i: int) -> _Node | None:
            if i < 0:
                return None
            return _Node(build(lefts[i]), build(rights[i]), runs[i][0], runs[i][1], prios[i])

        return cls(build(stack[0]) if stack else None)

    @classmethod
    def repeat(cls, item: T, n: int) -> PList[T]:
        """``n`` copies of ``item``: one node."""
        return cls(_Node(None, None, item, n, _DRAW()) if n > 0 else None)

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._root.size if self._root is not None else 0

    def __bool__(self) -> bool:
        return self._root is not None

    def __getitem__(self, i: int) -> T:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a list of {n}")
        i %= n
        node = self._root
        while True:
            left = node.left.size if node.left is not None else 0
            if i < left:
                node = node.left
            elif i < left + node.count:
                return node.item
            else:
                i -= left + node.count
                node = node.right

    def __iter__(self) -> Iterator[T]:
        stack: list[_Node] = []
        node = self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            for _ in range(node.count):
                yield node.item
            node = node.right

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PList):
            return NotImplemented
        if self._root is other._root:
            return True
        return len(self) == len(other) and all(self._same(a, b) for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _same(cls, a: T, b: T) -> bool:
        return a is b or a == b

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    # -- editing -----------------------------------------------------------------------

    def insert(self, i: int, item: T) -> PList[T]:
        """A new list with ``item`` before position ``i`` (0..len)."""
        if not 0 <= i <= len(self):
            raise IndexError(f"position {i} out of range for a list of {len(self)}")
        return type(self)(self._insert(self._root, i, item, _DRAW()))

    def delete(self, i: int) -> PList[T]:
        """A new list without the element at ``i`` (0..len-1)."""
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for a list of {len(self)}")
        return type(self)(self._delete(self._root, i))

    # -- the treap ---------------------------------------------------------------------

    @classmethod
    def _renew(cls, node: _Node, left: _Node | None, right: _Node | None, count: int | None = None) -> _Node:
        return _Node(left, right, node.item, node.count if count is None else count, node.prio)

    @classmethod
    def _insert(cls, node: _Node | None, i: int, item: Any, prio: float) -> _Node:
        """Path copying: the new element sinks to where its priority puts it."""
        if node is None:
            return _Node(None, None, item, 1, prio)
        left = node.left.size if node.left is not None else 0
        if prio > node.prio or left < i < left + node.count:
            a, b = cls._split(node, i)  # (its place is here, or inside this node's run)
            return cls._merge(cls._merge(a, _Node(None, None, item, 1, prio)), b)
        if i <= left:
            return cls._renew(node, cls._insert(node.left, i, item, prio), node.right)
        return cls._renew(node, node.left, cls._insert(node.right, i - left - node.count, item, prio))

    @classmethod
    def _delete(cls, node: _Node, i: int) -> _Node | None:
        left = node.left.size if node.left is not None else 0
        if i < left:
            return cls._renew(node, cls._delete(node.left, i), node.right)
        if i >= left + node.count:
            return cls._renew(node, node.left, cls._delete(node.right, i - left - node.count))
        if node.count > 1:
            return cls._renew(node, node.left, node.right, node.count - 1)
        return cls._merge(node.left, node.right)

    @classmethod
    def _split(cls, node: _Node | None, k: int) -> tuple[_Node | None, _Node | None]:
        """The first ``k`` elements and the rest (a run cut in two where ``k`` falls)."""
        if node is None:
            return None, None
        left = node.left.size if node.left is not None else 0
        if k <= left:
            a, b = cls._split(node.left, k)
            return a, cls._renew(node, b, node.right)
        if k >= left + node.count:
            a, b = cls._split(node.right, k - left - node.count)
            return cls._renew(node, node.left, a), b
        head = k - left
        a = _Node(node.left, None, node.item, head, node.prio)
        b = _Node(None, node.right, node.item, node.count - head, node.prio)
        return a, b

    @classmethod
    def _merge(cls, a: _Node | None, b: _Node | None) -> _Node | None:
        if a is None:
            return b
        if b is None:
            return a
        if a.prio >= b.prio:
            return cls._renew(a, a.left, cls._merge(a.right, b))
        return cls._renew(b, cls._merge(a, b.left), b.right)

