"""seqlower.fastpath.repeats: equal webs are lowered once and copied under their own names, and the
copies compute what lowering each web in place computes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from seqlower.fastpath import pipeline, repeats
from seqlower.io import check as model_check
from seqlower.errors import ModelError
from seqlower.cli import main
from seqlower.executor.verify import verify
from seqlower.io.inventory import take_inventory
from seqlower.io.check import InferredTypes, check_types
from seqlower.fastpath.regions import find
from tests.helpers import FLOAT, const, lower_checked, model, stacked_webs, t

ROWS, DIM = 16, 6


def _block(b: int, prev: str, step: str, w: str, out: str, dim: int = DIM) -> list[onnx.NodeProto]:
    """SplitToSequence -> SequenceMap(MatMul by the outer weight ``w``, Relu) -> ConcatFromSequence."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["e", w], ["m"]), helper.make_node("Relu", ["m"], ["o"])], f"body{b}",
        [t("e", FLOAT, [None, dim])], [t("o", FLOAT, [None, dim])])
    return [helper.make_node("SplitToSequence", [prev, step], [f"s{b}"], axis=0),
            helper.make_node("SequenceMap", [f"s{b}"], [f"m{b}"], body=body),
            helper.make_node("ConcatFromSequence", [f"m{b}"], [out], axis=0)]


def _chain(blocks: int, *, steps: tuple[int, ...] = (4,), dim: int = DIM, weight_dim: int | None = None,
           last_is_output: bool = False, rows: int | str = ROWS) -> onnx.ModelProto:
    """``blocks`` blocks in a row on x[rows, dim]; block b splits by ``steps[b % len(steps)]``
    rows (a constant per distinct step)."""
    rng = np.random.default_rng(0)
    inits = [const(f"step{s}", np.array(s, np.int64)) for s in sorted(set(steps))]
    nodes, prev = [], "x"
    for b in range(blocks):
        w = f"w{b}"
        inits.append(numpy_helper.from_array(rng.standard_normal((dim, weight_dim or dim)).astype(np.float32) / dim, w))
        out = "out" if last_is_output and b == blocks - 1 else f"y{b}"
        nodes += _block(b, prev, f"step{steps[b % len(steps)]}", w, out, dim)
        prev = out
    if not last_is_output:
        nodes.append(helper.make_node("Identity", [prev], ["out"]))
    return model(nodes, [t("x", FLOAT, [rows, dim])], [t("out", FLOAT, [rows, dim])], initializer=inits)


def _lower(m: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch | None = None, *, apart: bool = True):
    """Lowered as the CLI lowers a file; with the sub-models handed to the pass pipeline."""
    subs: list[int] = []
    if monkeypatch is not None:
        real = pipeline.lower_with_report

        def counted(sub, options=None, **kw):
            subs.append(len(sub.graph))
            return real(sub, options, **kw)

        monkeypatch.setattr(pipeline, "lower_with_report", counted)
        if not apart:
            monkeypatch.setattr(repeats, "MIN_MEMBERS", 10**9)
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    types = InferredTypes()
    check_types(copy, "test", types)
    out, report = pipeline.lower_proto_with_report(copy, inferred=types)
    assert isinstance(out, onnx.ModelProto), "the region way did not apply"
    if monkeypatch is not None:
        monkeypatch.undo()
    return out, report, subs


def _equivalent(m: onnx.ModelProto, low: onnx.ModelProto) -> None:
    onnx.checker.check_model(low, full_check=True)
    assert take_inventory(low).clean
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, backend=backend)
        assert rep.equivalent, rep.to_json()


def test_equal_blocks_are_lowered_once_and_copied(monkeypatch):
    m = _chain(8)
    low, report, subs = _lower(m, monkeypatch)
    # One block's template (3 nodes) and the rest of the region (the Identity).
    assert sorted(subs) == [1, 3]
    _equivalent(m, low)
    whole, whole_report, whole_subs = _lower(m, monkeypatch, apart=False)
    assert whole_subs == [25]
    # The same nodes rewritten, the same way, named as in the model.
    assert report.rewrites == whole_report.rewrites
    assert len(report.rewrites) == 24
    # At most the in-place lowering's nodes, and the model's own final Identity.
    assert len(low.graph.node) <= len(whole.graph.node) + 1
    # Each copy is named after its own block's values, and reads its own weight.
    by_out = {o: n for n in low.graph.node for o in n.output}
    for b in range(8):
        assert by_out[f"y{b}"].op_type == "Relu"  # (row chunks of a row-wise body: the body on the whole, no Reshape)
        assert any(f"w{b}" in n.input for n in low.graph.node if n.op_type == "MatMul")


def test_the_cli_lowers_repeated_blocks_with_held_weights(tmp_path):
    # 24 x 24 float weights (2.3 KB) are held out of the parsed model and come into the
    # template as typed inputs.
    m = _chain(6, dim=24)
    src, dst = tmp_path / "chain.onnx", tmp_path / "low.onnx"
    onnx.save(m, src)
    assert main(["lower", str(src), "-o", str(dst), "--verify", "-q"]) == 0
    low = onnx.load(dst)
    assert take_inventory(low).clean
    assert {t.name for t in low.graph.initializer} >= {f"w{b}" for b in range(6)}
    for a, b in zip(sorted((t for t in m.graph.initializer if t.name.startswith("w")), key=lambda t: t.name), sorted(
            (t for t in low.graph.initializer if t.name.startswith("w")), key=lambda t: t.name)):
        assert a.SerializeToString() == b.SerializeToString()


def test_different_constants_make_different_templates(monkeypatch):
    m = _chain(8, steps=(4, 2))
    low, report, subs = _lower(m, monkeypatch)
    assert sorted(subs) == [1, 3, 3]
    _equivalent(m, low)
    # Two templates (their split constants differ), each lowered to the body on the
    # whole input (row chunks of a row-wise body): one MatMul a block, no Reshape.
    ops = [n.op_type for n in low.graph.node]
    assert ops.count("MatMul") == 8 and "Reshape" not in ops


def test_blocks_that_share_a_weight(monkeypatch):
    m = _chain(5)
    g = m.graph
    for n in g.node:
        if n.op_type == "SequenceMap":
            n.attribute[0].g.node[0].input[1] = "w0"
    kept = [t for t in g.initializer if t.name in ("w0", "step4")]
    del g.initializer[:]
    g.initializer.extend(kept)
    low, report, subs = _lower(m, monkeypatch)
    assert sorted(subs) == [1, 3]
    _equivalent(m, low)
    assert sum(1 for n in low.graph.node if n.op_type == "MatMul" and "w0" in n.input) == 5


def test_blocks_linked_by_integers_stay_in_the_region(monkeypatch):
    # Each block passes on how many elements it made (an integer the next one splits by):
    # lowered in place, where the next block sees that count as a constant.
    inits = [const("step", np.array(4, np.int64)), const("one", np.array([1], np.int64))]
    nodes, prev, count = [], "x", "step"
    for b in range(5):
        nodes += [helper.make_node("SplitToSequence", [prev, count], [f"s{b}"], axis=0),
                  helper.make_node("SequenceLength", [f"s{b}"], [f"n{b}"]),
                  helper.make_node("ConcatFromSequence", [f"s{b}"], [f"y{b}"], axis=0)]
        prev, count = f"y{b}", f"n{b}"
    nodes.append(helper.make_node("Identity", [prev], ["out"]))
    m = model(nodes, [t("x", FLOAT, [ROWS, DIM])], [t("out", FLOAT, [ROWS, DIM])], initializer=inits)
    low, report, subs = _lower(m, monkeypatch)
    assert subs == [16]
    _equivalent(m, low)


def test_a_member_that_makes_a_model_output_is_lowered_in_place(monkeypatch):
    m = _chain(6, last_is_output=True)
    low, report, subs = _lower(m, monkeypatch)
    assert sorted(subs) == [3, 3]  # the template, and the last block in the region
    _equivalent(m, low)
    assert low.graph.output[0].name == "out"


def test_copies_take_no_name_the_model_has(monkeypatch):
    m = _chain(6)
    low, _, _ = _lower(m)
    made = [o for n in low.graph.node for o in n.output]
    # Give the model's other nodes the names the copies took, and lower again.
    taken = [x for x in made if x not in {f"y{b}" for b in range(6)} and x != "out"][:6]
    extra, prev = [], "x"
    for k, name in enumerate(taken):
        extra.append(helper.make_node("Neg" if k % 2 else "Abs", [prev], [name]))
        prev = name
    g = m.graph
    nodes = [*extra, *g.node[:-1], helper.make_node("Add", ["y5", prev], ["out"])]
    m2 = model(nodes, list(g.input), list(g.output), initializer=list(g.initializer))
    low2, _, subs = _lower(m2, monkeypatch)
    assert 3 in subs
    _equivalent(m2, low2)
    names = [o for n in low2.graph.node for o in n.output]
    assert len(names) == len(set(names))


def test_symbolic_rows_and_no_optimizer(monkeypatch, tmp_path):
    m = _chain(5, rows="batch")
    src, dst = tmp_path / "chain.onnx", tmp_path / "low.onnx"
    onnx.save(m, src)
    for extra in ([], ["--no-optimize"]):
        assert main(["lower", str(src), "-o", str(dst), "-q", *extra]) == 0
        low = onnx.load(dst)
        onnx.checker.check_model(low, full_check=True)
        assert take_inventory(low).clean
        for backend in ("reference", "onnxruntime"):
            rep = verify(m, low, backend=backend, dims={"batch": 8})
            assert rep.equivalent, rep.to_json()
        assert low.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def _loop_block(b: int, prev: str) -> list[onnx.NodeProto]:
    """A Loop that collects prev * i for i < 3 into a sequence; its last element and the
    three joined make the block's outputs: a member with a subgraph of its own."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", [prev, "f"], ["scaled"]),
         helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        f"loop{b}", [t("i", TensorProto.INT64, []), t("cond", TensorProto.BOOL, []),
                     onnx.helper.make_tensor_sequence_value_info("acc", FLOAT, None)],
        [t("cond_out", TensorProto.BOOL, []), onnx.helper.make_tensor_sequence_value_info("acc_out", FLOAT, None)])
    return [helper.make_node("SequenceEmpty", [], [f"e{b}"], dtype=FLOAT),
            helper.make_node("Loop", ["three", "true", f"e{b}"], [f"l{b}"], body=body),
            helper.make_node("SequenceAt", [f"l{b}", "two"], [f"y{b}"]),
            helper.make_node("ConcatFromSequence", [f"l{b}"], [f"c{b}"], axis=0, new_axis=1)]


def test_members_with_subgraphs_are_copied_with_their_own_names(monkeypatch):
    inits = [const("three", np.array(3, np.int64)), const("true", np.array(True)),
             const("two", np.array(2, np.int64))]
    nodes, prev = [], "x"
    for b in range(5):
        nodes += _loop_block(b, prev)
        prev = f"y{b}"
    nodes += [helper.make_node("Concat", [f"c{b}" for b in range(5)], ["all"], axis=0),
              helper.make_node("ReduceSum", ["all"], ["total"], keepdims=0),
              helper.make_node("ReduceSum", ["y4"], ["last"], keepdims=0),
              helper.make_node("Add", ["total", "last"], ["out"])]
    m = model(nodes, [t("x", FLOAT, [ROWS, DIM])], [t("out", FLOAT, [])], initializer=inits, opset=18)
    low, report, subs = _lower(m, monkeypatch)
    assert report.tensor_only
    assert sorted(subs) == [4]  # one template; nothing else in the region
    _equivalent(m, low)
    whole, _, _ = _lower(m, apart=False)
    assert Counter(n.op_type for n in low.graph.node) == Counter(n.op_type for n in whole.graph.node)


def test_keys_ignore_names_and_hold_what_the_lowering_reads():
    m = _chain(6, steps=(4, 4, 4, 2))
    found = find(m)
    types = InferredTypes()
    check_types(m, "test", types)
    keys = repeats._Keys(found, types, None)
    comps = repeats._components(found)
    members = [keys.member(c) for c in comps[:6]]
    assert [m.nodes for m in members[:2]] == [[0, 1, 2], [3, 4, 5]]
    shapes = [keys.key(x) for x in members]
    # Block 3 splits by 2 rows: another constant, another key; the others are equal
    # although their names, weights and body names differ.
    assert shapes[0] == shapes[1] == shapes[2] == shapes[4] == shapes[5] != shapes[3]
    assert members[1].inputs == ["y0", "step4", "w1"]
    assert members[1].outputs == ["y1"]


def test_plans_only_groups_of_enough_members():
    found = find(_chain(repeats.MIN_MEMBERS - 1))
    types = InferredTypes()
    check_types(found.model, "test", types)
    assert repeats.Plan(found, types).candidates == []
    found = find(_chain(repeats.MIN_MEMBERS))
    types = InferredTypes()
    check_types(found.model, "test", types)
    assert len(repeats.Plan(found, types).candidates) == repeats.MIN_MEMBERS
    assert repeats.Plan(found, None).candidates == []  # no inferred types, no keys


def test_lower_checked_holds_repeated_blocks_to_every_promise():
    lower_checked(_chain(5))


def test_keys_read_subgraphs_up_to_their_own_names():
    m = _chain(5)
    bodies = [n.attribute[0].g for n in m.graph.node if n.op_type == "SequenceMap"]
    # Block 1's body renamed throughout (as an exporter names each layer's own values).
    b1 = bodies[1]
    b1.input[0].name, b1.node[0].input[0] = "e1", "e1"
    b1.node[0].output[0], b1.node[1].input[0] = "m1x", "m1x"
    b1.node[1].output[0], b1.output[0].name = "o1", "o1"
    b1.node[0].name = "layer1/matmul"
    # Block 2's body computes another thing: Relu before the MatMul.
    b2 = bodies[2]
    relu, mm = b2.node[1], b2.node[0]
    relu.input[0], relu.output[0] = "e", "r"
    mm.input[0], mm.output[0] = "r", "o"
    del b2.node[:]
    b2.node.extend([relu, mm])
    found = find(m)
    types = InferredTypes()
    check_types(m, "test", types)
    keys = repeats._Keys(found, types, None)
    k = [keys.key(keys.member(c)) for c in repeats._components(found)[:5]]
    assert k[0] == k[1] == k[3] == k[4] != k[2]
    low, _, _ = _lower(m)
    _equivalent(m, low)


def test_a_template_that_fails_leaves_its_group_in_the_region(monkeypatch):
    from seqlower.errors import ModelError

    real = pipeline._lower_region

    def failing(region, label, options, reserved=None):
        if len(region.model.graph.node) == 3:
            raise ModelError("a template refused (test)")
        return real(region, label, options, reserved)

    monkeypatch.setattr(pipeline, "_lower_region", failing)
    m = _chain(5)
    low, report, _ = _lower(m)
    assert len(report.rewrites) == 15
    _equivalent(m, low)


@pytest.mark.parametrize("declared", [True, False])
def test_equal_blocks_with_untouched_nodes_between_them_are_lowered_once(monkeypatch, declared):
    """Six webs, each fed by a ReduceSum and an Add of the one before, spliced back around
    the untouched nodes in their order. Declared [3, 6], one template serves all six.
    Undeclared, inference names each Add's columns apart (unk__k): the keys number dim
    names as they come, so blocks 1-5 share a template (block 0 reads x[3, 6], its own),
    and each copy declares its own dim names."""
    m = stacked_webs(6)
    if declared:
        m.graph.value_info.extend(t(f"y{b}", FLOAT, [3, 6]) for b in range(5))
    low, report, subs = _lower(m, monkeypatch)
    # Templates of three nodes; nothing else went through the pipeline.
    assert subs == ([3] if declared else [3, 3])
    assert len(report.rewrites) == 18
    assert [n.name for n in low.graph.node if n.name.startswith(("sum", "add"))] == \
        [f"{op}{b}" for b in range(6) for op in ("sum", "add")]
    # No made-up dim name is declared on the values of two blocks.
    owners: dict[str, set[str]] = {}
    for v in (*low.graph.value_info, *low.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                owners.setdefault(d.dim_param, set()).add(v.name.split("_")[0])
    assert all(len(o) == 1 for o in owners.values()), owners
    _equivalent(m, low)


def test_dim_names_are_numbered_in_keys_and_each_copy_declares_its_own():
    """The keys number dim names as they come, onnx's made-up ones (unk__k) apart from the
    model's; a copy's types take its own names for the paired ones and a suffix for names
    the template's lowering made up."""
    from seqlower.io.protos import numbered_type
    from seqlower.fastpath.repeats import Group, Member, renamed as _renamed, symbol_names as _symbol_names

    def tp(*dims):
        return onnx.helper.make_tensor_type_proto(TensorProto.FLOAT, list(dims))

    def numbered(*types):
        symbols: dict[str, str] = {}
        return [numbered_type(x, symbols) for x in types], list(symbols)

    a, names_a = numbered(tp(3, "unk__5"), tp("unk__5", "unk__6"))
    b, names_b = numbered(tp(3, "unk__9"), tp("unk__9", "unk__2"))
    assert a == b and names_a == ["unk__5", "unk__6"] and names_b == ["unk__9", "unk__2"]
    assert numbered(tp(3, "unk__9"), tp("unk__2", "unk__2"))[0] != a  # another pattern
    assert numbered(tp(3, "cols"), tp("cols", "unk__6"))[0] != a  # the model's name is not a made-up one
    rep, m = Member([0], [], [], [], [], symbols=names_a), Member([1], [], [], [], [], symbols=names_b)
    group = Group(b"k", [rep, m])
    assert _symbol_names(group, 0) == ({}, "")
    names, suffix = _symbol_names(group, 1)
    got = _renamed(tp("unk__6", "unk__40", 2), names, suffix)
    assert [d.dim_param or d.dim_value for d in got.tensor_type.shape.dim] == ["unk__2", "unk__40_1", 2]


def _deferring(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every model counts as big: the reader defers the model's inference
    (``InferredTypes.pending``). The list gets the node count of each model the checks
    infer: the whole model's, and each sub-model's lowered."""
    runs: list[int] = []
    real = model_check.infer_types

    def counted(proto, *args, **kwargs):
        runs.append(len(proto.graph.node))
        return real(proto, *args, **kwargs)

    monkeypatch.setattr(model_check, "is_windowed", lambda proto, main_nodes=None: True)
    monkeypatch.setattr(model_check, "infer_types", counted)
    return runs


@pytest.mark.parametrize("rows", [ROWS, "batch"])
def test_a_stack_of_equal_blocks_needs_no_inference_of_the_model(monkeypatch, rows):
    # Each block's input is typed by the lowering of the block before it: the deferred
    # inference of the whole model never runs, and the lowering is the same.
    m = _chain(8, rows=rows)
    eager, _, _ = _lower(m)
    runs = _deferring(monkeypatch)
    low, _, _ = _lower(m)
    # Only the sub-models lowered are checked: a block's template, the rest of the region.
    assert runs and max(runs) <= 3 < len(m.graph.node)
    assert low.SerializeToString() == eager.SerializeToString()
    _equivalent(m, low)


@pytest.mark.parametrize("op, inferred", [("Erf", True), ("Abs", False)])
def test_a_deferred_inference_runs_when_a_block_reads_what_only_it_types(monkeypatch, op, inferred):
    # The first block reads a value made outside the region and declared nowhere. Made by
    # an elementwise op of static values (Abs), the keys type it as the broadcast of their
    # dims themselves; by any other (Erf), the whole model's deferred inference does.
    m = _chain(6)
    for n in m.graph.node:
        n.input[:] = ["a" if x == "x" else x for x in n.input]
    m.graph.node.insert(0, helper.make_node(op, ["x"], ["a"]))
    eager, _, _ = _lower(m)
    runs = _deferring(monkeypatch)
    low, _, _ = _lower(m)
    assert (len(m.graph.node) in runs) == inferred
    assert low.SerializeToString() == eager.SerializeToString()
    _equivalent(m, low)


@pytest.mark.parametrize("deferred", [False, True])
def test_a_kind_error_in_every_block_is_reported_deferred_or_not(monkeypatch, deferred):
    # Each block also asks the length of its input, a tensor, where a sequence goes.
    m = _chain(6)
    for b in range(6):
        k = next(i for i, n in enumerate(m.graph.node) if n.output[0] == f"s{b}")
        m.graph.node.insert(k, helper.make_node("SequenceLength", [m.graph.node[k].input[0]], [f"bad{b}"]))
    runs = _deferring(monkeypatch) if deferred else []
    with pytest.raises(ModelError, match=r"SequenceLength"):
        _lower(m)
    assert len(m.graph.node) not in runs  # deferred: found by a template's check
