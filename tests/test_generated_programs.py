"""Property test: random sequence programs (tests/program_generator.py) with run-time
positions, dynamic dims, Loops and Ifs lower to tensor-only models that match the
original on both backends, and the model passes onnx's full checker after every pass
(a wrong declared shape is caught in the pass that wrote it). The second test draws the
Stage 7 shapes too (lists whose elements differ, front and middle inserts in loops,
SequenceMap in If branches, Loop > If > SequenceMap, a model input of unknown rank in one
program of four, whose lists go Flat with widths and ranks known at run time).
``python tools/fuzz_programs.py`` runs many more."""

from __future__ import annotations

import os
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlower.errors import ModelWarning
from tests.helpers import lower_checked
from tests.program_generator import generate

EXAMPLES = int(os.environ.get("SEQLOWER_GENERATED_PROGRAMS", "150"))


def _drawer(data):
    def draw(kind, *args):
        if kind == "int":
            return data.draw(st.integers(args[0], args[1]))
        return data.draw(st.sampled_from(args[0]))

    return draw


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_generated_program_lowers_and_matches(data):
    m, feeds = generate(_drawer(data))
    lower_checked(m, inputs=[feeds], check_each_pass=True)


@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_generated_program_with_stage7_shapes_lowers_and_matches(data):
    m, feeds = generate(_drawer(data), shapes="v2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)  # an input of unknown rank is accepted with one
        lower_checked(m, inputs=[feeds], check_each_pass=True)
