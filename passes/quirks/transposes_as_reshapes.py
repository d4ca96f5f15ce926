"""A Transpose that OpenVINO would make a Reshape of, written so that it cannot go wrong
on an empty tensor (quirk "transpose-empty").

OpenVINO 2026.4 turns a Transpose whose dims other than 1 keep their order into a Reshape
to ``Gather(ShapeOf(x), perm)``, where a 0 means "copy the input's dim": when such a dim
is 0 at run time and moves, the Reshape copies the wrong one. ``Transpose([1, 2, 0])``
of an [1, 0, 3] tensor fails ("the shape of input data (1.0.3) conflicts with the reshape
pattern (0.3.1)"), and of an [1, 0, 0] tensor gives [1, 0, 1], no error (the lowered
``ConcatFromSequence(new_axis=1)`` of a one-element list, graph program 20220).

Where the dims known here to be 1 are the only ones that move, the Transpose becomes a
Reshape to its permuted dims with allowzero (0 is 0), which OpenVINO gives right. Where
OpenVINO may know more dims to be 1 than this analysis does, the input is sliced to a
Where of its own shape first, a no-op at run time after which OpenVINO knows no dim, sees
a real permutation and transposes. Transposes of static positive dims, and those whose
known dims other than 1 change order, stay.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import Ops
from seqlower.passes.quirks.guard_zero_trip_loops import sizing_shape
from seqlower.passes.quirks.squeezes_as_reshapes import reshape_to_index

__all__ = ["TransposesAsReshapesPass"]


class TransposesAsReshapesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _perm(node: ir.Node, rank: int) -> list[int]:
    attr = node.attributes.get("perm")
    return list(attr.as_ints()) if attr is not None else list(range(rank))[::-1]


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Transpose" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if const_array(x) is not None:
        return None
    if x.shape is not None:
        dims = list(x.shape.dims)
    elif "perm" in node.attributes:
        dims = [None] * len(node.attributes["perm"].as_ints())  # (the rank, from the perm)
    else:
        return None
    perm = _perm(node, len(dims))
    if sorted(perm) != list(range(len(dims))) or all(isinstance(d, int) and d > 0 for d in dims):
        return None
    # Dims OpenVINO may know to be 1: those known here, and any not known here (it
    # folds more of the shape arithmetic: graph program 20220's [?, 1, N, M] is
    # [1, 1, N, M] to it). If the others do not keep their order, it transposes.
    surely_not_one = [p for p in perm if isinstance(dims[p], int) and dims[p] != 1]
    if surely_not_one != sorted(surely_not_one) or perm == sorted(perm):
        return None
    not_one = [p for p in perm if dims[p] != 1]
    if not_one == sorted(not_one) and x.dtype is not None:
        # Only dims known to be 1 move among the others: a Reshape says the same.
        return reshape_to_index(node, perm, scope, names)
    if _hidden(x):
        return None
    # Which dims are 1 is known only to OpenVINO: the input is sliced to a Where of its
    # own shape (a no-op at run time), after which OpenVINO knows none, and transposes.
    o = Ops(scope.builder(node, names))
    node.replace_input_with(0, o.shape_hidden(x, node.name or "transpose"))
    return "Transpose", "its input's dims of 1 made unknown to OpenVINO, which otherwise reshapes it (OpenVINO)"


def _hidden(x: ir.Value) -> bool:
    """``x`` is the Slice this pass writes (``Slice(v, 0, Where(c, Shape(v), Shape(v)))``)."""
    p = x.producer()
    return p is not None and sizing_shape(p) is not None
