"""TensorRT's parser restrictions, as onnx-tensorrt's docs/operators.md states them (the
profile, ``seqlower/targets/tensorrt.toml``, quotes each; ``tools/trt_profile.py``
writes it from the doc). No TensorRT runs here: each detector names what the doc's words
exclude, on the model as written, and nothing was bisected on a runtime."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from seqlower import ops
from seqlower.errors import describe_node
from seqlower.io.inventory import walk_graphs
from seqlower.targets import load_target
from seqlower.targets.quirks.facts import dims_of, inferred_model

_DEFAULT = ("", "ai.onnx")
Finding = tuple[str, str, str]

# The input that holds the axes (from the opset where it is an input).
_AXES_INPUT = {"Slice": 3, "Squeeze": 1, "Unsqueeze": 1, "Pad": 3, "CumSum": 1}
# Ops whose 'Supported Types' are of another value than their first input.
_DATA_INPUT = {"Where": 1}
_OF_OUTPUT = frozenset({"ConstantOfShape", "RandomNormal", "RandomUniform", "EyeLike"})
# Control flow: the table's types are of what it carries, which its body's nodes show.
_SKIPPED = frozenset({"Loop", "If", "Scan"})
# TopK's K: 'must be less than 3840'.
_TOPK_LIMIT = 3840


def _where(n: onnx.NodeProto) -> str:
    return describe_node(n.op_type, n.name, list(n.output))


def _opsets_out_of_range(model: onnx.ModelProto) -> Iterator[Finding]:
    lo, hi = load_target("tensorrt").opsets or (0, 1 << 30)
    for o in model.opset_import:
        if o.domain in _DEFAULT and not lo <= o.version <= hi:
            yield (f"the model's opset import ai.onnx {o.version}", "main",
                   f"TensorRT's parser reads opsets {lo} to {hi} only (quirk trt-opset-range)")


def _constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto | None]:
    """Every initializer and every Constant node's output, in any graph, with its tensor
    (None for a Constant of another attribute): weights to TensorRT's parser, which takes
    a Constant's value as weights as it takes an initializer (importConstant)."""
    found: dict[str, onnx.TensorProto | None] = {}
    for _, g, is_fn in walk_graphs(model):
        if not is_fn:
            found.update((t.name, t) for t in g.initializer)
        for n in g.node:
            if n.op_type == "Constant" and n.domain in _DEFAULT and n.output:
                found[n.output[0]] = n.attribute[0].t if n.attribute and n.attribute[0].HasField("t") else None
    return found


def _computed_axes(model: onnx.ModelProto) -> Iterator[Finding]:
    constants = _constants(model)
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            if n.domain not in _DEFAULT:
                continue
            slot = 1 if n.op_type in ops.REDUCE_OPS else _AXES_INPUT.get(n.op_type)
            if slot is None or slot >= len(n.input) or not n.input[slot]:
                continue
            axes = n.input[slot]
            if axes in constants:
                continue
            word = "axis" if n.op_type == "CumSum" else "axes"
            yield (_where(n), path, f"its {word} '{axes}' is not an initializer, which TensorRT's parser needs "
                                    f"('`{word}` must be an initializer') (quirk trt-axes-initializer)")


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of each value the model (as onnx infers it) types, in every graph."""
    m = inferred_model(model) or model
    types: dict[str, int] = {}
    for _, g, is_fn in walk_graphs(m):
        if not is_fn:
            for v in (*g.input, *g.output, *g.value_info):
                if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type:
                    types[v.name] = v.type.tensor_type.elem_type
    types.update((name, t.data_type) for name, t in _constants(m).items() if t is not None)
    return types


def _unsupported_types(model: onnx.ModelProto) -> Iterator[Finding]:
    target = load_target("tensorrt")
    types = _element_types(model)
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            if n.domain not in _DEFAULT or n.op_type in _SKIPPED or n.op_type in target.lacks:
                continue
            allowed = target.types.get(n.op_type)
            if allowed is None:
                yield _where(n), path, f"{n.op_type} is not in TensorRT's operator table (quirk trt-op-types)"
                continue
            slot = _DATA_INPUT.get(n.op_type, 0)
            value = n.output[0] if n.op_type in _OF_OUTPUT else n.input[slot] if slot < len(n.input) else ""
            t = types.get(value)
            if not value or t is None or t == onnx.TensorProto.STRING:
                continue  # (not typed: nothing proven; strings: quirk no-strings)
            name = onnx.TensorProto.DataType.Name(t)
            if name not in allowed:
                yield (_where(n), path, f"it runs on '{value}', {name}; TensorRT's parser runs {n.op_type} on "
                                        f"{', '.join(allowed)} only (quirk trt-op-types)")


def _loops(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto, onnx.GraphProto]]:
    """(graph path, Loop node, its body) for every Loop with a body."""
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            body = next((a.g for a in n.attribute if a.name == "body"), None) \
                if n.op_type == "Loop" and n.domain in _DEFAULT else None
            if body is not None:
                yield path, n, body


def _dynamic_scan_lengths(model: onnx.ModelProto) -> Iterator[Finding]:
    constants = _constants(model)
    for path, n, body in _loops(model):
        scans = len(body.output) - 1 - (len(n.input) - 2)
        trips = n.input[0] if n.input else ""
        if scans > 0 and (not trips or trips not in constants):
            yield (_where(n), path, f"it has {scans} scan output(s) and its trip count is "
                                    f"{'not given' if not trips else 'computed at run time'}: TensorRT's parser "
                                    "needs 'Scan output length cannot be dynamic' (quirk trt-loop-scan-length)")


def _growing_loop_states(model: onnx.ModelProto) -> Iterator[Finding]:
    for path, n, body in _loops(inferred_model(model) or model):
        made = {o: node for node in body.node for o in node.output}
        for k in range(len(n.input) - 2):
            if 2 + k >= len(body.input) or 1 + k >= len(body.output):
                break
            state, out = body.input[2 + k], body.output[1 + k]
            grows = made.get(out.name) is not None and made[out.name].op_type == "Concat" \
                and state.name in made[out.name].input
            before, after = dims_of(state), dims_of(out)
            differ = before is not None and after is not None and (
                len(before) != len(after)
                or any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(before, after)))
            if grows or differ:
                yield (_where(n), path, f"what it carries as '{state.name}' changes shape from one iteration to "
                                        "the next: TensorRT's parser needs 'The shape of Loop carried dependencies "
                                        "must be the same across all loop iterations' (quirk trt-loop-carried-shape)")
                break


def _if_branches(model: onnx.ModelProto) -> Iterator[Finding]:
    m = inferred_model(model) or model
    for path, g, _ in walk_graphs(m):
        for n in g.node:
            if n.op_type != "If" or n.domain not in _DEFAULT:
                continue
            branches = {a.name: a.g for a in n.attribute if a.name in ("then_branch", "else_branch")}
            if len(branches) != 2:
                continue
            then, other = branches["then_branch"].output, branches["else_branch"].output
            for k, (a, b) in enumerate(zip(then, other)):
                da, db = dims_of(a), dims_of(b)
                if a.name == b.name:
                    why = f"both branches give '{a.name}' as output {k}, where they 'must have different names'"
                elif da is not None and db is not None and len(da) != len(db):
                    why = f"its branches give output {k} of rank {len(da)} and {len(db)}, where they 'must have the same rank'"
                else:
                    continue
                yield _where(n), path, f"{why} for TensorRT's parser (quirk trt-if-branches)"
                break


def _constant_attributes(model: onnx.ModelProto) -> Iterator[Finding]:
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            if n.op_type == "Constant" and n.domain in _DEFAULT:
                hit = [a.name for a in n.attribute if a.name in ("sparse_value", "value_string", "value_strings")]
                if hit:
                    yield (_where(n), path, f"its '{hit[0]}' is one of the attributes TensorRT's parser reads none of "
                                            "(quirk trt-constant-attributes)")


def _topks(model: onnx.ModelProto) -> Iterator[Finding]:
    constants = _constants(model)
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            if n.op_type != "TopK" or n.domain not in _DEFAULT:
                continue
            if any(a.name == "sorted" and a.i == 0 for a in n.attribute):
                yield _where(n), path, "it is unsorted, where TensorRT's parser needs '`sorted` must be 1' (quirk trt-topk)"
                continue
            k = constants.get(n.input[1]) if len(n.input) > 1 else None
            count = int(onnx.numpy_helper.to_array(k).reshape(-1)[0]) if k is not None else 0
            if count >= _TOPK_LIMIT:
                yield (_where(n), path, f"its K is {count}, where TensorRT's parser needs '`K` input must be less "
                                        "than 3840' (quirk trt-topk)")


def _uint8_inside(model: onnx.ModelProto) -> Iterator[Finding]:
    boundary = {v.name for v in (*model.graph.input, *model.graph.output)}
    types = _element_types(model)
    for path, g, _ in walk_graphs(model):
        for n in g.node:
            inside = [o for o in n.output if o and o not in boundary and types.get(o) == onnx.TensorProto.UINT8]
            if inside:
                yield (_where(n), path, f"it makes '{inside[0]}', a UINT8 value inside the model, where TensorRT has "
                                        "'UINT8 ... only supported as network input or output tensor types' "
                                        "(quirk trt-uint8-io)")
