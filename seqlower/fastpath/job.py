"""A model read for lowering, lowered, and written or handed back: the one road the API
(``seqlower.lower``) and the CLI (``seqlower lower``) both take.

    job = Job.read("model.onnx")      # a path, the bytes of a model, or a ModelProto
    report = job.lower(LowerOptions(target="openvino"))
    job.stage("out.onnx").commit()    # written beside the destination, then renamed
    proto = job.model()               # or the lowered model as one ModelProto

Reading checks the model as ``read_model_held`` does (an invalid one raises ModelError)
and holds its big weights out of the proto as stubs; lowering touches only the sequence
region (``seqlower.fastpath.pipeline.lower_proto_with_report``); the weights come back from their
bytes when the model is written or handed back. The lowering core itself
(``seqlower.lowering``) knows nothing of files, stubs or regions. ``lower`` is the API's
``seqlower.lower``.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import onnx

from seqlower.collector import fewer_collections
from seqlower.errors import LoweringDefect, ModelWarning, SeqlowerError
from seqlower.io.check import PROTOBUF_LIMIT, InferredTypes
from seqlower.io.models import StagedModel, read_model_held, stage_model, with_weights
from seqlower.options import LowerOptions
from seqlower.report import LowerReport
from seqlower.io.weights import Weights

__all__ = ["Job", "lower"]


class Job:
    def __init__(self, proto: onnx.ModelProto, weights: Weights | None, inferred: InferredTypes,
                 base_dir: str | None, label: str) -> None:
        self.proto = proto  # as read (stubs in place of held weights); lowered in place
        self.weights = weights
        self.base_dir = base_dir
        self.label = label
        self.lowered: Any = None  # ModelProto (the region way: still with stubs) or ir.Model
        self.report: LowerReport | None = None
        self._inferred = inferred

    @classmethod
    def read(cls, source: str | os.PathLike | bytes | onnx.ModelProto, *, base_dir: str | None = None) -> Job:
        """Read and check a model (ModelError: unreadable or invalid). ``base_dir``: the
        folder of its external data, for bytes or a ModelProto (a path's own folder
        otherwise). A ModelProto is read from its bytes, its weights held, as a file is
        (one past protobuf's 2 GiB has no bytes: it is read as it is, weights in place);
        the caller's is never changed."""
        inferred = InferredTypes()
        if isinstance(source, onnx.ModelProto) and source.ByteSize() < PROTOBUF_LIMIT:
            source = source.SerializeToString()
        if isinstance(source, bytes | onnx.ModelProto):
            label = "<model>"
        else:
            label = os.fspath(source)
            base_dir = base_dir or str(Path(source).parent.absolute())
        # (a proto loaded without its external data, and no folder: the data stays external)
        proto, weights = read_model_held(source, types=inferred, base_dir=base_dir, unplaced=base_dir is None)
        return cls(proto, weights, inferred, base_dir, label)

    def lower(self, options: LowerOptions | None = None) -> LowerReport:
        """Lower the model (once); the report of what was done and what stays. With
        ``options.validate`` (the default), what is lowered ran against the original
        first, and a web whose lowering fails or differs stays as it was (reported)."""
        from seqlower.fastpath.pipeline import lower_proto_with_report

        assert self.lowered is None, "a Job lowers once"
        options = options or LowerOptions()
        original = _copy(self.proto) if options.validate else None
        if original is not None:
            from seqlower.fastpath.validate import prepare

            prepare()
        failure = None
        try:
            self.lowered, self.report = lower_proto_with_report(
                self.proto, options, base_dir=self.base_dir, label=self.label,
                inferred=self._inferred, weights=self.weights)
        except LoweringDefect as e:
            if original is None:
                raise
            failure = str(e)
        except SeqlowerError:
            raise
        except Exception as e:  # a pass's own failure: a defect, not the input's
            if original is None:
                raise
            failure = f"internal error: {type(e).__name__}: {e}"
        self._inferred = InferredTypes()  # (released: it holds a typed copy of the graph)
        if original is not None:
            start = time.perf_counter()
            self._validate(original, options, failure)
            if self.report.validation and "seconds" not in self.report.validation:
                self.report.validation["seconds"] = round(time.perf_counter() - start, 4) + \
                    self.report.validation.pop("region_seconds", 0.0)
            self._validate_on_target(original, options)
        return self.report  # type: ignore[return-value]

    def _validate_on_target(self, original: onnx.ModelProto, options: LowerOptions) -> None:
        """The lowered model on the target's own runtime (seqlower.fastpath.validate.on_target):
        a failure there is a gap of the target, named before the file is written."""
        from seqlower.fastpath import validate
        from seqlower.targets import Gap

        if not self.report.tensor_only or (self.weights is not None
                                           and self.weights.held_bytes() > validate.MAX_WEIGHT_BYTES):
            return
        start = time.perf_counter()
        source = with_weights(original, self.weights)
        result = validate.on_target(source, self.model(), options)
        if result is None:
            return
        self.report.validation["target"] = {**result.to_json(scope="model"),
                                            "seconds": round(time.perf_counter() - start, 4)}
        self.report.notes.extend(result.notes)
        if result.failure is not None:
            why = f"validation on {result.backend}: the lowered model fails or differs there ({result.failure})"
            if validate.original_runs_on_target(source, options):
                # Never worse than the original: it runs there (the runtime runs its
                # sequence ops), the lowering does not; it is written as it was.
                why += f"; the original runs on {result.backend}: kept as it was"
                target = self.report.validation.get("target")
                self.lowered, self.report = original, validate.unchanged_report(original, why)
                self.report.validation["target"] = target
                warnings.warn(f"{self.label}: {why}; the model is written as it was", ModelWarning, stacklevel=3)
                return
            self.report.gaps = [*self.report.gaps, Gap("model", self.label, "main", why)]
            warnings.warn(f"{self.label}: {why}", ModelWarning, stacklevel=3)

    def _validate(self, original: onnx.ModelProto, options: LowerOptions, failure: str | None) -> None:
        """Hold the lowering to the original (seqlower.fastpath.validate); where it fails,
        lower again with the failing web kept, each web alone first, then all of them;
        where nothing validates, the model stays as it was."""
        from dataclasses import replace

        from seqlower.fastpath import validate

        if self.weights is not None and self.weights.held_bytes() > validate.MAX_WEIGHT_BYTES:
            if failure is not None:
                raise LoweringDefect(failure)
            self.report.notes.append("validation skipped: the weights are too big to run here; use --verify")
            return
        source = with_weights(original, self.weights)
        alone = self.report.validation if failure is None else {}
        if alone.get("failure"):
            failure = alone["failure"]
        elif alone.get("compared") or alone.get("whole"):
            # The region alone ran and matched (the rest of the model is untouched), or it
            # is nearly the whole model and proved nothing, as the model would: its
            # seconds were spent inside the lowering.
            self.report.validation["seconds"] = alone.pop("region_seconds", 0.0)
            alone.pop("whole", None)
            if not alone.get("compared"):
                self.report.notes.append("validation proved nothing: the original rejected every sample")
            return
        if failure is None:
            result = validate.run_validation(source, self.model(), options)
            if result.failure is None:
                self.report.validation = result.to_json()
                self.report.notes.extend(result.notes)
                return
            failure = result.failure
        why = f"validation: the lowering failed or differed ({failure}); kept as it was"
        webs = validate.sequence_webs(source)
        tries: list[set[str] | None] = [*(webs if 1 < len(webs) <= validate.MAX_WEBS_TRIED else []), None]
        for keep in tries:
            marked = _copy(source)
            validate.mark_kept(marked, keep, why)
            retry = Job.read(marked, base_dir=self.base_dir)
            try:
                retry.lower(replace(options, validate=False))
            except SeqlowerError:
                continue
            except Exception:  # noqa: BLE001 - another defect: the next try keeps more
                continue
            result = validate.run_validation(source, retry.model(), options)
            if result.failure is None:
                self.proto, self.weights, self.lowered, self.report = retry.proto, retry.weights, retry.lowered, retry.report
                self.report.validation = {**result.to_json(), "kept": why}
                self.report.notes.append(why)
                warnings.warn(f"{self.label}: {why}", ModelWarning, stacklevel=3)
                return
        self.lowered, self.report = original, validate.unchanged_report(original, why)
        warnings.warn(f"{self.label}: {why}; the model is written as it was", ModelWarning, stacklevel=3)

    def model(self) -> onnx.ModelProto:
        """The lowered model as one ModelProto, its weights back in place: the bytes
        ``stage`` writes (weights external on input stay external, with their locations)."""
        return with_weights(self.lowered, self.weights)

    def stage(self, path: str | os.PathLike) -> StagedModel:
        """The lowered model written beside ``path`` (``model_io.stage_model``): commit it
        once it has been checked, or discard it."""
        return stage_model(self.lowered, path, self.weights)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def lower(model: Any, *, base_dir: str | None = None, **kwargs: Any) -> Any:
    """Lower a model; returns the same kind it was given (ModelProto or onnx_ir.Model).

    A ModelProto takes the CLI's road (``Job``: read and checked as a file is, weights held
    as stubs, the region lowered and validated, the weights' bytes put back); the caller's
    is not changed. An onnx_ir.Model is lowered whole, in place (the core, no region, no
    optimizer, no validation). A model with external data needs none of it to be lowered: weights are
    passed through untouched (they stay external, with their locations). ``base_dir``, the
    folder the model was loaded from, lets small external constants (split sizes,
    positions) be read and folded; without it they are treated as known only at run time.
    """
    with fewer_collections():
        if isinstance(model, onnx.ModelProto):
            job = Job.read(model, base_dir=base_dir)
            job.lower(LowerOptions(**kwargs))
            return job.model()
        from seqlower._deferred import onnx_ir as ir
        from seqlower.fastpath.pipeline import lower_with_report

        if base_dir is not None:
            ir.external_data.set_base_dir(model.graph, base_dir)
        return lower_with_report(model, LowerOptions(**kwargs))[0]
