"""Fix the model's input shapes the user gives (``--input-shape``, ``--fix-dim``) and fold
what that makes static, before anything is lowered: what onnxsim's
``--overwrite-input-shape`` and Polygraphy's ``--override-input-shapes`` do first.

1. ``--input-shape NAME=D0,D1,...`` sets graph input NAME's shape (a sequence's or an
   optional's: its elements'); ``--fix-dim NAME=VALUE`` sets the symbolic dim NAME to
   VALUE wherever a graph input, output or value declares it. A given shape must keep
   the input's rank and its static dims: a contradiction is the user's error, named.
2. The shapes every other value carries from the file were derived from the symbolic
   ones: those with a dim not static are forgotten, and onnx's inference finds them again.
3. onnxscript's constant folding on the whole model, so ``Shape`` of a now-static value
   and the arithmetic on it become constants (trip counts, split sizes, positions): the
   sequence lowerings then see static lengths. Sequence ops are seqlower's to fold (onnx's
   reference kernels get some wrong: SEMANTICS.md): ``fold_tensor_constants``.

The lowered model's ABI (``seqlower.abi``, ``"fixed"``) says what was fixed, so that
``verify`` runs both models at those shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from seqlower.errors import ModelError
from seqlower.ir.helpers import graphs_of
from seqlower.passes._rewrite import read_abi_doc, write_abi_doc
from seqlower.passes.folds.clean_up_graph import CleanUpGraphPass
from seqlower.passes.folds.fold_tensor_constants import fold_tensor_constants
from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass

__all__ = ["SpecializeShapesPass", "fixed_of"]

logger = logging.getLogger(__name__)


class SpecializeShapesPass(ir.passes.InPlacePass):
    def __init__(self, input_shapes: Mapping[str, Sequence[int]], fixed_dims: Mapping[str, int],
                 keepdims_policy: str = "auto") -> None:
        super().__init__()
        self.input_shapes = {k: tuple(v) for k, v in input_shapes.items()}
        self.fixed_dims = dict(fixed_dims)
        self.keepdims_policy = keepdims_policy

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        inputs = {v.name: v for v in graph.inputs}
        for name, dims in self.input_shapes.items():
            _check_shape(inputs, name, dims)
        _check_dims(graph, self.fixed_dims)
        for v in _declared(model):
            if v.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value in self.fixed_dims
                                           for d in v.shape.dims):
                v.shape = ir.Shape([self.fixed_dims[d.value] if isinstance(d, ir.SymbolicDim)
                                    and d.value in self.fixed_dims else d for d in v.shape.dims])
        for name, dims in self.input_shapes.items():
            inputs[name].shape = ir.Shape(dims)
        _forget_derived_shapes(model)
        InferSequenceShapesPass(self.keepdims_policy)(model)
        fold_tensor_constants(model)
        CleanUpGraphPass()(model)
        InferSequenceShapesPass(self.keepdims_policy)(model)
        doc = read_abi_doc(model)
        doc["fixed"] = {"shapes": {k: list(v) for k, v in sorted(self.input_shapes.items())},
                        "dims": dict(sorted(self.fixed_dims.items()))}
        write_abi_doc(model, doc)
        return ir.passes.PassResult(model, True)


def fixed_of(model: ir.Model) -> dict[str, dict]:
    """What ``SpecializeShapesPass`` fixed in ``model`` ({} when nothing): the report's."""
    return read_abi_doc(model).get("fixed", {})


def _check_shape(inputs: Mapping[str, ir.Value], name: str, dims: tuple[int, ...]) -> None:
    given = f"--input-shape {name}={','.join(map(str, dims))}"
    if name not in inputs:
        raise ModelError(f"{given}: the model has no graph input {name!r} (its inputs: {', '.join(inputs) or 'none'})")
    v = inputs[name]
    if v.const_value is not None:
        logger.info("%s: an input with an initializer; its default's shape is %s", given, v.const_value.shape)
    declared = v.shape
    if declared is None:
        return
    what = "its elements have" if isinstance(v.type, (ir.SequenceType, ir.OptionalType)) else "it has"
    if declared.rank() != len(dims):
        raise ModelError(f"{given}: {what} rank {declared.rank()} ({_shape_text(declared)}), not {len(dims)}")
    for axis, (d, want) in enumerate(zip(declared.dims, dims)):
        if isinstance(d, int) and d != want:
            raise ModelError(f"{given}: dim {axis} of {name!r} is {d} ({_shape_text(declared)})")


def _check_dims(graph: ir.Graph, fixed: Mapping[str, int]) -> None:
    named = {d.value for v in graph.inputs if v.shape is not None for d in v.shape.dims
             if isinstance(d, ir.SymbolicDim) and d.value is not None}
    for name, value in fixed.items():
        if name not in named:
            raise ModelError(f"--fix-dim {name}={value}: no graph input has a dim named {name!r}"
                             f" (symbolic dims of the inputs: {', '.join(sorted(named)) or 'none'})")


def _shape_text(shape: ir.Shape) -> str:
    return "[" + ", ".join("?" if d is None or (isinstance(d, ir.SymbolicDim) and d.value is None) else str(d)
                           for d in shape.dims) + "]"


def _declared(model: ir.Model) -> list[ir.Value]:
    """Every value of every graph that can carry a declared shape."""
    out: list[ir.Value] = []
    for graph in graphs_of(model):
        out += [*graph.inputs, *graph.outputs]
        out += [o for node in graph for o in node.outputs]
    return out


def _forget_derived_shapes(model: ir.Model) -> None:
    """Shapes of values computed from the inputs, with a dim not static, forgotten: they
    were derived from the symbolic shapes and inference derives them again. Declared
    graph inputs and outputs stay (the model's boundary as the file gives it)."""
    for graph in graphs_of(model):
        boundary = {id(v) for v in (*graph.inputs, *graph.outputs)}
        for node in graph:
            for o in node.outputs:
                if id(o) not in boundary and o.shape is not None \
                        and not all(isinstance(d, int) for d in o.shape.dims):
                    o.shape = None
