"""seqlower.fastpath.regions: only the sequence region is converted, lowered and spliced back; the
rest of the model comes out as it went in, node for node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from seqlower.fastpath import pipeline
from seqlower.executor.verify import verify
from seqlower.io.inventory import take_inventory
from seqlower.fastpath.pipeline import lower_proto_with_report
from seqlower.fastpath.submodel import cut
from tests.helpers import FLOAT, const, model, seq, stacked_webs, t


def _residual(blocks: int, middle: list[onnx.NodeProto], inits: list[onnx.TensorProto], dim: int = 6) -> onnx.ModelProto:
    """Residual blocks on x[batch, dim] (no value_info: shapes are only known by inference),
    ``middle`` spliced in after the middle block, reading ``mid`` and writing ``back``."""
    rng = np.random.default_rng(0)
    nodes, prev = [], "x"
    for b in range(blocks):
        w = f"w{b}"
        inits = [*inits, numpy_helper.from_array(rng.standard_normal((dim, dim)).astype(np.float32) / dim, w)]
        nodes += [helper.make_node("MatMul", [prev, w], [f"h{b}"]), helper.make_node("Relu", [f"h{b}"], [f"r{b}"]),
                  helper.make_node("Add", [prev, f"r{b}"], [f"y{b}"])]
        prev = f"y{b}"
        if b == blocks // 2:
            nodes.append(helper.make_node("Identity", [prev], ["mid"]))
            nodes += middle
            prev = "back"
    nodes.append(helper.make_node("Identity", [prev], ["out"]))
    return model(nodes, [t("x", FLOAT, ["batch", dim])], [t("out", FLOAT, ["batch", dim])], initializer=inits)


def _split_concat() -> onnx.ModelProto:
    """Two column blocks of ``mid``, the first moved behind the second."""
    return _residual(6, [helper.make_node("SplitToSequence", ["mid", "halves"], ["parts"], axis=1),
                         helper.make_node("SequenceAt", ["parts", "first"], ["head"]),
                         helper.make_node("SequenceErase", ["parts", "first"], ["rest"]),
                         helper.make_node("SequenceInsert", ["rest", "head"], ["again"]),
                         helper.make_node("ConcatFromSequence", ["again"], ["back"], axis=1)],
                     [const("halves", np.array([2, 4], np.int64)), const("first", np.array(0, np.int64))])


def _lower(m: onnx.ModelProto) -> tuple[onnx.ModelProto, object]:
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    out, report = lower_proto_with_report(copy)
    assert isinstance(out, onnx.ModelProto), "the region way did not apply"
    return out, report


def _equivalent(m: onnx.ModelProto, low: onnx.ModelProto) -> None:
    onnx.checker.check_model(low, full_check=True)
    assert take_inventory(low).clean
    for backend in ("reference", "onnxruntime"):
        rep = verify(m, low, backend=backend, dims={"batch": 3})
        assert rep.equivalent, rep.to_json()


def test_a_model_without_sequence_ops_is_written_as_it_was_read(monkeypatch):
    m = _residual(4, [helper.make_node("Relu", ["mid"], ["back"])], [])
    monkeypatch.setattr(pipeline, "lower_with_report", lambda *a, **k: pytest.fail("a pass ran"))
    out, report = _lower(m)
    assert out.SerializeToString() == m.SerializeToString()
    assert report.tensor_only and not report.rewrites


def test_only_the_region_is_rewritten_and_the_rest_is_untouched():
    m = _split_concat()
    region = cut(m)
    assert region is not None
    assert sorted(m.graph.node[i].op_type for i in region.nodes) == [
        "ConcatFromSequence", "SequenceAt", "SequenceErase", "SequenceInsert", "SplitToSequence"]
    # Nothing declares mid's shape: the region's input is typed by inference on its cone.
    assert [d.dim_param or d.dim_value for d in region.model.graph.input[0].type.tensor_type.shape.dim] == ["batch", 6]
    low, report = _lower(m)
    assert report.tensor_only
    seq_free = [n for n in m.graph.node if not n.op_type.startswith(("Sequence", "Split", "Concat"))]
    # Every node outside the region is in the output, byte for byte and in order.
    outside = [n.SerializeToString() for n in low.graph.node if n.op_type in ("MatMul", "Relu", "Add")]
    assert outside == [n.SerializeToString() for n in seq_free if n.op_type in ("MatMul", "Relu", "Add")]
    # The lowering is a static permutation of two column blocks: no more nodes than before.
    assert len(low.graph.node) <= len(m.graph.node)
    # The split sizes and the position only the region read went with it.
    assert not {"halves", "first"} & {t.name for t in low.graph.initializer}
    _equivalent(m, low)


def test_names_the_rest_of_the_model_uses_are_never_taken():
    m = _split_concat()
    low, _ = _lower(m)
    made = ({o for n in low.graph.node for o in n.output} | {i.name for i in low.graph.initializer}) - (
        {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.initializer})
    assert made, "the lowering made no value of its own"
    # The same model with every one of those names already taken outside the region.
    taken = _split_concat()
    chain = ["x"]
    for name in sorted(made):
        taken.graph.node.append(helper.make_node("Neg", [chain[-1]], [name]))
        chain.append(name)
    taken.graph.output.append(t(chain[-1], FLOAT, ["batch", 6]))
    low2, _ = _lower(taken)
    names = [o for n in low2.graph.node for o in n.output]
    assert len(names) == len(set(names)), "a name is produced twice"
    _equivalent(taken, low2)


def test_a_sequence_carried_through_identity_and_if_is_part_of_the_region():
    then = helper.make_graph([helper.make_node("Identity", ["s"], ["s_then"])], "then", [],
                             [seq("s_then", FLOAT, [None, 3])])
    other = helper.make_graph([helper.make_node("SequenceErase", ["s", "zero"], ["s_else"])], "else", [],
                              [seq("s_else", FLOAT, [None, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["rx"]),
             helper.make_node("SplitToSequence", ["rx"], ["s"], axis=0),
             helper.make_node("Identity", ["s"], ["s2"]),
             helper.make_node("If", ["flag"], ["chosen"], then_branch=then, else_branch=other),
             helper.make_node("SequenceLength", ["s2"], ["n"]),
             helper.make_node("ConcatFromSequence", ["chosen"], ["c"], axis=0),
             helper.make_node("Neg", ["c"], ["y"])]
    m = model(nodes, [t("x", FLOAT, [4, 3]), t("flag", TensorProto.BOOL, [])],
              [t("y", FLOAT, [None, 3]), t("n", TensorProto.INT64, [])], initializer=[const("zero", np.array(0, np.int64))])
    region = cut(m)
    assert sorted(m.graph.node[i].op_type for i in region.nodes) == [
        "ConcatFromSequence", "Identity", "If", "SequenceLength", "SplitToSequence"]
    low, report = _lower(m)
    assert report.tensor_only
    for flag in (True, False):
        rep = verify(m, low, inputs=[{"x": np.arange(12, dtype=np.float32).reshape(4, 3) - 5,
                                      "flag": np.array(flag)}], backend="onnxruntime")
        assert rep.equivalent, rep.to_json()


def test_sequences_at_the_model_boundary_lower_the_whole_model():
    m = model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq("s", FLOAT, [2])], [t("n", TensorProto.INT64, [])])
    assert cut(m) is None
    out, report = lower_proto_with_report(m)
    assert not isinstance(out, onnx.ModelProto) and report.tensor_only


def test_a_region_whose_inputs_come_after_its_readers_is_merged_in_order():
    # The region (split, length, insert, concat) reads z, which a node after the region's
    # reader makes: no single place fits the lowered nodes, so each goes after what it
    # reads, and the untouched nodes keep their order.
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=FLOAT, name="cast"),
             helper.make_node("Add", ["x", "nf"], ["z"], name="add"),
             helper.make_node("SequenceInsert", ["s", "z"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)]
    m = model(nodes, [t("x", FLOAT, [2, 3])], [t("y", FLOAT, [4, 3])])
    low, report = _lower(m)
    assert report.tensor_only
    untouched = [n.name for n in low.graph.node if n.name in ("cast", "add")]
    assert untouched == ["cast", "add"]
    _equivalent(m, low)


def test_blocks_with_untouched_nodes_between_them_are_spliced_where_they_were():
    """Three webs, each fed by a ReduceSum of the one before (a layer stack with a tensor
    op between the layers): the region is spliced back around the untouched nodes, which
    come out as they went in, in their order."""
    m = stacked_webs(3, "batch")
    low, report = _lower(m)
    assert report.tensor_only and len(report.rewrites) >= 6
    kept = [n.name for n in low.graph.node if n.name.startswith(("sum", "add"))]
    assert kept == ["sum0", "add0", "sum1", "add1", "sum2", "add2"]
    # The sums as they were; an Add reads what its block's concat became (the split's own
    # input: a concat of all parts of a split is what was split).
    before = {n.name: n for n in m.graph.node if n.name}
    for n in low.graph.node:
        if n.name.startswith("sum"):
            assert n == before[n.name]
        elif n.name.startswith("add"):
            assert n.input[1] == before[n.name].input[1] and n.output == before[n.name].output
    assert [n.input[0] for n in low.graph.node if n.name.startswith("add")] == ["x", "y0", "y1"]
    _equivalent(m, low)


def _mapped_rows() -> onnx.ModelProto:
    """x[batch, 8] unbound into rows, each row + b then Relu, stacked back: a dynamic web."""
    fn = helper.make_graph([helper.make_node("Add", ["e", "b"], ["a"]), helper.make_node("Relu", ["a"], ["o"])], "f",
                           [t("e", FLOAT, [1, 8])], [t("o", FLOAT, [1, 8])])
    nodes = [helper.make_node("Relu", ["x"], ["rx"]),
             helper.make_node("SplitToSequence", ["rx"], ["s"], axis=0),
             helper.make_node("SequenceMap", ["s"], ["m"], body=fn),
             helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["batch", 8])], [t("y", FLOAT, ["batch", 8])], opset=18,
                 initializer=[const("b", np.ones(8, np.float32))])


def test_the_lowered_region_is_optimized_and_no_optimize_skips_it(tmp_path):
    from seqlower.cli import main
    from seqlower.options import LowerOptions

    m = _mapped_rows()
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    outs = {}
    for flag in ([], ["--no-optimize"]):
        dst = tmp_path / f"out{len(flag)}.onnx"
        assert main(["lower", str(src), "-o", str(dst), "-q", *flag]) == 0
        outs[bool(flag)] = onnx.load(str(dst))
    optimized, plain = outs[False], outs[True]
    # The batched body between one Unsqueeze and one constant-shape Reshape; the user's
    # Relu is untouched. Unoptimized, the packed map's Identity is still there.
    assert [n.op_type for n in optimized.graph.node] == ["Relu", "Unsqueeze", "Add", "Relu", "Reshape"]
    assert [n.op_type for n in plain.graph.node] == ["Relu", "Unsqueeze", "Add", "Relu", "Identity", "Reshape"]
    # The named dim survives.
    assert optimized.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for low in (optimized, plain):
        _equivalent(m, low)
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    out, _ = lower_proto_with_report(copy, LowerOptions(optimize=False))
    assert out.SerializeToString() == plain.SerializeToString()


def test_a_constant_the_rest_of_the_model_reads_too_stays():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
             helper.make_node("SequenceInsert", ["s", "row"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
             helper.make_node("Add", ["row", "row"], ["twice"])]
    m = model(nodes, [t("x", FLOAT, [2, 3])], [t("c", FLOAT, [3, 3]), t("twice", FLOAT, [1, 3])],
              initializer=[const("row", np.ones((1, 3), np.float32))])
    low, _ = _lower(m)
    assert "row" in {i.name for i in low.graph.initializer}
    _equivalent(m, low)


def test_a_splice_rebuilding_the_node_list_gives_what_one_in_place_gives(monkeypatch):
    """splice edits the node list in place when it moves few nodes and rebuilds it past
    splice._IN_PLACE: the two give the same model."""
    from seqlower.fastpath import splice

    m = _split_concat()
    in_place, _ = _lower(m)
    monkeypatch.setattr(splice, "_IN_PLACE", 0)
    rebuilt, _ = _lower(m)
    assert rebuilt.SerializeToString() == in_place.SerializeToString()
    _equivalent(m, rebuilt)


def test_topological_keeps_priorities_where_it_can_and_finds_cycles():
    from seqlower.fastpath.splice import topological

    a = helper.make_node("Relu", ["x"], ["a"], name="a")
    b = helper.make_node("Relu", ["a"], ["b"], name="b")
    c = helper.make_node("Relu", ["x"], ["c"], name="c")
    # Lowest priority first among the ready ones; b waits for a whatever its priority.
    assert [n.name for n in topological([b, c, a], [0, 2, 1])] == ["a", "b", "c"]
    assert [n.name for n in topological([b, c, a], [0, 1, 2])] == ["c", "a", "b"]
    # In order already: the same list back.
    nodes = [a, b, c]
    assert topological(nodes) is nodes
    loop = [helper.make_node("Relu", ["q"], ["p"]), helper.make_node("Relu", ["p"], ["q"])]
    assert topological(loop) is None


def _popped_while_longer(limit_from_shape: bool) -> onnx.ModelProto:
    """xs = x's rows; while len(xs) > k: xs.pop(); with k a constant (its test reads the
    region: SequenceLength -> Greater) or read from x's shape (a cone of model inputs)."""
    body = helper.make_graph(
        [helper.make_node("SequenceErase", ["s_in"], ["s_out"]), helper.make_node("SequenceLength", ["s_out"], ["n"]),
         helper.make_node("Greater", ["n", "two"], ["c_out"])], "body",
        [t("i", TensorProto.INT64, []), t("c", TensorProto.BOOL, []), seq("s_in", FLOAT, [1, 3])],
        [t("c_out", TensorProto.BOOL, []), seq("s_out", FLOAT, [1, 3])])
    first = ([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["rows"]),
              helper.make_node("Greater", ["rows", "two"], ["c0"])] if limit_from_shape else
             [helper.make_node("SequenceLength", ["xs"], ["n0"]), helper.make_node("Greater", ["n0", "two"], ["c0"])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("SplitToSequence", ["r"], ["xs"], axis=0), *first,
             helper.make_node("Loop", ["big", "c0", "xs"], ["ys"], body=body),
             helper.make_node("ConcatFromSequence", ["ys"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["N", 3])], [t("y", FLOAT, [None, 3])],
                 initializer=[const("two", 2, np.int64), const("big", 1 << 40, np.int64), const("zero", 0, np.int64)])


@pytest.mark.parametrize("from_shape", [False, True])
def test_a_control_value_computed_from_the_region_comes_into_it(from_shape):
    # The Loop's first condition tested on the list's length: its Greater joins the
    # region (the folds see it); one tested on x's shape stays out, as does the Relu.
    m = _popped_while_longer(from_shape)
    region = cut(m)
    ops = [n.op_type for n in region.model.graph.node]
    assert "Relu" not in ops and ops.count("Greater") == (0 if from_shape else 1)
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (0, 1, 2, 5)]
    out, report = lower_proto_with_report(onnx.load_from_string(m.SerializeToString()))
    assert take_inventory(out).clean
    for backend in ("reference", "onnxruntime"):
        assert verify(m, out, inputs=feeds, backend=backend).equivalent
