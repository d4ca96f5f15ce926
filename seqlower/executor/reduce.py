"""Cut a model that fails or computes other numbers on a runtime down to the smallest
model that still does (``seqlower reduce``; Polygraphy's ``debug reduce``).

1. The reference backend gives every value of the main graph (each exposed as an output:
   the reference computes the same numbers either way).
2. The first value, in graph order, whose cone alone (the nodes it needs, subgraphs'
   outer reads included, and nothing else) differs on the backend from the reference, or
   fails there. Cones, not one model with every value exposed: a runtime's optimizer then
   sees another graph, and the bug often hides (OpenVINO's did).
3. That cone, reduced: each node in turn is replaced by Constants of the reference's
   values of its outputs, and stays replaced while the value still goes wrong the same
   way (a failure stays a failure, wrong numbers stay wrong numbers).

A lowered model's sequence ports (``seqlower.abi``) are fed as the tensors that carry
them: the reproducer is a tensor model of raw ports. Subgraphs are kept whole: a Loop
that goes wrong stays one node of the reproducer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from seqlower.executor.abi import read_abi
from seqlower.executor.compare import compare_values
from seqlower.executor.runner import Executor
from seqlower.io.protos import outer_reads, subgraphs_of

__all__ = ["Reduction", "reduce_failure"]


@dataclass
class Reduction:
    """What ``reduce_failure`` found: ``summary``, one line; ``value``, the first value that
    goes wrong (None: none does alone); ``reproducer`` and its ``feeds`` and ``expected``
    (the reference's value), when there is one."""

    summary: str
    value: str | None = None
    how: str | None = None
    reproducer: onnx.ModelProto | None = None
    feeds: dict[str, np.ndarray] | None = None
    expected: Any = None
    nodes: int = 0

    @property
    def found(self) -> bool:
        return self.reproducer is not None

    def to_json(self) -> dict[str, Any]:
        return {"found": self.found, "summary": self.summary, "value": self.value, "how": self.how,
                "nodes": self.nodes, "ops": [n.op_type for n in self.reproducer.graph.node] if self.reproducer else []}


def reduce_failure(model: onnx.ModelProto, backend: str, feeds: dict[str, Any]) -> Reduction:
    """Cut ``model`` down to what fails or differs on ``backend`` with ``feeds`` (the
    model's own ports: a lowered model's sequences as lists)."""
    raw = _physical(model, feeds)
    nodes = list(model.graph.node)
    types = _tensor_types(model)
    model = _with_outputs(model, nodes, [o.name for o in model.graph.output if o.name in types], types)
    names = [o for n in nodes for o in n.output if o in types]
    ref = Executor(_with_outputs(model, nodes, names, types), backend="reference").run(raw).outputs
    wrong = [o.name for o in model.graph.output if o.name in ref and _differs(model, backend, raw, o.name, ref[o.name])]
    if not wrong:
        return Reduction(f"{backend} gives the reference's numbers on these inputs: nothing to reduce")
    first, how = _first_wrong(model, nodes, types, backend, raw, ref, wrong[0])
    if first is None:
        return Reduction(f"output '{wrong[0]}' goes wrong on {backend}, but no value's cone alone does", wrong[0])
    cone, frozen = _shrink(model, _cone(nodes, first), types, backend, raw, ref, first, how)
    reproducer = _with_outputs(model, cone, [first], types, list(frozen.values()))
    used = {i.name: np.asarray(raw[i.name]) for i in reproducer.graph.input if i.name in raw}
    ops = ", ".join(n.op_type for n in cone)
    return Reduction(f"'{first}' {how} on {backend}; reproducer of {len(cone)} node(s): {ops}", first, how,
                     reproducer, used, ref[first], len(cone))


def _physical(model: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any]:
    """The feeds as the graph's own inputs (a lowered model's sequences as their tensors)."""
    abi = read_abi(model)
    raw: dict[str, Any] = {}
    for name, value in feeds.items():
        raw.update(abi.inputs[name].pack(value) if abi is not None and name in abi.inputs else {name: value})
    return raw


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    g = model.graph
    return {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *g.output, *g.input)
            if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type}


def _reads(node: onnx.NodeProto) -> list[str]:
    return sorted(outer_reads(node)) if subgraphs_of(node) else [x for x in node.input if x]


def _with_outputs(model: onnx.ModelProto, nodes: list[onnx.NodeProto], outputs: list[str],
                  types: dict[str, int], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """``model`` with only ``nodes`` (and ``inits`` added), giving ``outputs``; the inputs
    and initializers nothing reads dropped, and no seqlower metadata (its ports are raw)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kept = [p for p in m.metadata_props if not p.key.startswith("seqlower.")]
    del m.metadata_props[:]
    m.metadata_props.extend(kept)
    del g.value_info[:]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    del g.output[:]
    for name in outputs:
        vi = onnx.ValueInfoProto(name=name)
        vi.type.tensor_type.elem_type = types[name]
        g.output.append(vi)
    read = {x for n in nodes for x in _reads(n)} | set(outputs)
    kept_inputs = [i for i in g.input if i.name in read]
    del g.input[:]
    g.input.extend(kept_inputs)
    kept_inits = [t for t in g.initializer if t.name in read]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    return m


def _cone(nodes: list[onnx.NodeProto], name: str) -> list[onnx.NodeProto]:
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    keep: set[int] = set()
    stack = [name]
    while stack:
        k = producer.get(stack.pop())
        if k is None or k in keep:
            continue
        keep.add(k)
        stack.extend(_reads(nodes[k]))
    return [nodes[k] for k in sorted(keep)]


def _differs(model: onnx.ModelProto, backend: str, feeds: dict[str, Any], name: str, want: Any) -> str | None:
    """How ``model``'s output ``name`` goes wrong on ``backend`` (None: it does not)."""
    feeds = {i.name: feeds[i.name] for i in model.graph.input if i.name in feeds}
    try:
        got = Executor(model, backend=backend).run(feeds).outputs[name]
    except Exception as e:  # noqa: BLE001 - a runtime's failure is what is cut down
        return f"fails: {' '.join(str(e).split())[:200]}"
    report = compare_values(name, want, got)
    if report.ok:
        return None
    if np.asarray(got).dtype != np.asarray(want).dtype and np.array_equal(np.asarray(got), np.asarray(want)):
        return None  # the same numbers in another type (OpenVINO hands int64 out as int32)
    return f"differs: {report.detail or 'shape ' + report.actual}"


def _first_wrong(model: onnx.ModelProto, nodes: list[onnx.NodeProto], types: dict[str, int], backend: str,
                 raw: dict[str, Any], ref: dict[str, Any], output: str) -> tuple[str | None, str | None]:
    """The first value, in graph order, whose cone alone goes wrong, and how."""
    suspects = {id(n) for n in _cone(nodes, output)}
    for n in nodes:
        if id(n) not in suspects or n.op_type == "Constant":
            continue  # (a Constant is no computation; OpenVINO hands int64 outputs out as int32)
        for o in n.output:
            if o in ref and isinstance(ref[o], np.ndarray):
                how = _differs(_with_outputs(model, _cone(nodes, o), [o], types), backend, raw, o, ref[o])
                if how:
                    return o, how
    return None, None


def _shrink(model: onnx.ModelProto, cone: list[onnx.NodeProto], types: dict[str, int], backend: str,
            raw: dict[str, Any], ref: dict[str, Any], first: str, how: str,
            ) -> tuple[list[onnx.NodeProto], dict[str, onnx.TensorProto]]:
    """Each node replaced by the reference's values of its outputs while ``first`` still
    goes wrong the same way."""
    frozen: dict[str, onnx.TensorProto] = {}
    k = 0
    while k < len(cone) - 1:
        outs = [o for o in cone[k].output if o]
        # (Not an empty value: OpenVINO folds the Shape of an empty constant wrong, which
        # would trade the bug for another.)
        if all(o in ref and isinstance(ref[o], np.ndarray) and ref[o].size for o in outs):
            trial_nodes = _cone(cone[:k] + cone[k + 1:], first)
            consts = {**frozen, **{o: numpy_helper.from_array(np.asarray(ref[o]), o) for o in outs}}
            trial = _with_outputs(model, trial_nodes, [first], types, list(consts.values()))
            again = _differs(trial, backend, raw, first, ref[first])
            if again and again.split(":")[0] == how.split(":")[0]:
                cone, frozen = trial_nodes, consts
                k = min(k, len(cone) - 1)
                continue
        k += 1
    return cone, frozen
