"""Python's cyclic garbage collector, held back while a model is lowered.

Reading, lowering and writing a big model make millions of small objects that live until
the end (tuples, dicts, protobuf wrappers), and few cycles. The collector's default
thresholds start a collection every 700 new objects and a full one (a walk of every live
object) whenever the young ones pile up: on a 5,000-block chain that is a fifth of the
time, spent finding nothing (ten objects collected in all). Collections still run, a
hundred times less often; the thresholds come back when the work is done.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["fewer_collections"]

_THRESHOLDS = (100_000, 20, 20)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
