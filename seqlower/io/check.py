"""onnx's checker, with what exporters write and onnxruntime runs accepted (one warning
each), external data resolved against the model's folder whatever the working
directory, and no weights read; plus the checks onnx's checker does not make but the
passes and the writer need (text, element types, raw data sizes, Constants, kinds).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import onnx
from seqlower._deferred import onnx_ir as ir

from seqlower.errors import ModelError, describe_node
from seqlower.io.inference import infer_shapes, infer_types, is_windowed
from seqlower.ir.helpers import graphs_of
from seqlower.io.map_types import restore_map_types
from seqlower.io.protos import copy_fields, data_bytes, iter_tensor_protos, outer_reads
from seqlower.io.weights import PLACEHOLDER
# (re-exported: the checks of a model's structure are part of checking it)
from seqlower.io.structure import check_structure, check_weight

__all__ = ["PROTOBUF_LIMIT", "InferredTypes", "check_model", "check_proto", "check_structure", "check_types",
           "check_weight", "skeleton", "sort_nodes", "weightless_proto"]


# Protobuf refuses messages of 2 GiB; leave room for the graph around the weights.
PROTOBUF_LIMIT = 2**31 - 2**24


# Checker complaints onnxruntime does not share: exporters (tf2onnx) write graph inputs
# and outputs without a shape when they do not know the rank, and onnxruntime runs them;
# onnxruntime sorts nodes that are out of order (hand-edited and merged graphs).
_SHAPELESS = re.compile(r"Field 'shape' of 'type' is required but missing")
_UNSORTED = re.compile(r"Nodes in a graph must be topologically sorted")

# External tensors up to this size are read for the checker: shape inference reads
# constant shapes, axes and sizes, which are small. Larger ones are weights: the checker
# gets them as references into a sparse placeholder file (it sizes raw data and wants
# external files to exist, but never reads them; nor does inference).
_CHECK_READS_BYTES = 1 << 20


def _first_line(e: BaseException) -> str:
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)


def check_proto(proto: onnx.ModelProto, label: str, base_dir: str | None, *, full: bool = False,
                 what: str = "invalid model", main_nodes: list[int] | None = None) -> list[str]:
    """onnx's checker (and with ``full`` its strict shape inference) with external data
    resolved against ``base_dir``, whatever the working directory, and without reading
    weights (see ``_weights_as_placeholders``).

    Returns the warnings for what is accepted although the checker refuses it.
    Raises ModelError for anything else. ``main_nodes``: see ``iter_tensor_protos``.
    """
    found: list[str] = []
    shapeless: list[onnx.ValueInfoProto] = []
    with _weights_as_placeholders(proto, base_dir, main_nodes) as check:
        try:
            # Each pass accepts one complaint and checks again, as the checker stops at
            # its first: nodes out of order (sorted), then shapeless boundary values.
            for _ in range(3):
                try:
                    with _placeholder_shapes(shapeless):
                        check(proto, full and not shapeless)
                    break
                except onnx.checker.ValidationError as e:
                    first = _first_line(e)
                    if _UNSORTED.search(first) and not any("topological" in w for w in found):
                        cycle = sort_nodes(proto)
                        if cycle:
                            raise ModelError(f"{label}: {what}: the graph has a cycle through {cycle} (its nodes "
                                             "cannot be topologically sorted)") from None
                        found.append(f"{label}: nodes are not in topological order; accepted, as onnxruntime does "
                                     "(sorted)")
                    elif _SHAPELESS.search(first) and not shapeless and (shapeless := _shapeless_boundary(proto)):
                        found.append(f"{label}: graph {'inputs/outputs' if len(shapeless) > 1 else 'input/output'} "
                                     f"{', '.join(repr(v.name) for v in shapeless)} declare no shape (rank unknown); "
                                     "accepted, as onnxruntime does")
                    else:
                        raise
            if full and shapeless:
                infer_shapes(proto, check_type=True, strict_mode=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise ModelError(f"{label}: {what}: {_first_line(e)}") from None
        except ValueError as e:  # protobuf size limits
            raise ModelError(f"{label}: {what}: {str(e).splitlines()[0]}") from None
    return found


def sort_nodes(proto: onnx.ModelProto) -> str | None:
    """Put the nodes of every graph, subgraph and function in topological order, in
    place, keeping the given order wherever it already works (a node that reads an
    outer value inside its subgraph depends on that value's producer). Returns the
    label of a node on a cycle, and then changes nothing."""
    graphs: list[Any] = [proto.graph, *proto.functions]
    orders: list[tuple[Any, list[onnx.NodeProto]]] = []
    while graphs:
        g = graphs.pop()
        nodes = list(g.node)
        produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        deps = [{produced[x] for x in outer_reads(n) if produced.get(x, i) != i} for i, n in enumerate(nodes)]
        users: list[list[int]] = [[] for _ in nodes]
        for i, d in enumerate(deps):
            for j in d:
                users[j].append(i)
        waiting = [len(d) for d in deps]
        ready = [i for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) < len(nodes):
            stuck = next(n for i, n in enumerate(nodes) if waiting[i])
            return describe_node(stuck.op_type, stuck.name, list(stuck.output))
        orders.append((g, [nodes[i] for i in order]))
        for n in nodes:
            for attr in n.attribute:
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
    for g, ordered in orders:
        if list(g.node) != ordered:
            copies = [onnx.NodeProto() for _ in ordered]
            for c, n in zip(copies, ordered):
                c.CopyFrom(n)
            del g.node[:]
            g.node.extend(copies)
    return None


def _shapeless_boundary(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for v in (*proto.graph.input, *proto.graph.output)
            if v.type.WhichOneof("value") == "tensor_type" and not v.type.tensor_type.HasField("shape")]


@contextlib.contextmanager
def _placeholder_shapes(values: list[onnx.ValueInfoProto]) -> Iterator[None]:
    """For the plain checker only (it looks at the presence of a shape, not at it)."""
    for v in values:
        v.type.tensor_type.shape.SetInParent()
    try:
        yield
    finally:
        for v in values:
            v.type.tensor_type.ClearField("shape")


@contextlib.contextmanager
def _weights_as_placeholders(proto: onnx.ModelProto, base_dir: str | None, main_nodes: list[int] | None = None,
                             ) -> Iterator[Callable[[onnx.ModelProto, bool], None]]:
    """Yields a checker for ``proto`` that reads no weights and needs no file of the
    model's: for the duration, small external tensors are made inline with their data
    (shape inference reads constant shapes, axes and sizes), and every other external
    tensor points into one sparse placeholder file in a temporary folder, where the
    checker (which resolves locations against the working directory in memory, and
    wants the bytes to exist) is then run by path. Restored afterwards."""
    saved: list[tuple[onnx.TensorProto, list[tuple[str, str]]]] = []
    longest = 0
    tmp: str | None = None
    try:
        for tensor in iter_tensor_protos(proto, main_nodes=main_nodes):
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = [(e.key, e.value) for e in tensor.external_data]
            saved.append((tensor, info))
            keys = dict(info)
            length = data_bytes(tensor)
            data = None
            if keys.get("location") != PLACEHOLDER and length is not None and length <= _CHECK_READS_BYTES:
                data = _read_external(base_dir, keys, length)
            del tensor.external_data[:]
            if data is not None:
                tensor.data_location = onnx.TensorProto.DEFAULT
                tensor.raw_data = data
            else:
                size = length if length is not None else int(keys.get("length") or 0)
                for key, value in (("location", PLACEHOLDER), ("offset", "0"), ("length", str(size))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, value
                longest = max(longest, size)

        if any(t.data_location == onnx.TensorProto.EXTERNAL for t, _ in saved):
            tmp = tempfile.mkdtemp(prefix="seqlower-check-")
            with open(os.path.join(tmp, PLACEHOLDER), "wb") as f:
                f.truncate(longest)  # sparse: no disk, no memory
            path = os.path.join(tmp, "model.onnx")

            def check(p: onnx.ModelProto, full: bool) -> None:
                with open(path, "wb") as f:
                    f.write(p.SerializeToString())
                onnx.checker.check_model(path, full_check=full)
        else:
            def check(p: onnx.ModelProto, full: bool) -> None:
                onnx.checker.check_model(p, full_check=full)

        yield check
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for tensor, info in saved:
            tensor.ClearField("raw_data")
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in info:
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value


def _read_external(base_dir: str | None, keys: dict[str, str], length: int) -> bytes | None:
    if base_dir is None:
        return None
    try:
        with open(os.path.join(base_dir, keys["location"]), "rb") as f:
            f.seek(int(keys.get("offset") or 0))
            data = f.read(length)
    except (OSError, KeyError, ValueError):
        return None
    return data if len(data) == length else None


def check_model(model: ir.Model | onnx.ModelProto, label: str, *, base_dir: str | None = None,
                what: str = "invalid model") -> list[str]:
    """The full check (checker and strict shape inference) of a model in memory, external
    data resolved against ``base_dir``; an ``ir.Model`` is checked without serializing its
    weights (``weightless_proto``). Returns warnings for what is accepted all the same."""
    proto = model if isinstance(model, onnx.ModelProto) else weightless_proto(model)
    return check_proto(proto, label, base_dir, full=True, what=what)


def weightless_proto(model: ir.Model, keep_bytes: int = _CHECK_READS_BYTES) -> onnx.ModelProto:
    """The model as a proto whose initializers past ``keep_bytes`` (1 MiB) are references
    to a placeholder file: for the checker, inference and inventories, which never read
    weights, so a model over protobuf's 2 GiB, or with external weights anywhere, can be
    looked at. Small external tensors are read where their file is found."""
    swapped: list[tuple[ir.Value, object]] = []
    try:
        for graph in graphs_of(model):
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is None:
                    continue
                stand_in: object = ir.ExternalTensor(PLACEHOLDER, 0, tensor.nbytes, tensor.dtype,
                                                     shape=tensor.shape, name=value.name or "")
                if tensor.nbytes <= keep_bytes:
                    if not isinstance(tensor, ir.ExternalTensor):
                        continue
                    try:
                        stand_in = ir.Tensor(tensor.numpy(), name=value.name)
                    except OSError:  # a proto loaded without its folder: nothing to read
                        pass
                swapped.append((value, tensor))
                value.const_value = stand_in
        return restore_map_types(model, ir.serde.serialize_model(model))
    finally:
        for value, tensor in swapped:
            value.const_value = tensor


# Initializers bigger than this become typed graph inputs in a skeleton: no check or
# inference reads them (what inference reads, shapes, axes, sizes, is a few numbers),
# and copying and serializing them is most of a big model's cost.
_SKELETON_BYTES = 1024


def skeleton(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` without its weights: each main-graph initializer over 1 KiB becomes a
    graph input of its type and shape (small ones, which inference reads, stay). For the
    checker and inference, which then cost what the graph costs, not what the weights do."""
    g = proto.graph
    big = [t for t in g.initializer if _stored_bytes(t) > _SKELETON_BYTES]
    if not big:
        return proto
    out = copy_fields(onnx.ModelProto(), proto, skip=("graph",))
    og = copy_fields(out.graph, g, skip=("initializer", "input"))
    og.input.extend(g.input)
    inputs = {v.name for v in g.input}
    big_names = {t.name for t in big}
    og.initializer.extend(t for t in g.initializer if t.name not in big_names)
    for t in big:
        if t.name not in inputs:
            # (by hand: onnx.helper.make_tensor_value_info costs 10 us a weight, 0.2 s on
            # a 40k-node model)
            vi = og.input.add()
            vi.name = t.name
            tt = vi.type.tensor_type
            tt.elem_type = t.data_type
            dims = tt.shape.dim
            for d in t.dims:
                dims.add().dim_value = d
    return out


def _stored_bytes(t: onnx.TensorProto) -> int:
    size = data_bytes(t)
    return size if size is not None else t.ByteSize()


class InferredTypes(Mapping[str, onnx.TypeProto]):
    """What ``check_types`` found for the main graph's values, read off inference's result
    when asked: the region cut asks for a few of tens of thousands.

    On a big model with many subgraphs, ``check_types`` only defers its run here
    (``pending``): the lowering types a stack of equal blocks from one block's lowering
    (``seqlower.fastpath.repeats``) and checks each sub-model it lowers, so the whole model's
    inference runs only if something asks for a type (``resolve``), and raises then what
    ``check_types`` would have raised."""

    def __init__(self) -> None:
        self._values: Sequence[onnx.ValueInfoProto] = []
        self._index: dict[str, onnx.ValueInfoProto] | None = None
        self._types: dict[str, onnx.TypeProto] = {}
        self._run: Callable[[], None] | None = None

    def found(self, values: Sequence[onnx.ValueInfoProto] | dict[str, onnx.TypeProto]) -> None:
        """What ``seqlower.io.inference.infer_types`` found."""
        if isinstance(values, dict):
            self._values, self._index, self._types = [], {}, values
        else:
            self._values, self._index, self._types = values, None, {}

    def defer(self, run: Callable[[], None]) -> None:
        """``run`` infers the types (and calls ``found``) when one is first asked for."""
        self._run = run

    @property
    def pending(self) -> bool:
        return self._run is not None

    def resolve(self) -> None:
        """Run the deferred inference now (ModelError: the model is invalid)."""
        run, self._run = self._run, None
        if run is not None:
            run()

    def release(self) -> None:
        """Let go of inference's result (it holds a typed copy of the whole graph)."""
        self._values, self._index, self._types = [], None, {}
        self._run = None

    def _type(self, name: object) -> onnx.TypeProto | None:
        if self._run is not None:
            self.resolve()
        if name in self._types:
            return self._types[name]  # type: ignore[index]
        if self._index is None:
            # (by name only: a type is read when asked for, a few of tens of thousands)
            self._index = {v.name: v for v in self._values}
        v = self._index.get(name)  # type: ignore[arg-type]
        return v.type if v is not None else None

    def __getitem__(self, name: str) -> onnx.TypeProto:
        tp = self._type(name)
        if tp is None or tp.WhichOneof("value") is None:
            raise KeyError(name)
        return tp

    def __contains__(self, name: object) -> bool:
        tp = self._type(name)
        return tp is not None and tp.WhichOneof("value") is not None

    def __iter__(self) -> Iterator[str]:
        if self._run is not None:
            self.resolve()
        if self._index is None:
            self._index = {v.name: v for v in self._values}
        # (one of the two is empty: ``found`` keeps what it was given)
        return (x for x in [*self._types, *self._index] if x in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def check_types(proto: onnx.ModelProto, label: str, types: dict[str, onnx.TypeProto] | InferredTypes | None = None,
                dims_from: onnx.ModelProto | None = None, main_nodes: list[int] | None = None,
                defer: bool = False) -> None:
    """Type errors the plain checker does not look for (a node fed a sequence where it
    takes a tensor). Not shapes: real exports declare shapes inference disagrees with.
    ``types``, when given, gets the inferred type of every main-graph value (the
    region cut reads them instead of inferring again). ``dims_from``, ``main_nodes``: see
    ``seqlower.io.inference.infer_shapes``. An ``InferredTypes`` gets the check deferred (see
    its doc) for a big model with many subgraphs, or whenever ``defer``."""

    def run() -> None:
        if proto.ByteSize() > PROTOBUF_LIMIT:
            return  # too big to hand to inference in memory; the passes meet such errors later
        try:
            found = infer_types(proto, check_type=True, strict_mode=False, data_prop=types is not None,
                                dims_from=dims_from, main_nodes=main_nodes)
            if isinstance(types, InferredTypes):
                types.found(found)
            elif types is not None:
                pairs = found.items() if isinstance(found, dict) else ((v.name, v.type) for v in found)
                types.update((name, tp) for name, tp in pairs if tp.WhichOneof("value") is not None)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as e:
            first = _first_line(e)
            # Only kind errors (a sequence or optional where a tensor goes) and types that do
            # not exist: an element type a schema does not list (ReverseSequence of bfloat16)
            # is a schema lag that runtimes accept.
            if isinstance(e, ValueError) or re.search(r"unsupported type: (seq|optional|map|sparse)", first):
                raise ModelError(f"{label}: invalid model: {first}") from None

    if isinstance(types, InferredTypes) and (defer or is_windowed(proto, main_nodes)):
        types.defer(run)
    else:
        run()
