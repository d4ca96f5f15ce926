"""seqlower's executor: runs models with spec-exact sequence kernels (``reference``) or
onnxruntime in a child process (``onnxruntime``), and compares two models.

It imports nothing from ``passes`` or the lowering code: it is the judge of the
lowering, so it shares no code with it.
"""

from __future__ import annotations

from seqlower.executor.abi import ABI_KEY, AbiEntry, read_abi
from seqlower.executor.compare import OutputReport, Tolerance, compare_values, default_tolerance
from seqlower.executor.inputs import Port, load_inputs, parse_dims, save_values, synthesize_inputs
from seqlower.executor.kernels import KEEPDIMS_POLICIES, KernelConfig, KernelError
from seqlower.executor.runner import BACKENDS, Executor, RunResult
from seqlower.executor.values import TensorSeq, describe_value
from seqlower.executor.verify import SampleReport, VerifyReport, verify

__all__ = [
    "ABI_KEY",
    "AbiEntry",
    "BACKENDS",
    "Executor",
    "KEEPDIMS_POLICIES",
    "KernelConfig",
    "KernelError",
    "OutputReport",
    "Port",
    "RunResult",
    "SampleReport",
    "TensorSeq",
    "Tolerance",
    "VerifyReport",
    "compare_values",
    "default_tolerance",
    "describe_value",
    "load_inputs",
    "parse_dims",
    "read_abi",
    "save_values",
    "synthesize_inputs",
    "verify",
]
