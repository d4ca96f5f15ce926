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
    "CarryStringScansPass": ".carry_string_scans",
    "CleanUpGraphPass": ".clean_up_graph",
    "FoldSequenceArgumentsPass": ".fold_sequence_arguments",
    "FoldSequenceConstantsPass": ".fold_sequence_constants",
    "FoldStaticIfsPass": ".fold_static_ifs",
    "ForgetIntermediateShapesPass": ".forget_intermediate_shapes",
    "GuardZeroTripLoopsPass": ".guard_zero_trip_loops",
    "InferSequenceShapesPass": ".infer_sequence_shapes",
    "LoopsToScansPass": ".loops_to_scans",
    "LowerCumSumPass": ".lower_cumsum",
    "LowerFlatSequencesPass": ".lower_flat_sequences",
    "LowerOptionalsPass": ".lower_optionals",
    "LowerPackedSequencesPass": ".lower_packed_sequences",
    "LowerReverseSequencePass": ".lower_reverse_sequence",
    "LowerUnrolledSequencesPass": ".lower_unrolled_sequences",
    "LowerZipMapPass": ".lower_zip_map",
    "SeparateTupleOutputsPass": ".separate_tuple_outputs",
    "UnfoldEmptyLoopStatesPass": ".unfold_empty_loop_states",
    "UnrollLoopsPass": ".unroll_loops",
    "VectorizeLoopsPass": ".vectorize_loops",
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
