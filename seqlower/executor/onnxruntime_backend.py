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

__all__ = ["OnnxruntimeBackend", "OPT_LEVELS", "WorkerProcess", "prestart"]

from seqlower.options import OPT_LEVELS  # noqa: E402


class WorkerProcess:
    """One long-lived child running a native runtime; restarted after it dies."""

    def __init__(self, label: str, module: str, argv: list[str]) -> None:
        self.label, self.module, self.argv = label, module, argv
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            write_msg(proc.stdin, msg)
            return read_msg(proc.stdout)
        except (EOFError, BrokenPipeError, OSError):
            code = proc.wait()
            self._proc = None
            raise ExecutionError(f"{self.label} crashed ({_describe_exit(code)}){self._tail()}") from None

    def prestart(self) -> None:
        """Start the child now (its runtime's import overlaps what the caller does next)."""
        if (self._proc is None or self._proc.poll() is not None) and importlib.util.find_spec(self.module) is not None:
            self._start()

    def _start(self) -> None:
        if importlib.util.find_spec(self.module) is None:
            raise ExecutionError(f"the {self.label} backend needs {self.module}: pip install {self.module}")
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([sys.executable, "-m", *self.argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)

    def _tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        self._stderr.seek(0)
        self._stderr.truncate()
        return f": {lines[-1].strip()[:200]}" if lines else ""


_Worker = WorkerProcess("onnxruntime", "onnxruntime", ["seqlower.executor._ort_worker"])


def prestart() -> None:
    """Start onnxruntime's worker ahead of its first model (lower starts it before it
    lowers, so that the worker's import of onnxruntime overlaps the lowering)."""
    _Worker.prestart()


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
