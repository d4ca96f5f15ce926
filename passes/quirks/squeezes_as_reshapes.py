"""Squeeze and Unsqueeze written as a Reshape to the dims they keep, for OpenVINO
(quirk "squeeze-empty").

OpenVINO 2026.4 gives the Squeeze or Unsqueeze of a tensor that is empty at run time
(a slice of no rows, not a model input) zeros for its other dims: Unsqueeze(x[:0], 0)
of an [n, 2] input is [1, 0, 0] where ONNX says [1, 0, 2], and Squeeze likewise. No
error: the wrong shape flows on, until a Concat with the right one fails (TorchScript's
``torch.cat(parts + [x[:0]])`` appended to a list, fuzz seed 5166). It converts them to
a Reshape whose inferred dim is 0 / 0. A Reshape to ``Gather(Shape(x), kept)``, with a 1
where Unsqueeze inserts one (allowzero: a 0 is a 0), says every dim, and OpenVINO gives
it right.

Only where the input's dims are not all known (a static shape OpenVINO gets right) and
its rank and the axes are; a constant input stays.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops

__all__ = ["SqueezesAsReshapesPass", "reshape_to_index"]


class SqueezesAsReshapesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _rewrite)


def _axes(node: ir.Node, opset: int) -> list[int] | None:
    if opset < 13:
        attr = node.attributes.get("axes")
        return None if attr is None else list(attr.as_ints())
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    axes = const_array(node.inputs[1])
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type not in ("Squeeze", "Unsqueeze") or not is_default_domain(node) or not node.inputs:
        return None
    x = node.inputs[0]
    if x is None or x.shape is None or const_array(x) is not None or x.dtype is None:
        return None
    if all(isinstance(d, int) for d in x.shape.dims):
        # Never empty, or empty with every dim known before it runs (OpenVINO folds the
        # target then, and reads a 0 in it as "copy": seed 9515).
        return None
    axes = _axes(node, scope.opset)
    if axes is None:
        return None
    rank = x.shape.rank()
    if node.op_type == "Squeeze":
        drop = {a % rank for a in axes} if rank else set()
        index = [i for i in range(rank) if i not in drop]
    else:
        out_rank = rank + len(axes)
        ones = {a % out_rank for a in axes}
        it = iter(range(rank))
        index = [rank if j in ones else next(it) for j in range(out_rank)]  # rank: the appended 1
    return reshape_to_index(node, index, scope, names)


def reshape_to_index(node: ir.Node, index: list[int], scope: Scope, names: NameAuthority) -> tuple[str, str]:
    """Replace ``node`` by a Reshape of its input to its dims at ``index`` (``rank``: a 1)."""
    x, out = node.inputs[0], node.outputs[0]
    rank = x.shape.rank()
    o = Ops(scope.builder(node, names))
    base = node.name or node.op_type.lower()
    kept = [1 if i == rank else x.shape[i] for i in index]
    unknown = [k for k, d in enumerate(kept) if not isinstance(d, int)]
    if len(unknown) == 1 and all(d > 0 for d in kept if isinstance(d, int)):
        # One dim not known, the others known and not 0: a constant target with -1 there
        # says the same (the -1 is 0 for an empty x). Not Gather(Shape(x)): OpenVINO ties
        # such a Reshape's dim to x's Shape, and then reads the Shape of a Slice of it with
        # a run-time end as the whole dim (wrong numbers, fuzz seed 10323).
        target = o.b.ints([-1 if k == unknown[0] else d for k, d in enumerate(kept)], f"{base}_target")
        new = o.op("Reshape", [x, target], f"{base}_reshaped", dtype=x.dtype)
        how = "to the dims it keeps, the one not known as -1 (OpenVINO)"
    else:
        dims = o.shape(x, f"{base}_dims")
        if rank in index:
            dims = o.concat([dims, o.ints([1])], 0, f"{base}_dims1")
        target = o.op("Gather", [dims, o.b.ints(index, f"{base}_kept")], f"{base}_target", dtype=INT64, shape=[len(index)])
        # (Below opset 14, without allowzero, reshape_exact pads a flat input.)
        flat = x if scope.opset >= 14 else o.reshape(x, o.ints([-1]), f"{base}_flat")
        new = o.reshape_exact(flat, target, len(index), f"{base}_reshaped", x.dtype, hint=out.shape)
        how = "to the dims it keeps, said one by one (OpenVINO)"
    new.type, new.shape = out.type, out.shape
    replace_output(out, new, scope, names, node, owned=True)
    scope.graph.remove(node)
    for k in range(len(node.inputs)):
        node.replace_input_with(k, None)  # (its axes stay used otherwise, and are kept)
    return "Reshape", how
