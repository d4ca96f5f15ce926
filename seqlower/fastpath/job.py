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
from pathlib import Path
from typing import Any

import onnx

from seqlower.collector import fewer_collections
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
        """Lower the model (once); the report of what was done and what stays."""
        from seqlower.fastpath.pipeline import lower_proto_with_report

        assert self.lowered is None, "a Job lowers once"
        self.lowered, self.report = lower_proto_with_report(
            self.proto, options or LowerOptions(), base_dir=self.base_dir, label=self.label,
            inferred=self._inferred, weights=self.weights)
        self._inferred = InferredTypes()  # (released: it holds a typed copy of the graph)
        return self.report

    def model(self) -> onnx.ModelProto:
        """The lowered model as one ModelProto, its weights back in place: the bytes
        ``stage`` writes (weights external on input stay external, with their locations)."""
        return with_weights(self.lowered, self.weights)

    def stage(self, path: str | os.PathLike) -> StagedModel:
        """The lowered model written beside ``path`` (``model_io.stage_model``): commit it
        once it has been checked, or discard it."""
        return stage_model(self.lowered, path, self.weights)


def lower(model: Any, *, base_dir: str | None = None, **kwargs: Any) -> Any:
    """Lower a model; returns the same kind it was given (ModelProto or onnx_ir.Model).

    A ModelProto takes the CLI's road (``Job``: read and checked as a file is, weights held
    as stubs, the region lowered, the weights' bytes put back); the caller's is not
    changed. An onnx_ir.Model is lowered whole, in place (the core, no region, no
    optimizer). A model with external data needs none of it to be lowered: weights are
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
