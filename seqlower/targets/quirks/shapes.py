"""Quirks of shapes computed at run time: tract's data-dependent shapes and slices, Pads of shapes,
OpenVINO's Reshapes of run-time rank and folds of empty inputs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

from seqlower.errors import describe_node
from seqlower.io.inventory import walk_graphs
from seqlower.targets.quirks.facts import DATA_SIZED_OPS, Dim, constants_of, data_sized_values, dims_of, inferred_model, names_read, show_dims, typed_graphs


# Inputs a runtime that plans every shape before it runs must know as dims.
_SHAPE_INPUTS = {"Reshape": (1,), "Range": (0, 1, 2), "Split": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,),
                 "Slice": (1, 2)}


def _data_dependent_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Reshape, Range, Split, Expand, ConstantOfShape or Tile whose shape
    input is computed from tensor values (not from dims: ``Shape`` and ``Size`` turn a
    tensor into dims) has no shape its analysis can know ('shape input is variable').
    Inside a subgraph, the subgraph's inputs (iteration number, state, slices) are values."""
    inits = {i.name for i in model.graph.initializer}
    yield from _data_shapes(model.graph, "main", {i.name for i in model.graph.input if i.name not in inits})


def _data_shapes(graph: onnx.GraphProto, path: str, outer: set[str]) -> Iterator[tuple[str, str, str]]:
    data = set(outer) | {i.name for i in graph.input}
    data -= {i.name for i in graph.initializer}
    for node in graph.node:
        where = describe_node(node.op_type, node.name, list(node.output))
        subgraphs = [(a.name, a.g) for a in node.attribute if a.HasField("g")]
        subgraphs += [(f"{a.name}[{i}]", g) for a in node.attribute for i, g in enumerate(a.graphs)]
        reads = set(node.input)
        for name, sub in subgraphs:
            yield from _data_shapes(sub, f"{path} > {where}.{name}", data)
            reads |= names_read(sub)
        if node.domain in ("", "ai.onnx") and node.op_type in _SHAPE_INPUTS:
            bad = [node.input[k] for k in _SHAPE_INPUTS[node.op_type] if k < len(node.input) and node.input[k] in data]
            if bad:
                yield where, path, (f"its input '{bad[0]}' is computed from tensor values, not dims; tract plans every "
                                    "shape before it runs and fails it: 'shape input is variable' (quirk data-dependent-shape)")
        if node.op_type not in ("Shape", "Size") and reads & data:
            data.update(o for o in node.output if o)


def _openvinos_folds_of_empty_inputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a model input declared with a dim of 0, from which it folds a Gather it
    dies on (SIGFPE) or a Reshape it refuses (passes/quirks/empty_inputs_as_symbolic.py names
    the dim; torch fuzz 16273). Only where such a node depends on it: a model lowered at
    fixed shapes (``--input-shape``) has its Reshapes' targets folded to constants."""
    empty = [(v, dims) for v in model.graph.input if (dims := dims_of(v)) is not None and 0 in dims]
    if not empty:
        return
    graphs = [g for _, g, _ in walk_graphs(model)]
    constants = {t.name for g in graphs for t in getattr(g, "initializer", ())}
    constants |= {n.output[0] for g in graphs for n in g.node if n.op_type == "Constant" and n.output}
    for v, dims in empty:
        if _folds_wrong_from(v.name, graphs, constants):
            yield (f"input '{v.name}'", "main", f"it is declared {show_dims(dims)}, and OpenVINO folds what depends on "
                   "an empty input wrong (a Gather at axis 1 of [0, 3] kills it; quirk static-empty-input)")


def _folds_wrong_from(name: str, graphs: list, constants: set[str]) -> bool:
    """Whether a Gather at an axis other than 0, or a Reshape to a computed shape, depends
    on ``name`` (by names across graphs: a subgraph reads its outer values by name)."""
    tainted = {name}
    changed = True
    while changed:
        changed = False
        for g in graphs:
            for n in g.node:
                if tainted.isdisjoint(n.input) and not (n.attribute and tainted & _outer_names(n)):
                    continue
                if n.op_type == "Gather" and any(a.name == "axis" and a.i != 0 for a in n.attribute):
                    return True
                if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] not in constants:
                    return True
                if not tainted.issuperset(o for o in n.output if o):
                    tainted.update(o for o in n.output if o)
                    changed = True
    return False


def _outer_names(node: onnx.NodeProto) -> set[str]:
    """Every name a node's subgraphs read (a superset of what they read from outside)."""
    return {x for a in node.attribute for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))
            for m in sub.node for x in m.input}


def _dynamic_rank_reshapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Reshape whose shape input's length is not known before it runs (an
    element of a list whose rank is only known at run time): its CPU plugin refuses a
    Reshape of dynamic rank."""
    if not any(n.op_type == "Reshape" for _, g, _ in walk_graphs(model) for n in g.node):
        return
    inferred = inferred_model(model)
    if inferred is None:
        return
    graphs = list(walk_graphs(inferred))
    # Names are one scope's each: what any graph knows, a subgraph reading it knows too.
    constants = {t.name for _, g, _ in graphs for t in getattr(g, "initializer", ())}
    constants |= {n.output[0] for _, g, _ in graphs for n in g.node if n.op_type == "Constant"}
    lengths: dict[str, Dim] = {}
    for _, g, _ in graphs:
        for v in (*getattr(g, "input", ()), *getattr(g, "value_info", ()), *getattr(g, "output", ())):
            dims = dims_of(v)
            if dims is not None and len(dims) == 1:
                lengths[v.name] = dims[0]
    for path, g, _ in graphs:
        for n in g.node:
            if n.op_type != "Reshape" or len(n.input) < 2 or n.input[1] in constants:
                continue
            if isinstance(lengths.get(n.input[1]), int):
                continue
            yield (describe_node(n.op_type, n.name, list(n.output)), path,
                   f"its shape '{n.input[1]}' has a length known only at run time (an element of a list of "
                   "run-time rank): OpenVINO's CPU plugin refuses a Reshape of dynamic rank")


def _computed_slice_ends(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Slice whose ends are computed from constants (dynamo's Cast and Reshape of
    a Constant) and reach past int32: tract slices the wrong rows (one of n, with no
    error); the same end as a plain constant it reads right."""
    from onnx import numpy_helper

    for path, g, _ in walk_graphs(model):
        values = {t.name: t for t in getattr(g, "initializer", ())}
        made = {o: n for n in g.node for o in n.output}
        for n in g.node:
            if n.op_type != "Slice" or len(n.input) < 3 or n.input[2] in values:
                continue
            name, steps = n.input[2], 0
            while name in made and steps < 8 and made[name].op_type in ("Cast", "Reshape", "Identity", "Squeeze", "Unsqueeze"):
                name, steps = made[name].input[0], steps + 1
            p = made.get(name)
            if steps == 0 or p is None or p.op_type != "Constant" or not p.attribute:
                continue
            a = p.attribute[0]
            ends = numpy_helper.to_array(a.t) if a.HasField("t") else list(a.ints) if a.ints else [a.i]
            if any(int(e) >= 2**31 - 1 for e in np.asarray(ends).reshape(-1)):
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its end '{n.input[2]}' is computed from a constant past int32 (INT64_MAX: to the end), "
                       "which tract slices to the wrong rows (quirk slice-end-max)")


def _zero_products_of_data_sized(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Mul by a constant zero of a tensor whose size a NonZero (or Compress,
    Unique) decides: tract replaces it by zeros broadcast to a size it cannot evaluate
    ('MultiBroadcastTo: Undetermined symbol'; TorchScript's ``mask_rows * float(i)``
    with ``i`` unrolled to 0, fuzz seeds 5292, 6421, 4044)."""
    for path, g, _ in walk_graphs(model):
        consts = constants_of(g)
        made = {o: n for n in g.node for o in n.output}
        sized = data_sized_values(g)
        for n in g.node:
            if n.op_type != "Mul" or len(n.input) != 2:
                continue
            for k, other in ((0, 1), (1, 0)):
                # (through Casts and reshapes: a Cast of the unrolled loop's int 0)
                name, steps = n.input[k], 0
                while name not in consts and name in made and steps < 8 and made[name].op_type in (
                        "Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze"):
                    name, steps = made[name].input[0], steps + 1
                c = consts.get(name)
                if c is None or c.size == 0 or np.any(c != 0):
                    continue
                if n.input[other] in sized:
                    yield (describe_node(n.op_type, n.name, list(n.output)), path,
                           f"it multiplies '{n.input[other]}', whose size a {'/'.join(sorted(DATA_SIZED_OPS))} decides, "
                           "by a constant zero, which tract turns into a broadcast it cannot size (quirk zero-product-data-sized)")
                    break


# Ops through which tract keeps a Shape's dims as TDim.
_TDIM_KEEPING = frozenset({"Shape", "Unsqueeze", "Squeeze", "Reshape", "Concat", "Slice", "Gather", "Identity", "Expand"})


def _pads_of_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Pad of a tensor taken from a Shape (a Flat list's shape row of a rank known
    only at run time, padded with 1s): tract holds it as TDim, and the pad value is I64
    ('Impossible to unify TDim with I64', graph program 20385)."""
    for path, g, _ in walk_graphs(model):
        dims: set[str] = set()
        for n in g.node:
            if n.op_type == "Shape" or (n.op_type in _TDIM_KEEPING and n.input and n.input[0] in dims):
                dims.update(o for o in n.output if o)
            elif n.op_type == "Pad" and n.input and n.input[0] in dims:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"it pads '{n.input[0]}', dims read from a Shape, which tract holds as TDim and cannot pad "
                       "with an int64 value (quirk pad-of-shape)")


def _data_sized_slices(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Slice with a bound known only at run time, over a tensor or with a bound
    a NonZero (or Compress, Unique) sizes: its DynSlice fails 'start + len == end'
    (fuzz seeds 4232, 5495, 7604: a Flat list holding a masked row, its elements sliced
    out by bounds summed from their lengths)."""
    for path, g, _ in walk_graphs(model):
        consts = {t.name for t in getattr(g, "initializer", ())} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
        sized = data_sized_values(g)
        for n in g.node:
            if n.op_type != "Slice" or len(n.input) < 3 or n.domain not in ("", "ai.onnx"):
                continue
            bounds = [b for b in n.input[1:3] if b and b not in consts]
            if bounds and not sized.isdisjoint((n.input[0], *bounds)):
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its bound '{bounds[0]}' is known only at run time and a {'/'.join(sorted(DATA_SIZED_OPS))} "
                       "sizes what it slices: tract's DynSlice fails it: 'start + len == end' (quirk data-sized-slice)")


def _reversed_slices_of_maybe_empty(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Slice with a negative step over an axis that may be empty fails its
    analysis ('end <= len' 1 vs 0: ``x.flip(0)`` and ``x[::-1]`` of no rows, fuzz seed 9018)."""
    for path, g, infos in typed_graphs(model):
        dims = {v.name: dims_of(v) for v in infos}
        consts = constants_of(g)
        for n in g.node:
            if n.op_type != "Slice" or len(n.input) < 5 or not n.input[4] or n.domain not in ("", "ai.onnx"):
                continue
            steps = consts.get(n.input[4])
            if steps is None or not np.any(np.asarray(steps) < 0):
                continue
            shape = dims.get(n.input[0])
            axes = consts.get(n.input[3]) if len(n.input) > 3 and n.input[3] else np.arange(np.asarray(steps).size)
            if axes is None:
                continue
            backwards = [int(a) for a, st in zip(np.asarray(axes).reshape(-1), np.asarray(steps).reshape(-1)) if st < 0]
            if shape is not None and all(isinstance(shape[a], int) and shape[a] > 0 for a in backwards if -len(shape) <= a < len(shape)):
                continue
            yield (describe_node(n.op_type, n.name, list(n.output)), path,
                   "it steps backwards along an axis that may be empty, which tract's analysis fails "
                   "('end <= len') (quirk reverse-slice-empty)")
