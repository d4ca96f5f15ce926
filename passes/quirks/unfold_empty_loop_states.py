"""Give a Loop's empty initial state a run-time shape, for OpenVINO (quirk
"empty-constant-loop-state").

OpenVINO 2026.4's ONNX frontend fails to convert a Loop whose carried initial value is
a zero-size constant ("Accessing out-of-range dimension" in shape_util.cpp), and a
value computed from constants only is folded into one. The lowerings start every list a
Loop grows that way: an empty ``[0]`` data tensor and ``[0, rank]`` shape rows. The same
empty tensor built by an ``Expand`` whose shape depends on the Loop's run-time trip count
converts: ``shape + max(min(M, 0), 0)``, which is the constant shape for every ``M``
(a while loop's condition, cast to 0 or 1, serves when there is no run-time ``M``).

A Loop whose trip count and condition are both constants has nothing run-time to build
the shape from (OpenVINO folds anything built from constants): the pipeline unrolls it
for OpenVINO instead, within ``--max-unroll`` (``has_constant_empty_state``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["UnfoldEmptyLoopStatesPass", "has_constant_empty_state"]


class UnfoldEmptyLoopStatesPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _unfold)


def _unfold(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type != "Loop" or not is_default_domain(node) or len(node.inputs) < 3:
        return None
    memo: dict[ir.Value, bool] = {}
    # A run-time scalar to build the zero from: the trip count, else the condition.
    m, cond = node.inputs[0], node.inputs[1]
    source = m if m is not None and not _foldable(m, memo) else cond if cond is not None and not _foldable(cond, memo) else None
    if source is None:
        return None
    slots = [k for k, v in enumerate(node.inputs) if k >= 2 and v is not None and _empty(v) and _foldable(v, memo)]
    if not slots:
        return None
    o = Ops(scope.builder(node, names))
    base = node.name or "loop"
    if source.dtype != INT64:
        source = o.op("Cast", [source], f"{base}_cond_int", dtype=INT64, to=INT64)
    if source.shape is None or source.shape.rank() != 0:
        source = o.reshape(source, o.ints([]), f"{base}_scalar")
    zero = o.op("Max", [o.op("Min", [source, o.scalar(0)], f"{base}_min0", dtype=INT64), o.scalar(0)], f"{base}_run_time_zero", dtype=INT64)
    for k in slots:
        v = node.inputs[k]
        dims = _static_shape(v) if v is not None else None
        assert v is not None and dims is not None and v.dtype is not None
        shape = o.op("Add", [o.ints(dims), zero], f"{v.name or base}_run_time_dims", dtype=INT64, shape=[len(dims)])
        fill = o.b.constant(np.zeros((), v.dtype.numpy()), f"{v.name or base}_fill")
        node.replace_input_with(k, o.op("Expand", [fill, shape], f"{v.name or base}_run_time_empty", dtype=v.dtype, shape=dims))
    return "tensor ops", f"empty initial state{'s' if len(slots) > 1 else ''} given a run-time shape (OpenVINO)"


def has_constant_empty_state(node: ir.Node) -> bool:
    """A Loop with a zero-size constant state and nothing run-time to build one from
    (OpenVINO gets such a Loop unrolled, within --max-unroll)."""
    if node.op_type != "Loop" or not is_default_domain(node) or len(node.inputs) < 3:
        return False
    memo: dict[ir.Value, bool] = {}
    if any(v is not None and not _foldable(v, memo) for v in node.inputs[:2]):
        return False
    return any(v is not None and _empty(v) and _foldable(v, memo) for v in node.inputs[2:])


def _empty(v: ir.Value) -> bool:
    shape = _static_shape(v)
    return shape is not None and v.dtype is not None and v.dtype != ir.DataType.STRING and 0 in shape


def _static_shape(v: ir.Value) -> list[int] | None:
    """``v``'s shape: a constant's own (a folded constant may still declare [None]), else
    the declared one when every dim is a number."""
    c = const_array(v)
    if c is not None:
        return list(c.shape)
    if v.shape is None or not all(isinstance(d, int) for d in v.shape.dims):
        return None
    return [int(d) for d in v.shape.dims]


def _foldable(v: ir.Value, memo: dict[ir.Value, bool]) -> bool:
    """Computed from constants only (what a runtime folds to a constant)."""
    if v in memo:
        return memo[v]
    memo[v] = False  # a cycle (through a subgraph) is not foldable
    if const_array(v) is not None:
        memo[v] = True
        return True
    p = v.producer()
    if p is None or p.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"):
        return False
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in p.attributes.values()):
        return False
    memo[v] = all(i is None or _foldable(i, memo) for i in p.inputs)
    return memo[v]
