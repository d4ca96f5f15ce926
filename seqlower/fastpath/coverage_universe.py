"""Every decision point of the lowering (``seqlower.coverage``), with the contexts it can
be reached in: what the fuzzers' coverage report (``tools/coverage.py``) counts against.
Above the passes, as it reads their rule tables."""

from __future__ import annotations

import seqlower.passes.lowering.lower_flat_sequences  # noqa: F401 - each registers its rules
import seqlower.passes.lowering.lower_optionals  # noqa: F401
import seqlower.passes.lowering.lower_packed_sequences  # noqa: F401
import seqlower.passes.lowering.lower_unrolled_sequences  # noqa: F401
from seqlower.coverage import CONTEXTS, REPRESENTATIONS, UNREACHABLE
from seqlower.ops import TRANSFERS
from seqlower.passes.lowering.convert import REPRESENTATIONS as RULE_TABLES
from seqlower.passes.lowering.convert import rules
from seqlower.targets.registry import QUIRKS

__all__ = ["universe"]


def universe() -> dict[str, tuple[str, ...]]:
    """Every decision point, with the contexts it can be reached in."""
    # A function holding lists is inlined first (passes/lowering/inline_sequence_functions.py),
    # its lists then lowered where it was called; one onnx_ir cannot inline (it imports
    # another opset, or takes a graph attribute) is kept whole, every value in it "kept".
    # The points of a function are those two decisions.
    in_graphs = tuple(c for c in CONTEXTS if c != "function")
    points: dict[str, tuple[str, ...]] = {}
    points.update({f"transfer:{op}": in_graphs for op in sorted(TRANSFERS)})
    for into in sorted(RULE_TABLES):
        points.update({f"rule:{into}:{op}": in_graphs for op in sorted(rules(into))})
    points.update({f"repr:{r}": in_graphs for r in REPRESENTATIONS})
    points.update({"inline:function": ("model",), "inline:kept": ("model",)})
    for point in UNREACHABLE:
        points.pop(point, None)
    for quirk in QUIRKS.values():
        if quirk.rewrite:
            points[f"quirk:{quirk.id}"] = ("model",)
        if quirk.detector:
            points[f"detector:{quirk.id}"] = ("model",)
    return points
