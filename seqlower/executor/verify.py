"""Verifying that two models compute the same numbers on the same inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from seqlower.errors import ExecutionError, SeqlowerError
from seqlower.executor.compare import OutputReport, compare_values
from seqlower.executor.inputs import DEFAULT_SEQ_LEN, Port, synthesize_inputs
from seqlower.executor.runner import Executor
from seqlower.io.models import ModelSource
from seqlower.options import TRIPS_EXCEEDED_KEY

__all__ = ["SampleReport", "VerifyReport", "verify"]


@dataclass
class SampleReport:
    index: int
    source: str
    status: str  # "equal" | "different" | "lowered failed" | "original failed"
    outputs: list[OutputReport] = field(default_factory=list)
    error: str = ""
    # With ``verify(keep=True)``, for a sample that differs or that the lowered model
    # failed: its inputs, and each model's outputs (None where it failed).
    feeds: dict[str, Any] | None = field(default=None, repr=False)
    expected: dict[str, Any] | None = field(default=None, repr=False)
    actual: dict[str, Any] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "source": self.source,
            "status": self.status,
            "error": self.error,
            "outputs": [o.to_json() for o in self.outputs],
        }


@dataclass
class VerifyReport:
    backend: str
    samples: list[SampleReport]
    notes: list[str]
    interface_error: str = ""
    # Why the backend could not load the first model (it then proves nothing either way).
    not_run: str = ""
    # The ports of the two models (with ``verify(keep=True)``): where kept samples go.
    ports: tuple[list[Any], list[Any], list[Any]] | None = field(default=None, repr=False)

    @property
    def compared(self) -> int:
        return sum(s.status in ("equal", "different", "lowered failed") for s in self.samples)

    @property
    def equivalent(self) -> bool:
        return not self.interface_error and self.compared > 0 and all(
            s.status in ("equal", "original failed") for s in self.samples
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "backend": self.backend,
            "compared": self.compared,
            "interface_error": self.interface_error,
            "not_run": self.not_run,
            "notes": self.notes,
            "samples": [s.to_json() for s in self.samples],
        }


def verify(
    original: ModelSource,
    lowered: ModelSource,
    *,
    inputs: list[dict[str, Any]] | None = None,
    samples: int = 3,
    seed: int = 0,
    dims: dict[str, int] | None = None,
    seq_len: int = DEFAULT_SEQ_LEN,
    backend: str = "reference",
    lowered_backend: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    keepdims_policy: str = "auto",
    ort_opt_level: str = "all",
    progress: Callable[[int, int], None] | None = None,
    keep: bool = False,
    check: bool = True,
) -> VerifyReport:
    """Run both models on the given inputs (or ``samples`` synthesized ones) and compare.

    A sample the original rejects says nothing about the lowering and is not counted;
    at least one sample must be compared for the models to be called equivalent.
    ``progress(done, total)`` is called before each sample. ``keep``: the inputs and both
    outputs of every sample that differs or that the lowered model fails stay on its
    report (``SampleReport.feeds``, ``expected``, ``actual``), to be saved.
    """
    report = VerifyReport(backend if lowered_backend in (None, backend) else f"{backend} vs {lowered_backend}", [], [])
    pair = _executors(report, original, lowered, backend, lowered_backend or backend, keepdims_policy, ort_opt_level,
                      check)
    if pair is None:
        return report
    a, b = pair
    if keep:
        report.ports = (a.inputs, a.outputs, b.outputs)
    # A lowering bounded by --max-trips / --dim-max says at run time when a Loop needed more.
    flag = next((p.value for p in b.proto.metadata_props if p.key == TRIPS_EXCEEDED_KEY), None)
    if flag is not None and flag not in {p.name for p in b.outputs}:
        flag = None
    ports, sizes = _synthesis(a, b, dims)
    feeds_list = (
        [(f"given #{i}", f) for i, f in enumerate(inputs)]
        if inputs
        else [(f"seed {seed + i}", synthesize_inputs(ports, seed + i, sizes, seq_len)) for i in range(samples)]
    )
    for index, (source, feeds) in enumerate(feeds_list):
        if progress is not None:
            progress(index, len(feeds_list))
        sample = SampleReport(index, source, "equal")
        report.samples.append(sample)
        expected, actual = _run_sample(report, sample, a, b, feeds, flag, rtol, atol)
        if keep and sample.status in ("different", "lowered failed"):
            sample.feeds, sample.expected, sample.actual = feeds, expected, actual
    return report


def _synthesis(a: Executor, b: Executor, dims: dict[str, int] | None) -> tuple[list[Port], dict[str, int]]:
    """The ports samples are drawn from, and the symbolic dims' sizes: the original's,
    unless the lowered model was specialized to fixed shapes (``lower --input-shape``,
    ``--fix-dim``), whose own ports then give them (its fixed dims over ``dims``)."""
    if b.abi is None or not b.abi.fixed:
        return a.inputs, dict(dims or {})
    # The fixed shapes themselves, not the lowered model's declared ones: for OpenVINO its
    # dims of 0 are named (quirk static-empty-input), yet it computes for 0 only.
    shapes = b.abi.fixed.get("shapes", {})
    return [_with_shape(p, shapes[p.name]) if p.name in shapes else p for p in a.inputs], \
        {**(dims or {}), **b.abi.fixed.get("dims", {})}


def _with_shape(port: Port, dims: list[int]) -> Port:
    """``port`` with its tensor's (a sequence's or optional's: its elements') shape ``dims``."""
    tp = onnx.TypeProto()
    tp.CopyFrom(port.type)
    inner = tp
    while inner.WhichOneof("value") in ("sequence_type", "optional_type"):
        inner = inner.sequence_type.elem_type if inner.WhichOneof("value") == "sequence_type" \
            else inner.optional_type.elem_type
    shape = inner.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = int(d)
    return Port(port.name, tp)


def _executors(report: VerifyReport, original: ModelSource, lowered: ModelSource, backend: str, lowered_backend: str,
               keepdims_policy: str, ort_opt_level: str, check: bool = True) -> tuple[Executor, Executor] | None:
    """Both models loaded, with the same inputs and every output of the first in the
    second; else None, and ``report`` says why."""
    # A model the backend refuses (onnxruntime rejects what the reference runs, such as a
    # Slice with repeated axes) is not equivalent there: a gate must not pass it.
    try:
        a = Executor(original, backend=backend, keepdims_policy=keepdims_policy, ort_opt_level=ort_opt_level, check=check)
    except ExecutionError as e:
        report.not_run = f"{backend} cannot load the first model: {e}"
        return None
    try:
        b = Executor(lowered, backend=lowered_backend, keepdims_policy=keepdims_policy, ort_opt_level=ort_opt_level,
                     check=check)
    except ExecutionError as e:
        report.interface_error = f"{lowered_backend} refuses the second model: {e}"
        return None
    a_in, b_in = [p.name for p in a.inputs], [p.name for p in b.inputs]
    b_out = {p.name for p in b.outputs}
    if sorted(a_in) != sorted(b_in):
        report.interface_error = f"inputs differ: {a_in} vs {b_in}"
        return None
    if missing := [p.name for p in a.outputs if p.name not in b_out]:
        report.interface_error = f"the second model lacks outputs {missing}"
        return None
    return a, b


def _run_sample(report: VerifyReport, sample: SampleReport, a: Executor, b: Executor, feeds: dict[str, Any],
                flag: str | None, rtol: float | None, atol: float | None,
                ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """One sample through both models; ``sample`` says how they compared. Gives each
    model's outputs (None where it failed)."""
    try:
        expected = a.run(feeds)
    except SeqlowerError as e:
        sample.status, sample.error = "original failed", str(e)
        return None, None
    _add_notes(report, expected.notes, "original")
    try:
        actual = b.run(feeds)
    except SeqlowerError as e:
        sample.status, sample.error = "lowered failed", str(e)
        return expected.outputs, None
    _add_notes(report, actual.notes, "lowered")
    if flag is not None and bool(np.asarray(actual.outputs[flag]).any()):
        sample.status = "lowered failed"
        sample.error = (f"a Loop needed more steps than its bound (--max-trips / --dim-max): {flag} is true,"
                        " the outputs are those of the first steps")
        return expected.outputs, actual.outputs
    for port in a.outputs:
        out = compare_values(port.name, expected.outputs[port.name], actual.outputs[port.name], rtol, atol)
        sample.outputs.append(out)
        if not out.ok:
            sample.status = "different"
    return expected.outputs, actual.outputs


def _add_notes(report: VerifyReport, notes: list[str], which: str) -> None:
    for n in notes:
        text = f"{which}: {n}"
        if text not in report.notes:
            report.notes.append(text)
