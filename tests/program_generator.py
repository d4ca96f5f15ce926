"""Random sequence programs for property tests (tests/test_generated_programs.py) and
the long run in tools/fuzz_programs.py.

A program is a chain of sequence ops over an input x [N, M] of one element type (float32,
float16, int64, bool or string; dims symbolic in the model, concrete in the feeds) with run-time positions and split sizes as model inputs,
segments wrapped in Loops (appends, erases) and Ifs (branches of different lengths), and
outputs read back through SequenceAt / SequenceLength / ConcatFromSequence or returned
as a sequence (the ABI). The generator executes the program on concrete sizes as it
draws, so every position it feeds is valid and the original model runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

INT64, BOOL = TensorProto.INT64, TensorProto.BOOL
ELEMENT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING)
OPSETS = tuple(range(11, 27))
# The IR version each opset came with (what exporters write for it).
IR_FOR_OPSET = {o: helper.find_min_ir_version_for([helper.make_opsetid("", o)]) for o in OPSETS}
# Loop and If carry sequences from opset 13 (below, only tensors cross a subgraph).
CARRY_SINCE = 13


@dataclass
class _State:
    """What the generator knows while drawing: the concrete element shapes of the
    current sequence value and the model being assembled."""

    family: str  # "rows": elements [r, M], concat axis 0; "cols": [N, c], concat axis 1
    elem: int  # the element type of x and of every sequence
    n_rows: int
    m_cols: int
    shapes: list[tuple[int, int]]
    seq: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    feeds: dict[str, Any] = field(default_factory=dict)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    counter: int = 0
    # A branch declares what onnx's inference contradicts (as TorchScript's unbind does):
    # the model passes the checker, not its full check.
    contradicted: bool = False
    opset: int = 0

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def runtime_int(self, value: int) -> str:
        name = self.fresh("p")
        self.inputs.append(helper.make_tensor_value_info(name, INT64, []))
        self.feeds[name] = np.array(value, dtype=np.int64)
        return name

    def x_shape(self) -> tuple[int, int]:
        return (self.n_rows, self.m_cols)


def _x(state: _State) -> np.ndarray:
    values = np.arange(state.n_rows * state.m_cols).reshape(state.n_rows, state.m_cols) + 1
    if state.elem == TensorProto.STRING:
        return np.array([f"s{v}" for v in values.reshape(-1)], dtype=object).reshape(values.shape)
    if state.elem == TensorProto.BOOL:
        return values % 3 == 0
    return values.astype(helper.tensor_dtype_to_np_dtype(state.elem))


def generate(draw: Any, shapes: str = "v1", unknown_rank: bool = True) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A random program and its feeds; ``draw(kind, *args)`` supplies the choices:
    draw("int", lo, hi) or draw("choice", options). ``shapes="v2"`` adds the program
    shapes of Stage 7 (see ``_V2_STEPS``), and with ``unknown_rank`` a model input of
    unknown rank in one program of four."""
    opset = draw("choice", list(OPSETS))
    n_rows, m_cols = draw("int", 0, 4), draw("int", 1, 3)
    family = draw("choice", ["rows", "cols"])
    elem = draw("choice", list(ELEMENT_TYPES))
    st = _State(family, elem, n_rows, m_cols, [], "", opset=opset)
    st.inputs.append(helper.make_tensor_value_info("x", elem, ["N", "M"]))
    if shapes == "v4" and draw("choice", [False, False, True]):
        # x of static dims (as exporters write for a fixed batch): the lists cut from it
        # have static lengths and go Unrolled in every context
        st.inputs[-1] = helper.make_tensor_value_info("x", elem, [n_rows, m_cols])
    if shapes in ("v2", "v3", "v4") and unknown_rank and draw("choice", [False, False, False, True]):
        st.inputs[-1].type.tensor_type.ClearField("shape")  # a model input of unknown rank
    st.feeds["x"] = _x(st)
    if shapes in ("v2", "v3", "v4") and draw("choice", [False, True]):
        _start_differing(st, draw)
    else:
        _start(st, draw)
    steps = ["insert", "erase", "at", "length", "loop", "if"] + (list(_V2_STEPS) if shapes in ("v2", "v3", "v4") else [])
    steps += list(_V3_STEPS) if shapes in ("v3", "v4") else []
    steps += list(_V4_STEPS) if shapes == "v4" else []
    for _ in range(draw("int", 1, 5)):
        step = draw("choice", steps)
        globals()[f"_{step}"](st, draw, opset)
    if shapes in ("v2", "v3", "v4") and opset >= 17 and draw("choice", [False, False, True]):
        _broadcast_rank_up(st)
    _finish(st, draw)
    nodes, functions, imports = st.nodes, [], [helper.make_opsetid("", opset)]
    # (a function's branches are held to what they declare: no contradicted program)
    if shapes == "v4" and draw("choice", [False, False, False, True]) and not st.contradicted:
        nodes, functions = _in_function(st, opset)
        imports.append(helper.make_opsetid("local", 1))
    g = helper.make_graph(nodes, "generated", st.inputs, st.outputs, initializer=st.inits)
    m = helper.make_model(g, opset_imports=imports, ir_version=IR_FOR_OPSET[opset], functions=functions)
    ranked = m.graph.input[0].type.tensor_type.HasField("shape")
    if ranked:
        onnx.checker.check_model(m, full_check=not st.contradicted)
    else:  # the checker wants a shape on graph inputs; onnxruntime (and seqlower) do not
        onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=not st.contradicted)
    return m, st.feeds


def _start(st: _State, draw: Any) -> None:
    out = st.fresh("s")
    n, m = st.x_shape()
    how = draw("choice", ["split1", "split_sizes", "construct", "empty"] + (["split_k"] if st.family == "cols" else []))
    axis = 0 if st.family == "rows" else 1
    dim = n if axis == 0 else m
    if how == "split1":
        st.nodes.append(helper.make_node("SplitToSequence", ["x"], [out], axis=axis))
        st.shapes = [(1, m) if axis == 0 else (n, 1)] * dim
    elif how == "split_k":
        k = draw("int", 1, 3)
        name = st.runtime_int(k)
        st.nodes.append(helper.make_node("SplitToSequence", ["x", name], [out], axis=axis))
        sizes = [k] * (dim // k) + ([dim % k] if dim % k else [])
        st.shapes = [(n, c) for c in sizes]
    elif how == "split_sizes":
        parts = draw("int", 1, 3)
        cuts = sorted(draw("int", 0, dim) for _ in range(parts - 1))
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, dim])]
        name = st.fresh("sizes")
        st.inputs.append(helper.make_tensor_value_info(name, INT64, ["K"]))
        st.feeds[name] = np.array(sizes, dtype=np.int64)
        st.nodes.append(helper.make_node("SplitToSequence", ["x", name], [out], axis=axis))
        st.shapes = [(s, m) if axis == 0 else (n, s) for s in sizes]
    elif how == "construct":
        st.nodes.append(helper.make_node("SequenceConstruct", ["x", "x"], [out]))
        st.shapes = [(n, m), (n, m)]
    else:
        st.nodes.append(helper.make_node("SequenceEmpty", [], [out], dtype=st.elem))
        st.shapes = []
    st.seq = out


def _insert(st: _State, draw: Any, opset: int) -> None:
    out = st.fresh("s")
    k = len(st.shapes)
    if draw("choice", [True, False]):
        p = draw("int", -k, k)
        st.nodes.append(helper.make_node("SequenceInsert", [st.seq, "x", st.runtime_int(p)], [out]))
        st.shapes.insert(p + k if p < 0 else p, st.x_shape())
    else:
        st.nodes.append(helper.make_node("SequenceInsert", [st.seq, "x"], [out]))
        st.shapes.append(st.x_shape())
    st.seq = out


def _erase(st: _State, draw: Any, opset: int) -> None:
    k = len(st.shapes)
    if not k:
        return _insert(st, draw, opset)
    out = st.fresh("s")
    if draw("choice", [True, False]):
        p = draw("int", -k, k - 1)
        st.nodes.append(helper.make_node("SequenceErase", [st.seq, st.runtime_int(p)], [out]))
        del st.shapes[p]
    else:
        st.nodes.append(helper.make_node("SequenceErase", [st.seq], [out]))
        st.shapes.pop()
    st.seq = out


def _at(st: _State, draw: Any, opset: int) -> None:
    k = len(st.shapes)
    if not k:
        return _insert(st, draw, opset)
    p = draw("int", -k, k - 1)
    out = st.fresh("at")
    st.nodes.append(helper.make_node("SequenceAt", [st.seq, st.runtime_int(p)], [out]))
    st.outputs.append(helper.make_tensor_value_info(out, st.elem, [None, None]))


def _length(st: _State, draw: Any, opset: int) -> None:
    out = st.fresh("len")
    st.nodes.append(helper.make_node("SequenceLength", [st.seq], [out]))
    st.outputs.append(helper.make_tensor_value_info(out, INT64, []))


def _loop(st: _State, draw: Any, opset: int) -> None:
    """A loop over a run-time trip count: append x (every step or on even steps), or
    erase the first element; a scan output reads the carried length. "append_once"
    does not read it (the step index is scanned instead): TorchScript's append-per-step
    pattern, which becomes a scan output."""
    if opset < CARRY_SINCE:
        return _insert(st, draw, opset)
    k = len(st.shapes)
    kinds = ["append", "append_once", "append_even"]
    kind = draw("choice", kinds + ["erase"] if k else kinds)
    trips = draw("int", 0, k if kind == "erase" else 3)
    i, c, s_in = st.fresh("i"), st.fresh("c"), st.fresh("carried")
    s_out, n_out, c_out = st.fresh("carried_out"), st.fresh("n"), st.fresh("c_out")
    nodes = [helper.make_node("Identity", [c], [c_out])]
    if kind in ("append", "append_once"):
        nodes.append(helper.make_node("SequenceInsert", [s_in, "x"], [s_out]))
    elif kind == "erase":
        zero = st.fresh("zero")
        st.inits.append(onnx.numpy_helper.from_array(np.array(0, np.int64), zero))
        nodes.append(helper.make_node("SequenceErase", [s_in, zero], [s_out]))
    else:
        two, zero_i, rem, even = st.fresh("two"), st.fresh("zero"), st.fresh("rem"), st.fresh("even")
        st.inits += [onnx.numpy_helper.from_array(np.array(2, np.int64), two), onnx.numpy_helper.from_array(np.array(0, np.int64), zero_i)]
        then_out, else_out, pos = st.fresh("then"), st.fresh("else"), st.fresh("pos")
        st.inits.append(onnx.numpy_helper.from_array(np.array(0, np.int64), pos))
        nodes += [
            helper.make_node("Mod", [i, two], [rem]),
            helper.make_node("Equal", [rem, zero_i], [even]),
            helper.make_node(
                "If", [even], [s_out],
                then_branch=helper.make_graph([helper.make_node("SequenceInsert", [s_in, "x"], [then_out])], "then", [],
                                              [helper.make_tensor_sequence_value_info(then_out, st.elem, None)]),
                # The else branch must still produce a sequence: insert then erase (a no-op).
                else_branch=helper.make_graph(
                    [helper.make_node("SequenceInsert", [s_in, "x", pos], [else_out + "_tmp"]),
                     helper.make_node("SequenceErase", [else_out + "_tmp", pos], [else_out])],
                    "else", [], [helper.make_tensor_sequence_value_info(else_out, st.elem, None)]),
            ),
        ]
    count = (helper.make_node("Identity", [i], [n_out]) if kind == "append_once"
             else helper.make_node("SequenceLength", [s_out], [n_out]))
    _loop_with_body(st, nodes[1:], s_in, s_out, i, c, c_out, trips, count)
    for step in range(trips):
        if kind in ("append", "append_once") or (kind == "append_even" and step % 2 == 0):
            st.shapes.append(st.x_shape())
        elif kind == "erase":
            del st.shapes[0]


def _if(st: _State, draw: Any, opset: int) -> None:
    """Branches of different lengths: insert at a run-time position vs. erase/keep."""
    if opset < CARRY_SINCE:
        return _insert(st, draw, opset)
    k = len(st.shapes)
    cond = draw("choice", [True, False])
    c = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
    st.feeds[c] = np.array(cond)
    p = draw("int", -k, k)
    pos = st.runtime_int(p)
    then_out, else_out = st.fresh("then"), st.fresh("else")
    then_g = helper.make_graph([helper.make_node("SequenceInsert", [st.seq, "x", pos], [then_out])], "then", [],
                               [helper.make_tensor_sequence_value_info(then_out, st.elem, None)])
    if k:
        else_g = helper.make_graph([helper.make_node("SequenceErase", [st.seq], [else_out])], "else", [],
                                   [helper.make_tensor_sequence_value_info(else_out, st.elem, None)])
    else:
        else_g = helper.make_graph([helper.make_node("SequenceInsert", [st.seq, "x"], [else_out])], "else", [],
                                   [helper.make_tensor_sequence_value_info(else_out, st.elem, None)])
    out = st.fresh("s")
    st.nodes.append(helper.make_node("If", [c], [out], then_branch=then_g, else_branch=else_g))
    if cond:
        st.shapes.insert(p + k if p < 0 else p, st.x_shape())
    elif k:
        st.shapes.pop()
    else:
        st.shapes.append(st.x_shape())
    st.seq = out


def _finish(st: _State, draw: Any) -> None:
    _length(st, draw, 0)
    if st.shapes:
        out = st.fresh("cat")
        rank = len(st.shapes[0])
        axis = (0 if st.family == "rows" else 1) + rank - 2
        stack = all(s == st.shapes[0] for s in st.shapes) and draw("choice", [True, False])
        if stack:
            st.nodes.append(helper.make_node("ConcatFromSequence", [st.seq], [out], axis=draw("int", -rank - 1, rank),
                                             new_axis=1))
        else:
            st.nodes.append(helper.make_node("ConcatFromSequence", [st.seq], [out], axis=axis))
        st.outputs.append(helper.make_tensor_value_info(out, st.elem, [None] * (rank + 1 if stack else rank)))
    if draw("choice", [True, False]):
        st.outputs.append(helper.make_tensor_sequence_value_info(st.seq, st.elem, None))


# -- Stage 7 shapes (generate(..., shapes="v2")) ----------------------------------------
# What the first generator never drew and real programs do: lists whose first elements
# differ in a dim, inserts at the front or the middle inside loops, SequenceMap inside If
# branches, Loop > If > SequenceMap nested three deep, a model input of unknown rank.
_V2_STEPS = ("loop_insert_front", "loop_insert_middle", "map_in_if", "nested_three_deep")
# And, last, a SequenceMap whose body broadcasts every element up a rank (_broadcast_rank_up).


def _const(st: _State, value: Any, base: str) -> str:
    name = st.fresh(base)
    st.inits.append(onnx.numpy_helper.from_array(np.array(value, dtype=np.int64), name))
    return name


def _start_differing(st: _State, draw: Any) -> None:
    """SequenceConstruct(x, x[:1]) along the family's axis: elements differing in a dim."""
    axis = 0 if st.family == "rows" else 1
    n, m = st.x_shape()
    part = st.fresh("part")
    st.nodes.append(helper.make_node("Slice", ["x", _const(st, [0], "st"), _const(st, [1], "en"),
                                              _const(st, [axis], "ax")], [part]))
    part_shape = (min(1, n), m) if axis == 0 else (n, min(1, m))
    out = st.fresh("s")
    first = draw("choice", [True, False])
    st.nodes.append(helper.make_node("SequenceConstruct", [part, "x"] if first else ["x", part], [out]))
    st.shapes = [part_shape, st.x_shape()] if first else [st.x_shape(), part_shape]
    st.seq = out


def _loop_with_body(st: _State, body_nodes: list, s_in: str, s_out: str, i: str, c: str, c_out: str,
                    trips: int, count: onnx.NodeProto | None = None) -> None:
    """A Loop over ``trips`` carrying the current list through ``body_nodes`` (``s_in``
    to ``s_out``), with a scan output: ``count`` (default: the carried length)."""
    if count is None:
        count = helper.make_node("SequenceLength", [s_out], [st.fresh("n")])
    n_out = count.output[0]
    body_nodes = [helper.make_node("Identity", [c], [c_out]), *body_nodes, count]
    body = helper.make_graph(
        body_nodes, st.fresh("body"),
        [helper.make_tensor_value_info(i, INT64, []), helper.make_tensor_value_info(c, BOOL, []),
         helper.make_tensor_sequence_value_info(s_in, st.elem, None)],
        [helper.make_tensor_value_info(c_out, BOOL, []), helper.make_tensor_sequence_value_info(s_out, st.elem, None),
         helper.make_tensor_value_info(n_out, INT64, [])],
    )
    out, lens = st.fresh("s"), st.fresh("lens")
    st.nodes.append(helper.make_node("Loop", [st.runtime_int(trips), "", st.seq], [out, lens], body=body))
    st.outputs.append(helper.make_tensor_value_info(lens, INT64, [None]))
    st.seq = out


def _loop_insert_front(st: _State, draw: Any, opset: int) -> None:
    if opset < CARRY_SINCE:
        return _insert(st, draw, opset)
    trips = draw("int", 0, 3)
    i, c, c_out, s_in, s_out = (st.fresh(b) for b in ("i", "c", "c_out", "carried", "carried_out"))
    zero = _const(st, 0, "front")
    _loop_with_body(st, [helper.make_node("SequenceInsert", [s_in, "x", zero], [s_out])], s_in, s_out, i, c, c_out,
                    trips)
    for _ in range(trips):
        st.shapes.insert(0, st.x_shape())


def _loop_insert_middle(st: _State, draw: Any, opset: int) -> None:
    """Insert x at len // 2 every step (the position computed in the body)."""
    if opset < CARRY_SINCE:
        return _insert(st, draw, opset)
    trips = draw("int", 0, 3)
    i, c, c_out, s_in, s_out = (st.fresh(b) for b in ("i", "c", "c_out", "carried", "carried_out"))
    length, half, two = st.fresh("len"), st.fresh("half"), _const(st, 2, "two")
    nodes = [helper.make_node("SequenceLength", [s_in], [length]), helper.make_node("Div", [length, two], [half]),
             helper.make_node("SequenceInsert", [s_in, "x", half], [s_out])]
    _loop_with_body(st, nodes, s_in, s_out, i, c, c_out, trips)
    for _ in range(trips):
        st.shapes.insert(len(st.shapes) // 2, st.x_shape())


def _map_body(st: _State, double: bool) -> onnx.GraphProto:
    """An element kept (Identity) or doubled along the family's axis (Concat of itself):
    ops every element type has."""
    e, o = st.fresh("e"), st.fresh("o")
    axis = 0 if st.family == "rows" else 1
    node = (helper.make_node("Concat", [e, e], [o], axis=axis) if double else helper.make_node("Identity", [e], [o]))
    return helper.make_graph([node], st.fresh("map"), [helper.make_tensor_value_info(e, st.elem, None)],
                             [helper.make_tensor_value_info(o, st.elem, None)])


def _doubled(st: _State, shape: tuple[int, int]) -> tuple[int, int]:
    return (2 * shape[0], shape[1]) if st.family == "rows" else (shape[0], 2 * shape[1])


def _map_in_if(st: _State, draw: Any, opset: int) -> None:
    """If cond: SequenceMap doubling each element; else: SequenceMap keeping it."""
    if opset < 17:  # SequenceMap exists from 17
        return _insert(st, draw, opset)
    cond = draw("choice", [True, False])
    c = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
    st.feeds[c] = np.array(cond)
    branches = []
    for double in (True, False):
        out = st.fresh("mapped")
        branches.append(helper.make_graph([helper.make_node("SequenceMap", [st.seq], [out], body=_map_body(st, double))],
                                          st.fresh("branch"), [],
                                          [helper.make_tensor_sequence_value_info(out, st.elem, None)]))
    out = st.fresh("s")
    st.nodes.append(helper.make_node("If", [c], [out], then_branch=branches[0], else_branch=branches[1]))
    if cond:
        st.shapes = [_doubled(st, s) for s in st.shapes]
    st.seq = out


def _nested_three_deep(st: _State, draw: Any, opset: int) -> None:
    """Loop > If > SequenceMap: each step, if cond, map every element to itself, else
    append x."""
    if opset < 17:
        return _loop(st, draw, opset)  # (which falls back to an insert below 13)
    trips = draw("int", 0, 3)
    cond = draw("choice", [True, False])
    cname = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(cname, BOOL, []))
    st.feeds[cname] = np.array(cond)
    i, c, c_out, s_in, s_out = (st.fresh(b) for b in ("i", "c", "c_out", "carried", "carried_out"))
    mapped, appended = st.fresh("mapped"), st.fresh("appended")
    then_g = helper.make_graph([helper.make_node("SequenceMap", [s_in], [mapped], body=_map_body(st, False))],
                               st.fresh("then"), [], [helper.make_tensor_sequence_value_info(mapped, st.elem, None)])
    else_g = helper.make_graph([helper.make_node("SequenceInsert", [s_in, "x"], [appended])], st.fresh("else"), [],
                               [helper.make_tensor_sequence_value_info(appended, st.elem, None)])
    nodes = [helper.make_node("If", [cname], [s_out], then_branch=then_g, else_branch=else_g)]
    _loop_with_body(st, nodes, s_in, s_out, i, c, c_out, trips)
    if not cond:
        st.shapes += [st.x_shape()] * trips


def _broadcast_rank_up(st: _State) -> None:
    """SequenceMap whose body broadcasts each element against a [1, 1, 1] constant
    (Where; Or for bools): every element gains a leading axis, rank 3."""
    e, o, keep = st.fresh("e"), st.fresh("o"), st.fresh("keep")
    # onnxruntime has no bool Where: bools broadcast through Or with false instead.
    is_bool = st.elem == BOOL
    node = (helper.make_node("Or", [e, keep], [o]) if is_bool else helper.make_node("Where", [keep, e, e], [o]))
    body = helper.make_graph(
        [node], st.fresh("rank_up"),
        [helper.make_tensor_value_info(e, st.elem, None)], [helper.make_tensor_value_info(o, st.elem, None)],
        initializer=[onnx.numpy_helper.from_array(np.full((1, 1, 1), not is_bool, dtype=bool), keep)],
    )
    out = st.fresh("s")
    st.nodes.append(helper.make_node("SequenceMap", [st.seq], [out], body=body))
    st.shapes = [(1, *s) for s in st.shapes]
    st.seq = out


# -- Stage 10 shapes (generate(..., shapes="v3")) ---------------------------------------
# Side lists beside the main one, each read back at once: If branches whose lists differ
# in rank (declared as the exporter pleases), ConcatFromSequence at an axis valid only for
# the rank the run takes, a list built and consumed inside a Loop body, a Flat pool of
# elements of unequal ranks.
_V3_STEPS = ("if_ranks", "loop_local_list", "unequal_ranks")


def _declared(st: _State, name: str, rank: int | None, draw: Any) -> onnx.ValueInfoProto:
    """A branch's sequence output as an exporter might declare it: no shape, the rank it
    has, or the rank of the other branch (TorchScript's unbind declares the spec's)."""
    how = draw("choice", ["none", "right", "other"])
    if how == "none" or rank is None:
        return helper.make_tensor_sequence_value_info(name, st.elem, None)
    r = rank if how == "right" else (3 - rank)
    st.contradicted |= r != rank
    return helper.make_tensor_sequence_value_info(name, st.elem, [None] * r)


def _if_ranks(st: _State, draw: Any, opset: int) -> None:
    """If cond: x unbound along the family's axis (elements of rank 1); else: [x, x]
    (rank 2). Read back by ConcatFromSequence at an axis valid for the branch taken (1
    when it gives rank 2, which the rank-1 branch could not take) and by SequenceLength."""
    if opset < CARRY_SINCE:
        return _insert(st, draw, opset)
    cond = draw("choice", [True, False])
    c = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
    st.feeds[c] = np.array(cond)
    axis = 0 if st.family == "rows" else 1
    then_out, else_out = st.fresh("unbound"), st.fresh("pair")
    then_g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], [then_out], axis=axis, keepdims=0)],
                               st.fresh("then"), [], [_declared(st, then_out, 1, draw)])
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], [else_out])], st.fresh("else"), [],
                               [_declared(st, else_out, 2, draw)])
    out, cat, n = st.fresh("ranked"), st.fresh("cat"), st.fresh("len")
    st.nodes.append(helper.make_node("If", [c], [out], then_branch=then_g, else_branch=else_g))
    n_rows, m_cols = st.x_shape()
    count = (n_rows if axis == 0 else m_cols) if cond else 2
    st.nodes.append(helper.make_node("SequenceLength", [out], [n]))
    st.outputs.append(helper.make_tensor_value_info(n, INT64, []))
    if count:  # (a ConcatFromSequence of nothing is an error)
        cat_axis = 0 if cond else draw("choice", [0, 1, -1])
        st.nodes.append(helper.make_node("ConcatFromSequence", [out], [cat], axis=cat_axis))
        st.outputs.append(helper.make_tensor_value_info(cat, st.elem, [None] if cond else [None, None]))


def _loop_local_list(st: _State, draw: Any, opset: int) -> None:
    """A Loop whose body builds a list of its own (x split along the family's axis, x
    appended i times... at most twice) and consumes it: its length and one concatenation
    are the step's scan outputs. No list crosses the body's boundary."""
    if opset < 11:
        return _insert(st, draw, opset)
    # At least one step: after none, the spec leaves a scan output's trailing dims open
    # (the reference gives 0s where the body declares none, a lowered model the real dims).
    trips = draw("int", 1, 3)
    axis = 0 if st.family == "rows" else 1
    i, c, c_out = st.fresh("i"), st.fresh("c"), st.fresh("c_out")
    parts, grown, length, cat = st.fresh("parts"), st.fresh("grown"), st.fresh("n"), st.fresh("joined")
    nodes = [helper.make_node("Identity", [c], [c_out]),
             helper.make_node("SplitToSequence", ["x"], [parts], axis=axis),
             helper.make_node("SequenceInsert", [parts, "x"], [grown]),
             helper.make_node("SequenceLength", [grown], [length]),
             helper.make_node("ConcatFromSequence", [grown], [cat], axis=axis)]
    body = helper.make_graph(
        nodes, st.fresh("local"),
        [helper.make_tensor_value_info(i, INT64, []), helper.make_tensor_value_info(c, BOOL, [])],
        [helper.make_tensor_value_info(c_out, BOOL, []), helper.make_tensor_value_info(length, INT64, []),
         helper.make_tensor_value_info(cat, st.elem, [None, None])],
    )
    lens, cats = st.fresh("lens"), st.fresh("cats")
    st.nodes.append(helper.make_node("Loop", [st.runtime_int(trips), ""], [lens, cats], body=body))
    st.outputs += [helper.make_tensor_value_info(lens, INT64, [None]), helper.make_tensor_value_info(cats, st.elem, [None] * 3)]


def _unequal_ranks(st: _State, draw: Any, opset: int) -> None:
    """A list of x, a row of x (rank 1) and, from opset 13, an element chosen by an If
    between the two: a Flat pool of unequal widths, read by SequenceAt at a run-time
    position and returned (the ABI)."""
    row = st.fresh("row")
    n_rows, m_cols = st.x_shape()
    if n_rows == 0:
        return _insert(st, draw, opset)
    st.nodes.append(helper.make_node("Gather", ["x", _const(st, 0, "first")], [row], axis=0))
    out, at = st.fresh("pool"), st.fresh("at")
    ranks = [2, 1] if draw("choice", [True, False]) else [1, 2]
    st.nodes.append(helper.make_node("SequenceConstruct", ["x" if r == 2 else row for r in ranks], [out]))
    p = draw("int", -2, 1)
    st.nodes.append(helper.make_node("SequenceAt", [out, st.runtime_int(p)], [at]))
    st.outputs.append(helper.make_tensor_value_info(at, st.elem, [None] * ranks[p]))
    if draw("choice", [True, False]):
        st.outputs.append(helper.make_tensor_sequence_value_info(out, st.elem, None))


# -- Stage 14 shapes (generate(..., shapes="v4")) ---------------------------------------
# Steered by the coverage report (tools/coverage.py): what v3 never reached. Lists built
# and consumed inside a SequenceMap body and a Scan body, static lists (Unrolled) inside
# If branches and Loop bodies, Identity and Optional around the current list, and, last,
# the whole program moved into a model-local function (_in_function).
_V4_STEPS = ("map_local_list", "scan_local_list", "static_list_in_if", "static_list_in_loop", "identity",
             "optional", "nested_local", "map_contained")


def _split_join(st: _State, e: str, axis: int, nodes: list) -> str:
    """Nodes splitting ``e`` along ``axis`` into pieces of one, appending ``e`` itself and
    joining them all back (``e`` doubled along ``axis``); the joined name."""
    parts, grown, joined = st.fresh("parts"), st.fresh("grown"), st.fresh("joined")
    nodes += [helper.make_node("SplitToSequence", [e], [parts], axis=axis),
              helper.make_node("SequenceInsert", [parts, e], [grown]),
              helper.make_node("ConcatFromSequence", [grown], [joined], axis=axis)]
    return joined


def _map_local_list(st: _State, draw: Any, opset: int) -> None:
    """SequenceMap whose body splits each element along the family's axis, appends the
    element and joins the pieces: every element doubled, by list ops inside the body."""
    if opset < 17:
        return _insert(st, draw, opset)
    e = st.fresh("e")
    nodes: list = []
    o = _split_join(st, e, 0 if st.family == "rows" else 1, nodes)
    body = helper.make_graph(nodes, st.fresh("map_local"), [helper.make_tensor_value_info(e, st.elem, [None, None])],
                             [helper.make_tensor_value_info(o, st.elem, [None, None])])
    out = st.fresh("s")
    st.nodes.append(helper.make_node("SequenceMap", [st.seq], [out], body=body))
    st.shapes = [_doubled(st, s) for s in st.shapes]
    st.seq = out


def _scan_local_list(st: _State, draw: Any, opset: int) -> None:
    """A Scan over x's rows whose body splits the row into its elements, appends the row
    and joins them (the row doubled), and counts the list: two scan outputs."""
    if st.n_rows == 0:  # (after no step a scan output's dims are the runtime's to choose)
        return _insert(st, draw, opset)
    row, n = st.fresh("row"), st.fresh("n")
    nodes: list = []
    joined = _split_join(st, row, 0, nodes)
    grown = nodes[1].output[0]
    nodes.append(helper.make_node("SequenceLength", [grown], [n]))
    body = helper.make_graph(nodes, st.fresh("scan_local"), [helper.make_tensor_value_info(row, st.elem, [None])],
                             [helper.make_tensor_value_info(joined, st.elem, [None]),
                              helper.make_tensor_value_info(n, INT64, [])])
    rows, counts = st.fresh("rows"), st.fresh("counts")
    st.nodes.append(helper.make_node("Scan", ["x"], [rows, counts], body=body, num_scan_inputs=1))
    st.outputs += [helper.make_tensor_value_info(rows, st.elem, [None, None]),
                   helper.make_tensor_value_info(counts, INT64, [None])]


def _static_list(st: _State, draw: Any, nodes: list) -> str:
    """Nodes building [x, x, x] (a length known statically: Unrolled), erasing one at a
    constant position, reading one and inserting it again, and joining them; the name of
    the join."""
    three, rest, cat, at, grown = (st.fresh(b) for b in ("three", "rest", "cat", "at", "grown"))
    axis = 0 if st.family == "rows" else 1
    nodes += [helper.make_node("SequenceConstruct", ["x", "x", "x"], [three]),
              helper.make_node("SequenceErase", [three, _const(st, draw("int", -3, 2), "gone")], [rest]),
              helper.make_node("SequenceAt", [rest, _const(st, draw("int", -2, 1), "which")], [at]),
              helper.make_node("SequenceInsert", [rest, at, _const(st, draw("int", -2, 2), "where")], [grown]),
              helper.make_node("ConcatFromSequence", [grown], [cat], axis=axis)]
    return cat


def _static_list_in_if(st: _State, draw: Any, opset: int) -> None:
    """If cond: a static list built, edited and joined in the branch; else: x twice."""
    cond = draw("choice", [True, False])
    c = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
    st.feeds[c] = np.array(cond)
    then_nodes: list = []
    then_out = _static_list(st, draw, then_nodes)
    else_out = st.fresh("twice")
    axis = 0 if st.family == "rows" else 1
    then_g = helper.make_graph(then_nodes, st.fresh("then"), [], [helper.make_tensor_value_info(then_out, st.elem, None)])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], [else_out], axis=axis)], st.fresh("else"), [],
                               [helper.make_tensor_value_info(else_out, st.elem, None)])
    out = st.fresh("static")
    st.nodes.append(helper.make_node("If", [c], [out], then_branch=then_g, else_branch=else_g))
    st.outputs.append(helper.make_tensor_value_info(out, st.elem, [None, None]))


def _static_list_in_loop(st: _State, draw: Any, opset: int) -> None:
    """A Loop whose body builds, edits and joins a static list each step (a scan output)."""
    trips = draw("int", 0, 2)
    i, c, c_out = st.fresh("i"), st.fresh("c"), st.fresh("c_out")
    nodes: list = [helper.make_node("Identity", [c], [c_out])]
    cat = _static_list(st, draw, nodes)
    body = helper.make_graph(nodes, st.fresh("static_body"),
                             [helper.make_tensor_value_info(i, INT64, []), helper.make_tensor_value_info(c, BOOL, [])],
                             [helper.make_tensor_value_info(c_out, BOOL, []),
                              helper.make_tensor_value_info(cat, st.elem, [None, None])])
    cats = st.fresh("cats")
    st.nodes.append(helper.make_node("Loop", [st.runtime_int(trips), ""], [cats], body=body))
    if trips:  # (after no step a scan output's dims are the runtime's to choose)
        st.outputs.append(helper.make_tensor_value_info(cats, st.elem, [None] * 3))


def _identity(st: _State, draw: Any, opset: int) -> None:
    if opset < 14:  # (Identity of a sequence from 14)
        return _insert(st, draw, opset)
    out = st.fresh("s")
    st.nodes.append(helper.make_node("Identity", [st.seq], [out]))
    st.seq = out


def _optional(st: _State, draw: Any, opset: int) -> None:
    """The list wrapped in an Optional, asked whether it has one, and unwrapped."""
    if opset < 18:  # (OptionalHasElement of a sequence optional from 18)
        return _identity(st, draw, opset)
    opt, has, out = st.fresh("opt"), st.fresh("has"), st.fresh("s")
    st.nodes += [helper.make_node("Optional", [st.seq], [opt]),
                 helper.make_node("OptionalHasElement", [opt], [has]),
                 helper.make_node("OptionalGetElement", [opt], [out])]
    st.outputs.append(helper.make_tensor_value_info(has, BOOL, []))
    st.seq = out


def _in_function(st: _State, opset: int) -> tuple[list[onnx.NodeProto], list[onnx.FunctionProto]]:
    """The program's nodes moved into a model-local function ``local.program`` (its
    initializers as Constant nodes: a function sees no graph initializer), called once."""
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in st.inits]
    st.inits = []
    f = helper.make_function("local", "program", [i.name for i in st.inputs], [o.name for o in st.outputs],
                             [*consts, *st.nodes], [helper.make_opsetid("", opset)])
    call = helper.make_node("program", [i.name for i in st.inputs], [o.name for o in st.outputs], domain="local")
    return [call], [f]


def _local(st: _State, draw: Any, src: str, axis: int, nodes: list, any_shape: bool = False,
           in_map: bool = False) -> str:
    """Nodes building a list of ``src`` where they land (any graph) and reading it back
    as one tensor: split and joined with itself, a pair read at a constant position, or
    grown from an empty list and joined, ... ``any_shape``: ``src`` is a list's element,
    of a shape not known here (no variant that cuts it at x's sizes)."""
    sized = [] if any_shape else ["runtime_split", "branched"]
    mapped = ["mapped_split"] if st.opset >= 17 and not in_map else []
    how = draw("choice", ["split_join", "construct_at", "empty_grow", "carried", "optional", *sized, *mapped])
    if how == "mapped_split":
        # ``src`` cut into pieces of one (a list of run-time length), each negated by a
        # SequenceMap, ``src`` appended (the join of no piece is an error) and joined
        parts, negated, grown, out = st.fresh("parts"), st.fresh("negated"), st.fresh("grown"), st.fresh("joined")
        e, o = st.fresh("e"), st.fresh("o")
        keep = st.elem in (TensorProto.STRING, TensorProto.BOOL)  # (no Neg of these: kept as they are)
        body = helper.make_graph([helper.make_node("Identity" if keep else "Neg", [e], [o])], st.fresh("negate"),
                                 [helper.make_tensor_value_info(e, st.elem, None)],
                                 [helper.make_tensor_value_info(o, st.elem, None)])
        nodes += [helper.make_node("SplitToSequence", [src], [parts], axis=axis),
                  helper.make_node("SequenceMap", [parts], [negated], body=body),
                  helper.make_node("SequenceInsert", [negated, src], [grown]),
                  helper.make_node("ConcatFromSequence", [grown], [out], axis=axis)]
        return out
    if how == "split_join":
        return _split_join(st, src, axis, nodes)
    if how in ("carried", "branched") and st.opset < CARRY_SINCE:
        how = "split_join" if any_shape else "runtime_split"
    if how in ("runtime_split", "carried", "branched", "optional"):
        return globals()[f"_local_{how}"](st, draw, src, axis, nodes)
    if how == "construct_at":
        pair, at = st.fresh("pair"), st.fresh("at")
        nodes += [helper.make_node("SequenceConstruct", [src, src], [pair]),
                  helper.make_node("SequenceAt", [pair, _const(st, draw("int", -2, 1), "which")], [at])]
        return at
    empty, one, two, cat = st.fresh("empty"), st.fresh("one"), st.fresh("two"), st.fresh("cat")
    nodes += [helper.make_node("SequenceEmpty", [], [empty], dtype=st.elem),
              helper.make_node("SequenceInsert", [empty, src], [one]),
              helper.make_node("SequenceInsert", [one, src, _const(st, 0, "front")], [two]),
              helper.make_node("ConcatFromSequence", [two], [cat], axis=axis)]
    return cat


def _map_contained(st: _State, draw: Any, opset: int) -> None:
    """SequenceMap over the current list (of run-time length: Stacked, Ragged or Flat),
    its body a local list zero to two graphs down; the mapped list joined and counted at
    once (its elements' sizes are not tracked)."""
    if opset < 17:
        return _insert(st, draw, opset)
    axis = 0 if st.family == "rows" else 1
    e, mapped, n, cat = st.fresh("e"), st.fresh("mapped"), st.fresh("n"), st.fresh("cat")
    inner: list = []
    got = _contained(st, draw, e, axis, draw("int", 0, 2), inner, opset, in_map=True, any_shape=True)
    body = helper.make_graph(inner, st.fresh("map_contained"), [helper.make_tensor_value_info(e, st.elem, [None, None])],
                             [helper.make_tensor_value_info(got, st.elem, [None, None])])
    st.nodes += [helper.make_node("SequenceMap", [st.seq], [mapped], body=body),
                 helper.make_node("SequenceLength", [mapped], [n])]
    st.outputs.append(helper.make_tensor_value_info(n, INT64, []))
    if st.shapes:  # (a ConcatFromSequence of nothing is an error)
        st.nodes.append(helper.make_node("ConcatFromSequence", [mapped], [cat], axis=axis))
        st.outputs.append(helper.make_tensor_value_info(cat, st.elem, [None, None]))


def _contained(st: _State, draw: Any, src: str, axis: int, depth: int, nodes: list, opset: int,
               in_map: bool = False, any_shape: bool = False) -> str:
    """One tensor computed from ``src`` by a local list ``depth`` graphs down: each level
    an If branch, a Loop body (one step or two, its first scan read back) or a
    SequenceMap body (over [src], its one element read back; not anywhere inside another,
    which onnxruntime's expansion of SequenceMap cannot load)."""
    if depth == 0:
        return _local(st, draw, src, axis, nodes, any_shape, in_map)
    # (no Loop of strings: onnxruntime's scan outputs of strings in nested graphs come out
    # empty, in the original as in any lowering of it)
    loops = ["loop"] if st.elem != TensorProto.STRING else []
    # (a Scan of no step leaves its output's dims to the runtime: only over rows there are)
    scans = ["scan"] if loops and not any_shape and st.x_shape()[0 if axis == 0 else 1] > 0 else []
    kind = draw("choice", ["if", *loops, *scans] + (["map"] if opset >= 17 and not in_map else []))
    out = st.fresh("held")
    if kind == "scan":
        # A Scan over the rows of ``src`` whose body cuts each row into its elements,
        # appends the row and joins them: a Scan holding a list, in any graph.
        row, rows = st.fresh("row"), st.fresh("rows")
        cut: list = []
        joined = _split_join(st, row, 0, cut)
        sbody = helper.make_graph(cut, st.fresh("held_scan"), [helper.make_tensor_value_info(row, st.elem, [None])],
                                  [helper.make_tensor_value_info(joined, st.elem, [None])])
        src_rows = src
        if axis == 1:  # (the rows along the family's axis: the Scan runs over the other)
            src_rows = st.fresh("transposed")
            nodes.append(helper.make_node("Transpose", [src], [src_rows], perm=[1, 0]))
        nodes.append(helper.make_node("Scan", [src_rows], [rows], body=sbody, num_scan_inputs=1))
        if axis == 1:
            nodes.append(helper.make_node("Transpose", [rows], [out], perm=[1, 0]))
        else:
            nodes.append(helper.make_node("Identity", [rows], [out]))
        return out
    if kind == "if":
        cond = draw("choice", [True, False])
        c = st.fresh("cond")
        st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
        st.feeds[c] = np.array(cond)
        branches = []
        for which in ("then", "else"):
            inner: list = []
            got = _contained(st, draw, src, axis, depth - 1, inner, opset, in_map, any_shape)
            branches.append(helper.make_graph(inner, st.fresh(which), [],
                                              [helper.make_tensor_value_info(got, st.elem, [None, None])]))
        nodes.append(helper.make_node("If", [c], [out], then_branch=branches[0], else_branch=branches[1]))
        return out
    if kind == "loop":
        i, c, c_out, scans = st.fresh("i"), st.fresh("c"), st.fresh("c_out"), st.fresh("scans")
        inner = [helper.make_node("Identity", [c], [c_out])]
        got = _contained(st, draw, src, axis, depth - 1, inner, opset, in_map, any_shape)
        body = helper.make_graph(inner, st.fresh("held_body"),
                                 [helper.make_tensor_value_info(i, INT64, []), helper.make_tensor_value_info(c, BOOL, [])],
                                 [helper.make_tensor_value_info(c_out, BOOL, []),
                                  helper.make_tensor_value_info(got, st.elem, [None, None])])
        nodes += [helper.make_node("Loop", [st.runtime_int(draw("int", 1, 2)), ""], [scans], body=body),
                  helper.make_node("Gather", [scans, _const(st, 0, "first")], [out], axis=0)]
        return out
    e, one, mapped = st.fresh("e"), st.fresh("one"), st.fresh("mapped")
    inner = []
    got = _contained(st, draw, e, axis, depth - 1, inner, opset, in_map=True)
    body = helper.make_graph(inner, st.fresh("held_map"), [helper.make_tensor_value_info(e, st.elem, [None, None])],
                             [helper.make_tensor_value_info(got, st.elem, [None, None])])
    nodes += [helper.make_node("SequenceConstruct", [src], [one]),
              helper.make_node("SequenceMap", [one], [mapped], body=body),
              helper.make_node("SequenceAt", [mapped, _const(st, 0, "only")], [out])]
    return out


def _nested_local(st: _State, draw: Any, opset: int) -> None:
    """A local list one to three graphs down (If branches, Loop bodies, SequenceMap
    bodies, in any order): every context a list can be built in."""
    out = _contained(st, draw, "x", 0 if st.family == "rows" else 1, draw("int", 1, 3), st.nodes, opset)
    st.outputs.append(helper.make_tensor_value_info(out, st.elem, [None, None]))


def _local_runtime_split(st: _State, draw: Any, src: str, axis: int, nodes: list) -> str:
    """``src`` (x's shape) split in pieces of a run-time size, one erased at a run-time
    position, ``src`` put in front, read at its run-time last position (from its length)
    and joined with that last piece: Stacked or Flat lists of run-time length."""
    dim = st.x_shape()[axis]
    k = draw("int", 1, 3)
    count = -(-dim // k)
    parts, rest, grown, n, last_pos, last, joined, out = (
        st.fresh(b) for b in ("parts", "rest", "grown", "n", "last_pos", "last", "joined", "out"))
    nodes.append(helper.make_node("SplitToSequence", [src, st.runtime_int(k)], [parts], axis=axis))
    if count:
        nodes.append(helper.make_node("SequenceErase", [parts, st.runtime_int(draw("int", -count, count - 1))], [rest]))
    else:
        rest = parts
    nodes += [helper.make_node("SequenceInsert", [rest, src, _const(st, 0, "front")], [grown]),
              helper.make_node("SequenceLength", [grown], [n]),
              helper.make_node("Sub", [n, _const(st, 1, "one")], [last_pos]),
              helper.make_node("SequenceAt", [grown, last_pos], [last]),
              helper.make_node("ConcatFromSequence", [grown], [joined], axis=axis),
              helper.make_node("Concat", [joined, last], [out], axis=axis)]
    return out


def _local_carried(st: _State, draw: Any, src: str, axis: int, nodes: list) -> str:
    """A Loop (where the nodes land) carrying a list from empty, ``src`` appended each of
    one or two steps, joined after it: a list-carrying Loop in any graph."""
    i, c, c_out, s_in, s_out = (st.fresh(b) for b in ("i", "c", "c_out", "carried", "carried_out"))
    empty, final, out = st.fresh("empty"), st.fresh("final"), st.fresh("joined")
    steps = [helper.make_node("Identity", [c], [c_out]), helper.make_node("SequenceInsert", [s_in, src], [s_out])]
    if st.opset >= 14 and draw("choice", [False, True]):  # (the list passed on through an Identity)
        grown = st.fresh("grown")
        steps[1].output[0] = grown
        steps.append(helper.make_node("Identity", [grown], [s_out]))
    body = helper.make_graph(
        steps,
        st.fresh("carry_body"),
        [helper.make_tensor_value_info(i, INT64, []), helper.make_tensor_value_info(c, BOOL, []),
         helper.make_tensor_sequence_value_info(s_in, st.elem, None)],
        [helper.make_tensor_value_info(c_out, BOOL, []), helper.make_tensor_sequence_value_info(s_out, st.elem, None)])
    nodes += [helper.make_node("SequenceEmpty", [], [empty], dtype=st.elem),
              helper.make_node("Loop", [st.runtime_int(draw("int", 1, 2)), "", empty], [final], body=body),
              helper.make_node("ConcatFromSequence", [final], [out], axis=axis)]
    return out


def _local_branched(st: _State, draw: Any, src: str, axis: int, nodes: list) -> str:
    """An If (where the nodes land) choosing a list: [src, src] or ``src`` cut in two
    along ``axis`` (sizes 0 and dim); its length and its join read after it."""
    cond = draw("choice", [True, False])
    c = st.fresh("cond")
    st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
    st.feeds[c] = np.array(cond)
    pair, cut, chosen, out = st.fresh("pair"), st.fresh("cut"), st.fresh("chosen"), st.fresh("joined")
    sizes = _const(st, [0, st.x_shape()[axis]], "sizes")
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", [src, src], [pair])], st.fresh("then"), [],
                               [helper.make_tensor_sequence_value_info(pair, st.elem, None)])
    else_g = helper.make_graph([helper.make_node("SplitToSequence", [src, sizes], [cut], axis=axis)], st.fresh("else"),
                               [], [helper.make_tensor_sequence_value_info(cut, st.elem, None)])
    nodes += [helper.make_node("If", [c], [chosen], then_branch=then_g, else_branch=else_g),
              helper.make_node("ConcatFromSequence", [chosen], [out], axis=axis)]
    return out


def _local_optional(st: _State, draw: Any, src: str, axis: int, nodes: list) -> str:
    """[src] wrapped in an Optional and unwrapped, joined (Optional ops in any graph);
    below opset 18, an Identity of the list instead (from 14)."""
    one, opt, back, out = st.fresh("one"), st.fresh("opt"), st.fresh("back"), st.fresh("joined")
    nodes.append(helper.make_node("SequenceConstruct", [src], [one]))
    if st.opset >= 18 and draw("choice", [False, True]):
        # the optional made in an If's branches (one wraps [src], the other [src, src])
        c, two, a, b = st.fresh("cond"), st.fresh("two"), st.fresh("opt_a"), st.fresh("opt_b")
        st.inputs.append(helper.make_tensor_value_info(c, BOOL, []))
        st.feeds[c] = np.array(draw("choice", [True, False]))
        opt_type = helper.make_optional_type_proto(helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(st.elem, None)))
        then_g = helper.make_graph([helper.make_node("Optional", [one], [a])], st.fresh("then"), [],
                                   [helper.make_value_info(a, opt_type)])
        else_g = helper.make_graph([helper.make_node("SequenceConstruct", [src, src], [two]),
                                    helper.make_node("Optional", [two], [b])], st.fresh("else"), [],
                                   [helper.make_value_info(b, opt_type)])
        nodes += [helper.make_node("If", [c], [opt], then_branch=then_g, else_branch=else_g),
                  helper.make_node("OptionalGetElement", [opt], [back])]
    elif st.opset >= 18:
        nodes += [helper.make_node("Optional", [one], [opt]), helper.make_node("OptionalGetElement", [opt], [back])]
    elif st.opset >= 14:  # (Identity of a sequence from 14)
        nodes.append(helper.make_node("Identity", [one], [back]))
    else:
        back = one
    nodes.append(helper.make_node("ConcatFromSequence", [back], [out], axis=axis))
    return out
