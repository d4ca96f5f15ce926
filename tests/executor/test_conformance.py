"""Every ONNX backend node case touching sequences, optionals of sequences or
ReverseSequence: the reference backend reproduces the expected outputs."""

from __future__ import annotations

import pytest

from seqlower.executor import Executor, compare_values
from tests.conftest import requires_ort, sequence_backend_cases

CASES = sequence_backend_cases()
# onnxruntime has no bfloat16 ReverseSequence kernel: it refuses the model at load.
ORT_UNSUPPORTED = {"test_reversesequence_bfloat16"}


def test_the_case_list_is_complete():
    names = {c.name for c in CASES}
    assert len(CASES) >= 37
    for expected in ("test_loop16_seq_none", "test_sequence_map_extract_shapes", "test_split_to_sequence_nokeepdims",
                     "test_if_opt", "test_optional_get_element_optional_sequence", "test_reversesequence_bfloat16"):
        assert expected in names


def _check(case, backend):
    ex = Executor(case.model, backend=backend)
    for inputs, expected in case.data_sets:
        result = ex.run({p.name: v for p, v in zip(ex.inputs, inputs)})
        for port, want in zip(ex.outputs, expected):
            report = compare_values(port.name, want, result.outputs[port.name], case.rtol, case.atol)
            assert report.ok, f"{case.name}/{port.name}: {report.detail}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_backend_matches_expected(case):
    _check(case, "reference")


@requires_ort
@pytest.mark.parametrize("case", [c for c in CASES if c.name not in ORT_UNSUPPORTED], ids=lambda c: c.name)
def test_onnxruntime_backend_matches_expected(case):
    _check(case, "onnxruntime")


@requires_ort
def test_onnxruntime_refusal_is_a_clear_error():
    from seqlower.errors import ExecutionError

    case = next(c for c in CASES if c.name == "test_reversesequence_bfloat16")
    with pytest.raises(ExecutionError, match="onnxruntime cannot load the model: .*bfloat16"):
        Executor(case.model, backend="onnxruntime")
