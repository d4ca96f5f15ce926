"""FoldStaticIfsPass: an If whose condition follows from static dims, and whose result
goes into a list, is replaced by its taken branch; other Ifs stay. TorchScript's
``squeeze(1)`` export (If(Shape(t)[1] == 1, Squeeze, Identity)) is the pattern."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from seqlower.io.models import to_proto
from seqlower.passes.folds.fold_static_ifs import FoldStaticIfsPass
from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass
from tests.helpers import BOOL, FLOAT, INT64, body, const, lower_checked, model, ops_of, seq, t


def _squeeze_if(t_in: str, out: str, axis_dim: str) -> list[onnx.NodeProto]:
    """TorchScript's squeeze(1): squeeze only if dim 1 is 1."""
    return [
        helper.make_node("Shape", [t_in], [f"{out}_shape"]),
        helper.make_node("Gather", [f"{out}_shape", "one"], [f"{out}_dim"], axis=0),
        helper.make_node("Equal", [f"{out}_dim", "one"], [f"{out}_is1"]),
        helper.make_node("If", [f"{out}_is1"], [out], name=f"{out}_if",
                         then_branch=body([helper.make_node("Squeeze", [t_in, "one"], [f"{out}_sq"])], [],
                                          [t(f"{out}_sq", FLOAT, None)]),
                         else_branch=body([helper.make_node("Identity", [t_in], [f"{out}_id"])], [],
                                          [t(f"{out}_id", FLOAT, None)])),
    ]


def _top_level(x_shape, y_rank: int = 1) -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), *_squeeze_if("xt", "row", "1"),
             helper.make_node("SequenceConstruct", ["row", "row"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, x_shape)], [t("y", FLOAT, [None] * y_rank)],
                 initializer=[const("one", [1], np.int64)])



def test_a_static_condition_inlines_the_taken_branch():
    # x [1, k]: transposed [k, 1], whose dim 1 is static although dim 0 is not.
    m = ir.serde.deserialize_model(_top_level([1, "k"]))
    InferSequenceShapesPass()(m)
    assert FoldStaticIfsPass()(m).modified
    out = to_proto(m)
    assert "If" not in ops_of(out) and "Squeeze" in ops_of(out)
    lower_checked(_top_level([1, "k"]), inputs=[{"x": np.arange(4, dtype=np.float32).reshape(1, 4)}])


def test_the_else_branch_when_the_dim_is_not_1():
    m = ir.serde.deserialize_model(_top_level([3, "k"], 2))
    InferSequenceShapesPass()(m)
    assert FoldStaticIfsPass()(m).modified
    assert "Squeeze" not in ops_of(to_proto(m)) and "If" not in ops_of(to_proto(m))
    # onnxruntime refuses this original: its inference checks the branch never taken.
    lower_checked(_top_level([3, "k"], 2), inputs=[{"x": np.ones((3, 2), np.float32)}], backends=("reference",))


def test_nothing_changes_when_the_dim_is_known_only_at_run_time():
    m = ir.serde.deserialize_model(_top_level(["a", "k"]))
    InferSequenceShapesPass()(m)
    assert not FoldStaticIfsPass()(m).modified


def test_an_if_that_feeds_no_list_is_the_users_and_stays():
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), *_squeeze_if("xt", "row", "1"),
             helper.make_node("Relu", ["row"], ["y"])]
    m = ir.serde.deserialize_model(model(nodes, [t("x", FLOAT, [1, "k"])], [t("y", FLOAT, None)],
                                         initializer=[const("one", [1], np.int64)]))
    InferSequenceShapesPass()(m)
    assert not FoldStaticIfsPass()(m).modified


def _nonzero_loop(opset: int, lie: bool = False) -> onnx.ModelProto:
    """TorchScript's list loop over nonzero results: each row's positive indices,
    squeezed with squeeze(1). ``lie``: the then-branch declares its output [1]."""
    loop_body = body(
        [helper.make_node("Gather", ["x", "i"], ["r"], axis=0),
         helper.make_node("Greater", ["r", "zero"], ["pos"]),
         helper.make_node("NonZero", ["pos"], ["nz"]),
         helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
         *_squeeze_if("idx", "sq", "1"),
         helper.make_node("SequenceInsert", ["acc", "sq"], ["acc_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        [t("i", INT64, []), t("c", BOOL, []), seq("acc", INT64, None)],
        [t("c_out", BOOL, []), seq("acc_out", INT64, None)],
    )
    for n in loop_body.node:
        if n.op_type == "If":
            for a in n.attribute:
                a.g.output[0].type.tensor_type.elem_type = INT64  # the branches give int64 indices
                if lie and a.name == "then_branch":
                    a.g.output[0].type.tensor_type.shape.dim.add().dim_value = 1
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=INT64),
             helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "zero_i"], ["n"], axis=0),
             helper.make_node("Loop", ["n", "", "empty"], ["rows"], body=loop_body),
             helper.make_node("SequenceInsert", ["rows", "tail"], ["all"]),
             helper.make_node("ConcatFromSequence", ["all"], ["y"], axis=0)]
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("y", INT64, [None])], opset=opset,
                 initializer=[const("one", [1], np.int64), const("zero", 0.0, np.float32),
                              const("zero_i", 0, np.int64), const("tail", [0], np.int64)])


_ROWS = [{"x": np.array([[1, -1, 2], [-3, 0, 0], [5, 6, 7]], np.float32)}, {"x": np.zeros((0, 2), np.float32)}]


@pytest.mark.parametrize("opset", [13, 17])
def test_inside_a_loop_body_like_torchscripts_nonzero_list_loop(opset):
    low, _ = lower_checked(_nonzero_loop(opset), inputs=_ROWS)
    assert "If" not in ops_of(low)


def test_a_branch_declaring_a_wrong_dim_is_not_trusted_once_inlined():
    """A file can declare a dim that is a lie (the file fuzzer changed the squeezed
    nonzero indices to [1]); once inlined, the values take their shapes from inference,
    not from the branch, so the list is not taken for one of [1]-shaped rows."""
    lie = _nonzero_loop(17, lie=True)
    loop = next(n for n in lie.graph.node if n.op_type == "Loop")
    branchy = next(n for n in loop.attribute[0].g.node if n.op_type == "If")
    then = next(a.g for a in branchy.attribute if a.name == "then_branch")
    assert [d.dim_value for d in then.output[0].type.tensor_type.shape.dim] == [1]
    lower_checked(lie, inputs=_ROWS, backends=("reference",))


def _erase_then_set() -> onnx.ModelProto:
    """Torch fuzz seed 5412's TorchScript export: ``l2 = [x, x[:, :1]]``, ``if len(l2) > 0:
    del l2[0]``, ``if len(l2) > 0: l2[0] = x[:, 1:]``, ``torch.cat(l2 + [x[:, :0]], 1)``. The
    second If's condition is known only once the first is folded and the list lowered."""
    def sliced(src: str, start: str, end: str, out: str) -> onnx.NodeProto:
        return helper.make_node("Slice", [src, start, end, "one1"], [out])

    def branch_if(cond_of: str, out: str, then_nodes, then_out: str) -> list[onnx.NodeProto]:
        return [helper.make_node("SequenceLength", [cond_of], [f"{out}_n"]), helper.make_node("Greater", [f"{out}_n", "zero"], [f"{out}_c"]),
                helper.make_node("If", [f"{out}_c"], [out],
                                 then_branch=body(then_nodes, [], [seq(then_out, FLOAT, [None, None])]),
                                 else_branch=body([helper.make_node("Identity", [cond_of], [f"{out}_same"])], [],
                                                  [seq(f"{out}_same", FLOAT, [None, None])]))]

    nodes = [sliced("x", "zero1", "one1", "head"), helper.make_node("SequenceConstruct", ["x", "head"], ["l2"]),
             *branch_if("l2", "l2_del", [helper.make_node("SequenceErase", ["l2", "zero"], ["l2_erased"])], "l2_erased"),
             *branch_if("l2_del", "l2_set", [sliced("x", "one1", "big", "tail"), helper.make_node("SequenceErase", ["l2_del", "zero"], ["e"]),
                                             helper.make_node("SequenceInsert", ["e", "tail", "zero"], ["l2_new"])], "l2_new"),
             sliced("x", "zero1", "zero1", "none"), helper.make_node("SequenceInsert", ["l2_set", "none"], ["all"]),
             helper.make_node("ConcatFromSequence", ["all"], ["y"], axis=1)]
    return model(nodes, [t("x", FLOAT, ["n", "w"])], [t("y", FLOAT, ["n", None])], opset=19,
                 initializer=[const("zero", 0, np.int64), const("zero1", [0], np.int64), const("one1", [1], np.int64),
                              const("big", [2**31 - 1], np.int64)])


@pytest.mark.parametrize("target", ["tract", "generic"])
def test_an_if_a_lowering_made_of_lists_folds_when_its_condition_becomes_known(target):
    m = _erase_then_set()
    feeds = [{"x": np.arange(15, dtype=np.float32).reshape(5, 3)}, {"x": np.zeros((0, 3), np.float32)}]
    low, _ = lower_checked(m, inputs=feeds, target=target)
    assert "If" not in ops_of(low)
    if target == "tract":
        from seqlower.executor import Executor

        for f in feeds:
            got = Executor(low, backend="tract").run(f).outputs["y"]
            assert np.array_equal(got, f["x"][:, 1:])
