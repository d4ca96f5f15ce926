"""A ``Shape`` that may give no dims (of a scalar, or sliced by ``start``/``end`` to
nothing) read through a ``Cast`` to int64, for onnx2torch (quirk "empty-shape-float": its
Shape is ``torch.tensor(x.shape[start:end])``, which makes an empty size a float32
tensor; a Concat with it then turns int64 dims into floats, and a Tile or Expand fed
them fails: "torch.Size() takes an iterable of 'int'", fixture
ts_masked_rows_of_no_trip_2282 lowered with --max-trips). A Shape whose output has a
static length of at least one is left alone, as is one read only through such a Cast
already. Subgraphs and functions included.
"""

from __future__ import annotations

import onnx_ir as ir

from seqlower.analysis.analyzer import is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node

__all__ = ["CastEmptyShapesPass"]


class CastEmptyShapesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _cast)


def _cast(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Shape" or not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
        return None
    out = node.outputs[0]
    if out.shape is not None and out.shape.rank() == 1 and isinstance(out.shape.dims[0], int) and out.shape.dims[0] >= 1:
        return None
    if out.uses() and not out.is_graph_output() and all(_to_int64(user) for user, _ in out.uses()):
        return None  # (a model lowered before)
    b = scope.builder(node, names)
    raw = b.op("Shape", list(node.inputs), f"{out.name or 'shape'}_raw", ir.DataType.INT64, out.shape,
               **{k: a.value for k, a in node.attributes.items()})
    cast = b.op("Cast", [raw], f"{out.name or 'shape'}_int64", ir.DataType.INT64, out.shape, to=ir.DataType.INT64)
    replace_output(out, cast, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "Shape", "read through a Cast to int64 (onnx2torch makes an empty shape float32)"


def _to_int64(user: ir.Node) -> bool:
    to = user.attributes.get("to")
    return user.op_type == "Cast" and to is not None and to.as_int() == ir.DataType.INT64
