"""The ``openvino`` and ``tract`` backends: real runtimes without sequence support, each in
a child process (see ``_native_worker``). They run tensor-only models: what seqlower
lowers for them."""

from __future__ import annotations

import hashlib
from typing import Any

import onnx

from seqlower.errors import ExecutionError
from seqlower.executor.onnxruntime_backend import WorkerProcess

__all__ = ["NativeBackend", "NATIVE_BACKENDS"]

NATIVE_BACKENDS = ("openvino", "tract")
_WORKERS: dict[str, WorkerProcess] = {}


def _worker(name: str) -> WorkerProcess:
    if name not in _WORKERS:
        _WORKERS[name] = WorkerProcess(name, name, ["seqlower.executor._native_worker", name])
    return _WORKERS[name]


class NativeBackend:
    def __init__(self, name: str, proto: onnx.ModelProto) -> None:
        assert name in NATIVE_BACKENDS
        self.name = name
        self._data = proto.SerializeToString()
        self._key = hashlib.sha256(self._data).hexdigest()
        # Every input, those with a default too: the executor feeds the default unless the
        # caller gave a value.
        self._inputs = [v.name for v in proto.graph.input]
        self._nested_loops = _nested_loops(proto.graph, False)
        self._load()

    def _load(self) -> None:
        reply = _worker(self.name).call({"op": "load", "key": self._key, "model": self._data,
                                         "nested_loops": self._nested_loops})
        if not reply["ok"]:
            raise ExecutionError(f"{self.name} cannot load the model: {reply['error']}")
        self.notes: list[str] = reply["notes"]
        self.version: str = reply["version"]

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        msg = {"op": "run", "key": self._key, "inputs": self._inputs, "feeds": feeds}
        reply = _worker(self.name).call(msg)
        if reply.get("missing"):
            self._load()
            reply = _worker(self.name).call(msg)
        if not reply["ok"]:
            raise ExecutionError(f"{self.name} failed: {reply['error']}")
        self.run_notes: list[str] = reply.get("notes", [])
        return reply["outputs"]


def _nested_loops(graph: onnx.GraphProto, in_loop: bool) -> bool:
    """Whether a Loop or Scan runs inside another's body (at any depth): OpenVINO compiles
    such a model once per input shape signature (the worker's quirk stale-state-across-shapes)."""
    for node in graph.node:
        looping = node.op_type in ("Loop", "Scan")
        if looping and in_loop:
            return True
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            if any(_nested_loops(g, in_loop or looping) for g in subs):
                return True
    return False
