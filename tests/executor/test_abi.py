"""The model-boundary ABI: a hand-written 'lowered' model with values/shapes tensors is
fed and compared exactly like its sequence-typed original."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.errors import ExecutionError, ModelError
from seqlower.executor import AbiEntry, Executor, verify
from tests.helpers import FLOAT, INT64, model, seq, t


def abi_doc(inputs=(), outputs=()):
    return json.dumps({"version": 1, "inputs": list(inputs), "outputs": list(outputs)})


def seq_entry(name, elem_shape=None, ranks=False):
    tensors = {"values": f"{name}_values", "shapes": f"{name}_shapes"}
    if ranks:
        tensors["ranks"] = f"{name}_ranks"
    return {"name": name, "kind": "sequence", "elem_type": "FLOAT", "elem_shape": elem_shape, "tensors": tensors}


def original_reverse():
    """Returns the input sequence reversed... as Identity, plus its length."""
    nodes = [helper.make_node("Identity", ["S"], ["R"]), helper.make_node("SequenceLength", ["S"], ["n"])]
    return model(nodes, [seq("S", FLOAT, ["k"])], [seq("R", FLOAT, ["k"]), t("n", INT64, [])])


def lowered_by_hand(doc, *, n_from_shapes=True, corrupt=False):
    nodes = [
        helper.make_node("Identity", ["S_values"], ["R_values"]),
        helper.make_node("Identity", ["S_shapes"], ["R_shapes"]),
        helper.make_node("Shape", ["S_shapes"], ["shp"], end=1),
        helper.make_node("Squeeze", ["shp"], ["n"]),
    ]
    if corrupt:  # drop the last value: the shapes no longer fit
        nodes[0] = helper.make_node("Slice", ["S_values", "zero", "minus_one"], ["R_values"])
    inits = [helper.make_tensor("zero", INT64, [1], [0]), helper.make_tensor("minus_one", INT64, [1], [-1])] if corrupt else []
    m = model(nodes, [t("S_values", FLOAT, ["v"]), t("S_shapes", INT64, ["n", 1])],
              [t("R_values", FLOAT, ["v"]), t("R_shapes", INT64, ["n", 1]), t("n", INT64, [])], initializer=inits)
    onnx.helper.set_model_props(m, {"seqlower.abi": doc})
    return m


DOC = abi_doc([seq_entry("S", ["k"])], [seq_entry("R", ["k"])])


def test_logical_ports_and_run():
    ex = Executor(lowered_by_hand(DOC))
    assert [p.name for p in ex.inputs] == ["S"] and [p.name for p in ex.outputs] == ["R", "n"]
    assert ex.inputs[0].type.WhichOneof("value") == "sequence_type"
    xs = [np.arange(k, dtype=np.float32) for k in (2, 0, 3)]
    out = ex.run({"S": xs}).outputs
    assert [o.tolist() for o in out["R"]] == [x.tolist() for x in xs] and out["n"] == 3
    raw = Executor(lowered_by_hand(DOC), use_abi=False)
    assert [p.name for p in raw.inputs] == ["S_values", "S_shapes"]


def test_verify_original_against_abi_model():
    report = verify(original_reverse(), lowered_by_hand(DOC), samples=3, seq_len=4)
    assert report.equivalent and report.compared == 3
    report = verify(original_reverse(), lowered_by_hand(DOC), samples=2, seq_len=0)
    assert report.equivalent


def test_corrupt_abi_output_is_caught():
    report = verify(original_reverse(), lowered_by_hand(DOC, corrupt=True), samples=1)
    assert not report.equivalent and report.samples[0].status == "lowered failed"
    assert "does not fit the values" in report.samples[0].error


def test_pack_unpack_round_trip_with_ranks():
    e = AbiEntry.from_json(seq_entry("S", None, ranks=True))
    value = [np.array(1.0, np.float32), np.arange(3, dtype=np.float32), np.ones((2, 2), np.float32)]
    packed = e.pack(value)
    assert packed["S_shapes"].tolist() == [[0, 0], [3, 0], [2, 2]] and packed["S_ranks"].tolist() == [0, 1, 2]
    back = e.unpack(packed)
    assert [b.shape for b in back] == [(), (3,), (2, 2)] and all(np.array_equal(a, b) for a, b in zip(value, back))
    with pytest.raises(ExecutionError, match="need a ranks tensor"):
        AbiEntry.from_json(seq_entry("S")).pack(value)


def test_optional_kinds():
    opt_t = AbiEntry.from_json({"name": "o", "kind": "optional_tensor", "elem_type": "FLOAT", "elem_shape": [2],
                                "tensors": {"present": "o_present", "value": "o_value"}})
    assert opt_t.unpack(opt_t.pack(None)) is None
    assert np.array_equal(opt_t.unpack(opt_t.pack(np.ones(2, np.float32))), np.ones(2))
    opt_s = AbiEntry.from_json({"name": "s", "kind": "optional_sequence", "elem_type": 7, "elem_shape": [],
                                "tensors": {"present": "p", "values": "v", "shapes": "sh"}})
    assert opt_s.unpack(opt_s.pack(None)) is None
    assert [int(x) for x in opt_s.unpack(opt_s.pack([np.array(4), np.array(5)]))] == [4, 5]
    assert opt_s.logical_type().optional_type.elem_type.WhichOneof("value") == "sequence_type"


def test_malformed_abi_metadata():
    with pytest.raises(ModelError, match="malformed"):
        Executor(lowered_by_hand('{"inputs": [{"name": "S", "kind": "bogus"}]}'))
    with pytest.raises(ExecutionError, match="does not have"):
        Executor(lowered_by_hand(abi_doc([seq_entry("Q")])))


@pytest.mark.parametrize("tensors, message", [
    # A ranks output claiming rank 3 for a shapes of width 2 (found by mutating a lowered
    # model's constants: the decoder used to read the two columns there were).
    ({"S_values": np.arange(6, dtype=np.float32), "S_shapes": np.array([[2, 3]]), "S_ranks": np.array([3])},
     "claims rank 3, past the 2 columns"),
    ({"S_values": np.arange(6, dtype=np.float32), "S_shapes": np.array([[2, 3]]), "S_ranks": np.array([-1])},
     "claims rank -1"),
    ({"S_values": np.zeros(0, np.float32), "S_shapes": np.array([[-2, 0]]), "S_ranks": np.array([2])},
     "negative dim"),
    ({"S_values": np.arange(5, dtype=np.float32), "S_shapes": np.array([[2, 3]]), "S_ranks": np.array([2])},
     "does not fit the values"),
    ({"S_values": np.arange(7, dtype=np.float32), "S_shapes": np.array([[2, 3]]), "S_ranks": np.array([2])},
     "cover 6 values but there are 7"),
])
def test_inconsistent_boundary_tensors_are_refused(tensors, message):
    e = AbiEntry.from_json(seq_entry("S", None, ranks=True))
    with pytest.raises(ExecutionError, match=message):
        e.unpack(tensors)


def test_a_shapes_width_other_than_the_declared_rank_is_refused():
    e = AbiEntry.from_json(seq_entry("S", [2, None]))
    assert [x.shape for x in e.unpack({"S_values": np.arange(6, dtype=np.float32), "S_shapes": np.array([[2, 3]])})] \
        == [(2, 3)]
    with pytest.raises(ExecutionError, match="3 columns but the elements have rank 2"):
        e.unpack({"S_values": np.arange(6, dtype=np.float32), "S_shapes": np.array([[2, 3, 1]])})
