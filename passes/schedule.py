"""The pass schedule ``seqlower lower`` runs: rounds of (infer, fold, lower) to a
fixpoint, then the target's rewrites and a final inference. It lives with the passes;
the API (``seqlower.lower``) and the CLI only build it from ``LowerOptions``."""

from __future__ import annotations

import importlib
import logging

import onnx_ir as ir
from onnx_ir.passes.common import CommonSubexpressionEliminationPass, DeduplicateInitializersPass

from seqlower import coverage
from seqlower.passes.loops.bound_loops import BoundLoopsPass, TripBounds, loop_of_fixed_shapes
from seqlower.passes.loops.carry_string_scans import CarryStringScansPass
from seqlower.passes.folds.clean_up_graph import CleanUpGraphPass
from seqlower.passes.lowering.inline_sequence_functions import InlineSequenceFunctionsPass
from seqlower.passes.folds.fold_row_gathers import FoldRowGathersPass
from seqlower.passes.folds.fold_zero_trip_loops import FoldZeroTripLoopsPass
from seqlower.passes.loops.counted_loops import CountedLoopsPass
from seqlower.passes.folds.fold_sequence_arguments import FoldSequenceArgumentsPass
from seqlower.passes.folds.fold_sequence_constants import FoldSequenceConstantsPass
from seqlower.passes.folds.fold_static_ifs import FoldStaticIfsPass
from seqlower.passes.quirks.guard_zero_trip_loops import GuardZeroTripLoopsPass
from seqlower.passes.loops.ifs_to_selects import IfsToSelectsPass
from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass
from seqlower.passes.loops.loops_to_scans import LoopsToScansPass
from seqlower.passes.quirks.lower_compress import LowerCompressPass
from seqlower.passes.quirks.lower_cumsum import LowerCumSumPass
from seqlower.passes.lowering.lower_flat_sequences import LowerFlatSequencesPass
from seqlower.passes.lowering.lower_optionals import LowerOptionalsPass
from seqlower.passes.lowering.lower_packed_sequences import LowerPackedSequencesPass
from seqlower.passes.lowering.lower_reverse_sequence import LowerReverseSequencePass
from seqlower.passes.lowering.lower_unrolled_sequences import LowerUnrolledSequencesPass
from seqlower.passes.lowering.lower_zip_map import LowerZipMapPass
from seqlower.passes.folds.drop_empty_concat_operands import DropEmptyConcatOperandsPass
from seqlower.passes.quirks.merge_equal_slices import MergeEqualSlicesPass
from seqlower.passes.folds.sink_transposes import SinkTransposesPass
from seqlower.passes.folds.specialize_shapes import SpecializeShapesPass
from seqlower.passes.quirks.unfold_empty_loop_states import UnfoldEmptyLoopStatesPass, has_constant_empty_state
from seqlower.passes.loops.unroll_constant_scans import UnrollConstantScansPass
from seqlower.passes.loops.unroll_loops import UnrollLoopsPass
from seqlower.passes.loops.vectorize_loops import VectorizeLoopsPass
from seqlower.passes.loops.vectorize_ragged_loops import VectorizeRaggedLoopsPass
from seqlower.analysis.analyzer import ANALYSIS_STASH_KEY
from seqlower.keys import LOOP_REASONS_KEY
from seqlower.io.models import check_model
from seqlower.targets.registry import FIXED_SHAPE_LOOPS, QUIRKS, relevant_ops
from seqlower.options import DEFAULT_MAX_UNROLL, LowerOptions
from seqlower.targets import Target, load_target

__all__ = ["MAX_ROUNDS", "CheckModelPass", "build_passes", "loop_fallbacks"]


# Each round can expose more static structure to the next (a lowered SequenceAt gives
# the next SplitToSequence a shape; an inlined SequenceMap body gives exact shapes), so
# the rounds repeat until nothing changes. Chains deeper than this are rare in exports.
MAX_ROUNDS = 16


class CheckModelPass(ir.passes.InPlacePass):
    """``inner``, then onnx's full checker whenever it changed the model, failing with the
    pass's name. With ``build_passes(..., check_each=True)`` every pass runs so, and a pass
    that writes a wrong declared shape is caught where it wrote it (tests and fuzzing); a
    pass that changed nothing left the model the last check passed."""

    def __init__(self, inner: ir.passes.PassBase) -> None:
        super().__init__()
        self.inner = inner

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = self.inner(model)
        if result.modified:
            check_model(model, f"the model after {type(self.inner).__name__}", what="fails the ONNX checker")
        return ir.passes.PassResult(model, result.modified)


def _checked(passes: list[ir.passes.PassBase]) -> list[ir.passes.PassBase]:
    return [CheckModelPass(p) for p in passes]


def build_passes(options: LowerOptions, *, check_each: bool = False,
                 inferred_after: bool = False) -> list[ir.passes.PassBase]:
    """The passes, in order: rounds of (infer, fold, lower Unrolled, clean up) to a
    fixpoint, then a final shape inference so every value is typed. ``check_each``:
    onnx's full checker after every pass (``CheckModelPass``). ``inferred_after``: the
    caller infers shapes after these passes whenever they rewrote the model (the
    optimizer's fold and inference on a region), so the final inference is left to it
    where no target rewrite after it reads the shapes it finds."""
    wrap = _checked if check_each else list
    target = load_target(options.target)
    rounds = Rounds(wrap(_round(options, target)), relevant=relevant_ops(target.lacks, dict(target.quirks)))
    final = wrap(_after_rounds(options, target, inferred_after))
    # What the rounds kept for a rank nothing could find is Flat with ranks known at run
    # time; then the rounds go on from there.
    runtime_ranks = wrap([LowerFlatSequencesPass(options.max_unroll, options.keepdims_policy, options.packed)])
    # A list crossing a model-local function's boundary is lowered where the call is.
    inline = wrap([InlineSequenceFunctionsPass()])
    specialize = wrap([SpecializeShapesPass(options.input_shapes, options.fixed_dims, options.keepdims_policy)]) \
        if options.specialized else []
    return [*specialize, *inline, rounds, ThenAgain(ir.passes.PassManager(runtime_ranks), rounds), *final]


def _round(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """One round: infer, fold, lower, clean up."""
    # Ops the target lacks that have a lowering, after the folds (a constant one folds).
    for_target: list[ir.passes.PassBase] = [LowerReverseSequencePass()] if "ReverseSequence" in target.lacks else []
    if "Compress" in target.lacks:
        for_target.append(LowerCompressPass())
    # Without Loop, constant-trip Loops become straight-line code first, so that the
    # sequences they carry are static for the lowerings after.
    # Specialized to fixed shapes, every Loop whose trip count became a constant is unrolled.
    unroll: list[ir.passes.PassBase] = [UnrollLoopsPass(options.max_unroll)] if "Loop" in target.lacks else []
    if options.specialized and "Loop" not in target.lacks:
        # A while loop over a dim that became a constant is counted, then unrolled (a Loop
        # that stays is no gap here: no reasons recorded).
        unroll = [CountedLoopsPass(), UnrollLoopsPass(options.max_unroll, select=_every_loop)]
    fold = FoldSequenceConstantsPass(options.keepdims_policy, options.max_unroll, options.packed)
    return [
        *unroll,
        LowerOptionalsPass(),
        InferSequenceShapesPass(options.keepdims_policy, leave_for=fold.params),
        FoldStaticIfsPass(),
        FoldSequenceArgumentsPass(),
        fold,
        # What the fold made constant (a list's length) decides more Ifs and Loops.
        FoldStaticIfsPass(),
        FoldZeroTripLoopsPass(),
        *for_target,
        LowerUnrolledSequencesPass(options.max_unroll, options.keepdims_policy),
        LowerPackedSequencesPass(options.max_unroll, options.keepdims_policy, options.packed),
        LowerFlatSequencesPass(options.max_unroll, options.keepdims_policy, options.packed, runtime_ranks=False),
        # The dynamic lowerings emit CumSum (element bounds): lowered after them.
        *([LowerCumSumPass()] if "CumSum" in target.lacks else []),
        # What stays a Loop (a run-time trip count) runs batched where its body allows,
        # else as a Scan where the target has one.
        *loop_fallbacks(target, TripBounds(options.max_trips, options.dim_max), options.max_unroll),
        # Without If, an If runs both branches.
        *([IfsToSelectsPass()] if "If" in target.lacks else []),
        CleanUpGraphPass(),
    ]


def _every_loop(node: ir.Node) -> bool:
    return True


def _not_of_fixed_shapes(node: ir.Node) -> bool:
    # (a Loop still carrying a list is left for the lowerings: it may lower to fixed shapes)
    body = node.attributes["body"].as_graph() if "body" in node.attributes else None
    if body is None or not all(isinstance(v.type, ir.TensorType) for v in (*body.inputs, *body.outputs)):
        return False
    return not loop_of_fixed_shapes(node)


def _after_rounds(options: LowerOptions, target: Target, inferred_after: bool) -> list[ir.passes.PassBase]:
    """What runs once after the rounds: the target's rewrites, and the final inference."""
    # onnxruntime stacks string scan outputs wrong; every target gets them carried. The
    # Transposes a batched map over a list cut along another axis writes cancel.
    final: list[ir.passes.PassBase] = [CarryStringScansPass(), SinkTransposesPass(), FoldRowGathersPass()]
    if "Loop" in target.lacks and "Scan" not in target.lacks:
        # A Loop made a Scan before its trip count was found constant (tract fails such a
        # Scan given no rows); before the rewrites below, which make Scans of their own.
        final.append(UnrollConstantScansPass(options.max_unroll))
    if not target.sequences:
        final.append(LowerZipMapPass())  # seq(map) outputs: no such type without sequences
    final += quirk_rewrites(target, options, "final")
    final.append(DropEmptyConcatOperandsPass())  # (the unrolled lists' empty starts)
    final += quirk_rewrites(target, options, "after-drop")
    final.append(CleanUpGraphPass())  # what the target's rewrites left unused
    after_inference = quirk_rewrites(target, options, "after-inference")
    if not inferred_after or after_inference:
        # (a whole-model onnx inference: 1.7 s of the 8.7 s of 3,000 run-time list edits)
        final.append(InferSequenceShapesPass(options.keepdims_policy))
    return final + after_inference


def quirk_rewrites(target: Target, options: LowerOptions, phase: str | None) -> list[ir.passes.PassBase]:
    """The passes of ``target``'s quirks' rewrites for ``phase``, or (``phase`` None) their
    runs again after folding, in the registry's order (``seqlower.targets.registry``)."""
    have = dict(target.quirks)
    passes: list[ir.passes.PassBase] = []
    for quirk in (q for q in QUIRKS.values() if q.id in have):
        ref = quirk.again if phase is None else quirk.rewrite if quirk.phase == phase else None
        if ref is None:
            continue
        module, name = ref.split(":")
        make = getattr(importlib.import_module(f"seqlower.passes.{module}"), name)
        made = [make()] if isinstance(make, type) else make(options, target)
        passes += [CountedPass(p, f"quirk:{quirk.id}") for p in made] if coverage.enabled() else made
    return passes


class CountedPass(ir.passes.InPlacePass):
    """``inner``, counted as the decision point ``point`` whenever it changes the model
    (seqlower.coverage: only while coverage is on)."""

    def __init__(self, inner: ir.passes.PassBase, point: str) -> None:
        super().__init__()
        self.inner, self.point = inner, point

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = self.inner(model)
        if result.modified:
            coverage.hit(self.point, "model")
        return ir.passes.PassResult(model, result.modified)


def empty_loop_states(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk empty-constant-loop-state's rewrite: the Loops with a constant empty state
    unrolled where they can be, the rest given the state built at run time."""
    return [UnrollLoopsPass(options.max_unroll, select=has_constant_empty_state), UnfoldEmptyLoopStatesPass()]


def empty_loop_states_again(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """After folding: it can make a Loop's trip count a constant too (TorchScript's len of a
    list of static length): such a Loop is unrolled, as before folding, and one it made run
    no iteration, reading the empty constants of a list lowered before its length was
    known, is its initial values; a Loop given a run-time state now may need its
    zero-trip guard too."""
    passes = [FoldZeroTripLoopsPass(), UnrollLoopsPass(options.max_unroll, select=has_constant_empty_state),
              UnfoldEmptyLoopStatesPass(), DropEmptyConcatOperandsPass()]
    if "loop-assumes-an-iteration" in dict(target.quirks):
        passes.append(GuardZeroTripLoopsPass())
    return passes


def merge_duplicates(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk duplicate-computations' rewrite: the same rows, then the same constants, so
    that the same computations have the same inputs (the bounds of the Slices merged)."""
    return [_MergeDuplicates(), CleanUpGraphPass()]


class _DeduplicateInitializersQuietly(DeduplicateInitializersPass):
    """onnx_ir's pass, without its warning for each initializer that is also a graph input
    (torch's keep_initializers_as_inputs): leaving an overridable default alone is right."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        log = logging.getLogger(DeduplicateInitializersPass.__module__)
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            return super().call(model)
        finally:
            log.setLevel(level)


class _MergeDuplicates(ir.passes.InPlacePass):
    """The same rows merged, then the same constants and computations, until nothing
    merges: the Slices of two Shapes of x are the same rows only once CSE made the two
    Shapes one (so that lowering the lowered model again changes nothing)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for _ in range(8):
            changed = False
            for p in (MergeEqualSlicesPass(), _DeduplicateInitializersQuietly(), CommonSubexpressionEliminationPass()):
                changed |= p(model).modified
            modified |= changed
            if not changed:
                break
        return ir.passes.PassResult(model, modified)


class Rounds(ir.passes.InPlacePass):
    """``passes`` in rounds until a round changes nothing, or no round could (a model the
    first round made tensor-only and free of subgraphs: the rounds after it would only
    run onnx's inference again, which the final pass does once). On a chain of 1,000
    split/map/concat blocks that is one round instead of three."""

    def __init__(self, passes: list[ir.passes.PassBase], relevant: frozenset[str]) -> None:
        super().__init__()
        self.passes = passes
        self.relevant = relevant
        self.rounds_run = 0  # of the last call (tests)
        self._typed_only = False  # the last round changed only types (the inference)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        model.meta.pop(ANALYSIS_STASH_KEY, None)  # one a pass before the rounds left
        self._typed_only = False
        try:
            for self.rounds_run in range(1, MAX_ROUNDS + 1):
                if not self._round(model):
                    break
                modified = True
                if not _work_left(model, self.relevant):
                    break
        finally:
            model.meta.pop(ANALYSIS_STASH_KEY, None)
        return ir.passes.PassResult(model, modified)

    def _round(self, model: ir.Model) -> bool:
        """One round; an analysis a pass left for the next (``keep_for_next_pass``) goes
        as soon as any pass changes the model, unless that pass left it (the inference
        leaves the analysis it wrote the model's shapes from).

        A round in which only the inference changed the model (it typed what the round
        before lowered) is followed by the passes before the inference alone: if they
        change nothing either, the inference would see the model it left, and every pass
        after it saw that model already and changed nothing (the third round of a model
        whose lowered Loops keep subgraphs: a whole-model inference and 15 walks).
        """
        modified = typed_only = False
        # (what the passes before the inference say of the Loops they keep, in a round that
        # turns out to change nothing, is not the last word: the passes after them said it)
        reasons = dict(model.meta.get(LOOP_REASONS_KEY, {})) if self._typed_only else None
        for p in self.passes:
            inference = isinstance(getattr(p, "inner", p), InferSequenceShapesPass)
            if inference and self._typed_only and not modified:
                self._typed_only = False
                if reasons is not None:
                    model.meta[LOOP_REASONS_KEY] = reasons
                return False
            before = model.meta.get(ANALYSIS_STASH_KEY)
            if p(model).modified:
                if model.meta.get(ANALYSIS_STASH_KEY) is before:
                    model.meta.pop(ANALYSIS_STASH_KEY, None)  # a pass that changed the model left none
                typed_only = inference if not modified else typed_only and inference
                modified = True
        self._typed_only = modified and typed_only
        return modified


def _work_left(model: ir.Model, relevant: frozenset[str]) -> bool:
    """Whether another round may change anything: a value that is not a tensor, an op
    some round pass rewrites, or a subgraph. onnx infers a graph without subgraphs in
    one forward run, so a second round finds nothing; a Loop body's shapes can need
    a second run (its inputs are typed by the first), and an If may have a constant
    condition a lowering left for the fold."""
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    for graph in graphs:
        if any(not isinstance(v.type, ir.TensorType | None) for v in graph.inputs):
            return True
        for node in graph:
            if node.domain not in ("", "ai.onnx") or node.op_type in relevant:
                return True  # ml maps and custom ops included: the passes judge them
            if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
                return True
            if any(v.type is not None and not isinstance(v.type, ir.TensorType) for v in node.outputs):
                return True
    return False


class ThenAgain(ir.passes.InPlacePass):
    """``first``, and ``then`` only when ``first`` changed the model."""

    def __init__(self, first: ir.passes.PassBase, then: ir.passes.PassBase) -> None:
        super().__init__()
        self.first = first
        self.then = then

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.first(model).modified:
            return ir.passes.PassResult(model, False)
        self.then(model)
        return ir.passes.PassResult(model, True)



def after_folding(options: LowerOptions) -> list[ir.passes.PassBase]:
    """The target's rewrites that constant folding undoes, to run again after it: an
    empty Loop state built at run time for OpenVINO has a static shape of size 0, which
    onnxscript's folding turns back into the constant OpenVINO fails on."""
    target = load_target(options.target)
    passes: list[ir.passes.PassBase] = []
    if "Loop" in target.lacks and "Scan" not in target.lacks:
        passes.append(UnrollConstantScansPass(options.max_unroll))  # (as in build_passes' final)
    # Folding makes a row's position a constant: onnxruntime miscomputes what reads it.
    passes.append(FoldRowGathersPass())
    return passes + quirk_rewrites(target, options, None)


def loop_fallbacks(target: Target, bounds: TripBounds | None = None,
                   max_unroll: int = DEFAULT_MAX_UNROLL) -> list[ir.passes.PassBase]:
    """For a target without Loop, what takes the Loops unrolling leaves: the batched body,
    else a Scan where the target has one, else (given ``bounds``) predicated steps. For a
    target that runs only Loops of fixed shapes, the Loops lowered to other shapes (a list
    carried and grown, scan outputs of a run-time length): unrolled where their trip count
    is a constant, else (given ``bounds``) predicated steps."""
    quirks = dict(target.quirks)
    if "Loop" not in target.lacks:
        if not FIXED_SHAPE_LOOPS & quirks.keys():
            return []
        refused = _not_of_fixed_shapes
        return [UnrollLoopsPass(max_unroll, select=refused), *([BoundLoopsPass(bounds, select=refused)] if bounds else [])]
    scans = [LoopsToScansPass(nested="nested-scan-state" not in quirks, known_steps="if-branch-facts" in quirks)] \
        if "Scan" not in target.lacks else []
    bounded = [BoundLoopsPass(bounds)] if bounds else []
    return [CountedLoopsPass(), VectorizeLoopsPass(), VectorizeRaggedLoopsPass(), *scans, *bounded]
