"""The ONNX backend node cases that touch sequences or optionals, two ways. Closed over
their test data (every input a constant, a sequence input a SequenceConstruct of
constants, every sequence output read back by SequenceAt + SequenceLength), and open
(lists in and out through the ABI, every data set). Both must lower to tensor-only
models whose outputs are the expected ones, on both backends."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from seqlower.executor import Executor, compare_values
from seqlower.io.inventory import take_inventory
from tests.conftest import sequence_backend_cases
from tests.helpers import lower_checked

CASES = sequence_backend_cases()
ORT_UNSUPPORTED = {"test_reversesequence_bfloat16"}


def close(case) -> tuple[onnx.ModelProto, dict, list[np.ndarray]]:
    """The case's model with its first data set baked in (optionals stay inputs: their
    feeds are returned), and the flat expected outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    inputs, expected = case.data_sets[0]
    g = m.graph
    kept, pre, feeds = [], [], {}
    for vi, val in zip(list(g.input), inputs):
        kind = vi.type.WhichOneof("value")
        if kind == "tensor_type":
            g.initializer.append(numpy_helper.from_array(np.asarray(val), vi.name))
        elif kind == "sequence_type" and isinstance(val, list):
            names = []
            for i, a in enumerate(val):
                g.initializer.append(numpy_helper.from_array(np.asarray(a), f"{vi.name}__e{i}"))
                names.append(f"{vi.name}__e{i}")
            elem = vi.type.sequence_type.elem_type.tensor_type.elem_type
            pre.append(
                helper.make_node("SequenceConstruct", names, [vi.name], name=f"closed_{vi.name}")
                if names else helper.make_node("SequenceEmpty", [], [vi.name], dtype=elem, name=f"closed_{vi.name}")
            )
        else:
            kept.append(vi)
            feeds[vi.name] = val
    del g.input[:]
    g.input.extend(kept)
    nodes = pre + list(g.node)
    outputs, flat = [], []
    for vi, want in zip(list(g.output), expected):
        if vi.type.WhichOneof("value") == "sequence_type":
            for i, a in enumerate(want):
                pos = f"{vi.name}__p{i}"
                g.initializer.append(numpy_helper.from_array(np.array(i, np.int64), pos))
                nodes.append(helper.make_node("SequenceAt", [vi.name, pos], [f"{vi.name}__{i}"]))
                outputs.append(helper.make_tensor_value_info(f"{vi.name}__{i}", helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.asarray(a).shape))
                flat.append(np.asarray(a))
            nodes.append(helper.make_node("SequenceLength", [vi.name], [f"{vi.name}__len"]))
            outputs.append(helper.make_tensor_value_info(f"{vi.name}__len", onnx.TensorProto.INT64, []))
            flat.append(np.array(len(want), np.int64))
        else:
            outputs.append(vi)
            flat.append(want)
    del g.node[:]
    g.node.extend(nodes)
    del g.output[:]
    g.output.extend(outputs)
    onnx.checker.check_model(m, full_check=True)
    return m, feeds, flat


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_closed_backend_case_lowers_and_matches_expected(case):
    # Closed over its data, the Unrolled lowering takes what is static; the rest goes Flat.
    m, feeds, expected = close(case)
    backends = ("reference",) if case.name in ORT_UNSUPPORTED else ("reference", "onnxruntime")
    low, _ = lower_checked(m, backends=backends, inputs=[feeds])
    assert take_inventory(low).clean
    ex = Executor(low)
    result = ex.run(feeds)
    for port, want in zip(ex.outputs, expected):
        rep = compare_values(port.name, want, result.outputs[port.name], case.rtol, case.atol)
        assert rep.ok, f"{case.name}/{port.name}: {rep.detail}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_open_backend_case_lowers_through_the_abi(case):
    """The case as it is: sequence-typed inputs and outputs go through the ABI, every
    data set is fed as lists of arrays and the outputs compared as lists."""
    runs = [("reference", "all")]
    if case.name not in ORT_UNSUPPORTED:
        runs += [("onnxruntime", "all"), ("onnxruntime", "disable")]
    datasets = [dict(zip([i.name for i in case.model.graph.input], inputs)) for inputs, _ in case.data_sets]
    low, _ = lower_checked(case.model, backends=())
    for backend, level in runs:
        ex = Executor(low, backend=backend, ort_opt_level=level)
        assert [p.name for p in ex.inputs] == [i.name for i in case.model.graph.input]
        for feeds, (_, expected) in zip(datasets, case.data_sets):
            result = ex.run(feeds)
            for port, want in zip(ex.outputs, expected):
                rep = compare_values(port.name, want, result.outputs[port.name], case.rtol, case.atol)
                assert rep.ok, f"{case.name}/{port.name} on {backend} ({level}): {rep.detail}"
