"""Clean-up keeps Loop valid after onnx_ir strips trailing empty inputs, and leaves no
value used by the body of a node it removed."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from seqlower.passes.folds.clean_up_graph import CleanUpGraphPass
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, t


def test_loop_without_cond_or_carried_values_keeps_two_inputs():
    b = body(
        [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Add", ["x", "x"], ["y"])],
        [t("i", INT64, []), t("c", BOOL, [])],
        [t("c2", BOOL, []), t("y", FLOAT, [2])],
    )
    m = model(
        [helper.make_node("Loop", ["trips", ""], ["ys"], body=b), helper.make_node("Neg", ["x"], ["dead"])],
        [t("x", FLOAT, [2])],
        [t("ys", FLOAT, [3, 2])],
        initializer=[const("trips", 3, np.int64), const("unused", 1.0, np.float32)],
    )
    irm = ir.serde.deserialize_model(m)
    assert CleanUpGraphPass()(irm).modified
    loop = next(n for n in irm.graph if n.op_type == "Loop")
    assert len(loop.inputs) == 2 and loop.inputs[1] is None
    assert [n.op_type for n in irm.graph] == ["Loop"] and "unused" not in irm.graph.initializers
    onnx.checker.check_model(to_proto(irm), full_check=True)
    assert not CleanUpGraphPass()(irm).modified


def test_a_removed_ifs_branches_stop_reading_outer_values():
    # s feeds only the dead If's branches: onnx_ir removes the If but its branch nodes
    # would keep reading s, so s (and its producer) could never be removed safely.
    branch = lambda op, out: body([helper.make_node(op, ["s"], [out])], [], [t(out, FLOAT, [2])])  # noqa: E731
    m = model(
        [
            helper.make_node("Neg", ["x"], ["s"]),
            helper.make_node("If", ["c"], ["dead"], then_branch=branch("Abs", "a"), else_branch=branch("Relu", "r")),
            helper.make_node("Identity", ["x"], ["y"]),
        ],
        [t("x", FLOAT, [2]), t("c", BOOL, [])],
        [t("y", FLOAT, [2])],
    )
    irm = ir.serde.deserialize_model(m)
    assert CleanUpGraphPass()(irm).modified
    assert [n.op_type for n in irm.graph] == ["Identity"]
    x = irm.graph.inputs[0]
    assert [u.node.op_type for u in x.uses()] == ["Identity"]


def test_nodes_out_of_order_are_sorted_and_nodes_in_order_are_left_alone():
    from seqlower.passes.folds.clean_up_graph import _sorted

    # A branch reads b, which its If comes before: the If must move after b's producer.
    then = body([helper.make_node("Neg", ["b"], ["n"])], [], [t("n", FLOAT, [2])])
    other = body([helper.make_node("Identity", ["b"], ["o"])], [], [t("o", FLOAT, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Abs", ["x"], ["b"])]
    m = ir.serde.deserialize_model(model(nodes, [t("x", FLOAT, [2]), t("c", BOOL, [])], [t("y", FLOAT, [2])]))
    assert not _sorted(m)
    assert CleanUpGraphPass()(m).modified
    assert [n.op_type for n in m.graph] == ["Abs", "If"] and _sorted(m)
    onnx.checker.check_model(to_proto(m), full_check=True)
    # Out of order inside a branch too.
    then = body([helper.make_node("Neg", ["a"], ["n"]), helper.make_node("Abs", ["x"], ["a"])], [], [t("n", FLOAT, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=body(
        [helper.make_node("Identity", ["x"], ["o"])], [], [t("o", FLOAT, [2])]))]
    m = ir.serde.deserialize_model(model(nodes, [t("x", FLOAT, [2]), t("c", BOOL, [])], [t("y", FLOAT, [2])]))
    assert not _sorted(m)
    CleanUpGraphPass()(m)
    branch = next(iter(m.graph)).attributes["then_branch"].as_graph()
    assert [n.op_type for n in branch] == ["Abs", "Neg"] and _sorted(m)
    assert not CleanUpGraphPass()(m).modified
