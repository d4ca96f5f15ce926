"""A Slice whose end is known only at run time written as a Compress by a mask of the
positions it keeps, for OpenVINO (quirk "slice-run-time-end").

OpenVINO 2026.4 takes such a Slice for the whole axis where its Shape is read: the Flat
lowering's read of one element, ``Slice(buffer, start, end)``, with ``end`` from a
CumSum of lengths, then the Shape of what the element became read back as the next
list's bounds, gives the buffer's whole length, with no error (fuzz seed 10323:
``[2.]`` for ``[]``; its compiled model computes ``ShapeOf(buffer)`` where the Slice
was). Rewriting the bounds (two Slices, a length from 0, a Max) did not help; a
Gather of a Range fails to compile ("Can not create StaticMemory object"). A Compress
keeps the same positions and its Shape is taken from what it made.

Each axis with a run-time end, steps of 1 (as the lowerings write them): positions
``r = 0 .. n-1`` kept where ``start' <= r < end'``, with negative bounds counted from
the end as ONNX says (bounds past the axis need no clamp for a mask). The axes with
constant bounds stay a Slice. Below opset 11 (no Range) a Slice stays. Functions and
subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority
from seqlower.options import LowerOptions
from seqlower.targets import Target
from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.passes.quirks.guard_zero_trip_loops import sizing_shape

__all__ = ["SlicesAsCompressPass", "with_compress_lowered"]


class SlicesAsCompressPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run_time = _RunTime()
        return rewrite_each_node(model, lambda node, scope, names: _rewrite(node, scope, names, run_time))


# Ops whose output shape follows their inputs' shapes alone (not their values).
_SHAPE_FROM_SHAPES = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Not", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Where", "Cast", "CastLike", "Neg", "Abs", "Relu", "Sigmoid", "Tanh",
    "Exp", "Log", "Sqrt", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Erf", "Identity", "Concat",
    "Transpose", "MatMul", "Softmax", "LogSoftmax", "Clip", "Max", "Min", "Sum", "Mean", "IsNaN", "IsInf",
    "BitShift", "Reciprocal", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Gelu", "CumSum"})
# Ops whose output size their first input's values decide.
_SIZED_BY_VALUES = frozenset({"Range", "ConstantOfShape", "NonZero", "Compress", "Unique", "NonMaxSuppression"})


class _RunTime:
    """What OpenVINO knows only when the model runs: a value that depends on an input's
    values (a subgraph's or function's input too), or a shape that depends on such a
    value or on an input dim the model leaves open. An initializer that is also an input
    is its constant here, as OpenVINO reads it (fuzz seed 10116, exported with
    keep_initializers_as_inputs); a static shape is a constant (OpenVINO folds its Shape).
    Loops and Ifs are not followed (run time)."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, int], bool] = {}

    def value(self, v: ir.Value) -> bool:
        return self._solve(("value", v))

    def shape(self, v: ir.Value) -> bool:
        return self._solve(("shape", v))

    def _solve(self, goal: tuple[str, ir.Value]) -> bool:
        stack = [goal]
        while stack:
            kind, v = stack[-1]
            key = (kind, id(v))
            if key in self.known:
                stack.pop()
                continue
            needs, rule = self._needs(kind, v)
            pending = [g for g in needs if (g[0], id(g[1])) not in self.known]
            if pending:
                stack.extend(pending)
                continue
            self.known[key] = rule([self.known[(k, id(n))] for k, n in needs])
            stack.pop()
        return self.known[(goal[0], id(goal[1]))]

    @staticmethod
    def _needs(kind: str, v: ir.Value):
        def fixed(answer: bool):
            return [], lambda _: answer

        static = v.shape is not None and all(isinstance(d, int) for d in v.shape.dims)
        if kind == "shape" and static:
            return fixed(False)
        node = v.producer()
        if node is None:
            if v.const_value is not None:
                return fixed(False)
            return fixed(True if kind == "value" else not static)
        if node.op_type == "Constant":
            return fixed(False)
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return fixed(True)
        inputs = [i for i in node.inputs if i is not None]
        if not inputs:
            return fixed(False)
        if kind == "value":
            if node.op_type in ("Shape", "Size"):
                return [("shape", inputs[0])], any
            return [("value", i) for i in inputs], any
        if node.op_type in ("Shape", "Size"):
            return fixed(False)  # (its length is the input's rank)
        needs = [("shape", i) for i in inputs]
        if node.op_type not in _SHAPE_FROM_SHAPES:
            needs += [("value", i) for i in node.inputs[1:] if i is not None]
        if node.op_type in _SIZED_BY_VALUES:
            needs.append(("value", inputs[0]))
        return needs, any


def _rewrite(node: ir.Node, scope: Scope, names: NameAuthority, run_time: _RunTime) -> tuple[str, str] | None:
    if node.op_type != "Slice" or not is_default_domain(node) or scope.opset < 11 or len(node.inputs) < 3:
        return None
    x, starts, ends = node.inputs[:3]
    if x is None or starts is None or ends is None or const_array(ends) is not None:
        return None
    if sizing_shape(node) is not None:
        return None  # (the zero-trip guard's no-op Slice: what it says is its bounds)
    if not _shape_read(node.outputs[0]):
        # Only where the wrong length can be read: OpenVINO computes the Slice itself
        # right, and a Compress after a Loop crashes it (SIGFPE: ts_split_insert_loop_cat).
        return None
    if not run_time.shape(x):
        # OpenVINO sizes a Slice of a tensor of static shape apart from it; and a
        # Compress of one, all its dims constant to OpenVINO, fails to compile when the
        # end is computed from constants it does not fold (a CumSum: "Can not create
        # StaticMemory object", fuzz seeds 10013, 10116, 10191).
        return None
    axes_in = node.inputs[3] if len(node.inputs) > 3 else None
    steps_in = node.inputs[4] if len(node.inputs) > 4 else None
    count = _length(starts)
    if count is None:
        return None
    if axes_in is None:
        axes = list(range(count))
    else:
        a = const_array(axes_in)
        if a is None:
            return None
        axes = [int(v) for v in np.asarray(a).reshape(-1)]
    if steps_in is not None:
        s = const_array(steps_in)
        if s is None or not np.all(np.asarray(s) == 1):
            return None
    if len(axes) != count:
        return None
    o = Ops(scope.builder(node, names))
    base = node.name or "slice"
    zero, one = o.scalar(0), o.scalar(1)
    dims = o.shape(x, f"{base}_dims")
    y = x
    for k, axis in enumerate(axes):
        start, end = _bound(starts, k, o, f"{base}_start{k}"), _bound(ends, k, o, f"{base}_end{k}")
        n = o.op("Gather", [dims, o.ints([axis])], f"{base}_n{k}", dtype=INT64, shape=[1])
        start, end = _from_end(start, n, zero, o, f"{base}_start{k}"), _from_end(end, n, zero, o, f"{base}_end{k}")
        r = o.op("Range", [zero, o.op("Squeeze", [n], f"{base}_count{k}", dtype=INT64, shape=[]), one], f"{base}_positions{k}", dtype=INT64, shape=[None])
        # (not GreaterOrEqual: it exists from opset 12)
        before_start = o.op("Less", [r, start], f"{base}_before_start{k}", dtype=ir.DataType.BOOL, shape=[None])
        keep = o.op("And", [o.op("Not", [before_start], f"{base}_from{k}", dtype=ir.DataType.BOOL, shape=[None]),
                            o.op("Less", [r, end], f"{base}_before{k}", dtype=ir.DataType.BOOL, shape=[None])],
                    f"{base}_kept{k}", dtype=ir.DataType.BOOL, shape=[None])
        y = o.op("Compress", [y, keep], f"{base}_compressed{k}" if k < len(axes) - 1 else f"{base}_compressed",
                 dtype=x.dtype, axis=axis)
    out = node.outputs[0]
    y.type, y.shape = out.type, out.shape
    replace_output(out, y, scope, names, node, owned=True)
    scope.graph.remove(node)
    for k in range(len(node.inputs)):
        node.replace_input_with(k, None)
    return "Compress", "a Slice with a run-time end as a Compress by the positions it keeps (OpenVINO)"


def _shape_read(out: ir.Value) -> bool:
    """Whether the Shape (or Size) of ``out`` is read, directly or through ops that keep
    its shape (elementwise ones: the Flat element a SequenceMap body computes)."""
    seen: set[int] = set()
    stack = [out]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        for use in v.uses():
            user = use.node
            if user.op_type in ("Shape", "Size"):
                return True
            if user.op_type in _SHAPE_FROM_SHAPES and user.op_type != "Concat":
                stack.extend(user.outputs)
    return False


def _length(v: ir.Value) -> int | None:
    c = const_array(v)
    if c is not None:
        return int(np.asarray(c).size)
    if v.shape is not None and v.shape.rank() == 1 and isinstance(v.shape[0], int):
        return v.shape[0]
    return None


def _bound(bounds: ir.Value, k: int, o: Ops, name: str) -> ir.Value:
    c = const_array(bounds)
    if c is not None:
        return o.ints([int(np.asarray(c).reshape(-1)[k])])
    return o.op("Gather", [bounds, o.ints([k])], name, dtype=INT64, shape=[1])


def _from_end(bound: ir.Value, n: ir.Value, zero: ir.Value, o: Ops, name: str) -> ir.Value:
    c = const_array(bound)
    if c is not None and int(np.asarray(c).reshape(-1)[0]) >= 0:
        return bound
    negative = o.op("Less", [bound, zero], f"{name}_negative", dtype=ir.DataType.BOOL, shape=[1])
    return o.op("Where", [negative, o.op("Add", [bound, n], f"{name}_from_end", dtype=INT64, shape=[1]), bound], f"{name}_counted", dtype=INT64, shape=[1])


def with_compress_lowered(options: LowerOptions, target: Target) -> list[ir.passes.PassBase]:
    """Quirk slice-run-time-end's rewrite (seqlower.targets.registry), and the Compress
    it writes lowered for a target without Compress."""
    from seqlower.passes.quirks.lower_compress import LowerCompressPass

    return [SlicesAsCompressPass(), *([LowerCompressPass()] if "Compress" in target.lacks else [])]
