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
import re

import onnx
import onnx_ir as ir

from seqlower.io.inference import infer_shapes, localize_outer_constants
from seqlower.passes._rewrite import NOTES_KEY, subgraph_scopes, walk_scopes
from seqlower.analysis.analyzer import Analysis, SeqInfo, analyze, keep_for_next_pass, const_array, const_position, dynamic_split_squeezes, is_default_domain, model_input_dims
from seqlower.ir.helpers import anchored_shape
from seqlower.ir.helpers import concat_shape, merge_shapes, subgraphs
from seqlower.errors import ModelError
from seqlower.ir.helpers import graphs_of
from seqlower.io.models import weightless_proto
from seqlower.io.protos import innermost_type, subgraphs_of

__all__ = ["InferSequenceShapesPass", "input_dim_names", "refine_shape"]

logger = logging.getLogger(__name__)


_GENERATED_DIM = re.compile(r"unk__\d+")
# Alternations of onnx's inference and the analysis in one settle. Each carries a shape
# one web further where only the analysis knows it (a concat's summed axis feeding the
# next web's map body): a chain of that many dependent webs settles static, a longer
# one lowers its tail at run time. Each alternation re-infers only downstream of the news.
_SETTLE_ROUNDS = 32


def _sanitize(shape: ir.Shape | None) -> ir.Shape | None:
    """onnx names the dims it cannot infer ``unk__N``; they promise nothing (two such
    dims with one name need not be equal), so they become unknown."""
    if shape is None:
        return None
    return ir.Shape(
        [None if isinstance(d, ir.SymbolicDim) and d.value and _GENERATED_DIM.fullmatch(d.value) else d for d in shape.dims]
    )


def refine_shape(old: ir.Shape | None, new: ir.Shape | None, anchored: frozenset[str] = frozenset()) -> ir.Shape | None:
    """``new`` where it knows more, ``old`` where it knows more; None if they disagree on rank.

    A dim named after a model input's dim (``anchored``) knows more than another name:
    it is one value for the whole run, where an exporter's name for a Loop body's output
    dim promises nothing across iterations (what append-once loops need to know).
    """
    if new is None:
        return old
    if old is None:
        return new
    if old.rank() != new.rank():
        return old
    dims = []
    for a, b in zip(old.dims, new.dims):
        if isinstance(a, int):
            dims.append(a)
        elif isinstance(b, int):
            dims.append(b)
        elif isinstance(b, ir.SymbolicDim) and b.value in anchored and not (isinstance(a, ir.SymbolicDim) and a.value in anchored):
            dims.append(b)
        elif isinstance(a, ir.SymbolicDim) and a.value is not None:
            dims.append(a)
        else:
            dims.append(b)
    return ir.Shape(dims)


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
        modified = _reset_after_policy_squeezes(model, self.keepdims_policy)
        _forget_body_output_names(model)
        _forget_carried_list_shapes(model)
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
            widened = _join_back(candidates, after, anchored)
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
                shape = _declarable(start, anchored)
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
        anchored = input_dim_names(model)
        boundary = {*model.graph.inputs, *model.graph.outputs}
        modified = False
        pairs: list[tuple[ir.Graph, onnx.GraphProto]] = [(model.graph, inferred.graph)]
        while pairs:
            graph, proto = pairs.pop()
            found = {vi.name: vi.type for vi in (*proto.input, *proto.value_info, *proto.output)}
            for value in (*graph.inputs, *graph.initializers.values()):
                if (tp := found.get(value.name)) is not None:
                    modified |= _take_type(value, tp, frozenset() if value in boundary else anchored)
            # Nodes with subgraphs by their outputs (the proto may hold more nodes:
            # localize_outer_constants copies Constants into subgraphs).
            holders = {(n.op_type, tuple(n.output)): n for n in proto.node if subgraphs_of(n)}
            for node in graph:
                for value in node.outputs:
                    if (tp := found.get(value.name)) is not None:
                        # The model's declared output shapes stay as the user named them.
                        modified |= _take_type(value, tp, frozenset() if value in boundary else anchored)
                node_proto = holders.get((node.op_type, tuple(v.name for v in node.outputs))) if node.attributes else None
                if node_proto is not None:
                    subs = {a.name: a for a in node_proto.attribute}
                    for name, attr in node.attributes.items():
                        if name not in subs:
                            continue
                        if attr.type == ir.AttributeType.GRAPH:
                            pairs.append((attr.as_graph(), subs[name].g))
                        elif attr.type == ir.AttributeType.GRAPHS:
                            pairs.extend(zip(attr.as_graphs(), subs[name].graphs))
        if cone is None:
            for function in model.functions.values():
                modified |= _infer_function(model, function, infer)
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
                modified |= _control_flow_shapes(node)
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
                shape = _concat_shape(node, info)
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


def _declarable(shape: ir.Shape, anchored: frozenset[str]) -> ir.Shape:
    """A shape a body input can declare for every iteration: numbers and model-input
    dims stay; a symbolic dim of the body's own (one size per iteration) is unknown."""
    return ir.Shape([d if isinstance(d, int) or (d is not None and anchored_shape(ir.Shape([d]), anchored)) else None
                     for d in shape.dims])


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


def _forget_body_output_names(model: ir.Model) -> bool:
    """Exporters name each dim of a subgraph output (TorchScript: ``Tanhh.3_dim_0``), and
    a declared graph output keeps its name through onnx's inference. Such a name promises
    nothing (not even one value across iterations), and it hides what inference knows
    (that the dim is the model input's ``w``), so it is forgotten; dims named after a
    model input's dims are kept."""
    anchored = input_dim_names(model)
    modified = False
    for graph in graphs_of(model):
        if graph is model.graph:
            continue
        for v in graph.outputs:
            if v.shape is None or isinstance(v.type, ir.SequenceType):
                continue
            dims = [None if isinstance(d, ir.SymbolicDim) and d.value not in anchored else d for d in v.shape.dims]
            if dims != list(v.shape.dims):
                v.shape = ir.Shape(dims)
                modified = True
    return modified


def _forget_carried_list_shapes(model: ir.Model) -> bool:
    """A subgraph's declared element shape of a list it carries in or out promises
    nothing: TorchScript declares the shape of the element its trace inserted last
    (a Loop body's ``seq(float[0, 3])`` for a list of ``[0, 1]`` columns and one
    ``[0, 3]``, fuzz seed 4845; If branches' ``seq(float[1, 2])`` for a list of
    ``[6, 2]``, ``[3, 2]`` and ``[1, 2]`` rows, seed 4773), and onnx's inference keeps a
    declared dim against an unknown one. The element shapes are proven instead: the
    analysis follows the branches, and the Loop fixpoint (``_loop_invariant_elements``)
    starts from the initial list and joins what the body inserts."""
    modified = False
    for graph in graphs_of(model):
        for node in graph:
            if node.op_type not in ("Loop", "If") or not is_default_domain(node):
                continue
            for attr in node.attributes.values():
                if attr.type != ir.AttributeType.GRAPH:
                    continue
                sub = attr.as_graph()
                for v in (*sub.inputs, *sub.outputs):
                    if isinstance(v.type, ir.SequenceType) and v.shape is not None:
                        v.shape = None
                        modified = True
    return modified


def input_dim_names(model: ir.Model) -> frozenset[str]:
    """The symbolic dims of the model's tensor inputs: each is one size for the whole run."""
    return frozenset(model_input_dims(model))


def _control_flow_shapes(node: ir.Node) -> bool:
    """Tensor outputs of Loop and If that onnx leaves without a shape get the merge of
    what flows into them. onnx drops the whole shape of a carried value whose body output
    shape differs in a dim (TorchScript's recurrent state), which loses the rank an
    element inserted into a sequence needs."""
    if node.op_type == "If":
        branches = [node.attributes[b].as_graph() for b in ("then_branch", "else_branch") if b in node.attributes]
        if len(branches) != 2:
            return False
        sources = [[g.outputs[i] for g in branches] for i in range(len(node.outputs))]
        scan = [False] * len(node.outputs)
    else:
        body = node.attributes["body"].as_graph() if "body" in node.attributes else None
        if body is None:
            return False
        carried = len(node.inputs) - 2
        sources = [[node.inputs[2 + i], body.outputs[1 + i]] for i in range(carried)]
        sources += [[body.outputs[1 + i]] for i in range(carried, len(body.outputs) - 1)]
        scan = [False] * carried + [True] * (len(body.outputs) - 1 - carried)
    modified = False
    for out, srcs, is_scan in zip(node.outputs, sources, scan):
        if out.shape is not None or isinstance(out.type, ir.SequenceType):
            continue
        if any(v is None or v.shape is None or isinstance(v.type, ir.SequenceType) for v in srcs):
            continue
        shape = merge_shapes([_sanitize(v.shape) for v in srcs])
        if shape is None:
            continue
        if is_scan:
            shape = ir.Shape([None, *shape.dims])
        if out.type is None and srcs[0].type is not None:
            out.type = srcs[0].type
        out.shape = shape
        modified = True
    return modified


def _reset_after_policy_squeezes(model: ir.Model, policy: str) -> bool:
    """Where the keepdims policy squeezes a SplitToSequence that onnx's inference (which
    follows the spec) does not, give the sequence its squeezed element shape and forget
    the shapes onnx derived from the unsqueezed one downstream, so they are re-inferred.
    A model output's declared shape derived that way (exporters copy onnx's inference)
    is wrong under the policy too: it is re-inferred, and the report says so.
    """
    if not any(n.op_type == "SplitToSequence" and len(n.inputs) > 1 and n.inputs[1] is not None
               and "keepdims" in n.attributes and not n.attributes["keepdims"].as_int()
               for g in (*graphs_of(model), *model.functions.values()) for n in g):
        return False  # no split the policy could squeeze: nothing to analyse
    analysis = analyze(model, max_unroll=0, keepdims_policy=policy)
    seeds = []
    for value, info in analysis.info.items():
        node = value.producer()
        if node is None or node.op_type != "SplitToSequence" or not is_default_domain(node):
            continue
        has_split = len(node.inputs) > 1 and node.inputs[1] is not None
        keepdims = node.attributes["keepdims"].as_int() if "keepdims" in node.attributes else 1
        if not has_split or keepdims:
            continue
        split = const_array(node.inputs[1])
        if info.elem_shape is None:
            # The input's shape not known yet (no value info: onnx infers it next), but the
            # squeeze is: written in the spec's form, onnx infers the policy's rank.
            if policy != "spec" and split is not None and split.ndim == 0 and int(split) == 1 \
                    and dynamic_split_squeezes(node, policy):
                node.resize_inputs(1)
                value.shape = None
                seeds.append(value)
            continue
        if value.shape == info.elem_shape:
            continue
        if value.shape is not None and value.shape.rank() == info.elem_shape.rank():
            continue
        if value.type is None and info.dtype is not None:
            value.type = ir.SequenceType(ir.TensorType(info.dtype))
        if value.type is not None:
            value.shape = info.elem_shape
        if policy != "spec" and split is not None and split.ndim == 0 and int(split) == 1:
            # Chunks of one, squeezed: what the spec's form without a split means, so
            # that onnx's own inference (run again below) agrees with the policy.
            node.resize_inputs(1)
        seeds.append(value)
    if not seeds:
        return False
    owners = _subgraph_owners(model)
    seen: set[ir.Value] = set(seeds)
    stack = list(seeds)

    def forget(out: ir.Value) -> None:
        if out not in seen:
            seen.add(out)
            _forget_shape(model, out, policy)
            stack.append(out)

    def forget_owners(graph: ir.Graph | ir.Function | None) -> None:
        """What the nodes owning ``graph`` (and theirs, outwards) return."""
        owner = owners.get(id(graph))
        while owner is not None:
            for out in owner.outputs:
                forget(out)
            owner = owners.get(id(owner.graph))

    while stack:
        v = stack.pop()
        # A subgraph's output (an If branch's list) is what its owner node returns.
        p = v.producer()
        if v.is_graph_output() and p is not None:
            forget_owners(p.graph)
        for use in v.uses():
            # A value a Loop carries or a map takes is its body's input there too.
            for inner in _body_inputs_of(use.node, use.idx):
                if inner not in seen:
                    seen.add(inner)
                    inner.shape = None
                    stack.append(inner)
            for out in use.node.outputs:
                forget(out)
            # A read inside a subgraph changes what its owner node computes.
            forget_owners(use.node.graph)
    return True


def _body_inputs_of(node: ir.Node, index: int) -> list[ir.Value]:
    """The body inputs that take ``node``'s input ``index`` (Loop's carried values, Scan's
    states and scanned inputs, SequenceMap's inputs)."""
    body = node.attributes.get("body")
    if body is None or body.type != ir.AttributeType.GRAPH or not is_default_domain(node):
        return []
    inputs = body.as_graph().inputs
    if node.op_type == "Loop":
        return [inputs[index]] if index >= 2 and index < len(inputs) else []
    if node.op_type in ("Scan", "SequenceMap"):
        return [inputs[index]] if index < len(inputs) else []
    return []


def _forget_shape(model: ir.Model, v: ir.Value, policy: str) -> None:
    if v.shape is None:
        return
    if v.is_graph_output() and v in model.graph.outputs:
        model.meta.setdefault(NOTES_KEY, []).append(
            f"output '{v.name}': the declared shape {v.shape} follows the spec's keepdims rule; "
            f"under the keepdims policy '{policy}' it was re-inferred"
        )
    v.shape = None


def _subgraph_owners(model: ir.Model) -> dict[int, ir.Node]:
    owners: dict[int, ir.Node] = {}
    for g in (model.graph, *model.functions.values()):
        for node in ir.traversal.RecursiveGraphIterator(g):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    owners[id(attr.as_graph())] = node
                elif attr.type == ir.AttributeType.GRAPHS:
                    for sub in attr.as_graphs():
                        owners[id(sub)] = node
    return owners



def _join_back(candidates: list[list], after: Analysis, anchored: frozenset[str]) -> bool | None:
    """Join what each body gives back into its declared shape; whether one widened, or
    None when a body changes the rank or gives back elements of unknown rank."""
    widened = False
    for cand in candidates:
        out = after.info.get(cand[1])
        if out is not None and out.length == 0:
            continue
        back = None if out is None or out.elem_shape is None else _declarable(out.elem_shape, anchored)
        joined = merge_shapes([cand[2], back])
        if joined is None:
            return None
        if joined != cand[2]:
            cand[2], widened = joined, True
    return widened


def _infer_function(model: ir.Model, function: ir.Function, infer) -> bool:
    """Shapes inside a model-local function, from the types its call sites pass.

    onnx infers nothing inside functions; typing the body as a graph with the call
    sites' merged input types gives its values the shapes every call agrees on, which
    is what lets a split inside a function unroll.
    """
    input_types = _call_site_types(model, function)
    if input_types is None:
        return False
    fproto = ir.serde.serialize_function(function)
    graph = onnx.helper.make_graph(
        list(fproto.node),
        "function_body",
        [onnx.helper.make_value_info(name, tp) for name, tp in zip(fproto.input, input_types)],
        [onnx.ValueInfoProto(name=name) for name in fproto.output],
    )
    imports = {**{k: v for k, v in model.opset_imports.items()}, **{o.domain: o.version for o in fproto.opset_import}}
    proto = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
        ir_version=model.ir_version,
        functions=[ir.serde.serialize_function(f) for f in model.functions.values() if f is not function],
    )
    try:
        inferred = infer(proto)
    except Exception as e:  # noqa: BLE001 - best effort, as for the main graph
        logger.info("shape inference inside %s failed (%s)", function.name, e)
        return False
    found = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    found.update((v.name, tp) for v, tp in zip(function.inputs, input_types) if v.name)
    modified = False
    values = [v for node in ir.traversal.RecursiveGraphIterator(function) for v in node.outputs]
    for v in [*function.inputs, *values]:
        tp = found.get(v.name or "")
        if tp is not None and tp.WhichOneof("value"):
            modified |= _take_type(v, tp)
    return modified


def _call_site_types(model: ir.Model, function: ir.Function) -> list[onnx.TypeProto] | None:
    """The type of each input of ``function`` as every call site passes it (shapes
    merged), or None when there is no call or the calls disagree on a type."""
    calls = [
        node
        for g in (model.graph, *model.functions.values())
        for node in ir.traversal.RecursiveGraphIterator(g)
        if node.op_identifier() == function.identifier()
    ]
    if not calls:
        return None
    input_types: list[onnx.TypeProto] = []
    for i in range(len(function.inputs)):
        args = [c.inputs[i] if i < len(c.inputs) else None for c in calls]
        if any(a is None or a.type is None for a in args) or len({str(a.type) for a in args}) != 1:
            return None
        merged = merge_shapes([a.shape for a in args])
        tp = onnx.TypeProto()
        ir.serde.serialize_type_into(tp, args[0].type)
        if merged is not None:
            ir.serde.serialize_shape_into(tp, merged)
        input_types.append(tp)
    return input_types


def _take_type(v: ir.Value, tp: onnx.TypeProto, anchored: frozenset[str] = frozenset()) -> bool:
    """Give ``v`` the type (if it has none) and the refined shape ``tp`` says."""
    if not tp.WhichOneof("value") or innermost_type(tp).WhichOneof("value") == "map_type":
        return False  # nothing found; maps have no IR type (seqlower.io.map_types)
    if isinstance(v.type, ir.TensorType) and v.shape is not None and all(isinstance(d, int) for d in v.shape.dims):
        return False  # nothing to learn: a static tensor (the common case, and cheap to see)
    new_type = ir.serde.deserialize_type_proto_for_type(tp)
    new_shape = _sanitize(ir.serde.deserialize_type_proto_for_shape(tp))
    modified = False
    if v.type is None and new_type is not None:
        v.type = new_type
        modified = True
    if v.type is not None and new_type is not None and isinstance(v.type, ir.SequenceType) != isinstance(new_type, ir.SequenceType):
        return modified
    shape = refine_shape(v.shape, new_shape, anchored)
    if shape != v.shape:
        v.shape = shape
        modified = True
    return modified


def _concat_shape(node: ir.Node, info: SeqInfo) -> ir.Shape | None:
    if info.shapes is None or "axis" not in node.attributes:
        return None
    new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
    return concat_shape(list(info.shapes), node.attributes["axis"].as_int(), bool(new_axis))
