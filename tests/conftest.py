from __future__ import annotations

import functools
import importlib.util
import warnings

import onnx
import pytest

SEQUENCE_FAMILY = frozenset(
    {
        "SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceMap", "SequenceEmpty",
        "SequenceConstruct", "SequenceAt", "SequenceLength", "ConcatFromSequence", "ReverseSequence",
        "Optional", "OptionalHasElement", "OptionalGetElement",
    }
)

HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


def _ops(graph: onnx.GraphProto):
    for n in graph.node:
        yield n.op_type
        for a in n.attribute:
            if a.HasField("g"):
                yield from _ops(a.g)
            for g in a.graphs:
                yield from _ops(g)


def _touches_sequences(m: onnx.ModelProto) -> bool:
    typed = any(
        v.type.WhichOneof("value") in ("sequence_type", "optional_type")
        for v in list(m.graph.input) + list(m.graph.output)
    )
    return typed or bool(set(_ops(m.graph)) & SEQUENCE_FAMILY)


@functools.lru_cache(maxsize=1)
def sequence_backend_cases() -> tuple:
    """The ONNX backend node cases that touch sequences, optionals or ReverseSequence."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return tuple(c for c in cases if _touches_sequences(c.model))


requires_ort = pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is in the test extra: pip install -e '.[test]'")
