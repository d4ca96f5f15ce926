"""An ``If (M > 0)`` around a node that iterates ``M`` times, for runtimes that get the
zero-iteration case wrong: tract fails a Scan over nothing, and OpenVINO's Loop shape
inference assumes a first iteration (a list the Loop grows gets a lower bound of one
element, and a Concat after it fails when there was none).

The else branch gives what the node gives after no iteration: its initial states and
empty scan outputs ``[0, *step]``, each step dim a number, a model input's dim, or 0 (as
onnxruntime's Loop gives a dim it does not know after no iteration). Building the dims
from the same values as the then branch keeps both branches one shape where the runtime
knows the dims (tract requires it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import Scope
from seqlower.passes.lowering._tensor_ops import INT64, Ops
from seqlower.ir.builder import Builder, NameAuthority

__all__ = ["zero_trip_guard"]


def is_zero_trip_guard(node: ir.Node) -> bool:
    """An If ``zero_trip_guard`` built: its then branch ends in a Loop whose outputs it
    returns (what a rewrite put before the Loop may be there too)."""
    then = node.attributes.get("then_branch")
    if node.op_type != "If" or then is None or then.type != ir.AttributeType.GRAPH:
        return False
    g = then.as_graph()
    nodes = list(g)
    return bool(nodes) and nodes[-1].op_type == "Loop" and list(g.outputs) == list(nodes[-1].outputs)


def zero_trip_guard(
    o: Ops,
    trips: ir.Value | None,
    cond: ir.Value | None,
    inits: Sequence[ir.Value | None],
    steps: Sequence[tuple[ir.Shape | None, ir.DataType | None]],
    olds: Sequence[ir.Value],
    make: Callable[[], ir.Node],
    scope: Scope,
    names: NameAuthority,
    input_dims: dict[str, tuple[ir.Value, int]],
    base: str,
) -> list[ir.Value]:
    """The outputs of an If that runs ``make()`` (a node with outputs like ``olds``:
    the final ``inits`` states, then scan outputs of ``steps``) when the scalar ``trips``
    (if any) is positive and the scalar ``cond`` (if any) holds, and gives ``inits`` and
    empty scans otherwise."""
    then = ir.Graph([], [], nodes=[], name=names.fresh(f"{base}_runs"), opset_imports={"": scope.opset})
    node = make()
    then.append(node)
    for v, old in zip(node.outputs, olds):
        v.name, v.type, v.shape = names.fresh(f"{old.name or base}_ran"), old.type, None
    then.outputs.extend(node.outputs)
    skip = ir.Graph([], [], nodes=[], name=names.fresh(f"{base}_skipped"), opset_imports={"": scope.opset})
    sb = Builder(skip, None, scope.opset, names, main_graph=False)
    skipped = [sb.identity(v, f"{old.name or base}_initial") for v, old in zip(inits, olds)]  # type: ignore[arg-type]
    if steps and trips is None:
        none1 = sb.ints([0], f"{base}_no_trips1")
    elif steps:
        assert trips is not None
        none = sb.op("Max", [trips, sb.constant(np.array(0, np.int64), f"{base}_zero")], f"{base}_no_trips", dtype=INT64, shape=ir.Shape([]))
        none1 = sb.op("Reshape", [none, sb.ints([1], f"{base}_one_dim")], f"{base}_no_trips1", dtype=INT64, shape=ir.Shape([1]))
    for (shape, dtype), old in zip(steps, olds[len(inits) :]):
        assert shape is not None and dtype is not None
        dims = [none1, *(_dim(d, sb, input_dims, f"{old.name or base}_d{k}") for k, d in enumerate(shape.dims))]
        full = sb.op("Concat", dims, f"{old.name or base}_none_shape", dtype=INT64, axis=0)
        zero = sb.constant(np.zeros((), dtype.numpy()), f"{old.name or base}_zero")
        skipped.append(sb.op("Expand", [zero, full], f"{old.name or base}_empty", dtype=dtype))
    skip.outputs.extend(skipped)
    runs = [] if trips is None else [o.op("Greater", [trips, o.scalar(0)], f"{base}_has_trips", dtype=ir.DataType.BOOL)]
    if cond is not None:
        runs.append(cond if cond.shape is not None and cond.shape.rank() == 0 else o.reshape(cond, o.ints([]), f"{base}_starts"))
    assert runs
    has_trips = runs[0] if len(runs) == 1 else o.op("And", runs, f"{base}_runs_any", dtype=ir.DataType.BOOL)
    branch = ir.Node("", "If", [has_trips], [ir.AttrGraph("then_branch", then), ir.AttrGraph("else_branch", skip)],
                     num_outputs=len(olds), name=names.fresh(f"{base}_if_trips"))
    if o.b.anchor is not None:
        o.b.graph.insert_before(o.b.anchor, branch)
    else:
        o.b.graph.append(branch)
    return list(branch.outputs)


def _dim(d: int | ir.SymbolicDim | None, b: Builder, input_dims: dict[str, tuple[ir.Value, int]], name: str) -> ir.Value:
    """A ``[1]`` tensor of one dim: a number, a model input's dim, or 0."""
    if isinstance(d, ir.SymbolicDim) and d.value in input_dims:
        x, axis = input_dims[d.value]
        dims = b.op("Shape", [x], f"{name}_dims", dtype=INT64)
        return b.slice(dims, b.ints([axis], f"{name}_at"), b.ints([axis + 1], f"{name}_to"), [0], name)
    return b.ints([d if isinstance(d, int) else 0], name)
