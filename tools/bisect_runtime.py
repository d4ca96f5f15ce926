"""Cut a wrong number or a failure on a runtime down to the smallest model that shows it.

    python tools/bisect_runtime.py MODEL.onnx --backend openvino [--inputs X.npz] [--save DIR]

1. The reference backend gives every value of the main graph (every value exposed as an
   output: the reference computes the same numbers either way).
2. The first value, in graph order, whose cone alone (the nodes it needs, subgraphs'
   outer reads included, and nothing else) differs on ``--backend`` from the reference,
   or fails there. Cones, not one model with everything exposed: a runtime's optimizer
   sees another graph then, and the bug often hides (OpenVINO's did).
3. That cone, reduced: each node in turn is replaced by Constants of the reference's
   values of its outputs, and stays replaced while the value still differs. What is left
   is the reproducer: the nodes the runtime needs to go wrong, with the model's inputs it
   still reads (``--save DIR`` writes ``reproducer.onnx`` and ``inputs.npz``).

Exit 0: a reproducer (or nothing differs: said so); 1: the model differs but no cone of
one value does; 2: bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seqlower.executor import Executor, compare_values, load_inputs, synthesize_inputs  # noqa: E402
from seqlower.io.protos import outer_reads, subgraphs_of  # noqa: E402


def _reads(node: onnx.NodeProto) -> list[str]:
    return sorted(outer_reads(node)) if subgraphs_of(node) else [x for x in node.input if x]


def _with_outputs(model: onnx.ModelProto, nodes: list[onnx.NodeProto], outputs: list[str],
                  types: dict[str, int], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    # (its ports are these values now, not the original's sequence ABI)
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
    except Exception as e:  # noqa: BLE001 - a runtime's failure is what we cut down
        return f"fails: {str(e).splitlines()[0][:200]}"
    report = compare_values(name, want, got)
    if report.ok:
        return None
    if np.asarray(got).dtype != np.asarray(want).dtype and np.array_equal(np.asarray(got), np.asarray(want)):
        return None  # the same numbers in another type (OpenVINO hands int64 out as int32)
    return f"differs: {report.detail or 'shape ' + report.actual}"


def bisect(model: onnx.ModelProto, backend: str, feeds: dict[str, Any]) -> tuple[str, onnx.ModelProto | None]:
    """A sentence saying what was found, and the reproducer if there is one."""
    g = model.graph
    nodes = list(g.node)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *g.output, *g.input)
             if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type}
    names = [o for n in nodes for o in n.output if o in types]
    ref = Executor(_with_outputs(model, nodes, names, types), backend="reference").run(feeds).outputs
    wrong = [o.name for o in g.output if o.name in ref and _differs(model, backend, feeds, o.name, ref[o.name])]
    if not wrong:
        return f"{backend} gives the reference's numbers on these inputs", None
    suspects = {n for n in (n.name for n in _cone(nodes, wrong[0])) if n}
    first = how = None
    for n in nodes:
        if n.name not in suspects or n.op_type == "Constant":
            continue  # (a Constant is no computation; OpenVINO hands int64 outputs out as int32)
        for o in n.output:
            if o in ref and isinstance(ref[o], np.ndarray):
                how = _differs(_with_outputs(model, _cone(nodes, o), [o], types), backend, feeds, o, ref[o])
                if how:
                    first = o
                    break
        if first:
            break
    if first is None:
        return f"output '{wrong[0]}' differs on {backend}, but no value's cone alone does", None
    cone = _cone(nodes, first)
    # Reduce: replace a node by the reference's values of its outputs while the bug stays.
    frozen: dict[str, onnx.TensorProto] = {}
    k = 0
    while k < len(cone) - 1:
        n = cone[k]
        outs = [o for o in n.output if o]
        # (Not an empty value: OpenVINO folds the Shape of an empty constant wrong, which
        # would trade the bug for another.)
        if all(o in ref and isinstance(ref[o], np.ndarray) and ref[o].size for o in outs):
            trial_nodes = _cone(cone[:k] + cone[k + 1:], first)
            consts = {**frozen, **{o: numpy_helper.from_array(np.asarray(ref[o]), o) for o in outs}}
            trial = _with_outputs(model, trial_nodes, [first], types, list(consts.values()))
            again = _differs(trial, backend, feeds, first, ref[first])
            # The same kind of going wrong (wrong numbers stay wrong numbers, not a load error).
            if again and again.split(":")[0] == how.split(":")[0]:
                cone, frozen = trial_nodes, consts
                k = min(k, len(cone) - 1)
                continue
        k += 1
    reproducer = _with_outputs(model, cone, [first], types, list(frozen.values()))
    ops = ", ".join(n.op_type for n in cone)
    return f"'{first}' {how} on {backend}; reproducer of {len(cone)} node(s): {ops}", reproducer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("--backend", required=True, choices=["openvino", "tract", "onnxruntime"])
    p.add_argument("--inputs", type=Path, help="an .npz of inputs (default: one synthesized sample)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", type=Path, help="folder for reproducer.onnx and inputs.npz")
    a = p.parse_args(argv)
    try:
        model = onnx.load(a.model)
        ports = Executor(model, backend="reference").inputs
        feeds = load_inputs(a.inputs, ports) if a.inputs else synthesize_inputs(ports, seed=a.seed)
    except Exception as e:  # noqa: BLE001
        print(f"bisect_runtime: error: {a.model}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    what, reproducer = bisect(model, a.backend, feeds)
    print(what)
    if reproducer is not None and a.save:
        a.save.mkdir(parents=True, exist_ok=True)
        onnx.save(reproducer, a.save / "reproducer.onnx")
        np.savez(a.save / "inputs.npz", **{i.name: feeds[i.name] for i in reproducer.graph.input if i.name in feeds})
        print(f"wrote {a.save / 'reproducer.onnx'}")
    return 0 if reproducer is not None or "gives the reference" in what else 1


if __name__ == "__main__":
    sys.exit(main())
