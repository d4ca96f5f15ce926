"""The lowering core: the pass schedule (``seqlower.passes.schedule``) run on an onnx_ir
model, the result checked, and a report of what was rewritten and what stays, with why.

Layers import one way (DESIGN.md, Core v2): this module sits above the passes and the
analysis and imports them at the top; ``seqlower.fastpath.pipeline``, the protobuf side (regions,
weights, repeats, splicing), loads this module where a model has work, so a model with
nothing to lower is read, checked and written with protobuf alone (tests/test_layers.py).
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir.passes import common

from seqlower.analysis.analyzer import Analysis, analyze
from seqlower.errors import LoweringDefect, ModelError, SeqlowerError
from seqlower.io.inventory import take_inventory
from seqlower.ir.helpers import graphs_of, node_label
from seqlower.keys import ANALYSIS_STASH_KEY, KEPT_ZIPMAPS_KEY, LEGALIZE_KEY, LOOP_REASONS_KEY, NOTES_KEY, REPORT_KEY, KEEP_KEY
from seqlower.io.models import check_model, weightless_proto
from seqlower.ops import makes_lists
from seqlower.options import DEFAULT_MAX_UNROLL, LowerOptions
from seqlower.passes.folds.clean_up_graph import CleanUpGraphPass
from seqlower.passes.folds.infer_sequence_shapes import InferSequenceShapesPass
from seqlower.passes.folds.specialize_shapes import fixed_of
from seqlower.passes.folds.fold_tensor_constants import fold_tensor_constants
from seqlower.passes.legalize import for_target
from seqlower.passes.lowering.lower_zip_map import LowerZipMapPass
from seqlower.passes.schedule import after_folding, build_passes, loop_fallbacks
from seqlower.passes.loops.unroll_loops import UnrollLoopsPass
from seqlower.report import LowerReport, overridable_notes
from seqlower.targets import load_target, target_gaps

__all__ = ["lower_with_report", "describe_sequences", "kept_loop_reasons", "check_nesting",
           "optimize_region", "build_passes", "MAX_SUBGRAPH_DEPTH"]

logger = logging.getLogger(__name__)


# Deeper subgraph nesting than this cannot be written and read back: protobuf's parser
# stops at 100 message levels, three per subgraph. Checked without recursion, so an
# ir.Model nested thousands deep gets this error rather than Python's recursion limit.
MAX_SUBGRAPH_DEPTH = 31


def check_nesting(model: ir.Model) -> None:
    """Refuse subgraphs nested deeper than ``MAX_SUBGRAPH_DEPTH``, naming the outermost
    node of the nest."""
    stack: list[tuple[ir.Graph | ir.Function, int, str | None]] = [
        (model.graph, 0, None), *((f, 0, None) for f in model.functions.values())]
    while stack:
        graph, depth, root = stack.pop()
        for node in graph:
            for attr in node.attributes.values():
                subs = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else (
                    list(attr.as_graphs()) if attr.type == ir.AttributeType.GRAPHS else [])
                for sub in subs:
                    where = root or node_label(node)
                    if depth + 1 > MAX_SUBGRAPH_DEPTH:
                        raise ModelError(f"{where}: subgraphs nested more than {MAX_SUBGRAPH_DEPTH} levels deep;"
                                         " an ONNX file cannot hold that (protobuf reads 100 message levels)")
                    stack.append((sub, depth + 1, where))


def lower_with_report(model: ir.Model, options: LowerOptions | None = None, *,
                      optimize: bool = False) -> tuple[ir.Model, LowerReport]:
    """Lower ``model`` in place. ``optimize``: the model is a region seqlower cut out (every
    node in it is one seqlower may rewrite), optimized after lowering when it was
    rewritten and ``options.optimize`` (``optimize_region``); what is checked and
    reported is the optimized model."""
    options = options or LowerOptions()
    check_nesting(model)

    report = LowerReport()
    # What every pass's builders ask before writing an op (passes/legalize.py).
    model.meta[LEGALIZE_KEY] = for_target(options.target)
    declared = {v.name for v in (*model.graph.inputs, *model.graph.outputs)}
    model.meta[REPORT_KEY] = []
    model.meta[NOTES_KEY] = []
    overridable = [v.name for v in model.graph.inputs
                   if v.const_value is not None and any(makes_lists(u.node.op_type) for u in v.uses())]
    if "" in model.opset_imports or "ai.onnx" in model.opset_imports:
        passes = build_passes(options, check_each=options.check_each_pass, inferred_after=optimize and options.optimize)
    else:
        # No ai.onnx op can be in the model (sequence ops are ai.onnx ops) nor be emitted
        # into it: only an ml-only classifier's ZipMap can go, returned as its input.
        passes = [] if load_target(options.target).sequences else [LowerZipMapPass()]
    model = _run_passes(passes, model) if passes else model
    # A model lowered at fixed shapes is folded whole, as a region is: the user asked for
    # every static thing to fold (--input-shape); the nodes outside sequences included.
    if (optimize or options.specialized) and options.optimize and model.meta.get(REPORT_KEY):
        _optimize(model, options)
    report.notes.extend(overridable_notes(overridable))
    _forget_impossible_dims(model)
    report.rewrites = list(model.meta.get(REPORT_KEY, []))
    report.notes.extend(dict.fromkeys(model.meta.get(NOTES_KEY, [])))
    report.kept_loops = _kept_loops(model)
    report.fixed = fixed_of(model)
    _initializers_as_inputs(model)
    proto = weightless_proto(model)
    # Shapeless graph inputs/outputs are accepted from the input (warned about there),
    # and a declared shape the model's own computation contradicts may be dropped; a
    # boundary value seqlower creates always declares its shape.
    if new := sorted(_shapeless_boundary(model) - declared):
        raise LoweringDefect(f"the lowered model declares no shape for graph input/output {new[0]!r} (internal error)")
    proto = _check_lowered(model, proto)
    _report_remaining(report, model, proto, options)
    report.gaps = target_gaps(proto, load_target(options.target), report.kept_loops)
    for graph in graphs_of(model):
        for node in graph:
            node.metadata_props.pop(KEEP_KEY, None)  # (validation's marks: reported, not written)
    return model, report


def _report_remaining(report: LowerReport, model: ir.Model, proto: onnx.ModelProto, options: LowerOptions) -> None:
    """Every sequence op and sequence-typed boundary value left, each with why."""
    analysis = analyze(model, max_unroll=options.max_unroll, keepdims_policy=options.keepdims_policy, packed=options.packed)
    why = _reasons_by_node(analysis)
    inventory = take_inventory(proto)
    why.update(model.meta.get(KEPT_ZIPMAPS_KEY, {}))
    for op in inventory.ops:
        if op.op_type == "ZipMap" and op.node not in why:
            why[op.node] = f"the target ({options.target}) runs ZipMap and sequences; lowered for targets without"
        report.remaining.append(
            {"op": op.op_type, "node": op.node, "graph": op.graph,
             "reason": why.get(op.node, "no lowering rule for this op yet")}
        )
        report.notes.extend(op.notes)
    for v in inventory.values:
        if v.role in ("input", "output") and v.graph == "main":
            # A value without a reason of its own has its producer's (a kept ZipMap's maps).
            reason = why.get(v.name) or why.get(v.producer) or f"sequence-typed graph {v.role} of a web that stays a sequence"
            report.remaining.append({"value": v.name, "type": v.type, "graph": v.graph, "reason": reason})


def _initializers_as_inputs(model: ir.Model) -> None:
    """Below IR 4 every initializer is also a graph input (onnxmltools' IR 3 models): the
    constants the lowering added are listed too, so the model keeps its IR version."""
    if model.ir_version >= 4:
        return
    for graph in graphs_of(model):
        listed = set(graph.inputs)
        graph.inputs.extend(v for v in graph.initializers.values() if v not in listed)


def _shapeless_boundary(model: ir.Model) -> set[str]:
    return {v.name for v in (*model.graph.inputs, *model.graph.outputs)
            if isinstance(v.type, ir.TensorType) and v.shape is None}


def kept_loop_reasons(model: ir.Model, target_name: str, max_unroll: int = DEFAULT_MAX_UNROLL) -> dict[str, str]:
    """Why each Loop of ``model`` stays for a target without Loop, as ``lower`` says it:
    for ``check --target`` on a model lowered before. The Loop passes ``lower`` would
    run for the target run on ``model`` (changed in place: give it a copy)."""
    target = load_target(target_name)
    if "Loop" not in target.lacks:
        return {}
    model = _run_passes([InferSequenceShapesPass(), UnrollLoopsPass(max_unroll), *loop_fallbacks(target)], model)
    return _kept_loops(model)


def _kept_loops(model: ir.Model) -> dict[str, str]:
    """The recorded reason of every Loop still in ``model``, by node label."""
    reasons = model.meta.get(LOOP_REASONS_KEY, {})
    remaining = {node_label(n) for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == "Loop"}
    return {k: reasons[k] for k in sorted(remaining & set(reasons))}


def _check_lowered(model: ir.Model, proto: onnx.ModelProto) -> onnx.ModelProto:
    """The full check of the lowered ``model`` (``proto`` is it), after dropping output
    dims its computation contradicts where that is what fails; the proto checked."""
    try:
        check_model(proto, "the lowered model", what="fails the ONNX checker")
    except ModelError as e:
        if "Inferred shape and existing shape differ" not in str(e) or not _drop_contradicted_output_dims(model, proto):
            raise LoweringDefect(str(e)) from None
        proto = weightless_proto(model)
        try:
            check_model(proto, "the lowered model", what="fails the ONNX checker")
        except ModelError as again:
            raise LoweringDefect(str(again)) from None
    return proto


def _drop_contradicted_output_dims(model: ir.Model, proto: onnx.ModelProto) -> bool:
    """A model output dim the exporter declared and the lowered computation contradicts
    becomes unknown: TorchScript declared [2, 4] for ``(x.split([1, 1]) + [x])[0]`` of a
    [2, 4] x (torch fuzz seed 14553), which nothing checked while SequenceAt made it. The
    original's declaration was never true; the lowered model keeps every other dim."""
    loose = onnx.ModelProto()
    loose.CopyFrom(proto)
    for out in loose.graph.output:
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            for d in out.type.tensor_type.shape.dim:
                d.Clear()
    try:
        inferred = onnx.shape_inference.infer_shapes(loose, strict_mode=False)
    except Exception:  # noqa: BLE001 - nothing to learn
        return False
    found = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    dropped = False
    for v in model.graph.outputs:
        info = found.get(v.name or "")
        if v.shape is None or info is None or not info.type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
        if len(dims) != v.shape.rank():
            continue
        new = [None if isinstance(d, int) and isinstance(i, int) and d != i else d for d, i in zip(v.shape.dims, dims)]
        if new != list(v.shape.dims):
            v.shape, dropped = ir.Shape(new), True
    return dropped


def _forget_impossible_dims(model: ir.Model) -> None:
    """A dim that no tensor can have (past int64, from shape arithmetic on a huge declared
    dim) becomes unknown: it cannot be written, and it was never true."""
    limit = 2**63 - 1
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    while graphs:
        g = graphs.pop()
        values = [*g.inputs, *g.outputs, *(g.initializers.values() if isinstance(g, ir.Graph) else [])]
        for node in g:
            values.extend(node.outputs)
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    graphs.append(attr.as_graph())
                elif attr.type == ir.AttributeType.GRAPHS:
                    graphs.extend(attr.as_graphs())
        for v in values:
            if v.shape is not None and any(isinstance(d, int) and not 0 <= d <= limit for d in v.shape.dims):
                v.shape = ir.Shape([d if not isinstance(d, int) or 0 <= d <= limit else None for d in v.shape.dims])


def _run_passes(passes: list[ir.passes.PassBase], model: ir.Model) -> ir.Model:
    """Run passes; a SeqlowerError raised inside (an invalid model) comes out as itself,
    not wrapped in onnx_ir's PassErrors. No analysis a pass kept for the next outlives them."""
    try:
        return ir.passes.PassManager(passes)(model).model
    except ir.passes.PassError as e:
        cause = e.__cause__
        while isinstance(cause, ir.passes.PassError) and cause.__cause__ is not None:
            cause = cause.__cause__
        if isinstance(cause, SeqlowerError):
            raise cause from None
        raise
    finally:
        model.meta.pop(ANALYSIS_STASH_KEY, None)


def _reasons_by_node(analysis: Analysis) -> dict[str, str]:
    """For every node touching a kept web (by the label the inventory uses) and every
    value of one (by name), its reason."""
    why: dict[str, str] = {}
    for web in analysis.webs:
        if web.repr != "kept":
            continue
        for v in web.values:
            if v.name:
                why.setdefault(v.name, web.reason)
            for node in [v.producer(), *(u.node for u in v.uses())]:
                if node is not None:
                    why.setdefault(node_label(node), web.reason)
    return why


def _optimize(lowered: ir.Model, options: LowerOptions) -> None:
    """A lowered region's sub-model optimized (``optimize_region``), in place."""
    optimize_region(lowered)
    # What folding made constant lets inference find more: inferred now, so that
    # lowering the output again finds nothing new. The target's rewrites that
    # folding undoes (a run-time empty Loop state folds back into a constant) again.
    _run_passes([*after_folding(options), InferSequenceShapesPass(options.keepdims_policy)], lowered)


def optimize_region(model: ir.Model) -> None:
    """onnxscript's constant folding and onnx_ir's common-subexpression elimination on a
    lowered region's sub-model (in place): the shape arithmetic the lowerings emit is
    folded, repeated subexpressions are computed once, constants become initializers
    (shared when equal). Functions are not inlined (they are the model's, not the
    region's); the region's inputs and outputs keep their names."""
    # Not onnxscript's whole optimize(): its pattern rewriter costs seconds per thousand
    # nodes (a matcher pass per rule per node), and its rules are not what a lowering leaves.
    # onnx_ir warns for each initializer it will not deduplicate because it is a graph
    # output: a fact about the model, not something for the user to act on.
    quiet = logging.getLogger("onnx_ir")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        fold_tensor_constants(model)
        # Not onnx_ir's IdentityEliminationPass: it makes a Loop body's output an outer
        # value, which onnx's checker refuses; the splice bypasses the Identities that matter.
        ir.passes.Sequential(
            common.CommonSubexpressionEliminationPass(),
            common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            common.DeduplicateInitializersPass(),
            # Not onnx_ir's RemoveUnusedNodesPass: it drops a Loop's empty condition input,
            # which the Loop schema requires in place.
            CleanUpGraphPass(),
        )(model)
    finally:
        quiet.setLevel(level)


def describe_sequences(model: ir.Model, options: LowerOptions | None = None) -> list[dict[str, Any]]:
    """Every sequence value's SeqInfo and what the lowering will do with it (for
    ``seqlower inspect``). Shapes are inferred on ``model`` first (in place)."""
    options = options or LowerOptions()
    check_nesting(model)
    model = _run_passes([InferSequenceShapesPass(options.keepdims_policy)], model)
    analysis = analyze(model, max_unroll=options.max_unroll, keepdims_policy=options.keepdims_policy, packed=options.packed)
    webs = {id(w): i for i, w in enumerate(analysis.webs)}
    out = []
    for web in analysis.webs:
        for v in web.values:
            info = analysis.info.get(v)
            producer = v.producer()
            feeds = [u for u in (producer.inputs if producer is not None else []) if u is not None and u in analysis.info]
            out.append(
                {
                    "name": v.name,
                    "graph": analysis.graph_of.get(v, "?"),
                    "producer": node_label(producer) if producer is not None else "graph input",
                    "op": producer.op_type if producer is not None else None,
                    # The sequences its producer reads, as (graph, name): the web's edges.
                    "from": [[analysis.graph_of.get(u, "?"), u.name] for u in feeds],
                    "web": webs[id(web)],
                    "info": info.to_json() if info is not None else None,
                    "lowering": _lowering_label(web, analysis.layout_of.get(v), analysis.stacked_shape.get(v), analysis.ragged.get(v)),
                    "reason": web.reason,
                }
            )
    return out


def _lowering_label(web: Any, layout: Any, stacked: Any, ragged: Any) -> str:
    if web.unrolled:
        return "unrolled (static)"
    if web.packed and stacked is not None:
        dims = ", ".join(str(d) if isinstance(d, int) else str(d.value) for d in stacked.dims)
        return f"stacked ([n, {dims}])" if dims else "stacked ([n])"
    if web.packed:
        axis, _ = ragged
        return f"ragged (data + lengths along axis {axis})"
    if web.flat:
        ranks = ", with ranks" if layout is not None and layout.ranked else ""
        return f"flat (values + shapes [n, {layout.width if layout else '?'}]{ranks})"
    return "kept"
