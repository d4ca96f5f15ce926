"""TVM Relax's shape expressions: what its frontend converts of the shapes it keeps."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from seqlower.errors import describe_node
from seqlower.io.inference import infer_shapes
from seqlower.io.inventory import walk_graphs
from seqlower.io.weights import is_stub
from seqlower.targets.quirks.facts import KNOWN_CACHE, dims_of


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
    flow = _ShapeFlow(model)
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            found = flow.step(node)
            if found is not None:
                yield found[0], "main", found[1]


# A finding: the node named as the report names it, and why.
_Finding = tuple[str, str]


class _ShapeFlow:
    """What TVM's frontend holds each main-graph value as, node after node: a shape
    expression or a prim dim (``shape``: whether its dims are known, whether it is one
    dim), a constant, or a tensor."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.known, self.ranked = _known_shapes(model)
        self.constant = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant"
                                                               for o in n.output}
        self.values = {i.name: i for i in graph.initializer}
        self.shape: dict[str, tuple[bool, bool]] = {}
        self.first_reader: dict[str, tuple[int, onnx.NodeProto]] = {}  # (protobuf's node wrappers have no stable id)
        self.int64_rows = {v.name for v in (*graph.input, *graph.value_info, *graph.output)
                           if v.type.tensor_type.elem_type == onnx.TensorProto.INT64 and len(dims_of(v) or []) == 1}
        self.int64_rows |= {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.INT64 and len(i.dims) == 1}
        for k, n in enumerate(graph.node):
            for x in n.input:
                self.first_reader.setdefault(x, (k, n))

    def step(self, node: onnx.NodeProto) -> _Finding | None:
        ins = list(node.input)
        where = describe_node(node.op_type, node.name, list(node.output))
        if node.op_type in ("Shape", "Size"):
            return self._read_shape(node, ins, where)
        if node.op_type in _FOLDED and ins and all(x in self.constant for x in ins if x):
            if node.op_type == "Concat" and all(x in self.int64_rows for x in ins if x):
                # (of 1-D int64 constants, a shape expression there: 20387)
                self.shape.update({o: (True, False) for o in node.output})
            else:
                self.constant.update(node.output)  # (its frontend computes these on constants)
            return None
        slot = TVM_SHAPE_SLOTS.get(node.op_type)
        if slot is not None and slot < len(ins) and ins[slot]:
            target = ins[slot]
            if (target not in self.shape and target not in self.constant) or self.shape.get(target, (True, False))[1]:
                return where, (f"its shape '{target}' is a computed tensor or one dim, where TVM's frontend wants "
                               "a shape expression or a constant (quirk shape-expr)")
            if node.op_type == "Expand" and target in self.values and not is_stub(self.values[target]) \
                    and 0 in onnx.numpy_helper.to_array(self.values[target]).reshape(-1):
                return where, ("it expands a computed tensor to a zero-size dim, which TVM's frontend refuses: "
                               "'Invalid target dimension 0' (quirk expand-zero-dim)")
            ins = [x if k != slot else "" for k, x in enumerate(ins)]
        fed = [k for k, x in enumerate(ins) if x in self.shape]
        if not fed or node.op_type == "Range":
            return None
        return self._fed(node, ins, fed, where)

    def _read_shape(self, node: onnx.NodeProto, ins: list[str], where: str) -> _Finding | None:
        shape = self.shape
        if ins and ins[0] in shape and not shape[ins[0]][1] and node.op_type == "Shape":
            return where, (f"it reads the shape of '{ins[0]}', itself read off Shape: TVM's frontend fails it "
                           "('shape_of expects a tensor input') (quirk shape-expr)")
        if ins and ins[0] not in self.ranked and node.op_type == "Shape":
            readers = [self.first_reader[o] for o in node.output if o in self.first_reader]
            if not readers:
                return None
            c = min(readers, key=lambda r: r[0])[1]
            return (describe_node(c.op_type, c.name, list(c.output)),
                    f"it reads the shape of '{ins[0]}', whose rank is not known: TVM's frontend needs it "
                    "('requires a statically known input rank') (quirk shape-expr)")
        shape.update({o: (bool(ins and ins[0] in self.known), node.op_type == "Size") for o in node.output})
        return None

    def _fed(self, node: onnx.NodeProto, ins: list[str], fed: list[int], where: str) -> _Finding | None:
        """A node that reads values held as shapes or prims (at ``fed``)."""
        op, shape, constant, values = node.op_type, self.shape, self.constant, self.values
        static = all(shape[ins[k]][0] for k in fed)
        prims = all(shape[ins[k]][1] for k in fed)
        tensors = [x for k, x in enumerate(ins) if x and k not in fed and x not in constant]
        if op == "Cast":
            if not prims and static:
                constant.update(node.output)  # (a shape of known dims is a constant there)
            return None  # a prim cast, and a shape of run-time dims cast, are tensors
        whole = [k for k in fed if not shape[ins[k]][1]]
        if whole and op not in TVM_SHAPE_TAKING_OPS:
            return where, (f"it takes '{ins[whole[0]]}', a shape read off Shape, which TVM's frontend takes "
                           f"for no {op}: 'cannot handle ShapeExpr inputs' (quirk shape-expr)")
        if op == "Slice" and 0 in whole and any(x and x not in constant for x in ins[1:]):
            return where, (f"it slices '{ins[0]}', a shape read off Shape, at bounds computed at run time: TVM's "
                           "frontend fails it ('Slice with dynamic parameters does not support ShapeExpr "
                           "input') (quirk shape-expr)")
        if op == "Reshape" and 0 in fed and shape[ins[0]][1]:
            return where, (f"it reshapes '{ins[0]}', a dim read off Shape, which TVM's frontend holds as a "
                           "prim: 'Reshape requires the input data to be Tensor' (quirk shape-expr)")
        if op == "Reshape" and fed == [0] and 0 in whole:
            if ins[1] in values and onnx.numpy_helper.to_array(values[ins[1]]).reshape(-1).tolist() == [-1]:
                shape.update({o: (static, False) for o in node.output})
            return None  # (reshaped to anything else, a shape is an int64 tensor there)
        if op == "Slice" and 0 in whole and static:
            constant.update(node.output)  # (a slice of known dims is a constant there)
            return None
        one_index = len(ins) > 1 and ins[1] in values and not values[ins[1]].dims
        if op == "Gather" and 0 in whole and not one_index:
            return None  # (gathered at a tensor of indices: a tensor)
        if op in ("Max", "Min", "Sum", "Mean", "Where"):
            return where, (f"it takes '{ins[fed[0]]}', a value read off Shape, which TVM's frontend converts "
                           f"for no {op}: 'PrimType object has no attribute shape' (quirk shape-expr)")
        if op in _SHAPE_KEEPING and set(fed) <= set(_SHAPE_KEEPING[op]):
            one = op == "Gather" and one_index
            shape.update({o: (static, one or (prims and op in ("Identity", "Squeeze"))) for o in node.output})
            return None
        if tensors:
            return where, (f"it mixes '{ins[fed[0]]}', a value read off Shape, with the computed tensor "
                           f"'{tensors[0]}': TVM's frontend cannot convert it (quirk shape-expr)")
        if static or prims or op == "Concat":
            shape.update({o: (static, prims and op != "Concat") for o in node.output})
            return None
        return where, (f"it computes on '{ins[fed[0]]}', a shape whose dims the input shapes do not fix: "
                       "TVM's frontend cannot convert it (quirk shape-expr)")


def _known_shapes(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """Main-graph values whose every dim onnx's inference (data propagation on) knows
    once every graph input dim is a number, and those whose rank it knows."""
    cached = KNOWN_CACHE.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    found = _fixed_dims_inference(model)
    KNOWN_CACHE[id(model)] = (model, found)
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
        dims = dims_of(v)
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
