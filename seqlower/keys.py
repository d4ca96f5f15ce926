"""Where the passes leave what they found for the report and for each other: keys of
``model.meta`` (in memory, never serialized) and of ``metadata_props`` (written). Public,
so code composing seqlower's passes in its own PassManager can read them."""

from __future__ import annotations

__all__ = ["ABI_KEY", "ANALYSIS_STASH_KEY", "KEPT_ZIPMAPS_KEY", "LOOP_REASONS_KEY", "NOTES_KEY", "OPEN_WHEN_EMPTY", "OPTIONAL_SEQUENCES_KEY", "REPORT_KEY",
           "RESERVED_NAMES_KEY", "LEGALIZE_KEY", "SHAPE_HIDDEN", "KEEP_KEY"]

# model.meta: every rewrite, a list of dicts {op, node, graph, into, how}.
REPORT_KEY = "seqlower.rewrites"
# model.meta: notes for the report (a list of strings), e.g. declared shapes a policy corrected.
NOTES_KEY = "seqlower.notes"
# metadata_props: the model-boundary mapping (docs/abi.md). The
# executor reads it with its own code: the judge shares nothing with the lowering.
ABI_KEY = "seqlower.abi"
# model.meta: optional-sequence model outputs (name -> present flag's name), left by
# lower_optionals for the lowering that writes the sequence payload's ABI entry.
OPTIONAL_SEQUENCES_KEY = "seqlower.optional_sequences"
# model.meta: {node label: why that Loop stays (it cannot be unrolled, or be a Scan)};
# the unrolling and the Scan pass write it, the report carries it.
LOOP_REASONS_KEY = "seqlower.loop_reasons"
# model.meta: {node label: why that ZipMap stays}.
KEPT_ZIPMAPS_KEY = "seqlower.kept_zipmaps"
# model.meta: an analysis a pass computed and then changed nothing with, for the next pass
# of the rounds to use (passes/schedule.py's Rounds drops it as soon as a pass changes
# the model). On 10,000 edits the fold and the Unrolled lowering read one analysis.
ANALYSIS_STASH_KEY = "seqlower.analysis_stash"

# model.meta: names a lowering must not take (a region's sub-model: the names the rest of
# the model keeps), so what it creates never collides when it is spliced back.
RESERVED_NAMES_KEY = "seqlower.reserved_names"

# metadata_props of a region's sub-model input that is a Loop's or a Scan's scan output in
# the model: after no iteration its trailing dims are whatever the runtime says.
OPEN_WHEN_EMPTY = "seqlower.open_when_empty"
# model.meta: the emitter rules of the target the model is lowered for (passes/legalize.py):
# every builder of a pass asks them before it writes an op, and writes another form of an
# op the target refuses.
LEGALIZE_KEY = "seqlower.legalize"
# Node names: the stem of what hides an OpenVINO value's shape (``Ops.shape_hidden`` named
# STEM, its Slice STEM_in): the rewrites that write it leave a value read through it alone,
# and check --target reads such a value as read right (targets/quirks/branches.py, values.py).
SHAPE_HIDDEN = "_shape_hidden"

# metadata_props of a sequence op: why its web must stay as it is (lower's validation ran
# the web's lowering against the original and it failed or differed: seqlower/fastpath/
# validate.py); the analysis keeps such a web, and the mark is removed from the output.
KEEP_KEY = "seqlower.keep"
