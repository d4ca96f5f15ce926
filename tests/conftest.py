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
    """The ONNX backend node cases that touch sequences, optionals or ReverseSequence.

    ``collect_testcases`` builds every node case onnx has (about 10 s: each case's expected
    outputs computed at import), in every xdist worker's collection. The few that touch
    sequences are kept in a file of this user's, keyed by onnx's version and this
    filter's source: one process builds them, the others (and later runs) read them."""
    import fcntl
    import hashlib
    import inspect
    import os
    import pickle
    import tempfile
    from pathlib import Path

    key = hashlib.sha256(f"{onnx.__version__}|{inspect.getsource(_touches_sequences)}|"
                         f"{sorted(SEQUENCE_FAMILY)}".encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"seqlower-tests-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    cache = folder / f"backend-cases-{key}.pickle"
    with open(folder / "backend-cases.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.exists() and folder.stat().st_uid == os.getuid():
            with open(cache, "rb") as f:
                return pickle.load(f)
        from onnx.backend.test.case.node import collect_testcases

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = tuple(c for c in collect_testcases(None) if _touches_sequences(c.model))
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(cases, f)
        os.replace(tmp, cache)
        return cases


requires_ort = pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is in the test extra: pip install -e '.[test]'")
