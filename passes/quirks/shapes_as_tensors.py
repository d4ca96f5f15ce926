"""Values read off Shape, given to an op TVM's frontend converts no shape (or no scalar
dim) for, become tensors first, for TVM Relax (quirk "shape-expr").

TVM 0.27's ONNX frontend (``relax/frontend/onnx/onnx_frontend.py``) keeps what
``Shape`` gives as a shape expression, and what a Slice, Concat or Squeeze of one gives;
a dim Gathered from one is a prim value, and arithmetic on prims stays prim. Any op
outside thirteen that takes shape expressions fails on one ("Node s7_length_col_unsqueeze
cannot handle ShapeExpr inputs", ``_construct_nodes``): the Packed ABI's Unsqueeze of a
list's lengths, a CumSum of the Flat lengths, the Tile of the shape rows (graph programs
20156, 20333, 20339). A Slice of a shape takes only constant bounds ("Slice with
dynamic parameters does not support ShapeExpr input", 20391), and a Reshape of a prim
fails ("Reshape requires the input data to be Tensor", the lowerings' position
``Reshape(n - 1, [1])``).

Its Cast turns a shape expression into a constant (every dim known) or an int64 tensor
(``shape_to_tensor``), and its Unsqueeze at axis 0 turns a prim into a shape expression.
So a Cast to the value's own type (a no-op in ONNX) is written before each op that would
get a shape expression it cannot take, and ``Reshape(Cast(Unsqueeze(p, [0])), [])``
(the same scalar in ONNX) before each that would get a prim it cannot take. A value
that is a tensor there loses nothing; Reshape, Expand and the others of the thirteen keep
reading shapes, which is what they need for their shape inputs.

Functions and subgraphs included: each value is converted once, right after the node
that makes it, and every reader that needs a tensor reads that (a subgraph's included).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import Builder, NameAuthority
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.targets.quirks.tvm import TVM_SHAPE_SLOTS, TVM_SHAPE_TAKING_OPS

__all__ = ["ShapesAsTensorsPass"]

# Its converters that compute on prims and constants to a prim (``BinaryBase``). Not
# its comparisons: a prim condition fails the Where it feeds (quirk where-shape-condition).
_PRIM_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Mod"})


class ShapesAsTensorsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _Conversion(model).rewrite)


class _Conversion:
    """The values that may be shape expressions or prims to TVM, found node after node,
    and each made a tensor once where an op takes none."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.shapes: set[ir.Value] = set()  # values that may be shape expressions to TVM
        self.prims: set[ir.Value] = set()  # scalars that may be prim values to TVM
        self.made: dict[ir.Value, ir.Value] = {}  # one conversion per value

    def tensor_of(self, v: ir.Value, scope: Scope, names: NameAuthority) -> ir.Value:
        """``v`` as a tensor, made once, right after what makes ``v`` (a subgraph's reads
        of an outer shape share it)."""
        if v not in self.made:
            producer = v.producer()
            assert producer is not None and producer.graph is not None  # (shapes come from nodes)
            b = Builder(producer.graph, None, scope.opset, names, main_graph=producer.graph is self.model.graph,
                        after=producer)
            base = v.name or "shape"
            x = v
            if v in self.prims:
                x = b.unsqueeze(v, [0], f"{base}_dims")
            t = b.op("Cast", [x], f"{base}_tensor", v.dtype, x.shape, to=v.dtype)
            if v in self.prims:
                t = b.op("Reshape", [t, b.constant(np.zeros(0, np.int64), "scalar_shape")], f"{base}_scalar",
                         v.dtype, v.shape)
            self.made[v] = t
        return self.made[v]

    def rewrite(self, node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
        if not is_default_domain(node):
            return None
        if node.op_type == "If":
            return None  # (its condition is a bool the frontend reads as it is)
        shapes, prims, ins = self.shapes, self.prims, node.inputs
        slot = TVM_SHAPE_SLOTS.get(node.op_type)  # (Ops.reshape_exact pins these)
        if slot is not None and slot < len(ins) and (unpinned := _unpinned(ins[slot])) is not None:
            # TVM folds a Concat of constants to a shape expression and a Reshape of one to
            # a tensor, which no shape input takes (graph program 20387: the stacked dims of
            # a ConcatFromSequence(new_axis=1), pinned to their length).
            node.replace_input_with(slot, unpinned)
            return node.op_type, "its shape read before the Reshape that pinned its length (TVM)"
        if node.op_type == "Shape":
            shapes.update(node.outputs)
            if ins and ins[0] in shapes and ins[0].dtype is not None:
                # The shape of a shape: 'shape_of expects a tensor input' (program 20391).
                node.replace_input_with(0, self.tensor_of(ins[0], scope, names))
                return "tensor ops", "the shape of a value read off Shape taken of a tensor (TVM)"
            return None
        fed = [k for k, v in enumerate(ins) if v is not None and v.dtype is not None and (v in shapes or v in prims)]
        if not fed:
            return None
        keep = _kept(node, shapes, prims)
        if keep is not None:
            (shapes if keep == "shape" else prims).update(node.outputs)
            return None
        if _takes(node, shapes, prims):
            return None
        for k in fed:
            v = ins[k]
            assert v is not None
            if v in prims and (v.shape is None or v.shape.rank() != 0):
                continue  # (a prim that ONNX has as [1] has no scalar form to write)
            node.replace_input_with(k, self.tensor_of(v, scope, names))
        return "tensor ops", "a value read off Shape made a tensor before an op TVM's frontend takes none for"


def _unpinned(v: ir.Value | None) -> ir.Value | None:
    """What ``v`` is a Reshape of, when that Reshape changes nothing: a 1-D value
    reshaped to [k] (which fails unless its length is k)."""
    p = v.producer() if v is not None else None
    if p is None or p.op_type != "Reshape" or not is_default_domain(p) or len(p.inputs) < 2 or p.inputs[0] is None:
        return None
    target, x = const_array(p.inputs[1]), p.inputs[0]
    if target is None or target.size != 1 or not _one_d(x):
        return None
    made = x.producer()
    if made is not None and made.op_type == "Gather" and len(made.inputs) > 1 and made.inputs[1] is not None \
            and made.inputs[1].shape is not None and made.inputs[1].shape.rank() == 0:
        # A row Gathered out of a table of shapes keeps its pin: onnxruntime's inference
        # propagates such a Gather's value as one element, and a Reshape to it as rank 1
        # (it refused the lowered model: "Can't merge shape info", guided seed 13, 222).
        return None
    k = int(target.reshape(-1)[0])
    d = x.shape.dims[0] if x.shape is not None else None
    return x if k == -1 or not isinstance(d, int) or d == k else None


def _one_d(x: ir.Value) -> bool:
    """``x`` is known to be 1-D (a Concat has its inputs' rank; the lowerings leave some
    Concats' shapes unset)."""
    if x.shape is not None:
        return x.shape.rank() == 1
    p = x.producer()
    return p is not None and p.op_type == "Concat" and any(v is not None and v.shape is not None and v.shape.rank() == 1
                                                           for v in p.inputs)


def _const(v: ir.Value | None) -> bool:
    return v is None or const_array(v) is not None


def _kept(node: ir.Node, shapes: set[ir.Value], prims: set[ir.Value]) -> str | None:
    """"shape" or "prim" where TVM's frontend converts ``node`` on what it is given to
    a shape expression or a prim; None where it does not (or makes a tensor)."""
    op, ins = node.op_type, node.inputs
    x = ins[0] if ins else None
    if op == "Gather" and x in shapes:
        index = const_array(ins[1]) if len(ins) > 1 else None
        return "prim" if index is not None and index.ndim == 0 else None
    if op == "Slice" and x in shapes and all(_const(v) for v in ins[1:]):
        return "shape"
    if op == "Squeeze" and x in shapes:
        one = x.shape is not None and x.shape.rank() == 1 and x.shape.dims[0] == 1
        return "prim" if one else "shape"
    if op == "Concat" and all(v in shapes or _const(v) for v in ins):
        return "shape"
    if op == "Reshape" and x in shapes:
        target = const_array(ins[1]) if len(ins) > 1 else None
        return "shape" if target is not None and target.reshape(-1).tolist() == [-1] else None
    if op == "Unsqueeze" and x in prims and _axis_zero(node):
        return "shape"
    if op == "Cast" and x in prims:
        return "prim"
    if op in _PRIM_ARITHMETIC and any(v in prims for v in ins) and all(v in prims or _const(v) for v in ins):
        return "prim"
    return None


def _takes(node: ir.Node, shapes: set[ir.Value], prims: set[ir.Value]) -> bool:
    """Whether TVM's frontend converts ``node`` given the shapes and prims it reads,
    without keeping either in its output."""
    op, ins = node.op_type, node.inputs
    if any(v in prims for v in ins) and op != "Range":
        return False  # (an Unsqueeze at axis 0 and a Cast keep it: not here)
    if any(v in shapes for v in ins):
        if op not in TVM_SHAPE_TAKING_OPS:
            return False
        if op == "Slice":
            return all(_const(v) for v in ins[1:]) or ins[0] not in shapes
        if op == "Concat":
            return False  # (not kept: a shape beside a computed tensor)
        if op == "Gather":
            return True  # (a shape gathered at tensor indices is a tensor)
    return True


def _axis_zero(node: ir.Node) -> bool:
    attr = node.attributes.get("axes")
    axes = attr.as_ints() if attr is not None else const_array(node.inputs[1]) if len(node.inputs) > 1 else None
    return axes is not None and [int(a) for a in np.asarray(axes).reshape(-1)] == [0]

