"""The choices the CLI and the API share, in a module that imports nothing heavy, so
``seqlower --help`` starts without loading onnx, numpy or the passes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BACKENDS", "DEFAULT_MAX_UNROLL", "KEEPDIMS_POLICIES", "LowerOptions", "OPT_LEVELS", "TARGETS", "TRIPS_EXCEEDED_KEY"]

BACKENDS = ("reference", "onnxruntime", "openvino", "tract")
KEEPDIMS_POLICIES = ("auto", "spec", "onnxruntime")
OPT_LEVELS = ("disable", "basic", "extended", "all")
DEFAULT_MAX_UNROLL = 64
# metadata_props key naming the bool output a model lowered with --max-trips/--dim-max
# raises when a Loop needed more steps than its bound (passes/loops/bound_loops.py).
TRIPS_EXCEEDED_KEY = "seqlower.trips_exceeded"
TARGETS: tuple[str, ...] = tuple(sorted(p.stem for p in (Path(__file__).parent / "targets").glob("*.toml")))


@dataclass
class LowerOptions:
    """What ``seqlower lower`` is asked for; the pass schedule is built from it."""

    max_unroll: int = DEFAULT_MAX_UNROLL
    keepdims_policy: str = "auto"
    # False: every dynamic sequence takes the Flat representation, even where the
    # elements share one shape (Stacked); for comparisons and debugging.
    packed: bool = True
    # The runtime the model is for (seqlower/targets): ops it lacks are lowered too.
    target: str = "generic"
    # onnx's full checker after every pass, naming the pass that broke the model
    # (tests and fuzzing: it costs a serialization per pass).
    check_each_pass: bool = False
    # onnxscript's optimizer (constant folding, common subexpressions, identity removal)
    # on the lowered region, never on nodes seqlower did not write (--no-optimize).
    optimize: bool = True
    # For a target without Loop (or running only Loops of fixed shapes: tensorrt): a Loop
    # with a run-time trip count that nothing else removes (or that the target refuses) is unrolled into this many predicated steps (--max-trips), or into the
    # bound of the model input dim its trip count is read from (--dim-max NAME=N); the
    # output seqlower_trips_exceeded says when a run needed more.
    max_trips: int | None = None
    dim_max: dict[str, int] = field(default_factory=dict)
    # Shape specialization (--input-shape NAME=D0,D1,..., --fix-dim NAME=VALUE): the model
    # is lowered for these shapes only (passes/folds/specialize_shapes.py); what becomes
    # static folds, constant-trip Loops unroll within max_unroll, lists lower Unrolled.
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fixed_dims: dict[str, int] = field(default_factory=dict)
    # Validated lowering (seqlower/fastpath/validate.py): what lower writes is run against
    # the original first, and a web whose lowering fails or differs is kept as it was
    # (--no-validate skips it). The core (seqlower.lowering) never reads it: the job does.
    validate: bool = True

    @property
    def specialized(self) -> bool:
        return bool(self.input_shapes or self.fixed_dims)
