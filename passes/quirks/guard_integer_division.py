"""Integer Div and Mod whose divisor may hold a zero divide by 1 there instead, for
onnxruntime (quirk "integer-division-by-zero").

onnxruntime 1.31 raises "Integer division by zero" (and "Integer modulo by zero") when
an integer divisor holds a zero, even when the dividend is empty and the result is
empty, which ONNX defines. tf2onnx's RaggedTensorToTensor divides an empty range by the
longest row, which is 0 when every row is empty: an export that runs on onnx's
reference evaluator fails on onnxruntime for a batch of empty rows, before and after
lowering.

The divisor gets 1 added where it is 0 (``b + Cast(b == 0)``); a quotient there is then
set to 0 (``q * (1 - Cast(b == 0))``), and a remainder by 1 is 0 already. So an empty
dividend gives the empty result, a non-zero divisor the same numbers as before, and a
zero divisor (undefined in ONNX for integers) 0, as onnx's reference evaluator and numpy
give. Divisors that are constants without a zero are left alone, as are floats.
Functions and subgraphs included.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope, replace_output, rewrite_each_node
from seqlower.analysis.analyzer import const_array, is_default_domain
from seqlower.ir.builder import NameAuthority

__all__ = ["GuardIntegerDivisionPass"]

# Equal has no 8/16-bit or unsigned kernels in ai.onnx before opset 11: zero is tested
# on the divisor cast to int64 there (a cast keeps zero and non-zero apart).
_EQUAL_ALL_INTS_SINCE = 11


class GuardIntegerDivisionPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return rewrite_each_node(model, _guard)


def _guard(node: ir.Node, scope: Scope, names: NameAuthority) -> tuple[str, str] | None:
    if node.op_type not in ("Div", "Mod") or not is_default_domain(node) or len(node.inputs) != 2 or None in node.inputs:
        return None
    a, b = node.inputs
    dtype = b.dtype or a.dtype
    if dtype is None or not dtype.is_integer() or _guarded(b):
        return None
    known = const_array(b)
    if known is not None and np.all(known != 0):
        return None
    bld = scope.builder(node, names)
    base = node.name or node.op_type
    tested = b
    if scope.opset < _EQUAL_ALL_INTS_SINCE and dtype not in (ir.DataType.INT32, ir.DataType.INT64):
        tested = bld.op("Cast", [b], f"{base}_divisor_i64", ir.DataType.INT64, b.shape, to=ir.DataType.INT64)
    zero = bld.constant(np.zeros((), (tested.dtype or dtype).numpy()), f"{base}_zero")
    is_zero = bld.op("Equal", [tested, zero], f"{base}_divisor_is_zero", ir.DataType.BOOL, b.shape)
    ones_at_zero = bld.op("Cast", [is_zero], f"{base}_ones_at_zero", dtype, b.shape, to=dtype)
    safe = bld.op("Add", [b, ones_at_zero], f"{base}_safe_divisor", dtype, b.shape)
    if node.op_type == "Mod":
        node.replace_input_with(1, safe)
        return "Mod", "the divisor 1 where it is 0: remainder 0, not onnxruntime's error (onnxruntime)"
    out = node.outputs[0]
    quotient = bld.op("Div", [a, safe], f"{base}_quotient", dtype, out.shape)
    keep = bld.op("Sub", [bld.constant(np.ones((), dtype.numpy()), f"{base}_one"), ones_at_zero], f"{base}_keep", dtype, b.shape)
    result = bld.op("Mul", [quotient, keep], f"{base}_guarded", dtype, out.shape)
    replace_output(out, result, scope, names, node, owned=True)
    scope.graph.remove(node, safe=True)
    return "Div", "the divisor 1 where it is 0 and the quotient 0 there, not onnxruntime's error (onnxruntime)"


def _guarded(b: ir.Value) -> bool:
    """``b`` is this pass's safe divisor: ``Add(x, Cast(Equal(x or Cast(x), 0)))``."""
    add = b.producer()
    if add is None or add.op_type != "Add" or len(add.inputs) != 2 or add.inputs[1] is None:
        return False
    cast = add.inputs[1].producer()
    if cast is None or cast.op_type != "Cast" or cast.inputs[0] is None:
        return False
    equal = cast.inputs[0].producer()
    return (equal is not None and equal.op_type == "Equal" and len(equal.inputs) == 2 and equal.inputs[1] is not None
            and (zero := const_array(equal.inputs[1])) is not None and zero.size == 1 and not zero.any())
