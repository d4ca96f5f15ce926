"""Every runtime quirk seqlower knows, registered once: what rewrites it, what names the
nodes it hits, which ops it touches and whether it reaches past the sequence region.

A target's profile (``seqlower/targets/NAME.toml``) says which quirks the runtime has, in
its own words; this table says what seqlower does about each. The schedule
(``passes/schedule.py``), the region way (``seqlower/fastpath/regions.py``), the re-run after
folding and ``check --target`` (``seqlower/targets/quirks/``) all read it, so a quirk
cannot be rewritten on one road and forgotten on another. ``tests/test_quirk_registry.py``
fails when a profile names an id that is not here, or one that has no rewrite, no
detector and no word on how else it is handled.

The table is data (importing it loads no pass: ``lower`` of a model with nothing to
lower reads it to decide there is nothing). A rewrite is named ``"module:callable"``
under ``seqlower.passes``: a pass class built with no argument, or a function
``(options, target) -> list of passes``. A detector is named ``"module:function"`` under
``seqlower.targets.quirks``: it gives (node, graph path, why) for every node the quirk hits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seqlower import ops

__all__ = ["FIXED_SHAPE_LOOPS", "QUIRKS", "QUIRK_OPS", "Quirk", "PHASES", "relevant_ops"]

# Where a rewrite runs, after the rounds: "final" (in table order), "after-drop" (after
# the empty operands of the unrolled lists' joins are dropped, as it pads joins), and
# "after-inference" (after the final inference, whose dims it reads).
PHASES = ("final", "after-drop", "after-inference")

# Quirks of a target that runs only Loops of fixed shapes (no scan output over a run-time
# trip count, carried values keep their shapes): given --max-trips or --dim-max, the
# rounds bound the other Loops into predicated steps (passes/loops/bound_loops.py).
FIXED_SHAPE_LOOPS = frozenset({"trt-loop-scan-length", "trt-loop-carried-shape"})


@dataclass(frozen=True)
class Quirk:
    id: str
    rewrite: str | None = None
    phase: str = "final"
    # Run again after the optimizer's constant folding, which undoes it.
    again: str | None = None
    # Every node of these ops is the rewrite's to change: the region takes them in.
    ops: tuple[str, ...] = ()
    # The rewrite reads nodes anywhere in the model (of ``ops``, or any node when there are
    # none): a region cut out of the model cannot hold it.
    whole_model: bool = False
    detector: str | None = None
    # Neither rewrite nor detector: how else it is handled, as "lowering: ...",
    # "executor: ..." or "values: ..." (it depends on values, not on nodes).
    handled: str | None = None


_REDUCE = tuple(sorted(ops.REDUCE_OPS))

_TABLE = [
    # -- rewrites, in the order they run -----------------------------------------------
    Quirk("empty-constant-loop-state", rewrite="schedule:empty_loop_states", again="schedule:empty_loop_states_again",
          ops=("Loop",), detector="values:_loops_from_empty_constants"),
    Quirk("stale-zero-trip-scans", rewrite="quirks.slice_stale_scans:SliceStaleScansPass", ops=("Loop",)),
    Quirk("zero-element-loop-state", detector="values:_zero_element_loop_states"),
    Quirk("loop-assumes-an-iteration", rewrite="quirks.guard_zero_trip_loops:GuardZeroTripLoopsPass", ops=("Loop",),
          detector="values:_loops_growing_from_a_row"),
    # (not region-wide: the empty constants are the lowerings' own, in the region)
    Quirk("empty-constant", rewrite="quirks.empty_constants_as_constant_of_shape:EmptyConstantsAsConstantOfShapePass",
          again="quirks.empty_constants_as_constant_of_shape:EmptyConstantsAsConstantOfShapePass",
          detector="values:_empty_constant_readers"),
    Quirk("split-tuple-output", rewrite="quirks.separate_tuple_outputs:SeparateTupleOutputsPass", whole_model=True),
    Quirk("nonzero-layout", rewrite="quirks.nonzero_by_topk:NonZeroByTopKPass", ops=("NonZero",)),
    # (the Slices a Split becomes and the CumSum of its run-time bounds come before the
    # passes that fix what onnx2torch reads wrong in them)
    Quirk("no-split-18", rewrite="quirks.split_to_slices:SplitToSlicesPass", ops=("Split",)),
    Quirk("no-allowzero", rewrite="quirks.reshape_without_allowzero:ReshapeWithoutAllowzeroPass", ops=("Reshape",)),
    Quirk("empty-shape-float", rewrite="quirks.cast_empty_shapes:CastEmptyShapesPass", ops=("Shape",)),
    Quirk("constant-list-value", rewrite="quirks.constant_values_as_tensors:ConstantValuesAsTensorsPass", ops=("Constant",)),
    Quirk("cumsum-exclusive-empty", rewrite="quirks.inclusive_cumsums:InclusiveCumSumsPass", ops=("CumSum",)),
    Quirk("cumsum-reverse-default", rewrite="quirks.spell_out_cumsum_direction:SpellOutCumSumDirectionPass", ops=("CumSum",)),
    Quirk("range-step-sign", rewrite="quirks.clamp_range_limits:ClampRangeLimitsPass", ops=("Range",)),
    Quirk("reduce-axes-attribute-ignored", rewrite="quirks.reductions_as_sums:for_openvino",
          ops=("ReduceL1", "ReduceLogSum", "ReduceLogSumExp"), detector="values:_integer_log_reductions"),
    Quirk("no-reduce-18", rewrite="quirks.reductions_as_sums:for_onnx2torch",
          ops=("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceMean"), detector="values:_reductions_from_18"),
    # (before the final inference, which types what the rules write; again after the fold,
    # which makes more shapes constants)
    Quirk("no-converter", rewrite="legalize:legalize_nodes", again="legalize:legalize_nodes",
          ops=("Identity", "Reshape", "ReduceMax", "ReduceMin", "ReduceProd"), detector="values:_without_converter"),
    # (tract's product of nothing is 1 already)
    Quirk("reduce-empty-axis", rewrite="quirks.pad_reduced_axes:for_empty_axes", ops=tuple(sorted(ops.REDUCE_OPS - {"ReduceProd"}))),
    Quirk("reduce-extremes-finite", rewrite="quirks.pad_reduced_axes:for_extremes", ops=("ReduceMax", "ReduceMin")),
    Quirk("expand-zero-dim", rewrite="quirks.fold_empty_expands:FoldEmptyExpandsPass", ops=("Expand",)),
    Quirk("empty-slice-pushed-up", rewrite="quirks.empty_slices_as_constant_of_shape:EmptySlicesAsConstantOfShapePass", ops=("Slice",)),
    Quirk("integer-division-by-zero", rewrite="quirks.guard_integer_division:GuardIntegerDivisionPass", ops=("Div", "Mod")),
    Quirk("reduce-negative-axis-empty", rewrite="quirks.positive_reduction_axes:PositiveReductionAxesPass",
          ops=(*_REDUCE, "ArgMax", "ArgMin"), detector="values:_negative_axes_of_unknown_rank"),
    Quirk("if-run-time-shape", rewrite="loops.ifs_to_selects:for_run_time_shapes", ops=("If",), detector="branches:_if_run_time_shapes"),
    # (last of the op rewrites: the rewrites above may leave Ifs)
    Quirk("one-if-per-graph", rewrite="quirks.ifs_in_scans:IfsInScansPass", ops=("If",), detector="branches:_ifs_past_the_first"),
    # TensorRT (from its parser's documentation: tools/trt_profile.py): the ops it runs
    # only on some types, then the branches' names.
    Quirk("trt-op-types", rewrite="quirks.supported_types:for_target", ops=("CumSum", "NonZero"),
          detector="tensorrt:_unsupported_types"),
    Quirk("trt-if-branches", rewrite="quirks.distinct_branch_outputs:DistinctBranchOutputsPass", ops=("If",),
          detector="tensorrt:_if_branches"),
    # (whole-model: a user's Squeeze of an empty slice anywhere; the rewrites above write some)
    Quirk("squeeze-empty", rewrite="quirks.squeezes_as_reshapes:SqueezesAsReshapesPass", ops=("Squeeze", "Unsqueeze"),
          whole_model=True),
    # (whole-model: a user's Transpose of an empty tensor, and the stacked lists' own)
    Quirk("transpose-empty", rewrite="quirks.transposes_as_reshapes:TransposesAsReshapesPass", ops=("Transpose",), whole_model=True),
    # (whole-model: a user's Slice to a computed end anywhere; the lowerings and the
    # rewrites above write many)
    Quirk("slice-run-time-end", rewrite="quirks.slices_as_compress:with_compress_lowered", ops=("Slice",), whole_model=True),
    # (after every rewrite above, which pad by Tile below opset 14: squeeze-empty's)
    Quirk("tile-nop-broadcast", rewrite="quirks.tiles_as_constant_of_shape:TilesAsConstantOfShapePass", ops=("Tile",)),
    # (whole-model: any constant may be a bound; after the rewrites, which write some;
    # again after folding: a folded bound is a new constant)
    Quirk("int64-narrowed", rewrite="quirks.narrow_int64_sentinels:NarrowInt64SentinelsPass",
          again="quirks.narrow_int64_sentinels:NarrowInt64SentinelsPass", whole_model=True),
    # (whole-model: a user's Shape anywhere; last, as every rewrite above writes Shapes)
    Quirk("shape-expr", rewrite="quirks.shapes_as_tensors:ShapesAsTensorsPass", ops=("Shape",), whole_model=True,
          detector="tvm:_tvm_shape_expressions"),
    # (after every rewrite, which join by Concat; again after folding, which leaves operands)
    Quirk("concat-after-run-time-empty", rewrite="quirks.pad_empty_concat_operands:PadEmptyConcatOperandsPass",
          again="quirks.pad_empty_concat_operands:PadEmptyConcatOperandsPass", phase="after-drop", ops=("Concat",)),
    # (after every rewrite, which may each write the same computation again, and after the
    # inference, whose dims decide which rows are the same)
    Quirk("duplicate-computations", rewrite="schedule:merge_duplicates", phase="after-inference"),
    Quirk("symbolic-value-info", rewrite="quirks.forget_intermediate_shapes:ForgetIntermediateShapesPass",
          phase="after-inference", whole_model=True),
    # (after the inference: the values inside keep the shapes it found)
    Quirk("static-empty-input", rewrite="quirks.empty_inputs_as_symbolic:empty_inputs", phase="after-inference",
          again="quirks.empty_inputs_as_symbolic:empty_inputs_again", whole_model=True, detector="shapes:_openvinos_folds_of_empty_inputs"),
    # -- named before anything runs -------------------------------------------------------
    Quirk("if-branch-facts", detector="branches:_if_branch_facts_all",
          handled="lowering: Loops made Scans for it take the steps they can prove (loop_fallbacks)"),
    Quirk("data-dependent-shape", detector="shapes:_data_dependent_shapes"),
    Quirk("data-sized-slice", detector="shapes:_data_sized_slices"),
    Quirk("zero-product-data-sized", detector="shapes:_zero_products_of_data_sized"),
    Quirk("pad-of-shape", detector="shapes:_pads_of_shapes"),
    Quirk("slice-end-max", detector="shapes:_computed_slice_ends"),
    Quirk("reverse-slice-empty", detector="shapes:_reversed_slices_of_maybe_empty"),
    Quirk("dynamic-split", detector="tvm:_tvm_dynamic_splits"),
    Quirk("concat-opaque-shape", detector="tvm:_tvm_concats_of_opaque_shapes"),
    Quirk("if-output-shape", detector="tvm:_tvm_shapes_of_if_outputs"),
    Quirk("reshape-dynamic-rank", detector="shapes:_dynamic_rank_reshapes"),
    Quirk("zero-size-scan-output", detector="values:_zero_size_scan_outputs"),

    Quirk("no-strings", detector="values:_string_tensors"),
    Quirk("trt-opset-range", detector="tensorrt:_opsets_out_of_range"),
    # (a Constant node's value is weights to its parser, as an initializer is: the
    # lowerings' constant axes pass; only computed ones are named)
    Quirk("trt-axes-initializer", detector="tensorrt:_computed_axes"),
    Quirk("trt-loop-scan-length", detector="tensorrt:_dynamic_scan_lengths"),
    Quirk("trt-loop-carried-shape", detector="tensorrt:_growing_loop_states"),
    Quirk("trt-constant-attributes", detector="tensorrt:_constant_attributes"),
    Quirk("trt-topk", detector="tensorrt:_topks"),
    Quirk("trt-uint8-io", detector="tensorrt:_uint8_inside"),
    Quirk("string-input", detector="values:_unread_string_inputs"),
    # -- handled otherwise ----------------------------------------------------------------
    Quirk("nested-scan-state", handled="lowering: no Loop is made a Scan inside a Scan for it (loop_fallbacks)"),
    Quirk("string-scan-outputs", handled="lowering: every target gets string scans carried (CarryStringScansPass)"),
    # (the lowerings take string rows by Slice or GatherND; this rewrites the model's own)
    Quirk("string-gather-rows", rewrite="quirks.string_gathers_as_gather_nd:StringGathersAsGatherNDPass",
          ops=("Gather",), detector="values:_string_row_gathers"),
    Quirk("keepdims-squeeze", handled="lowering: the auto keepdims policy follows it"),
    Quirk("if-sequences-before-13", handled="lowering: no If returns a sequence once lowered"),
    Quirk("empty-scan", handled="lowering: a Scan that may run no step sits in an If (loops_to_scans)"),
    Quirk("zero-trip-scan-shape", handled="lowering: every lowering scans [1, *elem] steps and reshapes them"),
    Quirk("where-shape-condition", handled="lowering: shape-expr's rewrite makes what Shape gives a tensor first"),
    Quirk("dynamic-compile", handled="executor: compiled for the run's concrete shapes when the dynamic model fails"),
    Quirk("stale-state-across-shapes", handled="executor: compiled once per input shape signature"),
    Quirk("input-renamed", handled="executor: inputs are fed by every name their port has"),
    Quirk("initializer-input-constant", handled="executor: fed the other inputs; a value other than the default is refused"),
    Quirk("shape-output", handled="executor: a TDim output is converted to int64"),
    Quirk("embedding-bag-mean-crash", handled="executor: the original's crash, with or without seqlower (its optimizer)"),
    Quirk("slice-list-index", handled="values: a warning of torch's, the numbers measured right"),
    Quirk("int64-as-int32", handled="values: int64 values past int32's range wrap; no node is wrong as such"),
    Quirk("integer-reductions-in-float32", handled="values: integer reductions past 2**24 round"),
    Quirk("reshape-empty", handled="values: empty only at the shapes it compiles for"),
    Quirk("trt-double", handled="values: DOUBLE runs in float32, clamped to +-FLT_MAX (its documentation's words)"),
]

QUIRKS: dict[str, Quirk] = {q.id: q for q in _TABLE}
assert len(QUIRKS) == len(_TABLE), "a quirk id registered twice"

# Target quirks whose rewrites apply to every node of their ops (this table's), so every
# such node belongs to the region.
QUIRK_OPS = {q.id: q.ops for q in QUIRKS.values() if q.rewrite and q.ops and not q.whole_model}


def relevant_ops(lacks: Iterable[str], quirks: Iterable[str] = ()) -> frozenset[str]:
    """Ops some pass rewrites: sequence and optional ops, ReverseSequence, what the target
    lacks (Loop and Scan too: unrolled, or made Scans) and, for a target with a quirk
    about an op, every node of it (``QUIRK_OPS``)."""
    every = {op for q in quirks if q in QUIRK_OPS for op in QUIRK_OPS[q]}
    return frozenset(ops.names("sequence") | ops.names("optional") | {"ReverseSequence"} | set(lacks) | every)
