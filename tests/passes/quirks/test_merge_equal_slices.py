"""tract quirk "duplicate-computations" (passes/quirks/merge_equal_slices.py): Slices and Split
outputs that give the same rows of one tensor become one value in the model lowered for
tract. The reproducer is torch fuzz seed 18057's export cut to its nodes: the rows
``x[1:2]`` twice, each times the same constant, and tract's "eval() called on a Dummy op"."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower.executor import Executor
from tests.helpers import FLOAT, const, lowered_for, model, t

_INITS = [const("k", np.float32(2.0)), const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64)),
          const("zero", np.array([0], np.int64)), const("one_b", np.array([1], np.int64)),
          const("two_b", np.array([2], np.int64)), const("zero_b", np.array([0], np.int64))]


def _twice(second: str, dims) -> object:
    """``x[1:2] * k`` beside the same rows made as ``second`` says, times k too."""
    if second == "split":
        made = [helper.make_node("Split", ["x"], ["p0", "p1"], axis=0, num_outputs=2)]
    elif second == "split_sizes":
        made = [helper.make_node("Split", ["x", "sizes"], ["p0", "p1"], axis=0)]
    else:  # the same bounds, held by other initializers
        made = [helper.make_node("Slice", ["x", "zero_b", "one_b", "zero_b"], ["p0"]),
                helper.make_node("Slice", ["x", "one_b", "two_b", "zero_b"], ["p1"])]
    nodes = [helper.make_node("Slice", ["x", "one", "two", "zero"], ["s"]), helper.make_node("Mul", ["s", "k"], ["m1"]),
             *made, helper.make_node("Mul", ["p1", "k"], ["m2"]),
             helper.make_node("Concat", ["p1", "p0"], ["cat"], axis=0),
             helper.make_node("Concat", ["m1", "m2"], ["cat1"], axis=0)]
    return model(nodes, [t("x", FLOAT, dims)], [t("cat", FLOAT, [None, 4]), t("cat1", FLOAT, [None, 4])],
                 opset=20, initializer=[*_INITS, const("sizes", np.array([1, 1], np.int64))])


@pytest.mark.parametrize("second, dims", [("split", [2, 4]), ("split_sizes", ["n", 4]), ("slices", ["n", 4])])
def test_tract_fails_the_same_rows_made_twice_and_runs_them_made_once(second, dims):
    m = _twice(second, dims)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with pytest.raises(Exception, match="Dummy"):
        Executor(m, backend="tract").run({"x": x})
    low = lowered_for(m, "tract")
    assert [n.op_type for n in low.graph.node].count("Mul") == 1
    for backend in ("reference", "tract"):
        got = Executor(low, backend=backend).run({"x": x}).outputs
        np.testing.assert_array_equal(got["cat"], np.concatenate([x[1:2], x[0:1]]))
        np.testing.assert_array_equal(got["cat1"], np.concatenate([x[1:2] * 2, x[1:2] * 2]))


def _pair(first: list, second: list, dims) -> object:
    """Two Slices of x with constant (starts, ends, axes), each a model output."""
    nodes, inits = [], []
    for k, (starts, ends, axes) in enumerate((first, second)):
        names = [f"b{k}_{w}" for w in ("s", "e", "a")]
        inits += [const(n, np.array(v, np.int64)) for n, v in zip(names, (starts, ends, axes))]
        nodes.append(helper.make_node("Slice", ["x", *names], [f"y{k}"]))
    return model(nodes, [t("x", FLOAT, dims)], [t("y0", FLOAT, [None, None]), t("y1", FLOAT, [None, None])],
                 opset=20, initializer=inits)


@pytest.mark.parametrize("first, second, dims, merged", [
    (([1], [3], [0]), ([1], [3], [0]), ["n", 4], True),  # written alike
    (([-3], [9], [0]), ([1], [4], [0]), [4, 4], True),  # alike once the dim is known
    (([0, 1], [4, 2], [1, 0]), ([1], [2], [0]), [4, 4], True),  # a full axis left out
    (([1], [3], [1]), ([1], [3], [0]), [4, 4], False),  # another axis
    (([-3], [9], [0]), ([1], [4], [0]), ["n", 4], False),  # alike only when n is 4
    (([1], [9], [0]), ([1], [4], [0]), ["n", 4], False),  # alike only when n <= 4
])
def test_slices_are_merged_exactly_when_their_rows_are_the_same(first, second, dims, merged):
    low = lowered_for(_pair(first, second, dims), "tract")
    assert ([n.op_type for n in low.graph.node].count("Slice") == 1) == merged
    for n in (4, 6) if dims[0] == "n" else (4,):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        got = Executor(low, backend="onnxruntime").run({"x": x}).outputs
        want = Executor(_pair(first, second, dims), backend="reference").run({"x": x}).outputs
        for k in ("y0", "y1"):
            np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("dims", [[1, 1], ["n", 1]])
def test_a_split_into_one_is_its_input_and_tract_runs_what_reads_both(dims):
    """torch fuzz 21836 (dynamo): ``x.split(1, 1)`` of a one-column x, and ``x + 1`` beside
    ``split[0] + 1``: tract took the Split for x, merged the two Adds, and failed ('eval()
    called on a Dummy op')."""
    nodes = [helper.make_node("Split", ["x"], ["part"], axis=1, num_outputs=1),
             helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("Add", ["part", "one"], ["b"]),
             helper.make_node("Split", ["a"], ["a_all"], axis=1, num_outputs=1),
             helper.make_node("Concat", ["b", "a_all"], ["y"], axis=1)]
    m = model(nodes, [t("x", FLOAT, dims)],
              [t("a_all", FLOAT, dims), t("y", FLOAT, [dims[0], 2]), t("a", FLOAT, dims)], opset=18,
              initializer=[const("one", np.float32(1.0))])
    x = np.array([[3.0]], np.float32)
    with pytest.raises(Exception, match="Dummy"):
        Executor(m, backend="tract").run({"x": x})
    low = lowered_for(m, "tract")
    assert "Split" not in [n.op_type for n in low.graph.node]
    for x in (x, np.arange(3, dtype=np.float32).reshape(3, 1)) if dims[0] == "n" else (x,):
        got = Executor(low, backend="tract").run({"x": x}).outputs
        np.testing.assert_array_equal(got["y"], np.concatenate([x + 1, x + 1], 1))
        np.testing.assert_array_equal(got["a"], x + 1)
