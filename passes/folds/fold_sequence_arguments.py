"""Constant-fold the tensor arithmetic that computes split sizes and positions.

TorchScript computes ``chunk``'s split sizes from ``Shape`` (Shape -> Gather -> Add ->
Div -> Expand -> Concat) even when the shape is static; once that arithmetic is a
constant, the sequence is static. This pass:

1. finds each sequence op's control input (``SplitToSequence``'s split, the position
   of ``SequenceInsert``/``SequenceErase``/``SequenceAt``, ``Loop``'s trip count);
2. evaluates its backward slice when every leaf is a constant or the ``Shape``/``Size``
   of a value with a static shape (with onnx's reference evaluator, node by node);
3. feeds the op the result as a constant.

Only those inputs change; the arithmetic, now unused, is removed by the clean-up.
onnxscript's folder is not used here because its per-op evaluators run before its
``should_fold`` filter: it would also rewrite (and, for SplitToSequence below opset 18
or with keepdims=0 and a 1-D split, break) the sequence ops themselves.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
from onnx.reference import ReferenceEvaluator

from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower import ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["FoldSequenceArgumentsPass", "evaluate"]

logger = logging.getLogger(__name__)

# The input each op's lowering needs as a constant (seqlower.ops).
CONTROL_INPUTS = {n: f.control for n, f in ops.REGISTRY.items() if f.control is not None and f.domain == ""}
_MAX_ELEMENTS = 1024
_MAX_SLICE = 64


class FoldSequenceArgumentsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _fold)


def _fold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if not is_default_domain(node) or node.op_type not in CONTROL_INPUTS:
        return None
    i = CONTROL_INPUTS[node.op_type]
    v = node.inputs[i] if i < len(node.inputs) else None
    if v is None or const_array(v) is not None or v.producer() is None:
        return None
    value = evaluate(v, scope.opset)
    if value is None:
        emptied = _fold_empty_expands(v, scope, names)
        return ("constant argument", f"{emptied} empty Expand(s) of its input {i} folded") if emptied else None
    const = scope.builder(node, names).constant(value, f"{v.name or 'arg'}_folded")
    node.replace_input_with(i, const)
    return "constant argument", f"input {i} folded from static shapes"


def _fold_empty_expands(v: ir.Value, scope: Scope, names: NameAuthority) -> int:
    """Fold each Expand in ``v``'s backward slice (this graph's part) whose result is
    empty whatever its input's values: a static input and a target shape computable here,
    one of whose dims is 0. How many it folded.

    TorchScript's ``chunk`` sizes are ``Concat(Expand(q, [0]), ...)`` with the ``[0]``
    computed; onnxruntime's optimizer (1.31, level basic and up) gives ``Expand([1],
    [0])`` the shape [1], so a Shape of those sizes, which the lowering reads, folds to a
    count one too many. The empty constant is the same value on every runtime."""
    folded, seen, stack = 0, set(), [v]
    while stack and len(seen) < _MAX_SLICE:
        p = stack.pop().producer()
        if p is None or id(p) in seen or p.graph is not scope.graph or not is_default_domain(p) \
                or p.op_type in ("Loop", "If", "Scan"):
            continue
        seen.add(id(p))
        if p.op_type == "Expand" and len(p.inputs) == 2 and None not in p.inputs and not p.outputs[0].is_graph_output():
            x = p.inputs[0]
            target = evaluate(p.inputs[1], scope.opset)  # (a constant evaluates to itself)
            if target is not None and x.shape is not None and x.shape.is_static() and x.dtype is not None:
                try:
                    dims = np.broadcast_shapes(tuple(int(d) for d in x.shape.dims), tuple(int(d) for d in target.reshape(-1)))
                except ValueError:
                    dims = None  # not broadcastable: the runtime's error, not ours to fold
                if dims is not None and 0 in dims:
                    empty = scope.builder(p, names).constant(np.zeros(dims, x.dtype.numpy()), f"{p.name or 'expand'}_empty")
                    p.outputs[0].replace_all_uses_with(empty)
                    folded += 1
                    continue
        stack.extend(i for i in p.inputs if i is not None)
    return folded


def evaluate(target: ir.Value, opset: int) -> np.ndarray | None:
    """The value of ``target`` if its backward slice is computable at compile time:
    constants, the ``Shape``/``Size`` of a value with a static shape, or the static dims
    a ``Gather``/``Slice`` picks out of a partly known shape, then any arithmetic."""
    known: dict[ir.Value, np.ndarray] = {}
    order: list[ir.Node] = []
    seen: set[int] = set()
    stack = [target]
    while stack:
        v = stack.pop()
        if v in known:
            continue
        c = const_array(v)
        if c is None:
            c = _static_dims_picked(v)
        if c is not None:
            known[v] = c
            continue
        node = v.producer()
        if node is None:  # a graph input
            return None
        if id(node) in seen:
            continue
        if not is_default_domain(node) or node.op_type in ("Loop", "If", "Scan"):
            return None
        seen.add(id(node))
        if len(seen) > _MAX_SLICE:
            return None
        order.append(node)
        if node.op_type in ("Shape", "Size"):
            x = node.inputs[0]
            if x is None or x.shape is None or not x.shape.is_static():
                return None
            continue
        for inp in node.inputs:
            if inp is not None:
                if inp.type is not None and not isinstance(inp.type, ir.TensorType):
                    return None
                stack.append(inp)
    for node in _producers_first(order):
        try:
            outputs = _run(node, known, opset)
        except Exception as e:  # noqa: BLE001 - a slice we cannot evaluate is simply not folded
            logger.debug("cannot evaluate %s: %s", node.op_type, e)
            return None
        for out, val in zip(node.outputs, outputs):
            if val.size > _MAX_ELEMENTS:
                return None
            known[out] = val
    return known.get(target)


def _static_dims_picked(v: ir.Value) -> np.ndarray | None:
    """``Gather(Shape(x), k)`` or ``Slice(Shape(x), ...)`` with constant indices, when
    the dims it picks are static although ``x``'s other dims are not."""
    node = v.producer()
    if node is None or not is_default_domain(node) or node.op_type not in ("Gather", "Slice") or not node.inputs:
        return None
    shape_node = node.inputs[0].producer() if node.inputs[0] is not None else None
    if shape_node is None or shape_node.op_type != "Shape" or not is_default_domain(shape_node):
        return None
    x = shape_node.inputs[0]
    if x is None or x.shape is None:
        return None
    start = shape_node.attributes["start"].as_int() if "start" in shape_node.attributes else 0
    end = shape_node.attributes["end"].as_int() if "end" in shape_node.attributes else x.shape.rank()
    dims = list(x.shape.dims)[slice(start, end)]
    positions = np.arange(len(dims), dtype=np.int64)
    try:
        if node.op_type == "Gather":
            index = const_array(node.inputs[1]) if len(node.inputs) > 1 else None
            if index is None or ("axis" in node.attributes and node.attributes["axis"].as_int() != 0):
                return None
            picked = positions[np.asarray(index, dtype=np.int64)]
        else:
            args = [const_array(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] is not None else None
                    for i in range(1, 5)]
            if args[0] is None or args[1] is None or (args[2] is not None and list(args[2].reshape(-1)) != [0]):
                return None
            step = int(args[3].reshape(-1)[0]) if args[3] is not None else 1
            picked = positions[int(args[0].reshape(-1)[0]):int(args[1].reshape(-1)[0]):step]
    except (IndexError, ValueError, TypeError):
        return None
    values = [dims[int(i)] for i in np.asarray(picked).reshape(-1)]
    if not all(isinstance(d, int) for d in values):
        return None
    return np.array(values, dtype=np.int64).reshape(np.asarray(picked).shape)


def _producers_first(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` in an order where every producer comes before its consumers."""
    members = {id(n) for n in nodes}
    done: set[int] = set()
    out: list[ir.Node] = []

    def visit(n: ir.Node) -> None:
        stack = [(n, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.append(node)
                continue
            if id(node) in done:
                continue
            done.add(id(node))
            stack.append((node, True))
            for inp in node.inputs:
                p = inp.producer() if inp is not None else None
                if p is not None and id(p) in members and id(p) not in done:
                    stack.append((p, False))

    for n in nodes:
        visit(n)
    return out


def _run(node: ir.Node, known: dict[ir.Value, np.ndarray], opset: int) -> list[np.ndarray]:
    if node.op_type in ("Shape", "Size"):
        shape = [int(d) for d in node.inputs[0].shape.dims]
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        start = node.attributes["start"].as_int() if "start" in node.attributes else 0
        end = node.attributes["end"].as_int() if "end" in node.attributes else len(shape)
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    proto = ir.serde.serialize_node(node)
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(node.inputs)]
    outs = [f"o{k}" for k in range(len(node.outputs))]
    del proto.input[:]
    proto.input.extend(names)
    del proto.output[:]
    proto.output.extend(outs)
    graph = onnx.helper.make_graph(
        [proto], "slice",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(known[v].dtype), None)
         for n, v in zip(names, node.inputs) if v is not None],
        [onnx.ValueInfoProto(name=o) for o in outs],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    feeds = {n: known[v] for n, v in zip(names, node.inputs) if v is not None}
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]
