"""The op registry (seqlower/ops.py) agrees with everything that has per-op knowledge:
onnx's schemas, the analysis's transfer functions, each representation's rules, the
executor's kernels and the program generator. Adding an op without one of them fails
here, naming what is missing."""

from __future__ import annotations

import random

import onnx
import pytest

from seqlower import ops
from seqlower.analysis import _Analyzer
from seqlower.executor.kernels import KERNELS
from seqlower.passes import lower_flat_sequences, lower_optionals, lower_packed_sequences, lower_unrolled_sequences
from tests.program_generator import generate


@pytest.mark.parametrize("name", sorted(ops.REGISTRY))
def test_each_op_exists_in_onnx_from_the_registered_opset(name):
    f = ops.REGISTRY[name]
    schema = onnx.defs.get_schema(name, max_inclusive_version=30, domain=f.domain)
    assert min(s.since_version for s in onnx.defs.get_all_schemas_with_history()
               if s.name == name and s.domain == f.domain) == f.since
    if f.inputs:
        assert len(f.inputs) <= max(schema.max_input, 1), name


def test_every_op_has_an_executor_kernel():
    kernels = {k.__name__ for k in KERNELS}
    assert set(ops.REGISTRY) == kernels


def test_every_lowered_op_has_a_transfer_function_and_a_rule_per_representation():
    lowered = ops.names("sequence", lowered=True) | ops.names("control", lowered=True)
    missing_transfer = sorted(n for n in lowered if not hasattr(_Analyzer, f"_t_{n}"))
    assert missing_transfer == []
    for module in (lower_flat_sequences, lower_packed_sequences):
        assert set(module.RULES) == lowered, module.__name__
    # Unrolled lists never cross a Loop (a trip count makes the length unknown).
    assert set(lower_unrolled_sequences.RULES) == lowered - {"Loop"}
    assert set(lower_optionals.RULES) >= ops.names("optional")


def test_the_program_generator_draws_every_sequence_op_and_nothing_unregistered():
    drawn: set[str] = set()
    rng = random.Random(0)

    def draw(kind, *args):
        return rng.randint(args[0], args[1]) if kind == "int" else rng.choice(args[0])

    for _ in range(200):
        m, _ = generate(draw, shapes="v2")
        graphs = [m.graph]
        while graphs:
            g = graphs.pop()
            for n in g.node:
                drawn.add(n.op_type)
                graphs += [a.g for a in n.attribute if a.HasField("g")]
    sequence_ops = ops.names("sequence")
    assert sequence_ops <= drawn, sorted(sequence_ops - drawn)
    assert {"If", "Loop"} <= drawn
    listy = {op for op in drawn if "Sequence" in op or op.startswith("Optional")}
    assert listy <= set(ops.REGISTRY), sorted(listy - set(ops.REGISTRY))
