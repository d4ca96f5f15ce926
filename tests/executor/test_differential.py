"""Our kernels against onnxruntime on randomized inputs (hypothesis). Where onnxruntime
deviates from the spec, the deviation is asserted as a deviation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from seqlower.errors import ExecutionError
from seqlower.executor import Executor, compare_values
from tests.conftest import requires_ort
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, seq, single, t

pytestmark = requires_ort
# Derandomized: the same examples on every run, so CI is reproducible.
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
_CACHE: dict = {}


def both(m, feeds, policy="auto"):
    """(ours, onnxruntime's): each an outputs dict or the ExecutionError raised."""
    key = m.SerializeToString()
    if key not in _CACHE:
        _CACHE[key] = (Executor(m, keepdims_policy=policy), Executor(m, backend="onnxruntime"))
    out = []
    for ex in _CACHE[key]:
        try:
            out.append(ex.run(feeds).outputs)
        except ExecutionError as e:
            out.append(e)
    return out


def assert_agree(ours, theirs):
    if isinstance(ours, Exception) or isinstance(theirs, Exception):
        assert isinstance(ours, Exception) and isinstance(theirs, Exception), f"ours={ours!r} onnxruntime={theirs!r}"
        return
    for name in ours:
        r = compare_values(name, ours[name], theirs[name])
        assert r.ok, r.detail


shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3)


def arr(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- SplitToSequence -------------------------------------------------------------------


@st.composite
def split_cases(draw):
    shape = draw(shapes)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    d = shape[axis]
    kind = draw(st.sampled_from(["none", "scalar", "list"]))
    if kind == "scalar":
        split = np.array(draw(st.integers(1, 5)), np.int64)
    elif kind == "list":
        cuts = sorted(draw(st.lists(st.integers(0, d), max_size=3)))
        split = np.diff([0, *cuts, d]).astype(np.int64)
    else:
        split = None
    return shape, axis, split, draw(st.sampled_from([0, 1]))


@SETTINGS
@given(split_cases())
def test_split_to_sequence(case):
    shape, axis, split, keepdims = case
    ins = [t("x", FLOAT, ["a"] * len(shape))] + ([t("s", INT64, list(split.shape))] if split is not None else [])
    m = single("SplitToSequence", ins, [seq("out")], axis=axis, keepdims=keepdims)
    feeds = {"x": arr(shape)} | ({"s": split} if split is not None else {})
    ours, theirs = both(m, feeds)
    a = axis % len(shape)
    rest = int(np.prod(shape[:a] + shape[a + 1 :]))  # elements per slice along the split axis
    if split is not None and split.ndim == 0 and keepdims == 0 and int(split) > 1 and shape[axis] > 1 and rest > 0:
        # Deviation: with keepdims=0 onnxruntime squeezes chunks of a scalar split, which
        # fails (a bad reshape) as soon as a chunk has more than one entry.
        assert isinstance(theirs, ExecutionError) and not isinstance(ours, Exception)
        return
    assert_agree(ours, theirs)


def test_split_keepdims_deviation_under_spec_policy():
    """onnxruntime squeezes the chunks of a scalar split of 1 with keepdims=0; the spec does not."""
    m = single("SplitToSequence", [t("x", FLOAT, [3, 2]), t("s", INT64, [])], [seq("out")], keepdims=0)
    feeds = {"x": arr((3, 2)), "s": np.array(1)}
    spec, theirs = both(m, feeds, policy="spec")
    assert [c.shape for c in spec["out"]] == [(1, 2)] * 3
    assert [c.shape for c in theirs["out"]] == [(2,)] * 3


def test_constant_zero_split_crash_is_reported():
    """onnxruntime dies with SIGFPE on a constant scalar split of 0: an error, not a dead process."""
    m = single("SplitToSequence", [t("x", FLOAT, [3, 2]), "s"], [seq("out")], initializer=[const("s", 0, np.int64)])
    with pytest.raises(ExecutionError, match=r"onnxruntime crashed \(killed by SIGFPE\)"):
        Executor(m, backend="onnxruntime").run({"x": arr((3, 2))})
    with pytest.raises(ExecutionError, match="must be positive"):
        Executor(m).run({"x": arr((3, 2))})
    # The worker comes back for the next model.
    ok = single("SplitToSequence", [t("x", FLOAT, [3, 2])], [seq("out")])
    assert len(Executor(ok, backend="onnxruntime").run({"x": arr((3, 2))}).outputs["out"]) == 3


# -- positions ---------------------------------------------------------------------------


@st.composite
def seq_and_pos(draw, slack=1):
    n = draw(st.integers(0, 4))
    elems = [arr(draw(st.lists(st.integers(0, 3), max_size=2)), i) for i in range(n)]
    pos = draw(st.one_of(st.none(), st.integers(-n - slack, n + slack)))
    return elems, pos


@SETTINGS
@given(seq_and_pos(), st.lists(st.integers(0, 3), max_size=2))
def test_sequence_insert(case, shape):
    elems, pos = case
    ins = [seq("S"), t("T", FLOAT, ["a"] * len(shape))] + ([t("p", INT64, [])] if pos is not None else [])
    m = single("SequenceInsert", ins, [seq("out")])
    feeds = {"S": elems, "T": arr(shape, 9)} | ({"p": np.array(pos)} if pos is not None else {})
    assert_agree(*both(m, feeds))


@SETTINGS
@given(seq_and_pos())
def test_sequence_erase(case):
    elems, pos = case
    ins = [seq("S")] + ([t("p", INT64, [])] if pos is not None else [])
    m = single("SequenceErase", ins, [seq("out")])
    assert_agree(*both(m, {"S": elems} | ({"p": np.array(pos)} if pos is not None else {})))


@SETTINGS
@given(seq_and_pos())
def test_sequence_at(case):
    elems, pos = case
    m = single("SequenceAt", [seq("S"), t("p", INT64, [])], [t("out", FLOAT, ["a"])])
    assert_agree(*both(m, {"S": elems, "p": np.array(0 if pos is None else pos)}))


# -- ConcatFromSequence ------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), st.integers(1, 3), st.integers(-4, 3), st.sampled_from([0, 1]))
def test_concat_from_sequence(shape, n, axis, new_axis):
    r = len(shape) + new_axis
    if not -r <= axis < r:
        return
    m = single("ConcatFromSequence", [seq("S")], [t("y", FLOAT, ["a"] * r)], axis=axis, new_axis=new_axis)
    sizes = [shape[:] for _ in range(n)]
    if not new_axis:  # vary the concatenated axis
        for i, s in enumerate(sizes):
            s[axis] = (s[axis] + i) % 4
    assert_agree(*both(m, {"S": [arr(s, i) for i, s in enumerate(sizes)]}))


# -- ReverseSequence -------------------------------------------------------------------


@SETTINGS
@given(st.integers(1, 4), st.integers(0, 4), st.lists(st.integers(1, 3), max_size=1), st.booleans(), st.data())
def test_reverse_sequence(batch, steps, rest, batch_first, data):
    shape = [batch, steps, *rest] if batch_first else [steps, batch, *rest]
    lens = np.array(data.draw(st.lists(st.integers(0, steps), min_size=batch, max_size=batch)), np.int64)
    m = single("ReverseSequence", [t("x", FLOAT, ["a"] * len(shape)), t("lens", INT64, [batch])],
               [t("y", FLOAT, ["a"] * len(shape))], batch_axis=0 if batch_first else 1, time_axis=1 if batch_first else 0)
    assert_agree(*both(m, {"x": arr(shape), "lens": lens}))


# -- SequenceMap and Loop --------------------------------------------------------------


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=2), max_size=4))
def test_sequence_map(shapes_):
    b = body([helper.make_node("Add", ["a", "w"], ["s"]), helper.make_node("Shape", ["a"], ["shp"])],
             [t("a", FLOAT, None), t("w", FLOAT, [])], [t("s", FLOAT, None), t("shp", INT64, [None])])
    node = helper.make_node("SequenceMap", ["S", "W"], ["sums", "shapes"], body=b)
    m = model([node], [seq("S"), t("W", FLOAT, [])], [seq("sums"), seq("shapes", INT64)])
    assert_agree(*both(m, {"S": [arr(s, i) for i, s in enumerate(shapes_)], "W": np.array(2, np.float32)}))


@SETTINGS
@given(st.integers(0, 4), st.lists(st.integers(1, 3), max_size=2), st.booleans())
def test_loop_scan_and_carried(trip, shape, cond):
    b = body(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        [t("i", INT64, []), t("c", BOOL, []), t("acc", FLOAT, ["a"] * len(shape))],
        [t("c_out", BOOL, []), t("acc_out", FLOAT, ["a"] * len(shape)), t("scan", FLOAT, [*shape])],
    )
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scans"], body=b)
    m = model([node], [t("M", INT64, []), t("cond", BOOL, []), t("acc0", FLOAT, list(shape)), t("x", FLOAT, list(shape))],
              [t("acc", FLOAT, list(shape)), t("scans", FLOAT, [None, *shape])], opset=13)
    feeds = {"M": np.array(trip), "cond": np.array(cond), "acc0": arr(shape, 1), "x": arr(shape, 2)}
    assert_agree(*both(m, feeds))


@pytest.mark.parametrize("lens", [[5, 1], [-1, 2], [1, 1, 1], [1]])
def test_reverse_sequence_invalid_lengths_rejected_by_both(lens):
    m = single("ReverseSequence", [t("x", FLOAT, [3, 2]), t("lens", INT64, ["b"])], [t("y", FLOAT, [3, 2])])
    ours, theirs = both(m, {"x": arr((3, 2)), "lens": np.array(lens, np.int64)})
    assert isinstance(ours, ExecutionError) and isinstance(theirs, ExecutionError)
    assert "ReverseSequence node" in str(ours)
