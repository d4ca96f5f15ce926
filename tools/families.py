"""Benchmark families: models drawn from a seed, each member with its feeds and, where a
person would write one, the hand-written tensor-only model computing the same numbers
(Stage 11: "benchmark families, not models"; tools/bench.py measures them).

    member = FAMILIES["chain"](seed, nodes)  # -> Member

- chain: B blocks of SplitToSequence -> SequenceMap -> ConcatFromSequence (+ a residual
  Add or not). Drawn: x's rank (2 or 3) and dims, the split axis (positive or negative),
  the split (a scalar, equal sizes as a tensor, unequal sizes, none: chunks of 1 kept or
  squeezed away), the body (MatMul by a matrix + Relu, Softmax of such a MatMul, or
  elementwise), the matrix read from the outer graph or passed as the map's second
  input, the element type (float32, float64, float16). By hand: the body on x itself, on
  x Reshaped to [.., n, c] and back, on x with its last two axes swapped, or on a Split's
  pieces: whatever is exact for that member.
- edits: a list of L rows (L up to the size), E SequenceInsert / SequenceErase /
  SequenceAt moves; positions shared, one initializer per op, or a model input (run
  time); inserted elements constant or computed (a ReduceMean of x); at the front, the
  back or anywhere. By hand (constant positions): Concat(x, extras) -> one Gather.
- sparse: residual MLP blocks with one SplitToSequence -> ConcatFromSequence pair
  somewhere (axis, halves drawn); by hand: without the pair.
- dynamic: blocks over x [N, M] with symbolic dims: rows mapped, one read at a run-time
  position and inserted, one erased, a Loop appending rows; no hand-written model.
- programs: tests/program_generator.py's random programs (Stage 10's v3 shapes), as many
  side by side as make the size; no hand-written model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
_NP = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16}


@dataclass
class Member:
    family: str
    seed: int
    what: str  # the draw, in words
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    hand: onnx.ModelProto | None = None
    tolerance: float = 1e-4
    params: dict = field(default_factory=dict)


def _model(nodes, inputs, outputs, inits, name: str, opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _pick(rng: np.random.Generator, options: list):
    return options[int(rng.integers(len(options)))]


# -- chain ------------------------------------------------------------------------------------


@dataclass
class _Chain:
    """One chain member's draw."""

    dims: list[int]
    axis: int
    written_axis: int  # (as the model says it: negative or not)
    split: str
    sizes: list[int]
    acts_on: int  # the element's last axis, in x's axes: the body acts along it only
    body: str
    weight: str
    residual: bool
    elem: int

    @property
    def squeezed(self) -> bool:
        return self.split == "ones-squeezed"


def _draw_chain(rng: np.random.Generator) -> _Chain:
    rank = _pick(rng, [2, 3])
    dims = [_pick(rng, [32, 64]), 200] if rank == 2 else [_pick(rng, [2, 4]), 32, 120]
    axis = int(rng.integers(rank))
    split = _pick(rng, ["scalar", "equal", "unequal", "ones-kept", "ones-squeezed"])
    if split.startswith("ones") and dims[axis] > 16:
        dims[axis] = 16  # (chunks of 1: a list as long as the dim, unrolled)
    acts_on = rank - 2 if split == "ones-squeezed" and axis == rank - 1 else rank - 1
    body = _pick(rng, ["matmul", "softmax", "elementwise"])
    if split == "unequal" and axis == acts_on and body != "elementwise":
        body = "elementwise"  # (a matrix per chunk size, a softmax per chunk: not one body)
    weight = _pick(rng, ["captured", "input"])
    residual = bool(rng.random() < 0.5)
    elem = _pick(rng, [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
    if elem == TensorProto.FLOAT16:
        # (onnxruntime 1.31 cannot load a float16 Softmax or Relu inside SequenceMap: it
        # inlines their function bodies out of order, "must be topologically sorted")
        body = "elementwise"
    written_axis = axis - rank if rng.random() < 0.3 else axis
    if split == "unequal" and dims[axis] < 3:
        split = "equal"
    if split in ("scalar", "equal"):
        n = _pick(rng, [2, 4, 5, 8]) if dims[axis] % 5 == 0 else _pick(rng, [2, 4, 8])
        while dims[axis] % n:
            n //= 2
        sizes = [dims[axis] // n] * n
    elif split == "unequal":
        cut = sorted(int(c) for c in rng.choice(np.arange(1, dims[axis]), size=2, replace=False))
        sizes = [cut[0], cut[1] - cut[0], dims[axis] - cut[1]]
    else:
        sizes = [1] * dims[axis]
    return _Chain(dims, axis, written_axis, split, sizes, acts_on, body, weight, residual, elem)


def _chain_nodes(d: _Chain, b: int, prev: str, w: str, width: int) -> list[onnx.NodeProto]:
    """Block ``b``'s SplitToSequence -> SequenceMap -> ConcatFromSequence."""
    wn = "wi" if d.weight == "input" else w
    if d.body == "elementwise":
        ops = [helper.make_node("Mul", ["e", wn], ["m"]), helper.make_node("Tanh", ["m"], ["o"])]
    elif d.body == "matmul":
        ops = [helper.make_node("MatMul", ["e", wn], ["m"]), helper.make_node("Relu", ["m"], ["o"])]
    else:
        ops = [helper.make_node("MatMul", ["e", wn], ["m"]), helper.make_node("Softmax", ["m"], ["o"], axis=-1)]
    elem_dims = [dim for i, dim in enumerate(d.dims) if not (d.squeezed and i == d.axis)]
    elem_shape = [dim if not (i == d.axis and not d.squeezed) else None for i, dim in enumerate(elem_dims)]
    ins = [helper.make_tensor_value_info("e", d.elem, elem_shape)]
    if d.weight == "input":
        ins.append(helper.make_tensor_value_info("wi", d.elem, [] if d.body == "elementwise" else [width, width]))
    g = helper.make_graph(ops, f"block{b}", ins, [helper.make_tensor_value_info("o", d.elem, elem_shape)])
    split_in = [prev] + (["step"] if d.split == "scalar" else ["sizes"] if d.split in ("equal", "unequal") else [])
    split_attrs = {"axis": d.written_axis}
    if d.split.startswith("ones"):
        split_attrs["keepdims"] = 0 if d.squeezed else 1
    return [helper.make_node("SplitToSequence", split_in, [f"s{b}"], **split_attrs),
            helper.make_node("SequenceMap", [f"s{b}"] + ([w] if d.weight == "input" else []), [f"m{b}"], body=g),
            helper.make_node("ConcatFromSequence", [f"m{b}"], [f"c{b}"], axis=d.written_axis, new_axis=1 if d.squeezed else 0)]


def chain(seed: int, nodes: int) -> Member:
    rng = np.random.default_rng(seed)
    d = _draw_chain(rng)
    blocks = max(1, nodes // (4 if d.residual else 3))
    np_t = _NP[d.elem]
    elem_dims = [dim for i, dim in enumerate(d.dims) if not (d.squeezed and i == d.axis)]
    width = elem_dims[-1] if not (d.axis == d.acts_on and not d.squeezed) else d.sizes[0]
    inits: list[onnx.TensorProto] = []
    if d.split == "scalar":
        inits.append(numpy_helper.from_array(np.array(d.sizes[0], np.int64), "step"))
    elif d.split in ("equal", "unequal"):
        inits.append(numpy_helper.from_array(np.array(d.sizes, np.int64), "sizes"))
    graph_nodes, hand_nodes, hand_inits, prev = [], [], [], "x"
    for b in range(blocks):
        w = f"w{b}"
        if d.body == "elementwise":
            inits.append(numpy_helper.from_array(np.array(0.5 + rng.random(), np_t), w))
        else:
            inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) * 0.4 / np.sqrt(width)).astype(np_t), w))
        graph_nodes += _chain_nodes(d, b, prev, w, width)
        hand_nodes += _hand_block(d.body, prev, w, f"c{b}", b, d.dims, d.axis, d.acts_on, d.sizes, d.squeezed, hand_inits)
        if d.residual:
            graph_nodes.append(helper.make_node("Add", [prev, f"c{b}"], [f"y{b}"]))
            hand_nodes.append(helper.make_node("Add", [prev, f"c{b}"], [f"y{b}"]))
        prev = f"y{b}" if d.residual else f"c{b}"
    graph_nodes.append(helper.make_node("Identity", [prev], ["out"]))
    hand_nodes.append(helper.make_node("Identity", [prev], ["out"]))
    x = helper.make_tensor_value_info("x", d.elem, d.dims)
    out = helper.make_tensor_value_info("out", d.elem, d.dims)
    used = {i for n in hand_nodes for i in n.input}
    hand = _model(hand_nodes, [x], [out], [t for t in inits + hand_inits if t.name in used], "chain_by_hand")
    what = (f"x{d.dims} split {d.split} {d.sizes[:4]}{'...' if len(d.sizes) > 4 else ''} axis {d.written_axis}, {d.body} "
            f"({d.weight}), {'residual, ' if d.residual else ''}{TensorProto.DataType.Name(d.elem).lower()}, {blocks} blocks")
    feeds = {"x": np.random.default_rng(seed + 1).standard_normal(d.dims).astype(np_t)}
    return Member("chain", seed, what, _model(graph_nodes, [x], [out], inits, "chain"), feeds, hand,
                  2e-2 if d.elem == TensorProto.FLOAT16 else 1e-4, {"axis": d.axis, "split": d.split, "body": d.body})


def _hand_block(body: str, x: str, w: str, out: str, b: int, dims: list[int], axis: int, acts_on: int,
                sizes: list[int], squeezed: bool, inits: list) -> list[onnx.NodeProto]:
    """What a person writes for one block: the body on x where cutting x along ``axis``
    does not change what it computes (it acts along another axis, or elementwise), else on
    x reshaped to equal chunks, else on a Split's pieces."""
    rank = len(dims)

    def apply(v: str, o: str) -> list[onnx.NodeProto]:
        if body == "elementwise":
            return [helper.make_node("Mul", [v, w], [f"{o}_m"]), helper.make_node("Tanh", [f"{o}_m"], [o])]
        last = helper.make_node("Relu", [f"{o}_m"], [o]) if body == "matmul" else helper.make_node("Softmax", [f"{o}_m"], [o], axis=-1)
        return [helper.make_node("MatMul", [v, w], [f"{o}_m"]), last]

    if body == "elementwise" or not squeezed and axis != acts_on or squeezed and axis != rank - 1:
        return apply(x, out)
    if squeezed:
        # Each element is a column: the body along x's second-to-last axis.
        perm = [*range(rank - 2), rank - 1, rank - 2]
        return [helper.make_node("Transpose", [x], [f"h{b}_t"], perm=perm), *apply(f"h{b}_t", f"h{b}_y"),
                helper.make_node("Transpose", [f"h{b}_y"], [out], perm=perm)]
    if len(set(sizes)) == 1:
        n, c = len(sizes), sizes[0]
        inits += [numpy_helper.from_array(np.array([*dims[:-1], n, c], np.int64), f"h{b}_cut"),
                  numpy_helper.from_array(np.array(dims, np.int64), f"h{b}_whole")]
        return [helper.make_node("Reshape", [x, f"h{b}_cut"], [f"h{b}_r"]), *apply(f"h{b}_r", f"h{b}_y"),
                helper.make_node("Reshape", [f"h{b}_y", f"h{b}_whole"], [out])]
    raise AssertionError("unequal chunks along the body's axis have an elementwise body")


# -- edits ------------------------------------------------------------------------------------


def edits(seed: int, nodes: int) -> Member:
    rng = np.random.default_rng(seed)
    count, width = max(1, nodes), 8
    rows = _pick(rng, [64, min(count, 10_000)])
    positions = _pick(rng, ["shared", "own", "shared", "own", "run time"])
    elements = _pick(rng, ["constant", "computed"])
    where = _pick(rng, ["front", "back", "anywhere", "anywhere"])
    extras = rng.standard_normal((16, width)).astype(np.float32)
    inits = [numpy_helper.from_array(extras[k], f"extra{k}") for k in range(16)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])]
    feeds: dict[str, np.ndarray] = {"x": np.random.default_rng(seed + 1).standard_normal((rows, width)).astype(np.float32)}
    nodes_out = [helper.make_node("SplitToSequence", ["x"], ["s0"], axis=0, keepdims=0)] + (
        [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0], keepdims=0)] if elements == "computed" else [])
    shared: dict[int, str] = {}
    state = list(range(rows))  # where each element comes from: < rows a row of x, else an extra
    has_runtime = positions == "run time"
    if has_runtime:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, []))
        feeds["k"] = np.array(0 if where == "front" else -1, np.int64)

    def position(i: int, p: int) -> str:
        if has_runtime:
            return "k"
        if positions == "shared":
            if p not in shared:
                shared[p] = f"p{len(shared)}"
                inits.append(numpy_helper.from_array(np.array(p, np.int64), shared[p]))
            return shared[p]
        inits.append(numpy_helper.from_array(np.array(p, np.int64), f"p{i}"))
        return f"p{i}"

    def draw_position(length: int, inserting: bool) -> int:
        if has_runtime:
            return int(feeds["k"])
        if where == "front":
            return 0
        if where == "back":
            return -1 if not inserting else length
        return int(rng.integers(-length, length + (1 if inserting else 0)))

    for i in range(count):
        s, t = f"s{i}", f"s{i + 1}"
        erase = len(state) > max(1, rows // 2) and (rng.random() < 0.5 or len(state) > rows + 16)
        if erase:
            p = draw_position(len(state), False)
            nodes_out.append(helper.make_node("SequenceErase", [s, position(i, p)], [t]))
            del state[p]
        else:
            p = draw_position(len(state), True)
            k = int(rng.integers(16))
            value = "mean" if elements == "computed" else f"extra{k}"
            nodes_out.append(helper.make_node("SequenceInsert", [s, value, position(i, p)], [t]))
            state.insert(p, rows + (16 if elements == "computed" else k))  # (-1: before the last, as in Python)
    nodes_out.append(helper.make_node("ConcatFromSequence", [f"s{count}"], ["out"], axis=0, new_axis=1))
    used = {i for n in nodes_out for i in n.input}
    model = _model(nodes_out, inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, width])],
                   [t for t in inits if t.name in used], "edits", opset=17)
    hand = None if has_runtime else _edits_by_hand(inputs[0], extras, state, width, elements == "computed")
    what = f"{count} edits on {rows} rows, positions {positions}, {elements} elements, {where}"
    return Member("edits", seed, what, model, feeds, hand)


def _edits_by_hand(x: onnx.ValueInfoProto, extras: np.ndarray, state: list[int], width: int,
                   computed: bool) -> onnx.ModelProto:
    """Concat(x, extras[, mean]) -> one Gather of the rows the edits leave, in order."""
    pool = [numpy_helper.from_array(extras, "extras"), numpy_helper.from_array(np.array(state, np.int64), "index")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0], keepdims=1)] if computed else []
    nodes += [helper.make_node("Concat", ["x", "extras"] + (["mean"] if computed else []), ["all"], axis=0),
              helper.make_node("Gather", ["all", "index"], ["out"], axis=0)]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [len(state), width])
    return _model(nodes, [x], [out], pool, "edits_by_hand", opset=17)


# -- sparse -----------------------------------------------------------------------------------


def sparse(seed: int, nodes: int) -> Member:
    rng = np.random.default_rng(seed)
    dim = _pick(rng, [32, 46, 64])
    blocks = max(1, (nodes - 2) // 4)
    at = int(rng.integers(blocks))
    axis = _pick(rng, [0, 1, -1])
    cut = int(rng.integers(1, dim))
    equal = bool(rng.random() < 0.5)
    body, hand, inits, prev = [], [], [], "x"
    for b in range(blocks):
        w1, w2 = f"w1_{b}", f"w2_{b}"
        inits += [numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w1),
                  numpy_helper.from_array((rng.standard_normal((dim, dim)) / dim).astype(np.float32), w2)]
        block = [helper.make_node("MatMul", [prev, w1], [f"h{b}"]), helper.make_node("Relu", [f"h{b}"], [f"r{b}"]),
                 helper.make_node("MatMul", [f"r{b}", w2], [f"g{b}"]), helper.make_node("Add", [prev, f"g{b}"], [f"y{b}"])]
        body += block
        hand += block
        prev = f"y{b}"
        if b == at:
            along = 32 if axis == 0 else dim
            halves = np.array(along // 2 if equal else [cut % (along - 1) + 1, along - cut % (along - 1) - 1], np.int64)
            inits.append(numpy_helper.from_array(halves, "halves"))
            body += [helper.make_node("SplitToSequence", [prev, "halves"], ["parts"], axis=axis),
                     helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=axis)]
            hand.append(helper.make_node("Identity", [prev], ["joined"]))
            prev = "joined"
    body.append(helper.make_node("Identity", [prev], ["out"]))
    hand.append(helper.make_node("Identity", [prev], ["out"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, dim])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [32, dim])
    what = f"{blocks} MLP blocks of {dim}, the pair after block {at}, axis {axis}, {'equal' if equal else 'unequal'} halves"
    feeds = {"x": np.random.default_rng(seed + 1).standard_normal((32, dim)).astype(np.float32)}
    return Member("sparse", seed, what, _model(body, [x], [out], inits, "sparse"), feeds,
                  _model(hand, [x], [out], [t for t in inits if t.name != "halves"], "sparse_by_hand"))


# -- dynamic ----------------------------------------------------------------------------------


def dynamic(seed: int, nodes: int) -> Member:
    rng = np.random.default_rng(seed)
    op = _pick(rng, ["Mul", "Add", "Sub"])
    act = _pick(rng, ["Relu", "Tanh", "Neg"])
    blocks = max(1, nodes // 11)  # (11 nodes a block)
    body = helper.make_graph(
        [helper.make_node(op, ["e", "w"], ["m"]), helper.make_node(act, ["m"], ["o"])],
        "map", [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["M"]), helper.make_tensor_value_info("w", TensorProto.FLOAT, ["M"])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, ["M"])])
    nodes_out = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "zero"], ["trips"], axis=0)]
    outputs, prev = [], "x"
    for b in range(blocks):
        loop = helper.make_graph(
            [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Gather", [prev, "i"], ["row"], axis=0),
             helper.make_node("SequenceInsert", ["acc", "row"], ["acc_out"])],
            f"collect{b}", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                            helper.make_tensor_sequence_value_info("acc", TensorProto.FLOAT, ["M"])],
            [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_sequence_value_info("acc_out", TensorProto.FLOAT, ["M"])])
        nodes_out += [
            helper.make_node("SplitToSequence", [prev], [f"rows{b}"], axis=0, keepdims=0),
            helper.make_node("SequenceAt", [f"rows{b}", "p"], [f"picked{b}"]),
            helper.make_node("SequenceMap", [f"rows{b}", "w"], [f"mapped{b}"], body=body),
            helper.make_node("SequenceInsert", [f"mapped{b}", f"picked{b}", "p"], [f"more{b}"]),
            helper.make_node("SequenceErase", [f"more{b}", "zero"], [f"fewer{b}"]),
            helper.make_node("ConcatFromSequence", [f"fewer{b}"], [f"y{b}"], axis=0, new_axis=1),
            helper.make_node("SequenceEmpty", [], [f"empty{b}"], dtype=TensorProto.FLOAT),
            helper.make_node("Loop", ["trips", "", f"empty{b}"], [f"collected{b}"], body=loop),
            helper.make_node("ConcatFromSequence", [f"collected{b}"], [f"z{b}"], axis=0, new_axis=1),
        ]
        outputs.append(helper.make_tensor_value_info(f"z{b}", TensorProto.FLOAT, [None, "M"]))
        prev = f"y{b}"
    outputs.append(helper.make_tensor_value_info(prev, TensorProto.FLOAT, [None, "M"]))
    n, m = int(rng.integers(4, 64)), int(rng.integers(4, 32))
    g = _model(nodes_out, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "M"]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, ["M"]),
                           helper.make_tensor_value_info("p", TensorProto.INT64, [])],
               outputs, [numpy_helper.from_array(np.array(0, np.int64), "zero")], "dynamic")
    r = np.random.default_rng(seed + 1)
    feeds = {"x": r.standard_normal((n, m)).astype(np.float32), "w": r.standard_normal(m).astype(np.float32),
             "p": np.array(int(r.integers(-n, n)), np.int64)}
    return Member("dynamic", seed, f"{blocks} blocks ({op}, {act}) over x[N, M], fed [{n}, {m}]", g, feeds)


# -- programs ---------------------------------------------------------------------------------


def programs(seed: int, nodes: int) -> Member:
    """Random programs side by side (one opset) until the model has ``nodes`` nodes."""
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.program_generator import OPSETS, generate

    rng = random.Random(seed)
    opset = rng.choice([o for o in OPSETS if o >= 13])

    def draw(kind, *args):
        if kind == "int":
            return rng.randint(*args)
        options = args[0]
        return opset if options == list(OPSETS) else rng.choice(options)

    parts, feeds, total, k = [], {}, 0, 0
    while total < nodes:
        m, f = generate(draw, shapes="v3", unknown_rank=False)
        _prefix(m.graph, f"p{k}_")
        parts.append(m)
        feeds.update({f"p{k}_{name}": v for name, v in f.items()})
        total += len(m.graph.node)
        k += 1
    g = helper.make_graph([n for m in parts for n in m.graph.node], "programs",
                          [i for m in parts for i in m.graph.input], [o for m in parts for o in m.graph.output],
                          initializer=[t for m in parts for t in m.graph.initializer])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=parts[0].ir_version)
    return Member("programs", seed, f"{k} programs at opset {opset}", model, feeds)


def _prefix(g: onnx.GraphProto, prefix: str) -> None:
    """Every value name in ``g`` and its subgraphs prefixed (onnx.compose.add_prefix
    leaves a body's reads of outer values as they were)."""
    for vi in [*g.input, *g.output, *g.value_info]:
        vi.name = prefix + vi.name
    for t in g.initializer:
        t.name = prefix + t.name
    for n in g.node:
        n.input[:] = [prefix + i if i else i for i in n.input]
        n.output[:] = [prefix + o if o else o for o in n.output]
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                _prefix(sub, prefix)


FAMILIES: dict[str, Callable[[int, int], Member]] = {
    "chain": chain, "edits": edits, "sparse": sparse, "dynamic": dynamic, "programs": programs,
}
