"""seqlower.analysis.plist and the analysis's elements on it (Stage 11): edits share what they do
not touch, so a 10^4-edit list costs O(log n) node creations per edit, not a copy."""

from __future__ import annotations

import random

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper

from seqlower.analysis import plist
from seqlower.analysis.lattice import Elements, SeqInfo
from seqlower.analysis.plist import PList


@pytest.mark.parametrize("seed", range(4))
def test_every_edit_gives_the_list_a_python_list_gives(seed):
    rng = random.Random(seed)
    ref = [rng.randint(0, 3) for _ in range(rng.randint(0, 300))]
    pl = PList.of(ref)
    kept = []  # (earlier lists stay as they were: nothing is shared wrong)
    for step in range(3000):
        op = rng.random()
        if op < 0.45 or not ref:
            i, x = rng.randint(0, len(ref)), rng.randint(0, 9)
            ref.insert(i, x)
            pl = pl.insert(i, x)
        elif op < 0.97:
            i = rng.randrange(len(ref))
            del ref[i]
            pl = pl.delete(i)
        else:  # (a run of copies, edited inside)
            n, x = rng.randint(0, 5), rng.randint(0, 9)
            ref = [x] * n + ref
            pl = PList.of([*PList.repeat(x, n), *pl])
        if step % 50 == 0:
            kept.append((list(ref), pl))
        assert len(pl) == len(ref)
    for want, got in kept:
        assert list(got) == want
        assert [got[i] for i in range(-len(want), len(want))] == want + want
    with pytest.raises(IndexError):
        pl[len(ref)]
    with pytest.raises(IndexError):
        pl.insert(len(ref) + 1, 0)


def test_the_census_follows_the_shapes_and_constants():
    a, b = ir.Shape([2, 3]), ir.Shape([4])
    one = np.ones(3, np.float32)
    e = Elements.of([(a, None), (a, one), (b, None)])
    assert {k: n for k, (_, n) in e.census.items()} == {(2, 3): 2, (4,): 1} and e.unknown == 2
    e2 = e.delete(2)
    info = SeqInfo.from_elements(ir.DataType.FLOAT, e2)
    assert info.uniform and info.elem_shape == a and info.length == 2 and list(info.shapes) == [a, a]
    assert SeqInfo.from_elements(ir.DataType.FLOAT, e).elem_shape is None  # (ranks differ)
    e3 = e2.delete(0)
    assert SeqInfo.from_elements(ir.DataType.FLOAT, e3).all_const and e3.unknown == 0
    assert e.census[(2, 3)][1] == 2  # (the edits left the first list as it was)


def _edits(n: int, rows: int) -> onnx.ModelProto:
    """``n`` inserts and erases at positions of their own on a list of ``rows`` rows,
    inserting a computed mean (Stage 11's long-list member)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s0"], axis=0, keepdims=0),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=0)]
    inits, length = [], rows
    for i in range(n):
        if length > 1 and i % 2:
            p = int(rng.integers(-length, length))
            nodes.append(helper.make_node("SequenceErase", [f"s{i}", f"p{i}"], [f"s{i + 1}"]))
            length -= 1
        else:
            p = int(rng.integers(-length, length + 1))
            nodes.append(helper.make_node("SequenceInsert", [f"s{i}", "m", f"p{i}"], [f"s{i + 1}"]))
            length += 1
        inits.append(numpy_helper.from_array(np.array(p, np.int64), f"p{i}"))
    nodes.append(helper.make_node("ConcatFromSequence", [f"s{n}"], ["out"], axis=0, new_axis=1))
    g = helper.make_graph(nodes, "edits", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [rows, 8])],
                          [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [None, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_analysis_of_ten_thousand_edits_creates_log_n_nodes_per_edit(monkeypatch):
    from seqlower import load_model
    from seqlower.analysis.analyzer import analyze

    created = [0]
    real = plist._Node.__init__

    def counted(self, *args):
        created[0] += 1
        real(self, *args)

    monkeypatch.setattr(plist._Node, "__init__", counted)
    n = 10_000
    analysis = analyze(load_model(_edits(n, n)))
    assert analysis.info[next(v for v in analysis.info if v.name == f"s{n}")].length == n
    # Copying each value's elements was n * n = 10^8 element copies; a treap of 2 * 10^4
    # elements is ~2 ln(n) ~ 20 deep, a few node copies per level (and at least one node
    # per edit: the elements are in the tree).
    assert n <= created[0] < 100 * n, created[0]
