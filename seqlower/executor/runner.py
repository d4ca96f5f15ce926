"""Running one model on a backend, through the model-boundary ABI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnx import numpy_helper

from seqlower.errors import ExecutionError
from seqlower.executor.abi import Abi, read_abi
from seqlower.executor.inputs import Port
from seqlower.executor.kernels import KernelConfig
from seqlower.executor.values import normalize
from seqlower.io.models import ModelSource, read_model_proto

__all__ = ["BACKENDS", "Executor", "RunResult"]

from seqlower.options import BACKENDS  # noqa: E402


@dataclass
class RunResult:
    outputs: dict[str, Any]
    notes: list[str] = field(default_factory=list)


class Executor:
    """One model, ready to run on one backend.

    ``inputs``/``outputs`` are the model's ports as the user sees them: for a lowered
    model carrying ``seqlower.abi``, the original sequence/optional ports, converted to
    and from their tensors on every run (``use_abi=False`` shows the raw tensors).
    """

    def __init__(
        self,
        model: ModelSource,
        *,
        backend: str = "reference",
        keepdims_policy: str = "auto",
        ort_opt_level: str = "all",
        use_abi: bool = True,
        check: bool = True,
    ) -> None:
        if backend not in BACKENDS:
            raise ExecutionError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        # (check=False: a model just checked, as lower's validation runs the original and
        # what it lowered: parsed, not checked and inferred again)
        self.proto = read_model_proto(model, check=check)
        self.abi: Abi | None = read_abi(self.proto) if use_abi else None
        graph = self.proto.graph
        self.raw_inputs = _raw_inputs(self.proto)
        # Inputs with an initializer (IR >= 4): defaults the caller may override. They may
        # be fed; unfed, every backend is given the default, so all run the same graph.
        # Below IR 4 every initializer is listed as an input and is a constant
        # (onnxruntime refuses a feed for one).
        declared = {v.name for v in graph.input} if self.proto.ir_version >= 4 else set()
        self.defaults: dict[str, Any] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name in declared}
        self.raw_outputs = [Port(v.name, v.type) for v in graph.output]
        self.inputs = self._logical(self.raw_inputs, self.abi.inputs if self.abi else {})
        self.outputs = self._logical(self.raw_outputs, self.abi.outputs if self.abi else {})
        self.config = KernelConfig(keepdims_policy)
        self.backend_name = backend
        if backend == "reference":
            from seqlower.executor.reference import ReferenceBackend

            self._backend: Any = ReferenceBackend(self.proto, self.config)
            self._load_notes: list[str] = []
        elif backend == "onnxruntime":
            from seqlower.executor.onnxruntime_backend import OnnxruntimeBackend

            self._backend = OnnxruntimeBackend(self.proto, ort_opt_level)
            self._load_notes = list(self._backend.notes)
        else:
            from seqlower.executor.native_backend import NativeBackend

            self._backend = NativeBackend(backend, self.proto)
            self._load_notes = list(self._backend.notes)

    @staticmethod
    def _logical(raw: list[Port], entries: dict) -> list[Port]:
        by_tensor = {t: e for e in entries.values() for t in e.tensors.values()}
        ports, seen = [], set()
        raw_names = {p.name for p in raw}
        for p in raw:
            entry = by_tensor.get(p.name)
            if entry is None:
                ports.append(p)
            elif entry.name not in seen:
                seen.add(entry.name)
                ports.append(Port(entry.name, entry.logical_type()))
        for e in entries.values():
            if missing := [t for t in e.tensors.values() if t not in raw_names]:
                raise ExecutionError(f"seqlower.abi maps {e.name!r} to {missing}, which the graph does not have")
        return ports

    def run(self, feeds: dict[str, Any]) -> RunResult:
        names = [p.name for p in self.inputs]
        if missing := [n for n in names if n not in feeds]:
            raise ExecutionError(f"missing value for input {missing[0]!r}")
        if extra := sorted(set(feeds) - set(names) - self.defaults.keys()):
            raise ExecutionError(f"{extra[0]!r} is not an input of the model (inputs: {', '.join(names)})")
        physical: dict[str, Any] = {k: v for k, v in self.defaults.items() if k not in feeds}
        for name, value in feeds.items():
            value = normalize(value)
            if self.abi and name in self.abi.inputs:
                physical.update(self.abi.inputs[name].pack(value))
            else:
                physical[name] = value
        before = len(self.config.notes)
        raw = self._backend.run(physical)
        by_name = {p.name: normalize(v) for p, v in zip(self.raw_outputs, raw)}
        outputs: dict[str, Any] = {}
        for port in self.outputs:
            if self.abi and port.name in self.abi.outputs:
                outputs[port.name] = self.abi.outputs[port.name].unpack(by_name)
            else:
                outputs[port.name] = by_name[port.name]
        return RunResult(outputs, self._load_notes + self.config.notes[before:] + list(getattr(self._backend, "run_notes", [])))


def _raw_inputs(proto: onnx.ModelProto) -> list[Port]:
    graph = proto.graph
    inits = {i.name for i in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    return [Port(v.name, v.type) for v in graph.input if v.name not in inits]


def ports_of(model: Any, check: bool = True) -> list[Port]:
    """The inputs a caller feeds ``model`` (through its ABI), without loading a backend."""
    proto = read_model_proto(model, check=check)
    abi = read_abi(proto)
    return Executor._logical(_raw_inputs(proto), abi.inputs if abi else {})
