"""onnx shape inference that stays linear in the size of the main graph.

onnx infers each subgraph with a copy of every type known in the graph around it, so a
main graph of n values with k If/Loop/Scan/SequenceMap nodes costs n x k: a chain of
5,000 SequenceMap blocks took 4.0 s where 1,000 took 0.2 s. ``infer_shapes`` cuts such a
main graph into windows of consecutive nodes (the nodes are in topological order: the
checker saw to it) and infers each window alone, its reads typed from what the windows
before it found. Inference is a forward pass in node order, so every node sees the types
it would see in one run; what the windows lose is what onnx carries besides types:

- constant values read across a window edge: initializers are in every window, and
  the Constant nodes a window reads are copied into it;
- ``data_prop``'s partial shape values (a Shape -> Gather -> Concat chain across an
  edge): the value after the edge is known by type only. Windows are only used where
  the whole run would be quadratic; a window is cut short (500 nodes, against 2,000)
  only where no value a propagating op made crosses the edge (``_windows``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence

import numpy as np
import onnx

from seqlower.io.protos import copy_fields, innermost_type, outer_reads, subgraphs_of, value_infos

__all__ = ["infer_shapes", "infer_types", "is_windowed", "localize_outer_constants", "WINDOW_NODES"]

# Main-graph nodes per window, and the work (nodes x nodes with subgraphs) past which
# the graph is cut into windows: below it one run costs under about a tenth of a second.
WINDOW_NODES = 2000
_WINDOWED_WORK = 4_000_000


def infer_shapes(proto: onnx.ModelProto, *, check_type: bool = False, strict_mode: bool = False,
                 data_prop: bool = False, window: int | None = None,
                 dims_from: onnx.ModelProto | None = None, main_nodes: Sequence[int] | None = None,
                 ) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes``, in windows of ``window`` main-graph nodes when
    the graph is big and holds many subgraphs (``window`` forces it: tests). ``data_prop``
    is dropped for a model that declares a dim past ``_DATA_PROP_DIM_LIMIT``, in ``proto``
    or in ``dims_from`` instead when given (a skeleton's model: its weights are stubs, not
    the tens of thousands of typed graph inputs the skeleton has for them, whose dims are
    the weights' own). ``main_nodes``: the main graph's nodes that may have attributes
    (subgraphs), by index, when the others are known to have none."""
    data_prop = _safe_data_prop(data_prop, dims_from if dims_from is not None else proto)
    if window is None:
        if not is_windowed(proto, main_nodes):
            return onnx.shape_inference.infer_shapes(proto, check_type=check_type, strict_mode=strict_mode,
                                                     data_prop=data_prop)
        window = WINDOW_NODES
    if len(proto.graph.node) <= window:
        return onnx.shape_inference.infer_shapes(proto, check_type=check_type, strict_mode=strict_mode,
                                                 data_prop=data_prop)
    return _windowed(proto, window, check_type=check_type, strict_mode=strict_mode, data_prop=data_prop)


def infer_types(proto: onnx.ModelProto, *, check_type: bool = False, strict_mode: bool = False,
                data_prop: bool = False, dims_from: onnx.ModelProto | None = None,
                main_nodes: Sequence[int] | None = None,
                ) -> Sequence[onnx.ValueInfoProto] | dict[str, onnx.TypeProto]:
    """What ``infer_shapes`` finds of the main graph's values (its value infos and outputs),
    without the typed model: windows then skip putting the graph back together."""
    data_prop = _safe_data_prop(data_prop, dims_from if dims_from is not None else proto)
    if not is_windowed(proto, main_nodes):
        g = onnx.shape_inference.infer_shapes(proto, check_type=check_type, strict_mode=strict_mode,
                                              data_prop=data_prop).graph
        return [*g.value_info, *g.output]
    found, outputs, _ = _window_runs(proto, WINDOW_NODES, False, check_type=check_type, strict_mode=strict_mode,
                                     data_prop=data_prop)
    found.update((name, v.type) for name, v in outputs.items())
    return found


def _safe_data_prop(data_prop: bool, dims_from: onnx.ModelProto) -> bool:
    # onnx's data propagation through a Loop whose trip count it computes from a huge dim
    # allocates without bound (a mutated dim of 2**31: 6 GB, then bad_alloc).
    return data_prop and not _huge_dim(dims_from)


def is_windowed(proto: onnx.ModelProto, main_nodes: Sequence[int] | None) -> bool:
    """Whether inference runs on ``proto`` in windows (``infer_shapes``): a big main graph
    with many subgraphs. ``main_nodes``: see ``infer_shapes``."""
    nodes = proto.graph.node
    if len(nodes) <= WINDOW_NODES:
        return False
    enough = _WINDOWED_WORK // len(nodes) + 1  # (counted until there are: a stack has thousands)
    heavy = 0
    for n in (nodes if main_nodes is None else (nodes[i] for i in main_nodes)):
        if n.attribute and subgraphs_of(n):
            heavy += 1
            if heavy >= enough:
                return True
    return False


# Past this, a declared dim is no real size (2**31 elements of one byte is 2 GiB) and
# data propagation is not worth its risk.
_DATA_PROP_DIM_LIMIT = 1 << 30


# A dim_value (field 1, a varint) of 2**30 or more: five bytes or more after its tag. Any
# field 1 varint that big matches, so no match means no huge dim, and a match is looked at.
_HUGE_VARINT = re.compile(rb"\x08[\x80-\xff]{4}[\x04-\xff]")
# Past this a model is not serialized to be searched (its weights are in it).
_SEARCHED_BYTES = 64 << 20


def _huge_dim(proto: onnx.ModelProto) -> bool:
    if proto.ByteSize() <= _SEARCHED_BYTES and not _HUGE_VARINT.search(proto.SerializeToString()):
        return False
    for v in value_infos(proto):
        tp = v.type
        # (a tensor's dims read directly: a skeleton types tens of thousands of weights)
        for d in (tp.tensor_type.shape.dim if tp.HasField("tensor_type") else _dims(tp)):
            if d.dim_value > _DATA_PROP_DIM_LIMIT:
                return True
    return False


_UNK = re.compile(rb"unk__([0-9]+)")
_SYMBOLS = "\0seqlower.symbols"  # no model's name: a NUL is not in onnx's names


def _highest_unk(data: bytes) -> int:
    return max((int(k) for k in _UNK.findall(data)), default=-1)


def _windowed(proto: onnx.ModelProto, window: int, **options: bool) -> onnx.ModelProto:
    g = proto.graph
    found, outputs, out_nodes = _window_runs(proto, window, True, **options)
    out = copy_fields(onnx.ModelProto(), proto, skip=("graph",))
    og = copy_fields(out.graph, g, skip=("node", "output", "value_info"))
    og.node.extend(out_nodes)
    og.output.extend(outputs.get(v.name, v) for v in g.output)
    # Like one run: the declared value infos first (refined), then what was found.
    declared = {v.name for v in g.value_info}
    skip = {*(v.name for v in g.output), *(v.name for v in g.input), *(t.name for t in g.initializer),
            *(t.values.name for t in g.sparse_initializer)}
    og.value_info.extend(onnx.helper.make_value_info(v.name, found[v.name]) if v.name in found else v
                         for v in g.value_info)
    og.value_info.extend(onnx.helper.make_value_info(name, tp) for name, tp in found.items()
                         if name not in declared and name not in skip)
    return out


def _window_runs(proto: onnx.ModelProto, window: int, keep_nodes: bool, **options: bool,
                 ) -> tuple[dict[str, onnx.TypeProto], dict[str, onnx.ValueInfoProto], list[onnx.NodeProto]]:
    """Inference window by window: the types found for values the model makes, the graph
    outputs as inference refined them, and (``keep_nodes``) the nodes as it returned them."""
    g = proto.graph
    lookup = _Lookup(g)
    found: dict[str, onnx.TypeProto] = {}  # what inference says of values the model produces
    constant_nodes: dict[str, onnx.NodeProto] = {}
    out_nodes: list[onnx.NodeProto] = []
    outputs: dict[str, onnx.ValueInfoProto] = {}
    # Each window would number the dims it makes up from unk__0 again, so two unrelated
    # dims would share a name, which says they are equal. onnx numbers past the symbols a
    # graph has: each window declares every unk__k up to the highest any name holds so
    # far (an unused value info), so what it makes up is new. (Read off the bytes: a
    # name that is not a dim only makes the numbers start later.)
    highest = _highest_unk(copy_fields(onnx.GraphProto(), g, skip=("initializer", "sparse_initializer"))
                           .SerializeToString())
    seed = onnx.helper.make_tensor_value_info(_SYMBOLS, onnx.TensorProto.FLOAT, [])
    header = copy_fields(onnx.ModelProto(), proto, skip=("graph",))
    header.graph.name = g.name
    nodes = list(g.node)
    # (a node without attributes reads its inputs: most of a big graph, read as a slice)
    node_reads = [sorted(outer_reads(n)) if n.attribute and subgraphs_of(n) else n.input[:] for n in nodes]
    for start, end in _windows(nodes, node_reads, window):
        chunk = nodes[start:end]
        made = {o for n in chunk for o in n.output if o}
        reads = dict.fromkeys(x for names in node_reads[start:end] for x in names if x and x not in made)
        seg = onnx.ModelProto()
        seg.CopyFrom(header)
        copied = lookup.fill(seg.graph, chunk, made, reads, found, constant_nodes)
        dims = seed.type.tensor_type.shape.dim
        for k in range(len(dims), highest + 1):
            dims.add().dim_param = f"unk__{k}"
        if dims:
            seg.graph.value_info.append(seed)
        result = onnx.shape_inference.infer_shapes(seg, **options)
        rg = result.graph
        highest = max(highest, _highest_unk(result.SerializeToString()))
        for v in (*rg.value_info, *rg.output):
            if v.name in made:
                found[v.name] = v.type
        outputs.update({v.name: v for v in rg.output})
        if keep_nodes:
            out_nodes.extend(rg.node[len(copied):])
        for n in chunk:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
                constant_nodes[n.output[0]] = n
    return found, outputs, out_nodes


class _Lookup:
    """The main graph's inputs, weights and declarations by name, for the windows."""

    def __init__(self, g: onnx.GraphProto) -> None:
        self.g = g
        self.model_inputs = {v.name: v for v in g.input}
        self.initializers = {t.name: t for t in g.initializer}
        self.sparse = {t.values.name: t for t in g.sparse_initializer}
        self.declared = {v.name: v.type for v in g.value_info}
        self.declared_outputs = {v.name: v for v in g.output}

    def fill(self, sg: onnx.GraphProto, chunk: list[onnx.NodeProto], made: set[str], reads: dict[str, None],
             found: dict[str, onnx.TypeProto], constant_nodes: dict[str, onnx.NodeProto]) -> list[onnx.NodeProto]:
        """One window's graph: what it reads (model inputs, weights, the Constant nodes of
        earlier windows, copied first, which it gives; values earlier windows made, as
        typed inputs), its nodes, their declared types and the model outputs they make."""
        copied: list[onnx.NodeProto] = []
        for name in reads:
            if name in self.model_inputs:
                sg.input.append(self.model_inputs[name])
            if name in self.initializers:
                sg.initializer.append(self.initializers[name])
            elif name in self.sparse:
                sg.sparse_initializer.append(self.sparse[name])
            elif name in constant_nodes:
                copied.append(constant_nodes[name])
            elif name not in self.model_inputs:
                # A value an earlier window made: typed from what inference found there.
                vi = sg.input.add()
                vi.name = name
                tp = found.get(name) or self.declared.get(name)
                if tp is not None:
                    vi.type.CopyFrom(tp)
        sg.node.extend(copied)
        sg.node.extend(chunk)
        sg.value_info.extend(v for v in self.g.value_info if v.name in made)
        sg.output.extend(self.declared_outputs[o] for n in chunk for o in n.output if o in self.declared_outputs)
        return copied


# Ops whose outputs may carry data propagation's values (a shape, a size, a sum of dims)
# to what reads them: a cut between two windows that such a value crosses loses it.
_PROPAGATING = frozenset({"Shape", "Size", "Cast", "CastLike", "Concat", "Gather", "GatherElements", "Squeeze",
                          "Unsqueeze", "Slice", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min",
                          "Identity", "Reshape", "Expand", "Range", "Where", "ConstantOfShape", "Flatten", "Split"})


def _windows(nodes: list[onnx.NodeProto], reads: list[list[str]], window: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each window of at most ``window`` nodes. onnx's cost for a node
    with subgraphs grows with the window (each subgraph gets a copy of every type around
    it), so windows are cut short, a quarter of ``window`` or more, where no value a
    propagating op made crosses the cut; where none is, at ``window`` nodes."""
    n = len(nodes)
    shortest = max(1, window // 4)
    last_read: dict[str, int] = {}
    for i, names in enumerate(reads):
        for x in names:
            last_read[x] = i
    # live[k]: how many values a propagating op made at k or before are read after k.
    delta = [0] * (n + 1)
    for i, node in enumerate(nodes):
        if node.op_type in _PROPAGATING or node.domain not in ("", "ai.onnx"):
            for o in node.output:
                last = last_read.get(o, i)
                if last > i:
                    delta[i] += 1
                    delta[last] -= 1
    live = list(itertools.accumulate(delta))
    start = 0
    while start < n:
        end = min(n, start + window)
        for k in range(start + shortest, end):
            if not live[k - 1]:
                end = k
                break
        yield start, end
        start = end


def _dims(tp: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension]:
    tp = innermost_type(tp)
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        t = getattr(tp, kind)
        return list(t.shape.dim) if t.HasField("shape") else []
    return []


_LOCALIZED_MAX_ELEMENTS = 64


def localize_outer_constants(proto: onnx.ModelProto) -> None:
    """Copy the small integer constants of the main graph that subgraphs read (axes,
    shapes, split sizes) into those subgraphs as Constant nodes, in the copy handed to
    onnx's inference: it sees the values of a subgraph's own constants only, so a Squeeze
    whose axes are an outer initializer gives an element of unknown rank, and its list
    could not be lowered. The copies shadow the outer names; only inferred shapes come
    back from this copy."""
    consts: dict[str, onnx.TensorProto] = {}
    for init in proto.graph.initializer:
        if init.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and np.prod(init.dims, dtype=np.int64) <= _LOCALIZED_MAX_ELEMENTS:
            consts[init.name] = init
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 and node.attribute[0].name == "value":
            t = node.attribute[0].t
            if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and np.prod(t.dims, dtype=np.int64) <= _LOCALIZED_MAX_ELEMENTS:
                consts[node.output[0]] = t
    if not consts:
        return
    stack = [a.g for n in proto.graph.node for a in n.attribute if a.HasField("g")]
    stack += [g for n in proto.graph.node for a in n.attribute for g in a.graphs]
    while stack:
        g = stack.pop()
        defined = {v.name for v in g.input} | {i.name for i in g.initializer} | {o for n in g.node for o in n.output}
        read = [i for n in g.node for i in n.input if i in consts and i not in defined]
        copies = []
        for name in dict.fromkeys(read):
            value = onnx.TensorProto()
            value.CopyFrom(consts[name])
            value.name = name
            copies.append(onnx.helper.make_node("Constant", [], [name], value=value))
        if copies:
            nodes = copies + list(g.node)
            del g.node[:]
            g.node.extend(nodes)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
