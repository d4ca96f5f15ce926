"""IR helpers the analysis and the lowerings share: labels, constants, positions,
users and shapes of values, model-input dims."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import weakref

import numpy as np
from seqlower._deferred import onnx_ir as ir

from seqlower.errors import ModelError, describe_node
from seqlower.keys import OPEN_WHEN_EMPTY

__all__ = ["merge_dims", "merge_shapes", "concat_shape", "anchored_shape", "open_when_empty", "const_array", "const_tensor", "const_position", "graph_label", "graphs_of", "is_default_domain",
           "loop_runs_all_trips", "loop_shapes_consistent", "model_input_dims", "node_label", "split_rank", "subgraphs"]


def is_default_domain(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx")


def node_label(node: ir.Node) -> str:
    return describe_node(node.op_type, node.name or "", [o.name or "" for o in node.outputs])


def graph_label(graph: ir.Graph | ir.Function, parent: str | None = None) -> str:
    if isinstance(graph, ir.Function):
        return f"function {graph.domain}::{graph.name}"
    return parent or "main"


# Tensor -> its array, read-only: the analyses read the same small constants (positions,
# axes) over and over (136,000 reads, 2.8 s of 25 on 10,000 edits, profiled).
_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def const_tensor(v: ir.Value | None) -> ir.TensorProtocol | None:
    """``v``'s value when it is fixed: an initializer or a Constant's output, never a graph
    input. (An initializer that is also a graph input, IR >= 4, is a default the caller may
    override: onnx's backend models feed positions that way, so folding it is wrong.)"""
    if v is None or v.is_graph_input():
        return None
    return ir.convenience.get_const_tensor(v)


def const_array(v: ir.Value | None) -> np.ndarray | None:
    t = const_tensor(v)
    if t is None:
        return None
    try:
        hit = _ARRAYS.get(t)
    except TypeError:  # not weakly referenceable
        hit = None
    if hit is not None:
        return hit
    try:
        a = t.numpy()
    except Exception:  # noqa: BLE001 - an unreadable constant is simply not a known constant
        return None
    if a.size <= 64:
        a = a.copy() if a.base is not None or not a.flags.owndata else a
        a.flags.writeable = False
        try:
            _ARRAYS[t] = a
        except TypeError:
            pass
    return a


def const_position(v: ir.Value | None, node: ir.Node, what: str = "position") -> int | None:
    """A constant position: int32/int64, scalar or shape [1] (TorchScript emits [1])."""
    a = const_array(v)
    if a is None:
        return None
    if a.dtype not in (np.int32, np.int64):
        raise ModelError(f"{node_label(node)}: {what} must be int32 or int64, got {a.dtype}")
    if a.size != 1 or a.ndim > 1:
        raise ModelError(f"{node_label(node)}: {what} must be a scalar, got shape {list(a.shape)}")
    return int(a.reshape(()))


def anchored_shape(shape: ir.Shape, anchored: frozenset[str]) -> bool:
    """Every dim a number or a model input's dim: one size for the whole run."""
    return all(isinstance(d, int) or (isinstance(d, ir.SymbolicDim) and d.value in anchored) for d in shape.dims)

def model_input_dims(model: ir.Model) -> dict[str, tuple[ir.Value, int]]:
    """Each symbolic dim of a model input: the first input and axis that has it."""
    dims: dict[str, tuple[ir.Value, int]] = {}
    for v in model.graph.inputs:
        if v.shape is None or isinstance(v.type, ir.SequenceType):
            continue
        for axis, d in enumerate(v.shape.dims):
            if isinstance(d, ir.SymbolicDim) and d.value is not None:
                dims.setdefault(d.value, (v, axis))
    return dims

def rank_of(v: ir.Value | None) -> int | None:
    if v is None:
        return None
    shape = shape_of_value(v)
    return shape.rank() if shape is not None else None

# Ops whose output is never a scalar, and ops whose output has the largest rank of their
# inputs (for a split, which is a scalar or 1-D, one 1-D input decides). Not Expand: its
# rank is the length of its shape input, not that input's rank.
_NEVER_SCALAR = frozenset({"Concat", "Shape", "Range", "Unsqueeze", "ConstantOfShape", "NonZero", "Split",
                           "TopK", "Tile", "Compress"})
_RANK_OF_INPUTS = frozenset({"Identity", "Cast", "CastLike", "Neg", "Abs", "Relu", "Floor", "Ceil", "Add", "Sub",
                             "Mul", "Div", "Mod", "Max", "Min", "Where", "Clip"})


def open_when_empty(v: ir.Value) -> bool:
    """Whether ``v`` is (through Identity) a Loop's or a Scan's scan output, here or, for
    a region's input, in the model (``seqlower.fastpath.regions`` marks those)."""
    if v.is_graph_input():
        return v.metadata_props.get(OPEN_WHEN_EMPTY) == "1"
    while (p := v.producer()) is not None and p.domain in ("", "ai.onnx"):
        if p.op_type == "Identity" and p.inputs[0] is not None:
            v = p.inputs[0]
            continue
        if p.op_type == "Loop":
            return v.index() >= len(p.inputs) - 2
        if p.op_type == "Scan":
            return v.index() >= len(p.inputs) - p.attributes["num_scan_inputs"].as_int()
        return False
    return False


def split_rank(split: ir.Value, depth: int = 8) -> int | None:
    """The rank of SplitToSequence's ``split`` (0: chunks of k; 1: sizes), from its shape,
    else from what makes it: TorchScript computes ``chunk``'s sizes by a Concat of an
    Expand whose shape onnx cannot infer, and a Concat is never a scalar."""
    r = rank_of(split)
    if r is not None or depth == 0:
        return r
    p = split.producer()
    if p is None or not is_default_domain(p):
        return None
    if p.op_type in _NEVER_SCALAR:
        return 1
    if p.op_type in _RANK_OF_INPUTS:
        ranks = [split_rank(v, depth - 1) for v in p.inputs[: 1 if p.op_type == "Clip" else None] if v is not None]
        if 1 in ranks:
            return 1
        return 0 if ranks and all(r == 0 for r in ranks) else None
    return None


def users_of(v: ir.Value) -> Iterator[ir.Node]:
    seen: set[int] = set()
    for use in v.uses():
        node = use.node
        if id(node) not in seen:
            seen.add(id(node))
            yield node

def shape_of_value(v: ir.Value | None) -> ir.Shape | None:
    if v is None:
        return None
    c = ir.convenience.get_const_tensor(v)
    if c is not None:
        return ir.Shape(c.shape)
    return v.shape


def int_attr(node: ir.Node, name: str, default: int | None) -> int | None:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()

def subgraph_of(node: ir.Node, name: str) -> ir.Graph | None:
    a = node.attributes.get(name)
    return None if a is None or a.type != ir.AttributeType.GRAPH else a.as_graph()

def loop_shapes_consistent(node: ir.Node) -> bool:
    """Whether each tensor a Loop carries has the same declared shape going in, in the
    body and coming out: then, by induction, the shapes inference derived from them hold
    in every iteration."""
    body = subgraph_of(node, "body")
    if body is None:
        return False
    for j, bi in enumerate(body.inputs[2:]):
        if isinstance(bi.type, ir.SequenceType) or bi.shape is None:
            continue
        init = node.inputs[2 + j] if 2 + j < len(node.inputs) else None
        bo = body.outputs[1 + j] if 1 + j < len(body.outputs) else None
        if init is None or bo is None or init.shape != bi.shape or bo.shape != bi.shape:
            return False
    return True

def loop_runs_all_trips(node: ir.Node, body: ir.Graph) -> bool:
    """True when the Loop's condition can never stop it early: no initial ``cond``
    or a constant true, and the body passes its cond through or outputs constant true."""
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if cond is not None:
        c = const_array(cond)
        if c is None or not bool(c.reshape(())):
            return False
    out = body.outputs[0]
    while out is not None and (p := out.producer()) is not None and p.op_type == "Identity" and is_default_domain(p) and p.inputs:
        out = p.inputs[0]
    if out is body.inputs[1]:
        return True
    c = const_array(out)
    return c is not None and bool(c.reshape(()))


def subgraphs(node: ir.Node) -> Iterator[ir.Graph]:
    if not node.attributes:  # (most nodes: the walks ask of every node)
        return
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.as_graph()
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.as_graphs()


def graphs_of(model: ir.Model) -> list[ir.Graph]:
    """``list(model.graphs())``, in its order (the main graph, then every subgraph depth
    first), without onnx_ir's generic traversal: that runs every node through a chain of
    generators (33 ms a call on a 14,000-node graph against 9 ms here), and the passes
    ask about 50 times a lowering."""
    found: list[ir.Graph] = []
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        found.append(graph)
        stack.extend(reversed([sub for node in graph if node.attributes for sub in subgraphs(node)]))
    return found


def merge_dims(a: int | ir.SymbolicDim | None, b: int | ir.SymbolicDim | None) -> int | ir.SymbolicDim | None:
    """The dim both may be (onnx's merge): equal dims stay, anything else is unknown."""
    if a == b:
        return a
    return None


def merge_shapes(shapes: Sequence[ir.Shape | None]) -> ir.Shape | None:
    """One shape for several values (the element shape onnx gives a sequence type)."""
    if not shapes or any(s is None for s in shapes):
        return None
    rank = shapes[0].rank()
    if any(s.rank() != rank for s in shapes):
        return None
    return ir.Shape(_merged_dims([s.dims for s in shapes], range(rank)))


def _merged_dims(dims: Sequence[Sequence[int | ir.SymbolicDim | None]], axes: Iterable[int]) -> list:
    """merge_dims over every list, at each of ``axes``: the dim all share, else None."""
    first, rest = dims[0], dims[1:]
    return [first[i] if all(d[i] == first[i] for d in rest) else None for i in axes]


def concat_shape(shapes: Sequence[ir.Shape | None], axis: int, new_axis: bool) -> ir.Shape | None:
    """The shape ConcatFromSequence (or Concat after Unsqueeze) gives these elements: the
    concatenated axis a sum (the count, for new_axis), the other dims merged."""
    if not shapes or any(s is None for s in shapes):
        return None
    rank = shapes[0].rank()
    if any(s.rank() != rank for s in shapes):
        return None
    r = rank + 1 if new_axis else rank
    if r == 0 or not -r <= axis < r:
        return None
    a = axis % r
    if new_axis:
        merged = merge_shapes(shapes)
        if merged is None:
            return None
        dims = list(merged.dims)
        dims.insert(a, len(shapes))
        return ir.Shape(dims)
    # Built from the dims lists: a Shape per element was most of the analysis's time on
    # thousands of concats.
    dims = _merged_dims([s.dims for s in shapes], (i for i in range(rank) if i != a))
    along = [s.dims[a] for s in shapes]
    dims.insert(a, sum(along) if all(isinstance(d, int) for d in along) else None)
    return ir.Shape(dims)
