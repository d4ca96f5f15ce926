"""seqlower's passes, each an ``onnx_ir`` pass, to compose with onnx_ir's and onnxscript's.

Installed as ``seqlower.passes`` (the folder sits at the top of the repository).
``build_passes(options)`` is the list ``seqlower lower`` runs; each class below can
also run alone, or inside a user's own ``onnx_ir.passes.PassManager``::

    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass
    from seqlower import LowerOptions
    from seqlower.passes import build_passes

    pm = ir.passes.PassManager([*build_passes(LowerOptions(target="openvino")),
                                RemoveUnusedNodesPass()])
    model = pm(ir.load("model.onnx")).model

Names are imported on first use, so importing one pass does not load the others.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "build_passes",
    "CarryStringScansPass",
    "CleanUpGraphPass",
    "FoldSequenceArgumentsPass",
    "FoldSequenceConstantsPass",
    "FoldStaticIfsPass",
    "ForgetIntermediateShapesPass",
    "GuardZeroTripLoopsPass",
    "InferSequenceShapesPass",
    "LoopsToScansPass",
    "LowerCumSumPass",
    "LowerFlatSequencesPass",
    "LowerOptionalsPass",
    "LowerPackedSequencesPass",
    "LowerReverseSequencePass",
    "LowerUnrolledSequencesPass",
    "LowerZipMapPass",
    "SeparateTupleOutputsPass",
    "UnfoldEmptyLoopStatesPass",
    "UnrollLoopsPass",
    "VectorizeLoopsPass",
]

_HOME = {
    "build_passes": ".schedule",
    "CarryStringScansPass": ".loops.carry_string_scans",
    "CleanUpGraphPass": ".folds.clean_up_graph",
    "FoldSequenceArgumentsPass": ".folds.fold_sequence_arguments",
    "FoldSequenceConstantsPass": ".folds.fold_sequence_constants",
    "FoldStaticIfsPass": ".folds.fold_static_ifs",
    "ForgetIntermediateShapesPass": ".quirks.forget_intermediate_shapes",
    "GuardZeroTripLoopsPass": ".quirks.guard_zero_trip_loops",
    "InferSequenceShapesPass": ".folds.infer_sequence_shapes",
    "LoopsToScansPass": ".loops.loops_to_scans",
    "LowerCumSumPass": ".quirks.lower_cumsum",
    "LowerFlatSequencesPass": ".lowering.lower_flat_sequences",
    "LowerOptionalsPass": ".lowering.lower_optionals",
    "LowerPackedSequencesPass": ".lowering.lower_packed_sequences",
    "LowerReverseSequencePass": ".lowering.lower_reverse_sequence",
    "LowerUnrolledSequencesPass": ".lowering.lower_unrolled_sequences",
    "LowerZipMapPass": ".lowering.lower_zip_map",
    "SeparateTupleOutputsPass": ".quirks.separate_tuple_outputs",
    "UnfoldEmptyLoopStatesPass": ".quirks.unfold_empty_loop_states",
    "UnrollLoopsPass": ".loops.unroll_loops",
    "VectorizeLoopsPass": ".loops.vectorize_loops",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
