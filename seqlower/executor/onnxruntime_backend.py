"""The ``onnxruntime`` backend, run in a child process (see ``_ort_worker``)."""

from __future__ import annotations

import hashlib
import importlib.util
import signal
import subprocess
import sys
import tempfile
from typing import Any

import onnx

from seqlower.errors import ExecutionError
from seqlower.executor._ort_worker import read_msg, write_msg

__all__ = ["OnnxruntimeBackend", "OPT_LEVELS"]

OPT_LEVELS = ("disable", "basic", "extended", "all")


class _Worker:
    """One long-lived child; restarted after it dies."""

    _proc: subprocess.Popen | None = None
    _stderr: Any = None

    @classmethod
    def call(cls, msg: dict[str, Any]) -> dict[str, Any]:
        if cls._proc is None or cls._proc.poll() is not None:
            cls._start()
        proc = cls._proc
        try:
            write_msg(proc.stdin, msg)
            return read_msg(proc.stdout)
        except (EOFError, BrokenPipeError, OSError):
            code = proc.wait()
            cls._proc = None
            raise ExecutionError(f"onnxruntime crashed ({_describe_exit(code)}){cls._tail()}") from None

    @classmethod
    def _start(cls) -> None:
        if importlib.util.find_spec("onnxruntime") is None:
            raise ExecutionError("the onnxruntime backend needs onnxruntime: pip install onnxruntime")
        cls._stderr = tempfile.TemporaryFile()
        cls._proc = subprocess.Popen(
            [sys.executable, "-m", "seqlower.executor._ort_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=cls._stderr,
        )

    @classmethod
    def _tail(cls) -> str:
        if cls._stderr is None:
            return ""
        cls._stderr.seek(0)
        lines = [ln for ln in cls._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        cls._stderr.seek(0)
        cls._stderr.truncate()
        return f": {lines[-1].strip()[:200]}" if lines else ""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class OnnxruntimeBackend:
    name = "onnxruntime"

    def __init__(self, proto: onnx.ModelProto, opt_level: str = "all") -> None:
        if opt_level not in OPT_LEVELS:
            raise ValueError(f"opt_level must be one of {OPT_LEVELS}")
        self._data = proto.SerializeToString()
        self._key = hashlib.sha256(self._data).hexdigest()
        self._opt = opt_level
        self._load()

    def _load(self) -> None:
        reply = _Worker.call({"op": "load", "key": self._key, "opt_level": self._opt, "model": self._data})
        if not reply["ok"]:
            raise ExecutionError(f"onnxruntime cannot load the model: {reply['error']}")
        self.notes: list[str] = reply["notes"]
        self.version: str = reply["version"]

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        msg = {"op": "run", "key": self._key, "opt_level": self._opt, "feeds": feeds}
        reply = _Worker.call(msg)
        if reply.get("missing"):  # the worker was restarted since the model was loaded
            self._load()
            reply = _Worker.call(msg)
        if not reply["ok"]:
            raise ExecutionError(f"onnxruntime failed: {reply['error']}")
        return reply["outputs"]
