"""Property test: random sequence programs (tests/program_generator.py) with run-time
positions, dynamic dims, Loops and Ifs lower to tensor-only models that match the
original on both backends, and the model passes onnx's full checker after every pass
(a wrong declared shape is caught in the pass that wrote it). The second test draws the
Stage 7 shapes too (lists whose elements differ, front and middle inserts in loops,
SequenceMap in If branches, Loop > If > SequenceMap, a model input of unknown rank in one
program of four, whose lists go Flat with widths and ranks known at run time).
``python tools/fuzz_programs.py`` runs many more."""

from __future__ import annotations

import os
import warnings

import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from seqlower.fastpath import repeats
from seqlower.fastpath.copies import rename
from seqlower.errors import ModelWarning
from tests.helpers import lower_checked
from tests.program_generator import generate

EXAMPLES = int(os.environ.get("SEQLOWER_GENERATED_PROGRAMS", "150"))
# Each test runs as this many items of EXAMPLES / SHARDS programs each: the suite's
# workers share them (one item of 150 programs was a 30 s tail on one core). Hypothesis
# draws each parametrized item's programs from its own seed (its node id).
SHARDS = 5


def _drawer(data):
    def draw(kind, *args):
        if kind == "int":
            return data.draw(st.integers(args[0], args[1]))
        return data.draw(st.sampled_from(args[0]))

    return draw


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(max_examples=EXAMPLES // SHARDS, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_program_lowers_and_matches(shard, data):
    m, feeds = generate(_drawer(data))
    lower_checked(m, inputs=[feeds], check_each_pass=True)


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(max_examples=EXAMPLES // 2 // SHARDS, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_program_with_stage7_shapes_lowers_and_matches(shard, data):
    m, feeds = generate(_drawer(data), shapes="v2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)  # an input of unknown rank is accepted with one
        lower_checked(m, inputs=[feeds], check_each_pass=True)


def _repeated(m: onnx.ModelProto, copies: int) -> onnx.ModelProto | None:
    """``copies`` copies of a generated program side by side on the same inputs, each
    float output read by a Neg and each integer or boolean one by a Cast (so no copy
    makes a model output: they can be lowered apart, seqlower.fastpath.repeats). None: a program
    with a sequence output."""
    g = m.graph
    if any(o.type.WhichOneof("value") != "tensor_type" for o in g.output):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(m)
    og = out.graph
    for field in ("node", "output", "initializer", "value_info"):
        og.ClearField(field)
    for j in range(copies):
        # (The initializers named up front: add_prefix_graph renames what subgraphs read of
        # them only if it knows them before it walks the subgraphs.)
        c = onnx.compose.add_prefix_graph(g, f"c{j}_", rename_inputs=False,
                                          name_map={t.name: f"c{j}_{t.name}" for t in g.initializer})
        og.node.extend(c.node)
        og.initializer.extend(c.initializer)
        og.value_info.extend(c.value_info)
        for o in c.output:
            elem = o.type.tensor_type.elem_type
            if elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                og.node.append(onnx.helper.make_node("Neg", [o.name], [o.name + "_neg"]))
                og.output.add(name=o.name + "_neg").type.CopyFrom(o.type)
            elif elem in (onnx.TensorProto.INT64, onnx.TensorProto.BOOL):
                og.node.append(onnx.helper.make_node("Cast", [o.name], [o.name + "_f"], to=onnx.TensorProto.FLOAT))
                v = og.output.add(name=o.name + "_f")
                v.type.CopyFrom(o.type)
                v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            else:
                og.output.append(o)
    return out


@pytest.mark.parametrize("shard", range(2))
@settings(max_examples=EXAMPLES // 5 // 2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_programs_repeated_lower_and_match(shard, data):
    """Four copies of one program: equal webs, lowered once and copied (seqlower.fastpath.repeats)
    where a copy can be lowered alone, and every copy computes what the program does."""
    m, feeds = generate(_drawer(data))
    repeated = _repeated(m, repeats.MIN_MEMBERS)
    assume(repeated is not None)
    lower_checked(repeated, inputs=[feeds])


def _chained(m: onnx.ModelProto, copies: int) -> onnx.ModelProto | None:
    """``_repeated``, each copy after the first reading its first float input through
    ``x + 0 * ReduceSum(an output of the copy before)``: untouched nodes between the
    copies' webs (the region is put back around them, ``seqlower.fastpath.splice.splice``), the
    same numbers. None: no float input, or no float output to chain through."""
    out = _repeated(m, copies)
    if out is None:
        return None
    floats = (onnx.TensorProto.FLOAT,)
    first = next((v.name for v in m.graph.input if v.type.tensor_type.elem_type in floats
                  and v.name not in {t.name for t in m.graph.initializer}), None)
    made = next((o.name for o in m.graph.output if o.type.tensor_type.elem_type in floats), None)
    if first is None or made is None:
        return None
    og = out.graph
    nodes = list(og.node)
    del og.node[:]
    for j in range(copies):
        prefix = f"c{j}_"
        mine = [n for n in nodes if any(o.startswith(prefix) for o in n.output)]
        if j > 0:
            fed = f"{prefix}{first}_fed"
            before = f"c{j - 1}_{made}"
            og.node.extend([
                onnx.helper.make_node("ReduceSum", [before], [f"{fed}_sum"], keepdims=0),
                onnx.helper.make_node("Mul", [f"{fed}_sum", "chain_zero"], [f"{fed}_zero"]),
                onnx.helper.make_node("Add", [first, f"{fed}_zero"], [fed])])
            for n in mine:
                rename(n, {first: fed}, all_names=False)  # (its subgraphs' reads too)
        og.node.extend(mine)
    og.initializer.append(onnx.helper.make_tensor("chain_zero", onnx.TensorProto.FLOAT, [], [0.0]))
    return out


@pytest.mark.parametrize("shard", range(3))
@settings(max_examples=EXAMPLES // 5 // 3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_programs_chained_through_untouched_nodes_lower_and_match(shard, data):
    """Four copies of one program, each fed by the one before through nodes the lowering
    does not touch: the region is spliced around them, repeats apply where keys agree,
    and every copy computes what the program does."""
    m, feeds = generate(_drawer(data))
    chained = _chained(m, repeats.MIN_MEMBERS)
    assume(chained is not None)
    lower_checked(chained, inputs=[feeds])


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(max_examples=EXAMPLES // 2 // SHARDS, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_program_with_stage14_shapes_lowers_and_matches(shard, data):
    # v4: lists built one to three graphs down (If branches, Loop and SequenceMap and Scan
    # bodies), static lists in branches and bodies, Optional and Identity around a list,
    # the program in a model-local function (tests/program_generator.py), and the v2-v3
    # shapes. A program whose branches declare what onnx's inference contradicts (as
    # exporters do) is not held to the full checker after every pass.
    m, feeds = generate(_drawer(data), shapes="v4")
    try:
        onnx.checker.check_model(m, full_check=True)
        full = True
    except onnx.checker.ValidationError:
        full = False
    except onnx.shape_inference.InferenceError:
        full = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)
        lower_checked(m, inputs=[feeds], check_each_pass=full)
