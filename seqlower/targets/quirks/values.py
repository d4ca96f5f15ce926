"""Quirks of ops and values: reductions (OpenVINO, onnx2torch, onnxruntime), strings, empty constants,
Loops that assume an iteration or stack zero-size outputs."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from seqlower import ops
from seqlower.errors import describe_node
from seqlower.keys import SHAPE_HIDDEN
from seqlower.targets import NO_REDUCE_18_OPS
from seqlower.io.inventory import walk_graphs
from seqlower.targets.quirks.facts import constants_of, dims_of, inferred_model, show_dims, typed_graphs


_REDUCING_OPS = ops.REDUCE_OPS | {"ArgMax", "ArgMin"}


def _negative_axis(node: onnx.NodeProto) -> bool:
    return any(a.name in ("axis", "axes") and (a.i < 0 or any(x < 0 for x in a.ints)) for a in node.attribute)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _negative_axes_of_unknown_rank(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """onnxruntime: a reduction with a negative ``axis``/``axes`` attribute over an input
    whose rank onnx's inference does not know (passes/quirks/positive_reduction_axes.py counts
    the others from the front); on an empty input it comes out unreduced."""
    suspects = any(n.op_type in _REDUCING_OPS and _negative_axis(n) for _, g, _ in walk_graphs(model) for n in g.node)
    if not suspects:
        return
    for path, graph, declared in typed_graphs(model):
        ranked = {v.name for v in declared if dims_of(v) is not None}
        ranked |= {i.name for i in getattr(graph, "initializer", [])}
        for node in graph.node:
            if node.op_type not in _REDUCING_OPS or node.domain not in ("", "ai.onnx") or not node.input or node.input[0] in ranked:
                continue
            if _negative_axis(node):
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       f"a negative axis over '{node.input[0]}', whose rank is not known: onnxruntime returns an empty "
                       "input unreduced then (quirk reduce-negative-axis-empty)")


def _integer_log_reductions(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a ReduceLogSum/LogSumExp with an axes attribute at opsets 13-17 over
    integers, which passes/quirks/reductions_as_sums.py cannot write as sums (no Log of
    integers); float ones and every ReduceL1 it rewrites."""
    ops = ("ReduceLogSum", "ReduceLogSumExp")
    if not 13 <= _opset(model) < 18 or not any(n.op_type in ops for _, g, _ in walk_graphs(model) for n in g.node):
        return
    for path, graph, declared in typed_graphs(model):
        floats = {v.name for v in declared if v.type.tensor_type.elem_type in _FLOAT_TYPES}
        floats |= {i.name for i in getattr(graph, "initializer", []) if i.data_type in _FLOAT_TYPES}
        for node in graph.node:
            if node.op_type in ops and node.domain in ("", "ai.onnx") and node.input and node.input[0] not in floats \
                    and any(a.name == "axes" for a in node.attribute):
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       "not known to reduce floats, so not written as a sum: OpenVINO ignores its axes attribute and "
                       "reduces every axis (quirk reduce-axes-attribute-ignored)")


def _reductions_from_18(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """onnx2torch: a reduction other than ReduceSum at opset 18 or later that
    passes/quirks/reductions_as_sums.py left (max, min, product, log-sum-exp, integer means)."""
    if _opset(model) < 18:
        return
    for path, graph, _ in walk_graphs(model):
        for node in graph.node:
            if node.op_type in NO_REDUCE_18_OPS and node.domain in ("", "ai.onnx"):
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       f"onnx2torch has no {node.op_type} converter from opset 18 (quirk no-reduce-18)")


def _without_converter(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """onnx2torch: a node whose op has no converter at the version the model's opset gives
    it (its table: seqlower/targets/onnx2torch.toml's [converters]), other than what other
    reasons name (the ops it lacks, the reductions of quirk no-reduce-18)."""
    from seqlower.targets import load_target, schema_version

    target = load_target("onnx2torch")
    opset = _opset(model)
    for path, graph, _ in walk_graphs(model):
        for node in graph.node:
            op = node.op_type
            if node.domain not in ("", "ai.onnx") or op in target.lacks or target.converts(op, opset) \
                    or opset >= 18 and op in NO_REDUCE_18_OPS:
                continue
            has = target.converters.get(op, ())
            yield (describe_node(op, node.name, list(node.output)), path,
                   f"onnx2torch has no converter for {op}-{schema_version(op, opset)} (opset {opset}"
                   + (f"; it converts versions {', '.join(map(str, has))}" if has else "; none for any version")
                   + ") (quirk no-converter)")


def _empty_constant_readers(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a node that reads a zero-size constant, which its frontend takes as a
    tensor of shape [] (``lower --target openvino`` writes every one as a ConstantOfShape,
    so only a model lowered otherwise has any)."""
    from seqlower.io.protos import outer_reads, subgraphs_of

    graphs = list(walk_graphs(model))
    empty = {t.name for _, g, _ in graphs for t in getattr(g, "initializer", ())
             if 0 in t.dims and t.data_type != onnx.TensorProto.STRING}
    empty |= {n.output[0] for _, g, _ in graphs for n in g.node if n.op_type == "Constant" and n.attribute
              and n.attribute[0].HasField("t") and 0 in n.attribute[0].t.dims
              and n.attribute[0].t.data_type != onnx.TensorProto.STRING}
    if not empty:
        return
    for path, g, _ in graphs:
        for n in g.node:
            read = outer_reads(n) if subgraphs_of(n) else set(n.input[:1] if n.op_type == "Reshape" else n.input)
            hit = sorted(empty.intersection(read))  # (a Reshape to a scalar reads its [] right)
            if hit:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"it reads '{hit[0]}', a zero-size constant, which OpenVINO's frontend takes as a tensor of "
                       "shape [] (quirk empty-constant)")


def _loops_in_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto, onnx.NodeProto, onnx.GraphProto]]:
    """Every Loop with a body, with the graph holding it, in the model with onnx's inferred
    shapes (as it is where inference fails); nothing inferred for a model without Loop."""
    if not any(n.op_type == "Loop" for _, g, _ in walk_graphs(model) for n in g.node):
        return
    for path, graph, _ in walk_graphs(inferred_model(model) or model):
        for node in graph.node:
            body = next((a.g for a in node.attribute if a.name == "body"), None)
            if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and body is not None:
                yield path, graph, node, body


def _loops_growing_from_a_row(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Loop of a run-time trip count that appends rows to a state whose initial
    value is a Concat with a row known to be there: its CPU plugin bounds the Loop's output
    below by that row plus one iteration's, and the Loop node itself fails when it runs
    none ("{2 - ?, 2} is incompatible with provided dimensions: {1, 2}", graph program
    20010). The zero-trip guard slices what reads the output; slicing the initial value
    too ran 20010 but broke states that shrink (20245, 20262), so such Loops are named."""
    facts: dict[int, tuple] = {}
    for path, g, n, body in _loops_in_graphs(model):
        if id(g) not in facts:
            dims = {v.name: dims_of(v) for v in (*g.input, *g.value_info, *g.output)}
            dims.update({t.name: list(t.dims) for t in getattr(g, "initializer", ())})
            facts[id(g)] = ({o: m for m in g.node for o in m.output}, dims, constants_of(g))
        made, dims, consts = facts[id(g)]
        if len(n.input) < 3 or all(x and x in consts for x in n.input[:2]):
            continue  # (a constant trip count and condition: it runs what it says)
        body_made = {o: b for b in body.node for o in b.output}
        for k, init in enumerate(n.input[2:]):
            p = made.get(init)
            if p is not None and f"{SHAPE_HIDDEN}_in" in init:
                continue  # (its shape hidden from OpenVINO: passes/quirks/guard_zero_trip_loops.py)
            if p is not None and p.op_type == "Slice" and p.input:
                # A row padded in and sliced off again (quirk concat-after-run-time-empty):
                # OpenVINO bounds the Slice below by the Concat's row too (program 240146).
                p = made.get(p.input[0])
            if p is None or p.op_type != "Concat" or any(a.name == "axis" and a.i != 0 for a in p.attribute):
                continue
            if not any(_has_a_row(x, made, dims) for x in p.input):
                continue
            carried = body.input[2 + k].name
            out = body_made.get(body.output[1 + k].name)
            if out is None or out.op_type != "Concat":
                continue
            of_state = lambda x: x == carried or (x in body_made and body_made[x].op_type == "Slice"  # noqa: E731
                                                   and body_made[x].input[0] == carried)
            if all(of_state(x) for x in out.input):
                continue  # (it keeps or drops rows)
            yield (describe_node(n.op_type, n.name, list(n.output)), path,
                   f"it appends to '{init}', which starts with a row, and OpenVINO fails such a Loop when it runs "
                   "no iteration (quirk loop-assumes-an-iteration)")
            break


def _loops_from_empty_constants(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Loop whose trip count and condition are constants (or computed from
    constants only) and whose carried initial value is a zero-size one computed from
    constants: its frontend fails to convert it ("Accessing out-of-range dimension", or
    the CPU plugin's "unordered_map::at" once the model is static: the embedding_bag
    export lowered at fixed shapes). The rewrite gives such a state a shape built from the
    trip count at run time, which a constant one is not; a Loop the lowering could not
    unroll (a while loop it cannot count, more trips than --max-unroll) is named."""
    for path, g, n, _ in _loops_in_graphs(model):
        folded = _folded(g)
        if len(n.input) < 3 or any(x and x not in folded for x in n.input[:2]):
            continue
        dims = {v.name: dims_of(v) for v in (*g.input, *g.value_info, *g.output)}
        for init in n.input[2:]:
            shape = folded.get(init) if init else None
            shape = shape if shape is not None else dims.get(init)
            if init in folded and shape is not None and 0 in shape:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its initial state '{init}' is empty and computed from constants, and so are its trip count"
                       " and condition: OpenVINO fails to convert such a Loop (quirk empty-constant-loop-state)")
                break


def _folded(graph: onnx.GraphProto) -> dict[str, list | None]:
    """The values of ``graph`` computed from constants only (what OpenVINO folds), each
    with its shape where it is known: a constant's, a ConstantOfShape's of constant dims."""
    consts = constants_of(graph)
    found: dict[str, list | None] = {k: list(v.shape) for k, v in consts.items()}
    for n in graph.node:
        if n.op_type == "Constant" or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                          for a in n.attribute):
            continue
        if n.op_type.startswith("Random") or n.op_type in ("Multinomial", "Bernoulli"):
            continue
        if all(not x or x in found for x in n.input):
            shape = [int(d) for d in consts[n.input[0]].reshape(-1)] \
                if n.op_type == "ConstantOfShape" and n.input and n.input[0] in consts else None
            found.update(dict.fromkeys(n.output, shape))
    return found


def _has_a_row(name: str, made: dict, dims: dict, depth: int = 0) -> bool:
    """``name`` is known to have a row: a first dim of at least 1, or a Concat along its
    first axis of something that has one (a list's length joined onto its counts)."""
    d = dims.get(name)
    if d and isinstance(d[0], int) and d[0] >= 1:
        return True
    p = made.get(name)
    if p is None or depth > 4 or p.op_type != "Concat" or any(a.name == "axis" and a.i != 0 for a in p.attribute):
        return False
    return any(_has_a_row(x, made, dims, depth + 1) for x in p.input)


def _zero_size_scan_outputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Loop whose scan output's per-iteration value has a dim known to be 0
    (a list of ``x[:, :0]`` slices appended in a loop): its CPU plugin gives the stacked
    output other dims ((2, 0, 0) for ONNX's (2, 2, 0)), and folding what reads it fails
    to compile ("Cannot infer '-1' dimension with zero-size output dimension", torch fuzz
    seed 6437)."""
    for path, _, n, body in _loops_in_graphs(model):
        carried = len(n.input) - 2
        for k, out in enumerate(body.output[1 + carried:]):
            dims = dims_of(out)
            if dims is not None and 0 in dims:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its scan output {k} stacks values of shape {show_dims(dims)}, of size 0, which OpenVINO "
                       "gives other dims (quirk zero-size-scan-output)")
                break


def _string_inputs(model: onnx.ModelProto) -> list[str]:
    STRING = onnx.TensorProto.STRING
    return [v.name for v in model.graph.input
            if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type == STRING]


def _string_row_gathers(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """onnxruntime: a Gather of a string tensor whose rank is not known to be 1 (it copies
    one string per gathered row: passes/quirks/string_gathers_as_gather_nd.py rewrites
    those of known rank from opset 11)."""
    for path, g, values in typed_graphs(model):
        ranks = {v.name: len(v.type.tensor_type.shape.dim) if v.type.tensor_type.HasField("shape") else None
                 for v in values if v.type.WhichOneof("value") == "tensor_type"
                 and v.type.tensor_type.elem_type == onnx.TensorProto.STRING}
        ranks.update({t.name: len(t.dims) for t in getattr(g, "initializer", ()) if t.data_type == onnx.TensorProto.STRING})
        for n in g.node:
            if n.op_type == "Gather" and n.domain in ("", "ai.onnx") and n.input and n.input[0] in ranks \
                    and ranks[n.input[0]] != 1:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"it gathers rows of the string tensor '{n.input[0]}', and onnxruntime copies one string per "
                       "row, the rest empty (quirk string-gather-rows)")


def _string_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO and tract: every node that reads a string tensor the model takes, holds
    or casts to (neither has a string type: OpenVINO's Python API refuses the input,
    'ov_type_it != dtype_map.end()', its frontend a string constant; tract refuses an
    object input: random graph programs over strings, seeds 20101-20299)."""
    from seqlower.io.protos import outer_reads, subgraphs_of

    STRING = onnx.TensorProto.STRING
    graphs = list(walk_graphs(model))
    strings = set(_string_inputs(model))
    strings |= {t.name for _, g, _ in graphs for t in getattr(g, "initializer", ()) if t.data_type == STRING}
    for path, g, _ in graphs:
        for n in g.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t") and n.attribute[0].t.data_type == STRING:
                strings.update(n.output)
            elif n.op_type == "Cast" and any(a.name == "to" and a.i == STRING for a in n.attribute):
                yield describe_node(n.op_type, n.name, list(n.output)), path, "it casts to string (quirk no-strings)"
    if not strings:
        return
    for path, g, _ in graphs:
        for n in g.node:
            read = outer_reads(n) if subgraphs_of(n) else set(n.input)
            hit = sorted(strings.intersection(read))
            if hit:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"it reads '{hit[0]}', a string tensor (quirk no-strings)")


def _unread_string_inputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract, TVM: a string model input nothing reads (those read, no-strings names): it is fed
    all the same, and tract refuses the value ('tract takes no object input', graph
    program 20320; OpenVINO drops such an input and runs)."""
    from seqlower.io.protos import outer_reads, subgraphs_of

    strings = _string_inputs(model)
    if not strings:
        return
    read = {x for _, g, _ in walk_graphs(model) for n in g.node for x in (outer_reads(n) if subgraphs_of(n) else n.input)}
    for name in strings:
        if name not in read:
            yield f"input '{name}'", "main", "it is a string tensor, which the runtime refuses to be given (quirk string-input)"


_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def _zero_element_loop_states(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Loop state that holds no element (a dim of 0) while another of its dims
    grows across iterations (a Flat list of scalars: shapes rows [n, 0]) comes out of the
    Loop with that dim 0 too: the count it carried is lost, with no error (greedy decoding
    collecting token ids, exported at opset 13: 1 token instead of 7)."""
    for path, _, n, body in _loops_in_graphs(model):
        carried = len(n.input) - 2
        made = {o: node for node in body.node for o in node.output}
        for k in range(max(0, carried)):
            if 1 + k >= len(body.output) or 2 + k >= len(body.input):
                break
            dims = dims_of(body.output[1 + k]) or dims_of(body.input[2 + k])
            step = made.get(body.output[1 + k].name)
            # (grown: the state joined with more along an axis other than its empty one)
            grown = step is not None and step.op_type == "Concat" and body.input[2 + k].name in step.input
            axis = next((a.i for a in step.attribute if a.name == "axis"), 0) if grown else None
            # Rows [n, 0] grown along axis 0 (a Flat list of scalars' shapes: nothing else
            # carries n). OpenVINO drops the count of a [0, k] state grown along axis 1 too,
            # but there (a Ragged list of an empty batch) its lengths carry it, and the
            # data has no element either way.
            if dims and grown and axis % len(dims) == 0 and 0 in dims[1:] and dims[0] != 0:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its state '{body.input[2 + k].name}' holds no element ({show_dims(dims)}) while its other"
                       " dims change: OpenVINO returns it with them 0 (quirk zero-element-loop-state)")
                break
