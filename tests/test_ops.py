"""The op registry (seqlower/ops.py) agrees with everything that has per-op knowledge:
onnx's schemas, the analysis's transfer functions, each representation's rules, the
executor's kernels and the program generator. Adding an op without one of them fails
here, naming what is missing."""

from __future__ import annotations

import random

import onnx
import pytest

from seqlower import ops
import seqlower.analysis.analyzer  # noqa: F401 (its transfer functions register as it loads)
from seqlower.executor.kernels import KERNELS
from seqlower.passes.lowering import lower_flat_sequences, lower_optionals, lower_packed_sequences, lower_unrolled_sequences
from seqlower.passes.lowering.convert import REPRESENTATIONS, rule, rules
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
    # (and the kernels where onnx's evaluator is wrong or missing: docs/executor.md)
    assert set(ops.REGISTRY) == kernels - {"LinearClassifier", "Reshape", "SVMClassifier"}


def test_every_lowered_op_has_a_transfer_function_and_a_rule_per_representation():
    lowered = ops.names("sequence", lowered=True) | ops.names("control", lowered=True)
    missing_transfer = sorted(lowered - set(ops.TRANSFERS))
    assert missing_transfer == []
    assert set(ops.TRANSFERS) <= set(ops.REGISTRY) | {"Scan"}
    for into in ("flat", "packed"):
        assert set(rules(into)) == lowered, into
    # Unrolled lists never cross a Loop (a trip count makes the length unknown).
    assert set(rules("unrolled")) == lowered - {"Loop"}
    assert set(rules("optional")) >= ops.names("optional")
    # Each module's table is the registry's view, filled by its decorated rules.
    for module, into in ((lower_flat_sequences, "flat"), (lower_packed_sequences, "packed"),
                         (lower_unrolled_sequences, "unrolled"), (lower_optionals, "optional")):
        assert dict(module.RULES) == dict(rules(into)) and set(REPRESENTATIONS) >= {into}


def test_a_second_transfer_function_or_one_for_an_unknown_op_is_refused():
    with pytest.raises(ValueError, match="two transfer functions for SequenceAt"):
        ops.transfer("SequenceAt")(lambda self, node, label: None)
    with pytest.raises(ValueError, match="no facts in the op registry"):
        ops.transfer("Gather")(lambda self, node, label: None)
    assert ops.TRANSFERS["SequenceAt"].__name__ == "_t_SequenceAt"


def test_a_second_rule_for_one_op_and_representation_is_refused():
    with pytest.raises(ValueError, match="two flat rules for SequenceAt"):
        rule("SequenceAt", "flat")(lambda lw, node, o, scope: "again")
    assert rules("flat")["SequenceAt"].__name__ == "_sequence_at"


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
