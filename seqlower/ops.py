"""One place for what seqlower knows about each op it handles (DESIGN.md, "Core v2": the
op registry's facts layer). The analysis, the inventory, the folds and the target gaps
read these facts; the lowering rules per representation live with the passes, and a
test (tests/test_ops.py) holds the facts, the rules, the executor's kernels and the
program generator to agreeing.

Adding an op: register its facts here with ``op_facts``, a kernel in
``seqlower/executor/kernels/op_<name>.py`` (and ``KERNELS``), a rule for each
representation (``@rule(name, into)`` in ``passes/lower_*``), a transfer function in the analysis
(``@transfer(name)``), and a step in ``tests/program_generator.py``; tests/test_ops.py
says which one is missing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from seqlower import coverage

__all__ = ["OpFacts", "REGISTRY", "REDUCE_OPS", "TRANSFERS", "op_facts", "facts", "names", "makes_lists", "transfer"]

_F = TypeVar("_F", bound=Callable[..., Any])

# The ai.onnx reductions (axes an attribute, then an input: ReduceSum from 13, the others
# from 18). Not sequence ops: several targets get them wrong, and their rewrites and
# detectors share this list.
REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                        "ReduceLogSumExp", "ReduceMax", "ReduceMin", "ReduceProd"})


@dataclass(frozen=True)
class OpFacts:
    """What is true of an op whatever the representation.

    ``inputs``: which inputs are sequences (True) and which tensors (False); the last
    entry repeats for variadic inputs (None: not checked, e.g. control flow).
    ``control``: the input whose constant value decides the lowering (a split, a
    position, a trip count), which ``fold_sequence_arguments`` computes from static
    shapes. ``family``: "sequence", "optional", "control" (If, Loop, Identity carrying
    lists), "ml" (ai.onnx.ml ops making maps) or "tensor" (ReverseSequence).
    ``lowered``: a lowering to tensors exists for this op's sequence values. ``since``:
    the first opset of the op in its domain.
    """

    name: str
    family: str
    inputs: tuple[bool, ...] | None = None
    control: int | None = None
    lowered: bool = True
    domain: str = ""
    since: int = 1


REGISTRY: dict[str, OpFacts] = {}


def op_facts(name: str, family: str, **kwargs: object) -> OpFacts:
    """Register ``name``'s facts (once)."""
    if name in REGISTRY:
        raise ValueError(f"{name} is registered twice")
    f = OpFacts(name, family, **kwargs)  # type: ignore[arg-type]
    REGISTRY[name] = f
    return f


# The analysis's transfer function of each op (``seqlower.analysis.analyzer``): what the op's
# output lists are, given its inputs'. Filled by ``@transfer``.
TRANSFERS: dict[str, Callable[..., None]] = {}


def transfer(name: str) -> Callable[[_F], _F]:
    """Register the decorated analyzer method as ``name``'s transfer function (once). An
    op with facts here, or Scan, which has none (no list crosses it: it is kept)."""
    def register(fn: _F) -> _F:
        if name not in REGISTRY and name != "Scan":
            raise ValueError(f"a transfer function for {name}, which has no facts in the op registry")
        if name in TRANSFERS:
            raise ValueError(f"two transfer functions for {name}")
        point = f"transfer:{name}"

        @functools.wraps(fn)
        def counted(analyzer: Any, node: Any, label: str) -> None:
            coverage.hit(point, label)  # (seqlower.coverage: the test of a flag while it is off)
            fn(analyzer, node, label)

        TRANSFERS[name] = counted
        return fn
    return register


def facts(name: str) -> OpFacts | None:
    return REGISTRY.get(name)


def makes_lists(name: str) -> bool:
    """A sequence, optional or map op (not control flow that may carry lists)."""
    f = REGISTRY.get(name)
    return f is not None and f.family in ("sequence", "optional", "ml")


def names(family: str | None = None, *, lowered: bool | None = None, domain: str | None = "") -> frozenset[str]:
    """The registered op names, filtered by family, by whether they are lowered, and by
    domain (None: any)."""
    return frozenset(
        n for n, f in REGISTRY.items()
        if (family is None or f.family == family) and (lowered is None or f.lowered == lowered)
        and (domain is None or f.domain == domain)
    )


op_facts("SplitToSequence", "sequence", inputs=(False,), control=1, since=11)
op_facts("SequenceEmpty", "sequence", inputs=(), since=11)
op_facts("SequenceConstruct", "sequence", inputs=(False,), since=11)
op_facts("SequenceInsert", "sequence", inputs=(True, False, False), control=2, since=11)
op_facts("SequenceErase", "sequence", inputs=(True, False), control=1, since=11)
op_facts("SequenceAt", "sequence", inputs=(True, False), control=1, since=11)
op_facts("SequenceLength", "sequence", inputs=(True,), since=11)
op_facts("ConcatFromSequence", "sequence", inputs=(True,), since=11)
op_facts("SequenceMap", "sequence", inputs=(True, True), since=17)
op_facts("Identity", "control", since=1)
op_facts("If", "control", since=1)
op_facts("Loop", "control", control=0, since=1)
op_facts("Optional", "optional", since=15)
op_facts("OptionalHasElement", "optional", since=15)
op_facts("OptionalGetElement", "optional", since=15)
# Folded (constants) and, for targets without it, lowered by lower_reverse_sequence;
# it makes no sequence value.
op_facts("ReverseSequence", "tensor", lowered=False, since=10)
# Its maps are lowered only where they leave the model (lower_zip_map).
op_facts("ZipMap", "ml", lowered=False, domain="ai.onnx.ml", since=1)
