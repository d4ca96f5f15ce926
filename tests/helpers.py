"""Small builders shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from seqlower.executor import Executor

FLOAT, INT64, INT32, BOOL, STRING = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.STRING


def t(name: str, elem: int = FLOAT, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def seq(name: str, elem: int = FLOAT, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt(name: str, inner: onnx.TypeProto) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def const(name: str, value: Any, dtype: Any = None) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _ranked(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """The checker wants a rank on top-level tensor inputs/outputs; the executor does not
    check declared shapes, so "any rank" tests declare a symbolic 1-D shape."""
    if vi.type.WhichOneof("value") == "tensor_type" and not vi.type.tensor_type.HasField("shape"):
        return helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, ["any"])
    return vi


def model(nodes, inputs, outputs, *, opset: int = 17, initializer=(), functions=(), ir_version: int = 8) -> onnx.ModelProto:
    inputs, outputs = [_ranked(v) for v in inputs], [_ranked(v) for v in outputs]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(g, opset_imports=imports, ir_version=ir_version, functions=list(functions))


def single(op: str, inputs: list, outputs: list, *, opset: int = 17, initializer=(), **attrs) -> onnx.ModelProto:
    """A one-node model; ``inputs``/``outputs`` are value infos ("" names skipped)."""
    node = helper.make_node(op, [i if isinstance(i, str) else i.name for i in inputs], [o.name for o in outputs], **attrs)
    graph_inputs = [i for i in inputs if not isinstance(i, str)]
    graph_inputs = [i for i in graph_inputs if i.name not in {c.name for c in initializer}]
    return model([node], graph_inputs, outputs, opset=opset, initializer=initializer)


def run(m: onnx.ModelProto, backend: str = "reference", policy: str = "auto", **feeds) -> dict[str, Any]:
    return Executor(m, backend=backend, keepdims_policy=policy).run(feeds).outputs


def body(nodes, inputs, outputs, initializer=()) -> onnx.GraphProto:
    return helper.make_graph(nodes, "body", inputs, outputs, initializer=list(initializer))


def lowered_for(m: onnx.ModelProto, target: str) -> onnx.ModelProto:
    """``m`` lowered for ``target`` (no other option), held to onnx's full checker."""
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.io.models import to_proto

    low = to_proto(lower_with_report(load_model(m), LowerOptions(target=target))[0])
    onnx.checker.check_model(low, full_check=True)
    return low


def lower_checked(
    m: onnx.ModelProto,
    *,
    backends: tuple[str, ...] = ("reference", "onnxruntime"),
    inputs: list[dict[str, Any]] | None = None,
    policy: str = "auto",
    max_unroll: int = 64,
    tensor_only: bool = True,
    dims: dict[str, int] | None = None,
    packed: bool = True,
    target: str = "generic",
    check_each_pass: bool = False,
    promises: bool | None = None,
    max_trips: int | None = None,
):
    """Lower ``m`` and check it: tensor-only, passes the full checker, keeps opset, IR
    version and declared inputs, and equal to the original on every backend asked for.
    ``promises``: also hold it to what seqlower promises of every lowering (byte-identical
    across runs, a fixpoint of lowering, the same through the region way, runs on
    onnxruntime with its optimizer off); by default on a quarter of the models, chosen by
    a hash of the model (reproducible, and spread over every test that lowers; every
    fixture is held to them through the CLI in tests/test_exported_models.py). With
    ``check_each_pass``, onnx's full checker also runs after every pass."""
    from seqlower import lower_with_report, load_model
    from seqlower.executor.verify import verify
    from seqlower.io.inventory import take_inventory
    from seqlower.io.models import to_proto

    original = m.SerializeToString()
    options = _options(max_unroll, policy, packed, target, max_trips)
    options.check_each_pass = check_each_pass
    low_ir, report = lower_with_report(load_model(m), options)
    low = to_proto(low_ir)
    assert m.SerializeToString() == original, "lowering modified its input"
    if _shapeless_io(m):
        # Inputs or outputs of unknown rank stay so; everything else is held to the full checker.
        from seqlower.io.check import check_proto

        accepted = check_proto(low, "lowered", None, full=True)
        assert accepted and all("declare no shape" in w for w in accepted), accepted
    else:
        onnx.checker.check_model(low, full_check=True)
    assert low.ir_version == m.ir_version
    # Tensor inputs keep their declared types and shapes (dim names included).
    declared = {i.name: i.type for i in low.graph.input}
    for i in m.graph.input:
        if i.type.WhichOneof("value") == "tensor_type" and i.name in declared:
            assert declared[i.name] == i.type, f"input {i.name}: {declared[i.name]} != {i.type}"
    assert {(o.domain, o.version) for o in low.opset_import} == {(o.domain, o.version) for o in m.opset_import}
    if tensor_only:
        inv = take_inventory(low)
        assert inv.clean, [o.op_type for o in inv.ops] + [v.name for v in inv.values]
        assert report.tensor_only, report.remaining
    for backend in backends:
        rep = verify(m, low, inputs=inputs, backend=backend, keepdims_policy=policy, dims=dims)
        assert rep.equivalent, (backend, rep.to_json())
    if not (promises if promises is not None else _curated(m)):
        return low, report
    again = to_proto(lower_with_report(load_model(m), _options(max_unroll, policy, packed, target, max_trips))[0])
    assert again.SerializeToString() == low.SerializeToString(), "lowering is not deterministic"
    twice = to_proto(lower_with_report(load_model(low), _options(max_unroll, policy, packed, target, max_trips))[0])
    assert twice.SerializeToString() == low.SerializeToString(), "lowering a lowered model changed it"
    _region_way(m, options, tensor_only, inputs, policy, dims, backends[0] if backends else None)
    if "onnxruntime" in backends:
        # onnxruntime's graph optimizer can hide a malformed lowering (or break a good
        # one); the lowered model must run on it with the optimizer off as well.
        rep = verify(m, low, inputs=inputs, backend="reference", lowered_backend="onnxruntime",
                     keepdims_policy=policy, dims=dims, ort_opt_level="disable")
        assert rep.equivalent, ("onnxruntime, optimizations disabled", rep.to_json())
    return low, report


def _curated(m: onnx.ModelProto) -> bool:
    """A quarter of the models, by a hash of their bytes."""
    import hashlib

    return hashlib.sha256(m.SerializeToString(deterministic=True)).digest()[0] % 4 == 0


def _region_way(m, options, tensor_only, inputs, policy, dims, backend) -> None:
    """The same model lowered as the CLI lowers a file (seqlower.fastpath.regions: only its sequence
    region, spliced back) is held to the same promises."""
    from seqlower.executor.verify import verify
    from seqlower.io.inventory import take_inventory
    from seqlower.io.check import check_proto
    from seqlower.fastpath.pipeline import lower_proto_with_report

    from seqlower.io.check import InferredTypes, check_types

    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    # With the types the CLI's reading infers: repeated webs are lowered apart with them.
    types = InferredTypes()
    check_types(copy, "region", types)
    out, report = lower_proto_with_report(copy, options, inferred=types)
    if not isinstance(out, onnx.ModelProto):
        return  # the whole model was lowered: what lower_checked held it to
    if _shapeless_io(m):
        assert all("declare no shape" in w for w in check_proto(out, "region", None, full=True))
    else:
        onnx.checker.check_model(out, full_check=True)
    if tensor_only:
        assert take_inventory(out).clean and report.tensor_only
    if backend is not None:
        rep = verify(m, out, inputs=inputs, backend=backend, keepdims_policy=policy, dims=dims)
        assert rep.equivalent, ("region", backend, rep.to_json())


def _shapeless_io(m: onnx.ModelProto) -> bool:
    return any(vi.type.WhichOneof("value") == "tensor_type" and not vi.type.tensor_type.HasField("shape")
               for vi in [*m.graph.input, *m.graph.output])


def _options(max_unroll: int, policy: str, packed: bool = True, target: str = "generic", max_trips: int | None = None):
    from seqlower import LowerOptions

    return LowerOptions(max_unroll=max_unroll, keepdims_policy=policy, packed=packed, target=target, max_trips=max_trips)


def ops_of(m: onnx.ModelProto) -> list[str]:
    """Every op type in the model, subgraphs and functions included, in order."""
    out: list[str] = []
    stack = [m.graph, *[f for f in m.functions]]
    while stack:
        g = stack.pop(0)
        for n in g.node:
            out.append(n.op_type)
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return out


def growing_loop_model(while_loop: bool = False, dependent: bool = False) -> onnx.ModelProto:
    """``for i in range(x.size(0)): flat = cat(flat, x[i]); rows = cat(rows, [[len(x[i])]])``,
    both starting as empty constants, then one more row after the Loop: what the Flat
    lowering makes of a list grown in a loop. ``while_loop``: no trip count; it starts
    when ``n > 0`` and the condition ``i + 1 < n`` stops it. ``dependent``: each row
    appended is ``x[i]`` plus the number of values appended before it (an iteration
    depends on the ones before: no batched rewrite takes the Loop)."""
    grown = [helper.make_node("Size", ["f_in"], ["so_far"]), helper.make_node("Cast", ["so_far"], ["so_far_f"], to=FLOAT),
             helper.make_node("Add", ["x_row", "so_far_f"], ["row"])] if dependent else [
        helper.make_node("Identity", ["x_row"], ["row"])]
    nodes = [helper.make_node("Gather", ["x", "i"], ["x_row"], axis=0), *grown,
             helper.make_node("Concat", ["f_in", "row"], ["f_out"], axis=0),
             helper.make_node("Shape", ["row"], ["row_dims"]),
             helper.make_node("Unsqueeze", ["row_dims", "axis0"], ["row_rows"]),
             helper.make_node("Concat", ["r_in", "row_rows"], ["r_out"], axis=0)]
    if while_loop:
        nodes += [helper.make_node("Add", ["i", "one"], ["next"]), helper.make_node("Less", ["next", "n"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["c_out"]))
    loop_body = body(nodes, [t("i", INT64, []), t("c", BOOL, []), t("f_in", FLOAT, [None]), t("r_in", INT64, [None, 1])],
                     [t("c_out", BOOL, []), t("f_out", FLOAT, [None]), t("r_out", INT64, [None, 1])])
    return model(
        [helper.make_node("Shape", ["x"], ["dims"]),
         helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
         helper.make_node("Greater", ["n", "zero"], ["has_rows"]),
         helper.make_node("Loop", ["" if while_loop else "n", "has_rows" if while_loop else "", "f0", "r0"], ["flat", "rows_in_loop"],
                          body=loop_body, name="grow"),
         helper.make_node("Concat", ["rows_in_loop", "extra_row"], ["rows"], axis=0)],
        [t("x", FLOAT, ["n", "w"])], [t("flat", FLOAT, [None]), t("rows", INT64, [None, 1])],
        initializer=[const("zero", 0, np.int64), const("one", 1, np.int64), const("axis0", np.array([0], np.int64)),
                     const("f0", np.zeros(0, np.float32)), const("r0", np.zeros((0, 1), np.int64)),
                     const("extra_row", np.array([[7]], np.int64))],
    )


def stacked_webs(blocks: int, rows: int | str = 3) -> onnx.ModelProto:
    """``blocks`` webs on x[rows, 6], each split into columns [2, 4], its last part taken
    and the parts joined again, then an untouched ReduceSum (``sum{b}``) of the last part
    added to the joined columns (``add{b}``), which feeds the next web: a layer stack with
    tensor ops between the layers."""
    nodes, prev = [], "x"
    for b in range(blocks):
        nodes += [helper.make_node("SplitToSequence", [prev, "halves"], [f"s{b}"], axis=1),
                  helper.make_node("SequenceAt", [f"s{b}", "last"], [f"h{b}"]),
                  helper.make_node("ConcatFromSequence", [f"s{b}"], [f"c{b}"], axis=1),
                  helper.make_node("ReduceSum", [f"h{b}", "one"], [f"r{b}"], keepdims=1, name=f"sum{b}"),
                  helper.make_node("Add", [f"c{b}", f"r{b}"], [f"y{b}"], name=f"add{b}")]
        prev = f"y{b}"
    return model(nodes, [t("x", FLOAT, [rows, 6])], [t(prev, FLOAT, [rows, 6])],
                 initializer=[const("halves", np.array([2, 4], np.int64)), const("last", np.array(-1, np.int64)),
                              const("one", np.array([1], np.int64))])


def cases_match(m: onnx.ModelProto, low: onnx.ModelProto, path, backend: str, flag: str | None = None,
                atol: float = 1e-5) -> int:
    """Run every stored case of fixture ``path`` that ``m`` itself runs on ``backend``
    (tf2onnx's ragged ops fail some with no rows) through ``low`` there: the framework's
    outputs, and the trips flag ``flag`` (a bounded lowering's) down. How many ran."""
    import numpy as np

    from seqlower.executor import Executor
    from tests.test_exported_models import load_cases

    original, ex = Executor(m, backend=backend), Executor(low, backend=backend)
    ran = 0
    for k, (feeds, expected) in enumerate(load_cases(path)):
        try:
            original.run(feeds)
        except Exception:  # noqa: BLE001 - the export's own failure there
            continue
        out = ex.run(feeds).outputs
        assert flag is None or not out[flag], (backend, k)
        for name, want in expected.items():
            np.testing.assert_allclose(out[name], want, rtol=1e-5, atol=atol, err_msg=f"{backend} case {k}: {name}")
        ran += 1
    return ran
