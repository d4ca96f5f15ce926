"""A region's nodes as a sub-model (DESIGN.md, "Core v2": Regions): its inputs typed
graph inputs (small constants as initializers, so the folds still see them), the values
the rest of the model reads its outputs. Where the model declares no type for an input,
onnx shape inference runs on the input's upstream cone only, with the weights replaced
by typed inputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from seqlower.fastpath.regions import DEFAULT_DOMAINS, NUMBER_TYPES, Found, Region, find
from seqlower.io.inference import infer_shapes
from seqlower.io.protos import outer_reads, scan_output_of, subgraphs_of
from seqlower.io.weights import Weights, is_stub
from seqlower.keys import OPEN_WHEN_EMPTY

__all__ = ["build", "cut", "constant_value", "full_type", "small_constant"]

# Constants at most this big are copied into the sub-model as initializers (the folds
# read split sizes, positions, shapes); bigger ones are typed graph inputs.
_SMALL_BYTES = 1 << 16


def cut(model: onnx.ModelProto, lacks: Iterable[str] = (), quirks: Iterable[str] = (),
        inferred: Mapping[str, onnx.TypeProto] | None = None, weights: Weights | None = None,
        kinds: list[tuple[str, str, bool]] | None = None) -> Region | None:
    """The sequence region of ``model``'s main graph as a sub-model, or None when the region
    way does not apply (see the module's doc). ``model`` is not changed. ``inferred``:
    types inference already found for the main graph's values (else the region's inputs
    that the model does not type are inferred on their cone). ``weights``: the weights
    ``model``'s stubs stand for (``seqlower.io.weights``); the region reads them itself.
    ``kinds``: ``node_kinds`` of the main graph, when read already.

    A few passes over the nodes, each a set test per node: a model of 40,000 nodes is cut
    in a tenth of a second."""
    found = find(model, lacks, quirks, weights, kinds)
    return None if found is None else build(found, found.region, inferred, weights)


@dataclass
class _Boundary:
    """What crosses the edge of a region's nodes in the main graph."""
    defined: set[str]  # every name the nodes make
    inputs: list[str]  # what they read from the rest, in order
    outputs: list[str]  # what the rest (or the graph's outputs) reads of what they make
    constant_nodes: dict[str, onnx.NodeProto]  # inputs made by a Constant node of one tensor
    constant_at: dict[str, int]  # where those Constant nodes are
    shared: set[str]  # inputs the rest of the model reads too
    last_producer: int  # the last node outside that makes an input (a Constant's aside)
    first_reader: int  # the first node outside that reads an output


def _boundary(found: Found, order: list[int]) -> _Boundary:
    index, kinds, nodes, outs, reads = found.index, found.kinds, found.nodes, found.outs, found.reads
    region = set(order)
    defined = {o for i in order for o in outs[i] if o}
    inputs = list(dict.fromkeys(x for i in order for x in reads[i] if x and x not in defined))
    read_outside: set[str] = index.graph_outputs & defined
    last_producer, first_reader = -1, len(nodes)
    constant_nodes: dict[str, onnx.NodeProto] = {}
    constant_at: dict[str, int] = {}
    shared: set[str] = set()
    for x in inputs:
        i = index.producer.get(x)
        if i is not None:
            if kinds[i][0] == "Constant" and kinds[i][1] in DEFAULT_DOMAINS and not nodes[i].input:
                # Comes along as a constant: a place after it only if the lowering reads it.
                constant_nodes[x] = nodes[i]
                constant_at[x] = i
            else:
                last_producer = max(last_producer, i)
        if any(r not in region for r in index.readers.get(x, ())):
            shared.add(x)
    for o in defined:
        outside = [r for r in index.readers.get(o, ()) if r not in region]
        if outside:
            read_outside.add(o)
            first_reader = min(first_reader, *outside)
    outputs = [o for i in order for o in outs[i] if o in read_outside]
    return _Boundary(defined, inputs, outputs, constant_nodes, constant_at, shared, last_producer, first_reader)


def _sub_boundary(found: Found, order: list[int], apart: set[int], edge: _Boundary) -> tuple[list[str], list[str]]:
    """The sub-model's inputs and outputs: the region's, and between the nodes kept and
    those ``apart``."""
    if not apart:
        return edge.inputs, edge.outputs
    outs, reads = found.outs, found.reads
    kept = [i for i in order if i not in apart]
    made_apart = {o for i in apart for o in outs[i] if o}
    kept_made = {o for i in kept for o in outs[i] if o}
    kept_reads = list(dict.fromkeys(x for i in kept for x in reads[i] if x and x not in kept_made))
    read_apart = {x for i in apart for x in reads[i]}
    wanted, read_outside = set(edge.inputs), set(edge.outputs)
    sub_in = [x for x in kept_reads if x in wanted or x in made_apart]
    sub_out = [o for i in kept for o in outs[i] if o and (o in read_outside or o in read_apart)]
    return sub_in, sub_out


def _initializers(found: Found, wanted: set[str], weights: Weights | None) -> dict[str, onnx.TensorProto]:
    """The main graph's initializers the region reads. A held weight of numbers (a float
    type) stays a stub, to come in as a typed input: the lowering reads the values of
    positions, sizes, shapes and masks, which are integers or booleans. An initializer
    that is also a graph input is a default the caller may override: it comes in as an
    input like any other, never as a constant."""
    g, index = found.model.graph, found.index
    return {x: weights.tensor(x) if weights is not None and x in weights.spans
            and g.initializer[i].data_type not in NUMBER_TYPES else g.initializer[i]
            for i, x in enumerate(index.init_names) if x in wanted and x not in index.overridable}


def build(found: Found, part: set[int], inferred: Mapping[str, onnx.TypeProto] | None = None,
          weights: Weights | None = None, apart: Iterable[int] = (),
          lowered: Mapping[str, onnx.TypeProto] | None = None,
          output_types: Mapping[str, onnx.TypeProto] | None = None, weights_typed: bool = False) -> Region:
    """The nodes ``part`` of ``found``'s graph as a Region (``cut``'s arguments). ``apart``:
    nodes of ``part`` that another way lowers (``seqlower.fastpath.repeats``): the Region still
    covers them (inputs, outputs, where it goes), but its sub-model leaves them out and
    reads what they make as inputs and declares what they read as outputs. ``lowered``:
    the types of values other nodes of the region make, as their lowering declares them
    (they type the sub-model's inputs before what the model declares or inference found).
    ``output_types``: how the sub-model declares its outputs, where not as the model does
    (when given, the others only as the model does: no inference for them).
    ``weights_typed``: every initializer of numbers (a float type) comes in as a typed
    input, as held weights do, whatever its size (a template: ``seqlower.fastpath.repeats``)."""
    index, order, apart = found.index, sorted(part), set(apart)
    edge = _boundary(found, order)
    sub_in, sub_out = _sub_boundary(found, order, apart, edge)
    initializers = _initializers(found, set(edge.inputs), weights)
    # What the sub-model's boundary needs a type for and nothing else gives: not the values
    # that come in as constants, nor what ``lowered`` and ``output_types`` type.
    needed = [x for x in sub_in if x not in initializers and (lowered is None or x not in lowered)
              and not (x in edge.constant_nodes and small_constant(constant_value(edge.constant_nodes[x])))]
    if output_types is None:
        needed += sub_out
    types = dict(index.types)
    missing = [x for x in dict.fromkeys(needed) if not full_type(types.get(x))]
    if missing and inferred is not None:
        types.update((x, inferred[x]) for x in missing if x in inferred)
    elif missing:
        types.update(_infer_cone(found.model, found.nodes, missing, types, part))
    sub_inputs, sub_inits, constants, model_inputs = _sub_inputs(
        found, edge, sub_in, initializers, lowered if lowered is not None else {}, types, weights_typed)
    sub_outputs = [_typed(x, output_types if output_types is not None and x in output_types else types)
                   for x in sub_out]
    kept = [i for i in order if i not in apart]
    inner = set().union(*(index.inner[i] for i in order if i in index.inner))
    sub = _sub_model(found, kept, sub_inputs, sub_outputs, sub_inits,
                     edge.defined | {n for i in kept if i in index.inner for n in index.inner[i]})
    shared = edge.shared | {v.name for v in found.model.graph.output}
    return Region(sub, order, edge.inputs, edge.outputs, constants, index.names - edge.defined - inner - set(edge.inputs),
                  edge.last_producer, edge.first_reader, {k: v for k, v in edge.constant_at.items() if k in constants},
                  constants - shared, found.reads, model_inputs, edge.defined | inner)


def _sub_inputs(found: Found, edge: _Boundary, sub_in: list[str], initializers: Mapping[str, onnx.TensorProto],
                lowered: Mapping[str, onnx.TypeProto], types: Mapping[str, onnx.TypeProto], weights_typed: bool,
                ) -> tuple[list[onnx.ValueInfoProto], list[onnx.TensorProto], set[str], list[str]]:
    """The sub-model's typed inputs and initializers; the region's inputs that come in as
    constants; those that do not (the model's values the lowered region reads). A Constant
    node of a kind that is not one tensor is a run-time value: the region goes after it."""
    index, nodes = found.index, found.nodes
    wanted, taken = set(edge.inputs), set(sub_in)
    sub_inputs, sub_inits, constants, model_inputs = [], [], set(), []
    for x in dict.fromkeys([*edge.inputs, *sub_in]):
        t = initializers.get(x)
        if t is None and x in edge.constant_nodes:
            t = constant_value(edge.constant_nodes[x])
            if t is None:
                edge.last_producer = max(edge.last_producer, edge.constant_at[x])
        if small_constant(t) and not (weights_typed and x in initializers and t.data_type in NUMBER_TYPES):
            constants.add(x)
            if x in taken:
                sub_inits.append(t)
            continue
        if x in wanted:
            model_inputs.append(x)
        if x not in taken:
            continue
        if t is not None:
            sub_inputs.append(helper.make_tensor_value_info(x, t.data_type, list(t.dims)))
        else:
            sub_inputs.append(_typed(x, lowered if x in lowered else types))
            i = index.producer.get(x)
            if i is not None and scan_output_of(nodes[i], x):
                sub_inputs[-1].metadata_props.add(key=OPEN_WHEN_EMPTY, value="1")
    return sub_inputs, sub_inits, constants, model_inputs


def _sub_model(found: Found, kept: list[int], sub_inputs: list[onnx.ValueInfoProto],
               sub_outputs: list[onnx.ValueInfoProto], sub_inits: list[onnx.TensorProto],
               region_names: set[str]) -> onnx.ModelProto:
    model, index = found.model, found.index
    sub_graph = helper.make_graph([found.nodes[i] for i in kept], model.graph.name or "main", sub_inputs,
                                  sub_outputs, initializer=sub_inits)
    order_of = index.value_info_order
    sub_graph.value_info.extend(index.value_info[x] for x in sorted(region_names & order_of.keys(), key=order_of.get))
    sub = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    sub.opset_import.extend(model.opset_import)
    sub.functions.extend(model.functions)
    sub.graph.CopyFrom(sub_graph)
    return sub


def small_constant(t: onnx.TensorProto | None) -> bool:
    """Whether a region input's value comes into its sub-model as an initializer."""
    return t is not None and len(t.raw_data) + 8 * len(t.int64_data) <= _SMALL_BYTES and not t.string_data \
        and not is_stub(t)


def _typed(name: str, types: Mapping[str, onnx.TypeProto]) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto(name=name)
    if name in types:
        vi.type.CopyFrom(types[name])
    return vi


def constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """A Constant node's value as a tensor named like its output (None: a kind kept as a
    run-time value: sparse, strings)."""
    attr = node.attribute[0] if len(node.attribute) == 1 else None
    if attr is None:
        return None
    name = node.output[0]
    if attr.name == "value":
        t = onnx.TensorProto()
        t.CopyFrom(attr.t)
        t.name = name
        return t
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attr.name not in kinds:
        return None
    return onnx.numpy_helper.from_array(np.asarray(helper.get_attribute_value(attr), kinds[attr.name]), name)


def full_type(tp: onnx.TypeProto | None) -> bool:
    return tp is not None and (tp.WhichOneof("value") != "tensor_type" or (
        tp.tensor_type.elem_type != 0 and tp.tensor_type.HasField("shape")))


def _infer_cone(model: onnx.ModelProto, nodes: list[onnx.NodeProto], wanted: list[str],
                types: dict[str, onnx.TypeProto], region: set[int]) -> dict[str, onnx.TypeProto]:
    """onnx shape inference on what ``wanted`` depends on (stopping at values the model types
    fully), weights replaced by typed inputs: types for ``wanted``."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    initializers = {t.name: t for t in model.graph.initializer}
    cone: set[int] = set()
    stack = list(wanted)
    seen: set[str] = set()
    inputs: list[onnx.ValueInfoProto] = []
    inits: list[onnx.TensorProto] = []
    while stack:
        x = stack.pop()
        if x in seen or not x:
            continue
        seen.add(x)
        i = producer.get(x)
        if i is not None and (i in region or not full_type(types.get(x))):
            if i not in cone:
                cone.add(i)
                stack.extend(outer_reads(nodes[i]) if subgraphs_of(nodes[i]) else nodes[i].input)
            continue
        if x in initializers:
            t = initializers[x]
            if len(t.raw_data) <= _SMALL_BYTES and not t.external_data and not is_stub(t):
                inits.append(t)
            else:
                inputs.append(helper.make_tensor_value_info(x, t.data_type, list(t.dims)))
        elif x in types:
            vi = onnx.ValueInfoProto(name=x)
            vi.type.CopyFrom(types[x])
            inputs.append(vi)
    graph = helper.make_graph([nodes[i] for i in sorted(cone)], "cone", inputs,
                              [onnx.ValueInfoProto(name=x) for x in wanted], initializer=inits)
    m = onnx.ModelProto(ir_version=model.ir_version)
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    m.graph.CopyFrom(graph)
    try:
        inferred = infer_shapes(m, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # best effort: inference failing leaves these unknown, as before
        return {}
    found = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)
             if v.type.WhichOneof("value") is not None}
    return {x: found[x] for x in wanted if x in found}
