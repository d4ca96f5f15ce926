"""The ``model.meta`` and ``metadata_props`` keys the passes leave what they found under
(defined in the base layer, ``seqlower.keys``, which the analysis reads too; re-exported
here for code composing seqlower's passes in its own PassManager)."""

from seqlower.keys import (ABI_KEY, ANALYSIS_STASH_KEY, KEPT_ZIPMAPS_KEY, LEGALIZE_KEY, LOOP_REASONS_KEY, NOTES_KEY,
                           OPTIONAL_SEQUENCES_KEY, REPORT_KEY)

__all__ = ["ABI_KEY", "ANALYSIS_STASH_KEY", "KEPT_ZIPMAPS_KEY", "LEGALIZE_KEY", "LOOP_REASONS_KEY", "NOTES_KEY",
           "OPTIONAL_SEQUENCES_KEY", "REPORT_KEY"]
