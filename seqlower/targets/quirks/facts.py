"""What the detectors share: dims of value infos, the model inferred once per check, walks of Ifs, Loops and
readers, values a NonZero sizes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

from seqlower.io.inference import infer_shapes, localize_outer_constants
from seqlower.io.inventory import walk_graphs


Dim = int | str | None


def dims_of(v: onnx.ValueInfoProto) -> list[Dim] | None:
    t = v.type.tensor_type
    if v.type.WhichOneof("value") != "tensor_type" or not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


# Within one quirk_findings call: the model inferred once for every detector that needs
# it (id of the model -> the model and its inferred copy, None when inference fails; the
# model is held so that its id is not another's).
INFERRED_CACHE: dict[int, tuple[onnx.ModelProto, onnx.ModelProto | None]] = {}


def inferred_model(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with onnx's inferred shapes (None: no inference, so nothing proven). A
    branch's Slice reads the bounds its outer graph holds (TorchScript): copied in, onnx's
    inference sees them and proves the branch's dims."""
    cached = INFERRED_CACHE.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    try:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        localize_outer_constants(copy)
        inferred: onnx.ModelProto | None = infer_shapes(copy, data_prop=True)
    except Exception:  # noqa: BLE001 - no inference, nothing proven
        inferred = None
    INFERRED_CACHE[id(model)] = (model, inferred)
    return inferred


def show_dims(dims: list[Dim] | None) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims or []) + "]"


def names_read(graph: onnx.GraphProto) -> set[str]:
    read: set[str] = set()
    for node in graph.node:
        read.update(x for x in node.input if x)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                read |= names_read(g)
    return read


# Within one quirk_findings call, as INFERRED_CACHE: _known_shapes once for every TVM detector.
KNOWN_CACHE: dict[int, tuple[onnx.ModelProto, tuple[set[str], set[str]]]] = {}


def typed_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto | onnx.FunctionProto, list[onnx.ValueInfoProto]]]:
    """(path, graph, the value infos onnx's inference gives it) for every graph, the
    model's own declarations where inference fails (a function's inputs are names)."""
    try:
        inferred = infer_shapes(model)
    except Exception:  # noqa: BLE001 - what the model declares
        inferred = model
    for path, graph, _ in walk_graphs(inferred):
        declared = [*graph.input, *graph.output, *getattr(graph, "value_info", [])]
        yield path, graph, [v for v in declared if isinstance(v, onnx.ValueInfoProto)]


def constants_of(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's initializers and Constant tensors by name, as arrays."""
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in getattr(graph, "initializer", ())}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t"):
            found[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return found


DATA_SIZED_OPS = frozenset({"NonZero", "Compress", "Unique", "NonMaxSuppression"})


def data_sized_values(graph: onnx.GraphProto, outer: set[str] = frozenset()) -> set[str]:
    """The values of ``graph`` computed from a NonZero's (or Compress's, Unique's) output:
    in graph order, each node's outputs when it is one or reads one (or reads one of
    ``outer``, the enclosing graph's; a branch's output may be one of those itself)."""
    tainted: set[str] = set(outer)
    for n in graph.node:
        if n.op_type in DATA_SIZED_OPS or not tainted.isdisjoint(n.input):
            tainted.update(o for o in n.output if o)
    return tainted
