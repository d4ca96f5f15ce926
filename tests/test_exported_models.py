"""Models as PyTorch's exporters emit them (tools/export_models.py made the fixtures, with
dynamic axes): each lowers to a tensor-only model equal to the original on both backends
(onnxruntime with its optimizer on and off) at every stored size, 0 and 1 included, and
equal to PyTorch's own eager outputs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest

from seqlower.errors import ExecutionError
from seqlower.executor import Executor
from seqlower.executor.verify import verify
from tests.conftest import HAS_ORT
from tests.helpers import lower_checked, ops_of

DATA = Path(__file__).parent / "data" / "exported"
MODELS = sorted(DATA.glob("*.onnx"))
BACKENDS = ("reference", "onnxruntime") if HAS_ORT else ("reference",)
SEQUENCE_OPS = {"SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceConstruct",
                "SequenceLength", "ConcatFromSequence", "SequenceEmpty", "SequenceMap"}
# (model, input, axis) -> sizes at which the exported model does not compute what PyTorch
# does, so no fixture case exists: TorchScript's chunk export makes an invalid split for
# w = 1; dynamo's embedding_bag export fails on zero bags; a split of zero rows is one
# empty chunk in PyTorch and no chunk in ONNX (tools/export_models.py).
EXPORTER_LIMITS = {("ts_chunk_dynamic_dim", "x", 1): {1}, ("dynamo_embedding_bag", "offsets", 0): {0},
                   ("ts_list_under_if_split", "x", 0): {0}, ("ts_first_chunk_unbound_1021", "x", 0): {0},
                   ("ts_max_of_unbound_rows_3041", "x", 1): {0}}  # (a max of no value is an error)


def load_cases(path: Path) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """``k/in/<name>`` and ``k/out/<name>`` arrays, as (inputs, expected) per case k."""
    cases: dict[int, tuple[dict, dict]] = defaultdict(lambda: ({}, {}))
    with np.load(str(path)[: -len(".onnx")] + ".cases.npz") as z:
        for key in z.files:
            k, side, name = key.split("/", 2)
            cases[int(k)][0 if side == "in" else 1][name] = z[key]
    return [cases[k] for k in sorted(cases)]


def _ort_loads(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> bool:
    # Through the executor: it runs onnxruntime in a child process, which is where a
    # crash on loading belongs.
    if not HAS_ORT:
        return False
    try:
        Executor(m, backend="onnxruntime").run(feeds)
    except ExecutionError as e:
        if "cannot load" in str(e) or "crashed" in str(e):
            return False
        raise
    return True


def test_fixtures_cover_both_exporters_and_the_list_patterns():
    names = {p.stem for p in MODELS}
    assert len(names) >= 20
    for pattern in ("ts_list_mutations_loop", "ts_conditional_append_cat", "ts_nested_list_loops",
                    "ts_split_dynamic_sizes", "ts_loop_collect_steps", "ts_unbind", "ts_chunk", "dynamo_embedding_bag"):
        assert any(n.startswith(pattern) for n in names), pattern


@pytest.mark.parametrize("packed", [True, False], ids=["default", "flat"])
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_exported_model_lowers_and_matches_pytorch(path, packed):
    # Twice: as lowered by default, and with every dynamic list Flat (the fallback).
    m = onnx.load(path)
    assert set(ops_of(m)) & SEQUENCE_OPS, "a fixture without sequences tests nothing"
    cases = load_cases(path)
    # Every dynamic input dim takes the sizes 0 and 1 in some case, except where the
    # export itself is wrong at that size.
    for vi in m.graph.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.dim_param:
                sizes = {feeds[vi.name].shape[axis] for feeds, _ in cases}
                wanted = {0, 1} - EXPORTER_LIMITS.get((path.stem.rsplit("_opset", 1)[0], vi.name, axis), set())
                assert wanted <= sizes, (vi.name, axis, sizes)
    feeds = [c[0] for c in cases]
    # TorchScript at opset 13 emits Identity on sequences (valid only from 14), which
    # onnxruntime refuses to load: such originals run on the reference backend only,
    # their lowered models on both (lower_checked runs them on onnxruntime, optimizer
    # on and off).
    ort_loads = _ort_loads(m, feeds[0])
    low, _ = lower_checked(m, backends=BACKENDS if ort_loads else ("reference",), inputs=feeds, packed=packed)
    if HAS_ORT and not ort_loads:
        rep = verify(m, low, inputs=feeds, backend="reference", lowered_backend="onnxruntime")
        assert rep.equivalent, rep.to_json()
    assert not set(ops_of(low)) & SEQUENCE_OPS
    ex = Executor(low)
    for k, (inputs, expected) in enumerate(cases):
        result = ex.run(inputs).outputs
        for name, want in expected.items():
            np.testing.assert_allclose(result[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{path.stem} case {k}: {name}")


# Targets whose lowerings differ (the others share these passes).
GUARANTEE_TARGETS = ("generic", "openvino", "tract", "onnx2torch")
# Every fixture for the generic target (the API and the CLI held to one road everywhere),
# and each for one of the others in turn (a third of the fixtures each): the promises on
# a curated set, not the whole grid (Stage 12: 188 cells took 81 s of the suite's CPU).
GUARANTEE_CASES = [(p, t) for i, p in enumerate(MODELS)
                   for t in ("generic", GUARANTEE_TARGETS[1 + i % (len(GUARANTEE_TARGETS) - 1)])]


@pytest.mark.parametrize("path, target", GUARANTEE_CASES, ids=lambda c: getattr(c, "stem", c))
def test_guarantees_through_the_cli(path, target, tmp_path, capsys):
    """What seqlower promises for every model, checked on every fixture: the output passes
    the full checker, lowering is byte-for-byte deterministic and the same through the
    CLI and the API (one road: ``seqlower.lower`` reads a ModelProto as ``lower`` reads a
    file), lowering the output again changes nothing, and the input file is never modified."""
    import hashlib

    import seqlower
    from seqlower.cli import main

    before = hashlib.sha256(path.read_bytes()).hexdigest()
    out = tmp_path / "out0.onnx"
    assert main(["lower", str(path), "-o", str(out), "--target", target]) == 0, capsys.readouterr().err
    outs = [out.read_bytes(), seqlower.lower(onnx.load(path), target=target).SerializeToString()]
    assert outs[0] == outs[1], "the API and the CLI (or two runs) differ"
    onnx.checker.check_model(onnx.load_from_string(outs[0]), full_check=True)
    again = tmp_path / "again.onnx"
    assert main(["lower", str(tmp_path / "out0.onnx"), "-o", str(again), "--target", target]) == 0
    assert again.read_bytes() == outs[0], "lowering the lowered model changed it"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "the input was modified"
    if target == "generic" and HAS_ORT:
        # What the CLI writes (the region way) runs every stored case on onnxruntime, in
        # one session: the region's own inference named one made-up dim for both halves
        # of an odd split, and onnxruntime's planner reused one's buffer for the other
        # ("Shape mismatch attempting to re-use buffer", ts_split_dynamic_sizes at n = 1).
        ex = Executor(onnx.load_from_string(outs[0]), backend="onnxruntime")
        for k, (inputs, expected) in enumerate(load_cases(path)):
            result = ex.run(inputs).outputs
            for name, want in expected.items():
                np.testing.assert_allclose(result[name], want, rtol=1e-5, atol=1e-6, err_msg=f"case {k}: {name}")


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_one_node_label_in_report_inspect_and_check(path):
    """Every node the lower report names is named the same way by inspect and check (the
    inventory of the input), subgraph paths included."""
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.errors import describe_node
    from seqlower.io.inventory import take_inventory, walk_graphs
    from seqlower.fastpath.pipeline import describe_sequences

    proto = onnx.load(str(path))
    inv = take_inventory(proto)
    known = {(op.node, op.graph) for op in inv.ops}
    known |= {(label, v.graph) for v in inv.values for label in [v.producer, *v.consumers] if label}
    known |= {(s["producer"], s["graph"]) for s in describe_sequences(load_model(path))}
    # Any other node a rewrite names (an If it folded) is named as check walks the input.
    known |= {(describe_node(n.op_type, n.name, list(n.output)), where)
              for where, g, _ in walk_graphs(proto) for n in g.node}
    _, report = lower_with_report(load_model(path), LowerOptions())
    named = {(r["node"], r["graph"]) for r in report.rewrites}
    # A node of an If branch the folds inlined keeps its name; it is in its If's graph now.
    inlined = {r["node"] for r in report.rewrites if r["op"] == "If" and r["into"] == "inlined"}
    moved = {(label, where) for label, where in named
             if any((label, f"{where} > {i}.{side}") in known for i in inlined for side in ("then_branch", "else_branch"))}
    assert named and named - moved <= known, sorted(named - moved - known)
