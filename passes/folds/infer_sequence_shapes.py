"""Shape inference that keeps sequence types and adds what only seqlower knows.

1. Runs ``onnx.shape_inference`` (through onnx_ir's C-API helper, which keeps big
   initializers out of the serialized copy) and merges the result dim by dim, never
   replacing a known dim by an unknown one. Unlike onnx_ir's ``ShapeInferencePass``,
   a sequence value keeps its ``SequenceType`` (that pass sets ``dtype``, which turns
   it into a tensor type the checker then rejects).
2. Gives every sequence value the element dtype and merged element shape of its
   SeqInfo: exact shapes after inserts into ``SequenceEmpty``, which onnx loses.
3. ``SequenceAt`` at a constant position gets that element's shape, and
   ``ConcatFromSequence`` of a sequence of known length gets its concatenated axis as
   a sum (onnx leaves both unknown).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from seqlower.io.inference import infer_shapes, localize_outer_constants
from seqlower.passes._rewrite import subgraph_scopes, walk_scopes
from seqlower.analysis.analyzer import Analysis, analyze, keep_for_next_pass, const_position, is_default_domain
from seqlower.ir.helpers import merge_shapes, subgraphs
from seqlower.errors import ModelError
from seqlower.ir.helpers import graphs_of
from seqlower.io.models import weightless_proto
from seqlower.io.protos import subgraphs_of
from seqlower.passes.folds.subgraph_shapes import (concat_dims, control_flow_shapes, declarable, forget_body_output_names,
                                                  forget_carried_list_shapes, infer_function, input_dim_names, join_back,
                                                  refine_shape, reset_after_policy_squeezes, take_type,
                                                  unproven_by_onnx)

__all__ = ["InferSequenceShapesPass", "input_dim_names", "refine_shape"]

logger = logging.getLogger(__name__)


# Alternations of onnx's inference and the analysis in one settle. Each carries a shape
# one web further where only the analysis knows it (a concat's summed axis feeding the
# next web's map body): a chain of that many dependent webs settles static, a longer
# one lowers its tail at run time. Each alternation re-infers only downstream of the news.
_SETTLE_ROUNDS = 32


class InferSequenceShapesPass(ir.passes.InPlacePass):
    """Types and shapes on every value; sequence values stay sequences."""

    def __init__(self, keepdims_policy: str = "auto", leave_for: dict[str, object] | None = None) -> None:
        """``leave_for``: the analysis parameters of a pass after this one (the fold's);
        the analysis is then made with them and left for it (``keep_for_next_pass``)."""
        super().__init__()
        self.keepdims_policy = keepdims_policy
        self.leave_for = leave_for
        self.last: Analysis | None = None

    news_for_onnx = True

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # Modified is what differs at the end: the shapes forgotten first and proven
        # again by the Loop fixpoint are the same shapes, and a pass that says it changed
        # the model every time keeps the rounds going to their limit (16 rounds of 40
        # random programs side by side, each a whole-model inference: the "programs"
        # benchmark family).
        before = _typing(model)
        modified = reset_after_policy_squeezes(model, self.keepdims_policy)
        forget_body_output_names(model)
        forget_carried_list_shapes(model)
        self._settle(model)
        settled = self.last
        self._loop_invariant_elements(model)
        modified |= _typing(model) != before
        if self.leave_for is not None and self.last is settled:
            # What the last analysis found is what the model now declares (the apply
            # wrote it), and what an analysis reads of a value it typed is what it
            # computed itself: a new one would find the same. Not after the Loop
            # fixpoint, which re-settles and may restore shapes.
            keep_for_next_pass(model, settled, **self.leave_for)
        return ir.passes.PassResult(model, modified)

    def _analyze(self, model: ir.Model) -> Analysis:
        # Only the decisions depend on the parameters (--max-unroll, packed...), and this
        # pass reads none of them: analysed as the pass it leaves the analysis for.
        params = self.leave_for or dict(max_unroll=0, keepdims_policy=self.keepdims_policy)
        self.last = analyze(model, **params)
        return self.last

    def _settle(self, model: ir.Model) -> bool:
        # What seqlower adds (a concat's summed axis) feeds onnx's inference of the
        # tensor ops after it, so alternate until neither learns anything (bounded).
        # After the first run, onnx's inference runs only on the nodes downstream of what
        # the analysis wrote (_cone_proto): the rest of the model has nothing new to learn.
        # A graph of list edits alone on typed tensors (no tensor op, no subgraph) is
        # typed by the analysis itself: onnx's inference runs only if it left a value
        # untyped.
        modified = False
        if _list_edits_only(model):
            modified = self._apply_analysis(model, self._analyze(model))
            if all(v.type is not None for node in model.graph for v in node.outputs):
                return modified
        news: list[ir.Value] | None = None
        for _ in range(_SETTLE_ROUNDS):
            changed = self._onnx_inference(model, news)
            if news is not None and not changed:
                # onnx learned nothing from what the analysis wrote, which is what another
                # analysis would find again: the last one stands.
                break
            changed |= self._apply_analysis(model, self._analyze(model))
            modified |= changed
            if not changed or not self.news_for_onnx:
                # Nothing the analysis wrote feeds what onnx infers (a shape only sequence
                # ops read, which the analysis itself follows): another onnx run finds nothing.
                break
            news = list(self.news)
        return modified

    def _loop_invariant_elements(self, model: ir.Model) -> bool:
        """The element shape a Loop-carried sequence keeps, as a fixpoint with widening.

        A body input declared with unknown dims (TorchScript's ``seq(float[?])``) makes
        every element read in the body unknown, so what the body inserts is unknown, so
        the carried elements look unknown: the fixpoint is stuck low. Start instead from
        the initial value's merged element shape (its rank, the dims every element
        shares: numbers and model-input dims), declare it on the body input, infer, and
        join what the body gives back into it (a dim that differs widens to unknown);
        repeat until the body gives back nothing new (at most one round more than
        there are dims to widen). A rank the body changes restores every shape.
        """
        candidates = self._loop_candidates(model)
        if not candidates:
            return False
        snapshot = [(v, v.shape) for g in graphs_of(model) for v in _graph_values(g)]
        anchored = input_dim_names(model)
        # Each round that does not settle widens at least one declared dim to unknown.
        for _ in range(1 + sum(shape.rank() for _, _, shape in candidates)):
            for bi, _, shape in candidates:
                bi.shape = shape
            self._settle(model)
            after = analyze(model, max_unroll=0, keepdims_policy=self.keepdims_policy)
            widened = join_back(candidates, after, anchored)
            if widened is None:
                break
            if not widened:
                return True
        for v, old in snapshot:
            v.shape = old
        return False

    def _loop_candidates(self, model: ir.Model) -> list[list]:
        """[body input, body output, the shape to start from] for each Loop-carried
        sequence whose body input could be declared more precisely."""
        loops = [
            node for graph in graphs_of(model) for node in graph
            if node.op_type == "Loop" and is_default_domain(node) and "body" in node.attributes
            and any(isinstance(v.type, ir.SequenceType) for v in node.inputs[2:] if v is not None)
        ]
        if not loops:
            return []  # nothing to prove: no analysis
        analysis = analyze(model, max_unroll=0, keepdims_policy=self.keepdims_policy)
        anchored = input_dim_names(model)
        candidates: list[list] = []
        for node in loops:
            body = node.attributes["body"].as_graph()
            for k, init in enumerate(node.inputs[2:]):
                info = analysis.info.get(init) if init is not None else None
                if info is None or 1 + k >= len(body.outputs):
                    continue
                start = info.elem_shape
                if info.length == 0:
                    # An empty list has no element shape yet (the lattice's bottom): seed
                    # the fixpoint with what the body inserts; the check below keeps
                    # the result only if the body gives back nothing outside it.
                    start = merge_shapes(_inserted_shapes(body))
                if start is None:
                    continue
                shape = declarable(start, anchored)
                bi = body.inputs[2 + k]
                if bi.shape == shape or (bi.shape is not None and _at_least_as_precise(bi.shape, shape)):
                    continue
                candidates.append([bi, body.outputs[1 + k], shape])
        return candidates

    def _onnx_inference(self, model: ir.Model, news: list[ir.Value] | None = None) -> bool:
        """onnx's inference on the model, or, given ``news`` (values whose shapes the
        analysis just wrote), on the main-graph nodes downstream of them only."""
        def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
            localize_outer_constants(proto)
            # No data propagation: it treats 2-D int64 tensors (our shapes rows) as 1-D
            # and infers wrong ranks for Reshapes they feed (a fuzzed program found it).
            return infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)

        cone = None if news is None else _cone_proto(model, news)
        if news is not None and cone is not None and not cone.graph.node:
            return False
        try:
            # Weights past 4 KiB go to onnx's inference as placeholders (it reads only
            # shapes, axes and sizes, a few numbers each), so a model over 2 GiB is
            # inferred too, and a model's weights are never copied for it.
            inferred = infer(cone if cone is not None else weightless_proto(model, keep_bytes=_SMALL_BYTES))
        except Exception as e:  # noqa: BLE001 - inference is best effort; the checker judges later
            logger.info("onnx shape inference failed (%s); keeping the shapes we have", e)
            return False
        # Read the types straight off the inferred proto, graph by graph alongside the
        # IR: deserializing it whole was most of this pass's cost on big models.
        found = _inferred_types(model.graph, inferred.graph)
        # What onnx derived from a premise that does not hold (a Loop's list typed by its
        # first value, a split's rank the policy decides at run time) is not taken: the
        # analysis proves those lists' element shapes, and the next (cone) run, which
        # starts from them, types what they reach.
        made = None if cone is None else _outputs_of(cone)
        ran = None if made is None else {n for n in model.graph if n.outputs and n.outputs[0].name in made}
        unproven = unproven_by_onnx(model, self.keepdims_policy, lambda v: found.get(id(v.graph), {}).get(v.name), ran)
        anchored = input_dim_names(model)
        boundary = {*model.graph.inputs, *model.graph.outputs}
        modified = False
        for graph in graphs_of(model):
            types = found.get(id(graph))
            if not types:
                continue
            for value in (*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)):
                if (tp := types.get(value.name)) is not None:
                    # The model's declared output shapes stay as the user named them.
                    how = None if unproven.get(value) else False if value in unproven else True
                    modified |= take_type(value, tp, frozenset() if value in boundary else anchored, how)
        if cone is None:
            for function in model.functions.values():
                modified |= infer_function(model, function, infer)
        return modified

    def _apply_analysis(self, model: ir.Model, analysis: Analysis) -> bool:
        self.news_for_onnx = False
        self.news: list[ir.Value] = []
        modified = False
        for value, info in analysis.info.items():
            changed = False
            if info.dtype is not None and not isinstance(value.type, ir.SequenceType):
                value.type = ir.SequenceType(ir.TensorType(info.dtype))
                changed = True
            shape = refine_shape(value.shape, info.elem_shape)
            if shape != value.shape:
                value.shape = shape
                changed = True
            if changed:
                modified = True
                self._note(value, _SEQUENCE_READERS, model.graph)
        for scope in walk_scopes(model):
            modified |= self._reads(scope.graph, scope, analysis, model.graph)
        return modified

    def _note(self, value: ir.Value, followed: frozenset[str], main: ir.Graph) -> None:
        if _read_by_onnx(value, followed, main):
            self.news_for_onnx = True
            self.news.append(value)

    def _reads(self, graph: ir.Graph | ir.Function, scope, analysis: Analysis, main: ir.Graph) -> bool:
        modified = False
        for node in graph:
            for sub in subgraph_scopes(node, scope):
                modified |= self._reads(sub.graph, sub, analysis, main)
            if is_default_domain(node) and node.op_type in ("Loop", "If"):
                modified |= control_flow_shapes(node)
            if not is_default_domain(node) or not node.inputs or node.inputs[0] is None:
                continue
            info = analysis.info.get(node.inputs[0])
            if info is None:
                continue
            shape = None
            if node.op_type == "SequenceAt" and info.shapes is not None and len(node.inputs) > 1:
                try:
                    pos = const_position(node.inputs[1], node)
                except ModelError:
                    pos = None
                if pos is not None and -len(info.shapes) <= pos < len(info.shapes):
                    shape = info.shapes[pos]
            elif node.op_type == "ConcatFromSequence":
                shape = concat_dims(node, info)
            if shape is not None:
                out = node.outputs[0]
                new = refine_shape(out.shape, shape)
                if out.type is None and info.dtype is not None:
                    out.type = ir.TensorType(info.dtype)
                    modified = True
                    self._note(out, _TENSOR_READERS, main)
                if new != out.shape:
                    out.shape = new
                    self._note(out, _TENSOR_READERS, main)
                    modified = True
        return modified


# Readers of a sequence whose outputs the analysis does not type itself (onnx's inference
# does, from the sequence's declared element type), and readers of a tensor the analysis
# typed that are not sequence ops (for those, the analysis follows the shape itself).
_SEQUENCE_READERS = frozenset({"SequenceInsert", "SequenceErase", "SequenceLength"})
_TENSOR_READERS = frozenset({"SequenceInsert", "SequenceConstruct", "SplitToSequence"})


_FOLLOWED = _SEQUENCE_READERS | _TENSOR_READERS
# Ops whose every output the analysis types (sequences, and the tensors it reads out of
# them), from typed inputs.
_TYPED_BY_ANALYSIS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
                                "SplitToSequence", "ConcatFromSequence"})


def _list_edits_only(model: ir.Model) -> bool:
    """The main graph holds only ops the analysis types, on typed graph inputs and
    initializers, and the model no function: onnx's inference would find nothing the
    analysis does not."""
    if model.functions:
        return False
    for node in model.graph:
        if not is_default_domain(node) or node.op_type not in _TYPED_BY_ANALYSIS or next(subgraphs(node), None) is not None:
            return False
        if any(v is not None and v.type is None and v.producer() is None for v in node.inputs):
            return False
    return True


# Initializers onnx's inference gets as data (it reads shapes, axes and sizes, a few
# numbers each); bigger ones are typed inputs or placeholders.
_SMALL_BYTES = 4096


def _inferred_types(main: ir.Graph, inferred: onnx.GraphProto) -> dict[int, dict[str, onnx.TypeProto]]:
    """What onnx inferred, per graph of the IR (by ``id``), by value name."""
    found: dict[int, dict[str, onnx.TypeProto]] = {}
    pairs: list[tuple[ir.Graph, onnx.GraphProto]] = [(main, inferred)]
    while pairs:
        graph, proto = pairs.pop()
        found[id(graph)] = {vi.name: vi.type for vi in (*proto.input, *proto.value_info, *proto.output)}
        # Nodes with subgraphs by their outputs (the proto may hold more nodes:
        # localize_outer_constants copies Constants into subgraphs).
        holders = {(n.op_type, tuple(n.output)): n for n in proto.node if subgraphs_of(n)}
        for node in graph:
            node_proto = holders.get((node.op_type, tuple(v.name for v in node.outputs))) if node.attributes else None
            if node_proto is None:
                continue
            subs = {a.name: a for a in node_proto.attribute}
            for name, attr in node.attributes.items():
                if name not in subs:
                    continue
                if attr.type == ir.AttributeType.GRAPH:
                    pairs.append((attr.as_graph(), subs[name].g))
                elif attr.type == ir.AttributeType.GRAPHS:
                    pairs.extend(zip(attr.as_graphs(), subs[name].graphs))
    return found


def _outputs_of(proto: onnx.ModelProto) -> set[str]:
    return {name for node in proto.graph.node for name in node.output}


def _cone_proto(model: ir.Model, news: list[ir.Value]) -> onnx.ModelProto | None:
    """The main-graph nodes onnx's inference could learn something new for after the
    analysis wrote the shapes of ``news``: their readers and what reads those, not
    through the ops the analysis follows itself; with what they read as typed graph
    inputs (constants and small initializers as such, for the values inference reads).
    None when some news is in a subgraph or a function: the whole model is inferred."""
    main = model.graph
    if any(v.graph is not main for v in news):
        return None
    cone: set[ir.Node] = set()
    stack = [u.node for v in news for u in v.uses() if _teaches(u, _FOLLOWED, v)]
    while stack:
        node = stack.pop()
        if node in cone or (is_default_domain(node) and node.op_type in _FOLLOWED):
            continue
        if node.graph is not main:
            return None  # read inside a subgraph: its owner is the node to infer
        cone.add(node)
        stack.extend(u.node for v in node.outputs for u in v.uses())
    ordered = [n for n in main if n in cone]
    produced = {v for n in ordered for v in n.outputs}
    read: dict[ir.Value, None] = {}
    for node in ordered:
        for v in node.inputs:
            if v is not None and v not in produced:
                read[v] = None
        for sub in subgraphs(node):
            for inner in ir.traversal.RecursiveGraphIterator(sub):
                for v in inner.inputs:
                    if v is not None and v.graph is main and v not in produced:
                        read[v] = None
    graph = onnx.GraphProto(name=main.name or "cone")
    for v in read:
        producer = v.producer()
        if producer is not None and producer.op_type == "Constant" and is_default_domain(producer):
            graph.node.append(ir.serde.serialize_node(producer))
        elif v.const_value is not None and not v.is_graph_input() and v.const_value.nbytes <= _SMALL_BYTES and not isinstance(v.const_value, ir.ExternalTensor):
            graph.initializer.append(ir.serde.serialize_tensor(v.const_value))
            graph.initializer[-1].name = v.name or ""
        elif v.type is None:
            return None  # nothing to declare it by: the whole model is inferred
        else:
            graph.input.append(ir.serde.serialize_value(v))
    graph.node.extend(ir.serde.serialize_node(n) for n in ordered)
    # What is known of the cone's own values is declared, as a whole model's proto does
    # (onnx starts from it); no graph outputs: onnx writes what it infers to value_info.
    graph.value_info.extend(ir.serde.serialize_value(v) for n in ordered for v in n.outputs if v.name and v.type is not None)
    proto = onnx.ModelProto(ir_version=model.ir_version, graph=graph)
    proto.opset_import.extend(onnx.OperatorSetIdProto(domain=d, version=ver) for d, ver in model.opset_imports.items())
    proto.functions.extend(ir.serde.serialize_function(f) for f in model.functions.values())
    return proto


def _read_by_onnx(v: ir.Value, followed: frozenset[str], main: ir.Graph) -> bool:
    """Whether a shape just written on ``v`` can teach onnx's inference something: ``v``
    is read by a node outside ``followed`` (ops the analysis follows itself) or inside a
    subgraph, or is a subgraph's output (its owner's output is inferred from it)."""
    if v.is_graph_output() and v.graph is not main:
        return True
    return any(_teaches(u, followed, v) for u in v.uses())


def _teaches(use: ir.Usage, followed: frozenset[str], v: ir.Value) -> bool:
    """Whether onnx's inference of ``use``'s node may learn from ``v``'s new shape: not an
    op the analysis follows, and not a SequenceMap whose body input already declares as
    much (onnx types the body from the list's element shape, nothing else)."""
    node = use.node
    if node.graph is not v.graph:
        return True
    if not is_default_domain(node):
        return True
    if node.op_type in followed:
        return False
    if node.op_type == "SequenceMap" and "body" in node.attributes and v.shape is not None:
        body_inputs = node.attributes["body"].as_graph().inputs
        declared = body_inputs[use.idx].shape if use.idx < len(body_inputs) else None
        return declared is None or not _at_least_as_precise(declared, v.shape)
    return True


def _inserted_shapes(body: ir.Graph) -> list[ir.Shape | None]:
    """The shapes of the tensors a body (and the subgraphs in it) puts into lists."""
    shapes = []
    for node in ir.traversal.RecursiveGraphIterator(body):
        if node.op_type == "SequenceInsert" and len(node.inputs) > 1 and node.inputs[1] is not None:
            shapes.append(node.inputs[1].shape)
        elif node.op_type == "SequenceConstruct":
            shapes += [v.shape for v in node.inputs if v is not None]
    return shapes


def _at_least_as_precise(declared: ir.Shape, shape: ir.Shape) -> bool:
    """``declared`` already says all ``shape`` says (same rank, each known dim equal)."""
    return declared.rank() == shape.rank() and all(
        b is None or (a is not None and str(a) == str(b)) for a, b in zip(declared.dims, shape.dims))


def _typing(model: ir.Model) -> list[tuple]:
    """Every value's type and dims, to compare (dims as a tuple: a Shape may change in place)."""
    return [(v, v.type, None if v.shape is None else tuple(v.shape.dims))
            for g in graphs_of(model) for v in _graph_values(g)]


def _graph_values(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.inputs
    for node in graph:
        yield from node.outputs
