"""Folds and inference: what is known at compile time written as constants, shapes
inferred with sequences kept, and what the lowerings leave dead removed."""
