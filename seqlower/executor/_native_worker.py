"""OpenVINO or tract in a child process (one per runtime), so that a native crash is an
error report instead of a dead parent. Same protocol as ``_ort_worker``.

    python -m seqlower.executor._native_worker openvino|tract
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import numpy as np

from seqlower.executor._ort_worker import protocol_streams, serve

_TRACT_TYPES = {
    np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.float64): "f64",
    np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64",
    np.dtype(np.bool_): "bool",
}


class _OpenVINO:
    def __init__(self) -> None:
        import openvino as ov

        self.core = ov.Core()
        self.version = ov.__version__

    def load(self, data: bytes, nested_loops: bool) -> Any:
        model = self.core.read_model(model=data)
        loaded: dict[str, Any] = {"data": data, "compiled": {}, "dynamic": None, "why": "", "per_shape": nested_loops}
        try:
            loaded["dynamic"] = self.core.compile_model(model, "CPU")
        except RuntimeError as e:
            # Its CPU plugin fails some dynamic-shape models that it compiles for concrete
            # shapes (quirk "dynamic-compile"): run() compiles per input shapes then.
            loaded["why"] = " ".join(str(e).split())[-120:]
        return loaded

    def run(self, loaded: Any, names: list[str], feeds: dict[str, Any]) -> tuple[list[Any], list[str]]:
        # One compiled model per input shape signature where it has nested Loops: those keep
        # state from a run with other shapes (quirk "stale-state-across-shapes"). Any other
        # is compiled once, as its users run it (a compile is 0.5 s of a fixture's case).
        sig = tuple((n, np.shape(feeds[n])) for n in names) if loaded["per_shape"] or loaded["why"] else ()
        notes = []
        compiled = loaded["compiled"].get(sig)
        if compiled is None:
            if loaded["dynamic"] is not None:
                compiled, loaded["dynamic"] = loaded["dynamic"], None
            elif loaded["why"]:
                compiled = self._static(loaded["data"], names, feeds)
            else:
                compiled = self.core.compile_model(self.core.read_model(model=loaded["data"]), "CPU")
            loaded["compiled"][sig] = compiled
        if loaded["why"]:
            notes.append(f"OpenVINO did not compile the model for dynamic shapes ({loaded['why']}); compiled for these input shapes")
        # By port, not by name: OpenVINO drops inputs nothing reads and can rename an input
        # that feeds an output directly (quirk "input-renamed"); a port keeps every name.
        request = {}
        for port in compiled.inputs:
            hit = _fed(port, names)
            if hit is None:
                raise KeyError(f"no input fed for OpenVINO's input {sorted(port.get_names())}")
            request[port] = feeds[hit]
        result = compiled(request)
        # OpenVINO keeps the outputs in the model's order (it may rename them).
        return [np.asarray(result[o]) for o in compiled.outputs], notes

    def _static(self, data: bytes, names: list[str], feeds: dict[str, Any]) -> Any:
        model = self.core.read_model(model=data)
        shapes = {port: list(np.shape(feeds[hit])) for port in model.inputs if (hit := _fed(port, names)) is not None}
        model.reshape(shapes)
        return self.core.compile_model(model, "CPU")


def _fed(port: Any, names: list[str]) -> str | None:
    """The feed name among ``names`` that an OpenVINO port answers to."""
    return next((n for n in names if n in port.get_names()), None)


class _Tract:
    def __init__(self) -> None:
        import tract

        self.tract = tract
        self.version = tract.version() if callable(getattr(tract, "version", None)) else "tract"

    def load(self, data: bytes, nested_loops: bool) -> Any:
        fd, path = tempfile.mkstemp(suffix=".onnx")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        model = self.tract.onnx().load(path)
        return {"path": path, "plans": {}, "inputs": [model.input_name(i) for i in range(model.input_count())],
                "defaults": _input_defaults(data)}

    def run(self, loaded: Any, names: list[str], feeds: dict[str, Any]) -> list[Any]:
        # tract takes an input that has an initializer as that constant (quirk
        # "initializer-input-constant"): it is no input of its model, and a value other
        # than the default would be ignored, so it is refused.
        for n in names:
            if n not in loaded["inputs"] and n in loaded["defaults"]:
                if not np.array_equal(np.asarray(feeds[n]), loaded["defaults"][n]):
                    raise ValueError(f"tract takes input '{n}' as its initializer, a constant: "
                                     "a value other than the default cannot be given")
        names = [n for n in loaded["inputs"] if n in feeds]
        # tract plans for concrete input shapes: one plan per shape signature.
        # (not np.ascontiguousarray: it turns a scalar into a [1] array)
        arrays = [np.asarray(feeds[n], order="C") for n in names]
        sig = tuple((a.dtype.str, a.shape) for a in arrays)
        plan = loaded["plans"].get(sig)
        if plan is None:
            model = self.tract.onnx().load(loaded["path"])
            for i, a in enumerate(arrays):
                if a.dtype not in _TRACT_TYPES:
                    raise TypeError(f"tract takes no {a.dtype} input")
                dims = ",".join(str(d) for d in a.shape)
                model.set_input_fact(i, f"{dims},{_TRACT_TYPES[a.dtype]}" if dims else _TRACT_TYPES[a.dtype])
            plan = model.into_model().into_runnable()
            loaded["plans"][sig] = plan
        return [self._numpy(r) for r in plan.run(arrays)]

    def _numpy(self, r: Any) -> np.ndarray:
        # tract types a shape-derived integer as TDim, which its Python API does not hand
        # out (profile quirk "shape-output"); converted to int64 it is the same numbers.
        try:
            return r.to_numpy()
        except self.tract.TractError as e:
            if "TDim" not in str(e):
                raise
            return r.convert_to(self.tract.DatumType.I64).to_numpy()


def _input_defaults(data: bytes) -> dict[str, np.ndarray]:
    """The main graph's inputs that have an initializer, and its value."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load_from_string(data).graph
    declared = {i.name for i in graph.input}
    return {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name in declared}


def main() -> None:
    inp, out = protocol_streams()
    runtime = {"openvino": _OpenVINO, "tract": _Tract}[sys.argv[1]]()
    serve(
        inp, out, lambda msg: msg["key"],
        lambda msg: (runtime.load(msg["model"], msg.get("nested_loops", True)), {"notes": [], "version": runtime.version}),
        lambda loaded, msg: runtime.run(loaded, msg["inputs"], msg["feeds"]),
        # OpenVINO names the failing node and why on its 5th to 7th lines.
        error_lines=8,
    )


if __name__ == "__main__":
    main()
