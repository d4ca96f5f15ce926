"""Quirks a model can be checked for before it runs: for each quirk id of a target
profile that no lowering rewrites around, a detector that names the nodes it would hit.
``target_gaps`` reports what they find with the ops the target lacks, so ``check
--target`` and ``lower --target`` say it (and ``--strict`` fails) before anything runs.

Each detector was bisected from a runtime failure to a minimal model; the tests hold
the detector and the runtime's failure side by side (tests/test_quirks.py), so when
the runtime is fixed the test says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx

from seqlower import ops
from seqlower.errors import describe_node
from seqlower.inference import infer_shapes, localize_outer_constants
from seqlower.inventory import walk_graphs
from seqlower.targets.registry import QUIRKS
from seqlower.weights import is_stub

__all__ = ["DETECTORS", "quirk_findings", "TVM_SHAPE_TAKING_OPS", "TVM_SHAPE_SLOTS"]

Dim = int | str | None


def _dims(v: onnx.ValueInfoProto) -> list[Dim] | None:
    t = v.type.tensor_type
    if v.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _differ(a: list[Dim] | None, b: list[Dim] | None) -> bool:
    """Provably different shapes: other ranks, or a dim known on both sides (a number or
    a name the model gave, not one inference made up) that is not the same."""
    if a is None or b is None:
        return False
    if len(a) != len(b):
        return True
    for x, y in zip(a, b):
        known = [d for d in (x, y) if d is not None and not (isinstance(d, str) and d.startswith("unk__"))]
        if len(known) == 2 and x != y:
            return True
    return False


def _unknown(d: Dim) -> bool:
    """Not found: no dim, or a name onnx's inference made up."""
    return d is None or (isinstance(d, str) and d.startswith("unk__"))


def _unproven(a: list[Dim] | None, b: list[Dim] | None) -> bool:
    """Same rank, but a dim inference could not find on one side that the other side
    has (a number, or a name the model gave)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return any(_unknown(x) != _unknown(y) for x, y in zip(a, b))


# Within one quirk_findings call: the model inferred once for every detector that needs
# it (id of the model -> the model and its inferred copy, None when inference fails; the
# model is held so that its id is not another's).
_INFERRED: dict[int, tuple[onnx.ModelProto, onnx.ModelProto | None]] = {}


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with onnx's inferred shapes (None: no inference, so nothing proven). A
    branch's Slice reads the bounds its outer graph holds (TorchScript): copied in, onnx's
    inference sees them and proves the branch's dims."""
    cached = _INFERRED.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    try:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        localize_outer_constants(copy)
        inferred: onnx.ModelProto | None = infer_shapes(copy, data_prop=True)
    except Exception:  # noqa: BLE001 - no inference, nothing proven
        inferred = None
    _INFERRED[id(model)] = (model, inferred)
    return inferred


def _inferred_if_any_if(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model inferred, when it has an If (None: no If, or no inference)."""
    if not any(n.op_type == "If" for _, g, _ in walk_graphs(model) for n in g.node):
        return None
    return _inferred(model)


def _if_branch_facts(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If whose branches give outputs of different shapes fails its analysis."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    for path, node, then, other in _ifs(inferred):
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = _dims(a), _dims(b)
            # Provably different, or one side's dims unknown where the other's are named:
            # tract unifies the branches' facts and fails unless they are the same (a
            # branch slicing a column, [?, ?], against one passing [n, w] on: seed 4438).
            if _differ(da, db) or _unproven(da, db):
                where = describe_node(node.op_type, node.name, list(node.output))
                yield where, path, (f"its branches give output {k} as {_show(da)} and {_show(db)}; "
                                    "tract needs one shape from both (quirk if-branch-facts)")
                break


def _both_unknown(a: list[Dim] | None, b: list[Dim] | None, name_a: str, name_b: str) -> bool:
    """A dim inference finds on neither side, of two outputs computed apart: tract,
    which knows every dim from the input's, finds them and they may differ (a list mapped
    by two bodies, one doubling each element: graph program 20409, 'Unifying shapes 4,3
    and 8,3'). One value passed out of both branches is one shape."""
    if a is None or b is None or len(a) != len(b) or name_a == name_b:
        return False
    return any(_unknown(x) and _unknown(y) for x, y in zip(a, b))


def _if_branch_unknown_dims(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If output whose dims inference finds on neither side (the least
    specific reason, so last)."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    for path, node, then, other in _ifs(inferred):
        if any(_runs_a_loop(g) for g in (then, other)):
            continue  # a zero-trip guard: its empty branch is built from the Scan's dims
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = _dims(a), _dims(b)
            if _both_unknown(da, db, a.name, b.name):
                where = describe_node(node.op_type, node.name, list(node.output))
                yield where, path, (f"its branches give output {k} as {_show(da)} and {_show(db)}, computed apart; "
                                    "tract needs one shape from both (quirk if-branch-facts)")
                break


def _runs_a_loop(branch: onnx.GraphProto) -> bool:
    """A branch that returns what a Scan or Loop in it gives (loops_to_scans' zero-trip
    guard; every fixture tract runs through one)."""
    made = _producers(branch)
    return any(o.name in made and made[o.name].op_type in ("Scan", "Loop") for o in branch.output)


def _if_branch_data_sizes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If output a NonZero (or Compress, Unique) sizes, in a branch or outside
    it, where the branches do not give the same value: tract gives each such size its
    own symbol in each branch, or none to an outer one a branch reads ('x,F32 vs
    x_0,F32': fuzz seed 10395, a masked row appended to a list under an ``if`` on values;
    'Source node without a determined fact': seed 9088)."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    outer: dict[int, set[str]] = {}
    for path, graph, node, then, other in _ifs_in_graphs(inferred):
        if id(graph) not in outer:
            outer[id(graph)] = _data_sized(graph)
        sized = (_data_sized(then, outer[id(graph)]), _data_sized(other, outer[id(graph)]))
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = _dims(a), _dims(b)
            if a.name == b.name or not (a.name in sized[0] or b.name in sized[1]):
                continue
            if da is not None and db is not None and len(da) == len(db) and all(
                    isinstance(x, int) and x == y for x, y in zip(da, db)):
                continue  # (one static shape: one fact)
            where = describe_node(node.op_type, node.name, list(node.output))
            yield where, path, (f"output {k} is sized by what a NonZero (or Compress, Unique) finds; tract "
                                "gives such a size its own symbol in each branch and needs one shape from "
                                "both (quirk if-branch-facts)")
            break


def _ifs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto, onnx.GraphProto, onnx.GraphProto]]:
    """Every If with both branches: (graph path, node, then branch, else branch)."""
    for path, _, node, then, other in _ifs_in_graphs(model):
        yield path, node, then, other


def _ifs_in_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto, onnx.NodeProto, onnx.GraphProto, onnx.GraphProto]]:
    """Every If with both branches, with the graph holding it."""
    for path, graph, _ in walk_graphs(model):
        for node in graph.node:
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
            if len(branches) == 2:
                yield path, graph, node, branches["then_branch"], branches["else_branch"]


def _if_branch_growth(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If where one branch passes an outer tensor through and the other
    concatenates to it or slices it (TorchScript's list append, insert or pop under an
    ``if``) gives two shapes, whatever inference can prove about the dims."""
    for path, node, then, other in _ifs(model):
        sides = [(then, _producers(then)), (other, _producers(other))]
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            for ((pg, pm), po), ((_, om), oo) in (((sides[0], a.name), (sides[1], b.name)), ((sides[1], b.name), (sides[0], a.name))):
                source = _passed_through(pg, po, pm)
                if source is not None and _resizes(oo, source, om):
                    where = describe_node(node.op_type, node.name, list(node.output))
                    yield where, path, (f"one branch passes '{source}' through as output {k} and the other "
                                        "concatenates to it or slices it; tract needs one shape from both "
                                        "(quirk if-branch-facts)")
                    break
            else:
                continue
            break


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in graph.node for o in n.output}


def _passed_through(graph: onnx.GraphProto, name: str, made: dict[str, onnx.NodeProto]) -> str | None:
    while name in made and made[name].op_type == "Identity":
        name = made[name].input[0]
    return None if name in made or name in {i.name for i in graph.initializer} else name


def _resizes(name: str, source: str, made: dict[str, onnx.NodeProto]) -> bool:
    p = made.get(name)
    while p is not None and p.op_type == "Identity":
        p = made.get(p.input[0])
    if p is None or p.op_type not in ("Concat", "Slice"):
        return False
    stack, seen = list(p.input), set()
    while stack:
        x = stack.pop()
        if x == source:
            return True
        if x in seen or x not in made:
            continue
        seen.add(x)
        stack.extend(made[x].input)
    return False


def _show(dims: list[Dim] | None) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims or []) + "]"


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
            reads |= _names_read(sub)
        if node.domain in ("", "ai.onnx") and node.op_type in _SHAPE_INPUTS:
            bad = [node.input[k] for k in _SHAPE_INPUTS[node.op_type] if k < len(node.input) and node.input[k] in data]
            if bad:
                yield where, path, (f"its input '{bad[0]}' is computed from tensor values, not dims; tract plans every "
                                    "shape before it runs and fails it: 'shape input is variable' (quirk data-dependent-shape)")
        if node.op_type not in ("Shape", "Size") and reads & data:
            data.update(o for o in node.output if o)


def _names_read(graph: onnx.GraphProto) -> set[str]:
    read: set[str] = set()
    for node in graph.node:
        read.update(x for x in node.input if x)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= _names_read(g)
    return read


# TVM Relax: what its frontend does with a value read off Shape (a ShapeExpr, or a
# PrimValue once Gathered), measured on the 43 exported fixtures lowered for it and read
# in its onnx_frontend.py: these keep it a shape (a prim: Unsqueeze, Identity), Range
# takes it as a bound, and anything else fails to convert.
_SHAPE_KEEPING = {"Gather": (0,), "Slice": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Cast": (0,), "Identity": (0,)}
# The ops its frontend lets take a shape expression at all (``shape_compatible_ops``):
# any other fails on one ("cannot handle ShapeExpr inputs").
TVM_SHAPE_TAKING_OPS = frozenset({"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand", "Concat",
                                  "Equal", "Where", "Cast", "CastLike", "Squeeze"})
# Ops its frontend computes when every input is a constant.
_FOLDED = frozenset({"Concat", "Unsqueeze", "Squeeze", "Reshape", "Add", "Sub", "Mul", "Cast", "Gather", "Slice"})
# The input that is a shape, which the frontend wants as a shape expression or a constant.
# (Tile takes an int64 tensor of a known length too.)
TVM_SHAPE_SLOTS = {"Reshape": 1, "Expand": 1, "ConstantOfShape": 0}


def _tvm_shape_expressions(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """TVM Relax keeps what ``Shape`` gives as a shape expression, and a dim Gathered
    from one as a prim value. Bisected node by node on the 43 fixtures and checked on
    small models, its frontend fails: a shape expression or prim mixed with a computed
    tensor in one op ('cannot handle ShapeExpr inputs', 'PrimType object has no
    attribute shape', relax.concat of a shape and a tensor); arithmetic on a whole shape
    whose dims the input shapes do not fix (it converts with them fixed and folds the
    rest); the shape of a value of unknown rank ('Slice requires a statically known
    input rank'); a Reshape/Expand/ConstantOfShape/Tile shape that is a computed tensor
    or a prim; an Expand to a zero dim. Known dims are what onnx's inference with data
    propagation finds with every input dim fixed."""
    graph = model.graph
    known, ranked = _known_shapes(model)
    constant = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    values = {i.name: i for i in graph.initializer}
    shape: dict[str, tuple[bool, bool]] = {}  # shape value -> (its dims are known, it is one prim dim)
    first_reader: dict[str, tuple[int, onnx.NodeProto]] = {}  # (protobuf's node wrappers have no stable id)
    int64_rows = {v.name for v in (*graph.input, *graph.value_info, *graph.output)
                  if v.type.tensor_type.elem_type == onnx.TensorProto.INT64 and len(_dims(v) or []) == 1}
    int64_rows |= {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.INT64 and len(i.dims) == 1}
    for k, n in enumerate(graph.node):
        for x in n.input:
            first_reader.setdefault(x, (k, n))
    for node in graph.node:
        ins = list(node.input)
        where = describe_node(node.op_type, node.name, list(node.output))
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("Shape", "Size"):
            if ins and ins[0] in shape and not shape[ins[0]][1] and node.op_type == "Shape":
                yield where, "main", (f"it reads the shape of '{ins[0]}', itself read off Shape: TVM's frontend fails it "
                                      "('shape_of expects a tensor input') (quirk shape-expr)")
                continue
            if ins and ins[0] not in ranked and node.op_type == "Shape":
                readers = [first_reader[o] for o in node.output if o in first_reader]
                if readers:
                    c = min(readers, key=lambda r: r[0])[1]
                    yield (describe_node(c.op_type, c.name, list(c.output)), "main",
                           f"it reads the shape of '{ins[0]}', whose rank is not known: TVM's frontend needs it "
                           "('requires a statically known input rank') (quirk shape-expr)")
                continue
            shape.update({o: (bool(ins and ins[0] in known), node.op_type == "Size") for o in node.output})
            continue
        if node.op_type in _FOLDED and ins and all(x in constant for x in ins if x):
            if node.op_type == "Concat" and all(x in int64_rows for x in ins if x):
                # (of 1-D int64 constants, a shape expression there: 20387)
                shape.update({o: (True, False) for o in node.output})
                continue
            constant.update(node.output)  # (its frontend computes these on constants)
            continue
        slot = TVM_SHAPE_SLOTS.get(node.op_type)
        if slot is not None and slot < len(ins) and ins[slot]:
            target = ins[slot]
            if (target not in shape and target not in constant) or shape.get(target, (True, False))[1]:
                yield where, "main", (f"its shape '{target}' is a computed tensor or one dim, where TVM's frontend wants "
                                      "a shape expression or a constant (quirk shape-expr)")
                continue
            if node.op_type == "Expand" and target in values and not is_stub(values[target]) \
                    and 0 in onnx.numpy_helper.to_array(values[target]).reshape(-1):
                yield where, "main", ("it expands a computed tensor to a zero-size dim, which TVM's frontend refuses: "
                                      "'Invalid target dimension 0' (quirk expand-zero-dim)")
                continue
            ins = [x if k != slot else "" for k, x in enumerate(ins)]
        fed = [k for k, x in enumerate(ins) if x in shape]
        if not fed or node.op_type == "Range":
            continue
        static = all(shape[ins[k]][0] for k in fed)
        prims = all(shape[ins[k]][1] for k in fed)
        tensors = [x for k, x in enumerate(ins) if x and k not in fed and x not in constant]
        if node.op_type == "Cast":
            if not prims and static:
                constant.update(node.output)  # (a shape of known dims is a constant there)
            continue  # a prim cast, and a shape of run-time dims cast, are tensors
        whole = [k for k in fed if not shape[ins[k]][1]]
        if whole and node.op_type not in TVM_SHAPE_TAKING_OPS:
            yield where, "main", (f"it takes '{ins[whole[0]]}', a shape read off Shape, which TVM's frontend takes "
                                  f"for no {node.op_type}: 'cannot handle ShapeExpr inputs' (quirk shape-expr)")
            continue
        if node.op_type == "Slice" and 0 in whole and any(x and x not in constant for x in ins[1:]):
            yield where, "main", (f"it slices '{ins[0]}', a shape read off Shape, at bounds computed at run time: TVM's "
                                  "frontend fails it ('Slice with dynamic parameters does not support ShapeExpr "
                                  "input') (quirk shape-expr)")
            continue
        if node.op_type == "Reshape" and 0 in fed and shape[ins[0]][1]:
            yield where, "main", (f"it reshapes '{ins[0]}', a dim read off Shape, which TVM's frontend holds as a "
                                  "prim: 'Reshape requires the input data to be Tensor' (quirk shape-expr)")
            continue
        if node.op_type == "Reshape" and fed == [0] and 0 in whole:
            flat = ins[1] in values and onnx.numpy_helper.to_array(values[ins[1]]).reshape(-1).tolist() == [-1]
            if flat:
                shape.update({o: (static, False) for o in node.output})
            continue  # (reshaped to anything else, a shape is an int64 tensor there)
        if node.op_type == "Slice" and 0 in whole and static:
            constant.update(node.output)  # (a slice of known dims is a constant there)
            continue
        if node.op_type == "Gather" and 0 in whole and not (len(ins) > 1 and ins[1] in values and not values[ins[1]].dims):
            continue  # (gathered at a tensor of indices: a tensor)
        if node.op_type in ("Max", "Min", "Sum", "Mean", "Where"):
            yield where, "main", (f"it takes '{ins[fed[0]]}', a value read off Shape, which TVM's frontend converts "
                                  f"for no {node.op_type}: 'PrimType object has no attribute shape' (quirk shape-expr)")
            continue
        if node.op_type in _SHAPE_KEEPING and set(fed) <= set(_SHAPE_KEEPING[node.op_type]):
            one = node.op_type == "Gather" and len(ins) > 1 and ins[1] in values and not values[ins[1]].dims
            shape.update({o: (static, one or (prims and node.op_type in ("Identity", "Squeeze"))) for o in node.output})
            continue
        if tensors:
            yield where, "main", (f"it mixes '{ins[fed[0]]}', a value read off Shape, with the computed tensor "
                                  f"'{tensors[0]}': TVM's frontend cannot convert it (quirk shape-expr)")
            continue
        if static or prims or node.op_type == "Concat":
            shape.update({o: (static, prims and node.op_type != "Concat") for o in node.output})
            continue
        yield where, "main", (f"it computes on '{ins[fed[0]]}', a shape whose dims the input shapes do not fix: "
                              "TVM's frontend cannot convert it (quirk shape-expr)")


# Within one quirk_findings call, as _INFERRED: _known_shapes once for every TVM detector.
_KNOWN: dict[int, tuple[onnx.ModelProto, tuple[set[str], set[str]]]] = {}


def _known_shapes(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """Main-graph values whose every dim onnx's inference (data propagation on) knows
    once every graph input dim is a number, and those whose rank it knows."""
    cached = _KNOWN.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    found = _fixed_dims_inference(model)
    _KNOWN[id(model)] = (model, found)
    return found


def _fixed_dims_inference(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    inits = {i.name for i in fixed.graph.initializer}
    for v in fixed.graph.input:
        if v.name in inits or v.type.WhichOneof("value") != "tensor_type":
            continue
        for d in v.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
                d.dim_value = 2
    try:
        inferred = infer_shapes(fixed, data_prop=True)
    except Exception:  # noqa: BLE001 - nothing known
        return set(), {v.name for v in model.graph.input}
    known, ranked = set(), {i.name for i in model.graph.initializer}
    for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = _dims(v)
        if dims is not None:
            ranked.add(v.name)
            if all(isinstance(d, int) for d in dims):
                known.add(v.name)
    return known, ranked


# What TVM's frontend computes on shapes and dims read off Shape as expressions.
_SHAPE_ARITHMETIC = frozenset({"Gather", "Slice", "Squeeze", "Unsqueeze", "Concat", "Identity", "Add", "Sub", "Mul", "Div"})


def _tvm_concats_of_opaque_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """TVM Relax: a Concat of a tensor whose dims its frontend holds as no expression (an
    If's output whose branches differ, a Slice at bounds read from tensor values, what
    is computed from those) converts, and then its VM codegen fails ('CodeGenVM cannot
    emit this Relax operator directly ... R.concat', graph program 20225 and the
    TorchScript split by run-time sizes). Dims of a value onnx's inference knows once
    every input dim is a number are expressions there."""
    graph = model.graph
    known, _ = _known_shapes(model)
    constant = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    shaped: set[str] = set()  # read off Shape, through anything
    opaque: set[str] = set()
    for node in graph.node:
        ins = [x for x in node.input if x]
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Shape" or (node.op_type in _SHAPE_ARITHMETIC and any(x in shaped for x in ins)
                                       and all(x in shaped or x in constant for x in ins)):
            shaped.update(node.output)  # (a Cast of one is a tensor there)
            continue
        if node.op_type == "Concat" and any(x in opaque for x in ins):
            x = next(x for x in ins if x in opaque)
            yield (describe_node(node.op_type, node.name, list(node.output)), "main",
                   f"it concatenates '{x}', whose dims TVM holds as no expression (an If's or a Slice's at bounds read "
                   "from tensor values): its VM codegen fails, 'CodeGenVM cannot emit this Relax operator directly' "
                   "(quirk concat-opaque-shape)")
            continue
        dynamic = node.op_type in ("If", "Loop", "Scan") or (
            node.op_type == "Slice" and any(x not in constant and x not in shaped for x in ins[1:]))
        if dynamic or any(x in opaque for x in ins):
            opaque.update(o for o in node.output if o not in known)


def _tvm_shapes_of_if_outputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """TVM Relax: the Shape of an If's output. Its frontend types the If by what it can
    unify of the branches and then fails what reads the Shape ('shape_of expects a tensor
    input', ''int' object has no attribute 'numpy'', ''AnyType' object has no attribute
    'shape''), even where both branches give int64 tensors of one length (graph programs
    20140, 20391, 20413; checked on small models)."""
    for path, graph, _ in walk_graphs(model):
        made = {o: n for n in graph.node for o in n.output}
        for node in graph.node:
            if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx") and node.input \
                    and (p := made.get(node.input[0])) is not None and p.op_type == "If":
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       f"it reads the shape of '{node.input[0]}', an If's output, which TVM's frontend fails "
                       "('shape_of expects a tensor input') (quirk if-output-shape)")


def _tvm_dynamic_splits(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """TVM Relax: a Split whose sizes are not a constant ('Dynamic Split not yet supported')."""
    for path, graph, _ in walk_graphs(model):
        constant = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
        for node in graph.node:
            if node.op_type == "Split" and node.domain in ("", "ai.onnx") and len(node.input) > 1 and node.input[1] \
                    and node.input[1] not in constant:
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       f"its sizes '{node.input[1]}' are computed at run time: TVM's frontend has no such Split, "
                       "'Dynamic Split not yet supported' (quirk dynamic-split)")


_REDUCING_OPS = ops.REDUCE_OPS | {"ArgMax", "ArgMin"}


def _negative_axis(node: onnx.NodeProto) -> bool:
    return any(a.name in ("axis", "axes") and (a.i < 0 or any(x < 0 for x in a.ints)) for a in node.attribute)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _typed_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto | onnx.FunctionProto, list[onnx.ValueInfoProto]]]:
    """(path, graph, the value infos onnx's inference gives it) for every graph, the
    model's own declarations where inference fails (a function's inputs are names)."""
    try:
        inferred = infer_shapes(model)
    except Exception:  # noqa: BLE001 - what the model declares
        inferred = model
    for path, graph, _ in walk_graphs(inferred):
        declared = [*graph.input, *graph.output, *getattr(graph, "value_info", [])]
        yield path, graph, [v for v in declared if isinstance(v, onnx.ValueInfoProto)]


def _negative_axes_of_unknown_rank(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """onnxruntime: a reduction with a negative ``axis``/``axes`` attribute over an input
    whose rank onnx's inference does not know (passes/positive_reduction_axes.py counts
    the others from the front); on an empty input it comes out unreduced."""
    suspects = any(n.op_type in _REDUCING_OPS and _negative_axis(n) for _, g, _ in walk_graphs(model) for n in g.node)
    if not suspects:
        return
    for path, graph, declared in _typed_graphs(model):
        ranked = {v.name for v in declared if _dims(v) is not None}
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
    integers, which passes/reductions_as_sums.py cannot write as sums (no Log of
    integers); float ones and every ReduceL1 it rewrites."""
    ops = ("ReduceLogSum", "ReduceLogSumExp")
    if not 13 <= _opset(model) < 18 or not any(n.op_type in ops for _, g, _ in walk_graphs(model) for n in g.node):
        return
    for path, graph, declared in _typed_graphs(model):
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
    passes/reductions_as_sums.py left (max, min, product, log-sum-exp, integer means)."""
    if _opset(model) < 18:
        return
    for path, graph, _ in walk_graphs(model):
        for node in graph.node:
            if node.op_type in _REDUCING_OPS - {"ReduceSum", "ArgMax", "ArgMin"} and node.domain in ("", "ai.onnx"):
                yield (describe_node(node.op_type, node.name, list(node.output)), path,
                       f"onnx2torch has no {node.op_type} converter from opset 18 (quirk no-reduce-18)")


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each name a node of ``graph`` reads (its subgraphs' outer reads included), and the
    nodes that read it: read once per graph, not per value asked about."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        read = {x for x in n.input if x}
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= _names_read(g)
        for x in read:
            readers.setdefault(x, []).append(n)
    return readers


def _read_twice(readers: dict[str, list[onnx.NodeProto]], name: str) -> bool:
    """Whether a node reads ``name`` and another node reads what that one makes."""
    return any(o in readers for n in readers.get(name, ()) for o in n.output if o)


def _if_run_time_shapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: an If whose branches give a 1-D output of a length known only at run time
    that two ops in a row read. ``lower --target openvino`` runs each as a select
    (passes/ifs_to_selects.py). A zero-trip guard's If is read right."""
    inferred = _inferred_if_any_if(model)
    if inferred is None:
        return
    graphs = {path: g for path, g, _ in walk_graphs(inferred)}
    indexed: dict[str, dict[str, list[onnx.NodeProto]]] = {}
    for path, node, then, other in _ifs(inferred):
        if then.node and then.node[-1].op_type == "Loop" and list(then.output) and \
                [o.name for o in then.output] == list(then.node[-1].output):
            continue  # a zero-trip guard
        if path not in indexed and path in graphs:
            indexed[path] = _readers(graphs[path])
        readers = indexed.get(path)
        for k, (a, b) in enumerate(zip(then.output, other.output)):
            da, db = _dims(a), _dims(b)
            if a.type.WhichOneof("value") != "tensor_type" or k >= len(node.output):
                continue
            if readers is not None and not _read_twice(readers, node.output[k]):
                continue  # (read by one op at most, or only returned: read right)
            # As measured: a 1-D output of a run-time length (lengths and sizes read wrong;
            # the lowering also runs Ifs of other run-time shapes as selects: one of
            # [?, W] failed to compile, one of [2, n, 1] read as garbage (torch fuzz
            # 20561), but others run right, dynamo's embedding_bag's [1, ?] in a Loop:
            # not named).
            if da is None or db is None or len(da) != 1 or len(db) != 1 or (da == db and isinstance(da[0], int)):
                continue
            where = describe_node(node.op_type, node.name, list(node.output))
            yield where, path, (f"its branches give output {k} as {_show(da)} and {_show(db)}, a length known only at "
                                "run time, which OpenVINO reads wrong two ops further on (quirk if-run-time-shape); "
                                "lower --target openvino runs such an If as a select")
            break


def _openvinos_folds_of_empty_inputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a model input declared with a dim of 0, from which it folds a Gather it
    dies on (SIGFPE) or a Reshape it refuses (passes/empty_inputs_as_symbolic.py names
    the dim; torch fuzz 16273)."""
    for v in model.graph.input:
        dims = _dims(v)
        if dims is not None and 0 in dims:
            yield (f"input '{v.name}'", "main", f"it is declared {_show(dims)}, and OpenVINO folds what depends on "
                   "an empty input wrong (a Gather at axis 1 of [0, 3] kills it; quirk static-empty-input)")


def _empty_constant_readers(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a node that reads a zero-size constant, which its frontend takes as a
    tensor of shape [] (``lower --target openvino`` writes every one as a ConstantOfShape,
    so only a model lowered otherwise has any)."""
    from seqlower.protos import outer_reads, subgraphs_of

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
    for path, graph, _ in walk_graphs(_inferred(model) or model):
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
            dims = {v.name: _dims(v) for v in (*g.input, *g.value_info, *g.output)}
            dims.update({t.name: list(t.dims) for t in getattr(g, "initializer", ())})
            facts[id(g)] = ({o: m for m in g.node for o in m.output}, dims, _constants(g))
        made, dims, consts = facts[id(g)]
        if len(n.input) < 3 or all(x and x in consts for x in n.input[:2]):
            continue  # (a constant trip count and condition: it runs what it says)
        body_made = {o: b for b in body.node for o in b.output}
        for k, init in enumerate(n.input[2:]):
            p = made.get(init)
            if p is None or p.op_type != "Concat" or any(a.name == "axis" and a.i != 0 for a in p.attribute):
                continue
            if not any((d := dims.get(x)) and isinstance(d[0], int) and d[0] >= 1 for x in p.input):
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


def _zero_size_scan_outputs(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Loop whose scan output's per-iteration value has a dim known to be 0
    (a list of ``x[:, :0]`` slices appended in a loop): its CPU plugin gives the stacked
    output other dims ((2, 0, 0) for ONNX's (2, 2, 0)), and folding what reads it fails
    to compile ("Cannot infer '-1' dimension with zero-size output dimension", torch fuzz
    seed 6437)."""
    for path, _, n, body in _loops_in_graphs(model):
        carried = len(n.input) - 2
        for k, out in enumerate(body.output[1 + carried:]):
            dims = _dims(out)
            if dims is not None and 0 in dims:
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its scan output {k} stacks values of shape {_show(dims)}, of size 0, which OpenVINO "
                       "gives other dims (quirk zero-size-scan-output)")
                break


def _string_inputs(model: onnx.ModelProto) -> list[str]:
    STRING = onnx.TensorProto.STRING
    return [v.name for v in model.graph.input
            if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type == STRING]


def _string_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO and tract: every node that reads a string tensor the model takes, holds
    or casts to (neither has a string type: OpenVINO's Python API refuses the input,
    'ov_type_it != dtype_map.end()', its frontend a string constant; tract refuses an
    object input: random graph programs over strings, seeds 20101-20299)."""
    from seqlower.protos import outer_reads, subgraphs_of

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
    from seqlower.protos import outer_reads, subgraphs_of

    strings = _string_inputs(model)
    if not strings:
        return
    read = {x for _, g, _ in walk_graphs(model) for n in g.node for x in (outer_reads(n) if subgraphs_of(n) else n.input)}
    for name in strings:
        if name not in read:
            yield f"input '{name}'", "main", "it is a string tensor, which the runtime refuses to be given (quirk string-input)"


def _dynamic_rank_reshapes(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """OpenVINO: a Reshape whose shape input's length is not known before it runs (an
    element of a list whose rank is only known at run time): its CPU plugin refuses a
    Reshape of dynamic rank."""
    if not any(n.op_type == "Reshape" for _, g, _ in walk_graphs(model) for n in g.node):
        return
    inferred = _inferred(model)
    if inferred is None:
        return
    graphs = list(walk_graphs(inferred))
    # Names are one scope's each: what any graph knows, a subgraph reading it knows too.
    constants = {t.name for _, g, _ in graphs for t in getattr(g, "initializer", ())}
    constants |= {n.output[0] for _, g, _ in graphs for n in g.node if n.op_type == "Constant"}
    lengths: dict[str, Dim] = {}
    for _, g, _ in graphs:
        for v in (*getattr(g, "input", ()), *getattr(g, "value_info", ()), *getattr(g, "output", ())):
            dims = _dims(v)
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


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's initializers and Constant tensors by name, as arrays."""
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in getattr(graph, "initializer", ())}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t"):
            found[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return found


_DATA_SIZED = frozenset({"NonZero", "Compress", "Unique", "NonMaxSuppression"})


def _zero_products_of_data_sized(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Mul by a constant zero of a tensor whose size a NonZero (or Compress,
    Unique) decides: tract replaces it by zeros broadcast to a size it cannot evaluate
    ('MultiBroadcastTo: Undetermined symbol'; TorchScript's ``mask_rows * float(i)``
    with ``i`` unrolled to 0, fuzz seeds 5292, 6421, 4044)."""
    for path, g, _ in walk_graphs(model):
        consts = _constants(g)
        made = {o: n for n in g.node for o in n.output}
        sized = _data_sized(g)
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
                           f"it multiplies '{n.input[other]}', whose size a {'/'.join(sorted(_DATA_SIZED))} decides, "
                           "by a constant zero, which tract turns into a broadcast it cannot size (quirk zero-product-data-sized)")
                    break


def _data_sized(graph: onnx.GraphProto, outer: set[str] = frozenset()) -> set[str]:
    """The values of ``graph`` computed from a NonZero's (or Compress's, Unique's) output:
    in graph order, each node's outputs when it is one or reads one (or reads one of
    ``outer``, the enclosing graph's; a branch's output may be one of those itself)."""
    tainted: set[str] = set(outer)
    for n in graph.node:
        if n.op_type in _DATA_SIZED or not tainted.isdisjoint(n.input):
            tainted.update(o for o in n.output if o)
    return tainted


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
        sized = _data_sized(g)
        for n in g.node:
            if n.op_type != "Slice" or len(n.input) < 3 or n.domain not in ("", "ai.onnx"):
                continue
            bounds = [b for b in n.input[1:3] if b and b not in consts]
            if bounds and not sized.isdisjoint((n.input[0], *bounds)):
                yield (describe_node(n.op_type, n.name, list(n.output)), path,
                       f"its bound '{bounds[0]}' is known only at run time and a {'/'.join(sorted(_DATA_SIZED))} "
                       "sizes what it slices: tract's DynSlice fails it: 'start + len == end' (quirk data-sized-slice)")


def _reversed_slices_of_maybe_empty(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: a Slice with a negative step over an axis that may be empty fails its
    analysis ('end <= len' 1 vs 0: ``x.flip(0)`` and ``x[::-1]`` of no rows, fuzz seed 9018)."""
    for path, g, infos in _typed_graphs(model):
        dims = {v.name: _dims(v) for v in infos}
        consts = _constants(g)
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


def _ifs_past_the_first(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: every If of a graph that has one before it ('Duplicate node name: If')."""
    for path, g, _ in walk_graphs(model):
        ifs = [n for n in g.node if n.op_type == "If" and n.domain in ("", "ai.onnx")]
        for n in ifs[1:]:
            yield (describe_node(n.op_type, n.name, list(n.output)), path,
                   f"tract names every If it loads 'If', and {describe_node(ifs[0].op_type, ifs[0].name, list(ifs[0].output))} "
                   "has that name in this graph already (quirk one-if-per-graph)")


_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def _if_branch_facts_all(model: onnx.ModelProto) -> Iterator[tuple[str, str, str]]:
    """tract: an If whose branches give what it cannot hold as one fact, every way found."""
    return _unique([*_if_branch_facts(model), *_if_branch_growth(model), *_if_branch_data_sizes(model),
                    *_if_branch_unknown_dims(model)])


# Quirk id -> detector: (node, graph path, why) for every node the quirk hits; which
# function detects which quirk is the registry's (seqlower.targets.registry).
DETECTORS: dict[str, Callable[[onnx.ModelProto], Iterator[tuple[str, str, str]]]] = {
    q.id: globals()[q.detector] for q in QUIRKS.values() if q.detector
}


def _unique(found: list[tuple[str, str, str]]) -> Iterator[tuple[str, str, str]]:
    """One finding per node (the first reason)."""
    seen = set()
    for where, path, why in found:
        if (where, path) not in seen:
            seen.add((where, path))
            yield where, path, why


def quirk_findings(model: onnx.ModelProto, quirk_ids: list[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    try:
        for quirk in quirk_ids:
            if quirk in DETECTORS:
                found.extend(DETECTORS[quirk](model))
    finally:
        _INFERRED.pop(id(model), None)
        _KNOWN.pop(id(model), None)
    return found
