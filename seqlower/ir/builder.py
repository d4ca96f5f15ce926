"""The one place new nodes are made: an opset-aware builder.

Every lowering emits through :class:`Builder`, so the opset rules live here and
nowhere else (SEMANTICS.md, "Opset rules for emitted nodes"):

- ``Split``: ``split`` is an attribute up to opset 12 and an input from 13; from 18
  ``num_outputs`` also exists, but onnxruntime rejects uneven ``num_outputs``
  splits, so explicit sizes are always emitted.
- ``Squeeze`` / ``Unsqueeze``: ``axes`` attribute up to 12, input from 13.
- ``ReduceSum``: ``axes`` input from 13; the other Reduce ops from 18.

- Every node is held to onnx's schema of its op at the graph's opset as it is made: the
  op exists there and takes its inputs' dtypes (``unsupported``). ``Max``/``Min`` on
  integers below opset 12 (which has them for floats only) are written with
  ``Greater``/``Less`` and ``Where``; anything else the schema refuses is an internal
  error naming the op, never a model the checker refuses.

The model's opset is never changed. Outputs get a dtype and, where it can be computed,
a shape, so lowered values are shape-inferred as they are made. Constants go to
initializers in the main graph and to ``Constant`` nodes in subgraphs and functions
(functions have no initializers; subgraph initializers are legal but rarer in the
wild, so runtimes handle them less well).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from seqlower.keys import RESERVED_NAMES_KEY
from seqlower.ir.helpers import graphs_of, subgraphs

__all__ = ["Builder", "NameAuthority", "ai_onnx_opset", "default_opset", "type_string", "unsupported"]

logger = logging.getLogger(__name__)


def ai_onnx_opset(model: ir.Model, graph: ir.Graph | ir.Function | None = None) -> int | None:
    """The ai.onnx opset in force in ``graph`` (a function may import its own); None where
    none is imported (an ml-only model: no ai.onnx op is in it, none may be emitted)."""
    if isinstance(graph, ir.Function):
        v = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx"))
        if v is not None:
            return v
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def default_opset(model: ir.Model, graph: ir.Graph | ir.Function | None = None) -> int:
    """``ai_onnx_opset``, where a pass is about to emit ai.onnx ops."""
    v = ai_onnx_opset(model, graph)
    if v is None:
        raise ValueError("the model imports no ai.onnx opset")
    return v


class NameAuthority:
    """Unique, readable, deterministic names across the whole model (all graphs and
    functions share one namespace, so a subgraph never shadows an outer name)."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self._scanned: set[str] | None = None  # (taken on the first name asked: most passes ask none)
        self._counters: dict[str, int] = {}
        # Small constants already emitted, per graph: (graph id, dtype, shape, bytes) ->
        # value, so a lowering emits one `axes = [0]` per graph, not one per chunk.
        self.constant_pool: dict[tuple[int, str, tuple[int, ...], bytes], ir.Value] = {}

    @property
    def _used(self) -> set[str]:
        if self._scanned is None:
            self._scanned = _names_in(self._model)
        return self._scanned

    def fresh(self, base: str) -> str:
        base = base or "v"
        if base not in self._used:
            self._used.add(base)
            return base
        n = self._counters.get(base, 0)
        while True:
            n += 1
            cand = f"{base}_{n}"
            if cand not in self._used:
                self._counters[base] = n
                self._used.add(cand)
                return cand


def _names_in(model: ir.Model) -> set[str]:
    """Every name the model uses: its graphs', functions' and subgraphs' inputs,
    initializers, nodes and values, and the names a region's sub-model reserves."""
    # A region's sub-model (seqlower.fastpath.regions) carries the names the rest of the model uses.
    used: set[str] = set(model.meta.get(RESERVED_NAMES_KEY, ()))
    graphs: list[ir.Graph | ir.Function] = list(graphs_of(model))
    for f in model.functions.values():
        graphs.append(f)
        graphs.extend(sub for node in ir.traversal.RecursiveGraphIterator(f) for sub in subgraphs(node))
    for g in graphs:
        used.update(v.name for v in g.inputs)
        if isinstance(g, ir.Graph):
            used.update(g.initializers)
        for node in g:
            used.add(node.name)
            used.update(v.name for v in node.outputs)
    used.discard(None)
    used.discard("")
    return used


@functools.cache
def _schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


@functools.cache
def unsupported(op: str, opset: int, types: tuple[str | None, ...]) -> str | None:
    """Why the default-domain ``op`` at ``opset`` does not take inputs of ``types`` (onnx's
    type strings, ``tensor(int64)``; None: unknown, not checked), or None when it does, by
    onnx's own schemas."""
    schema = _schema(op, opset)
    if schema is None:
        return f"{op} does not exist at opset {opset}"
    if schema.deprecated:
        return f"{op} is deprecated at opset {opset}"
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = schema.inputs
    for i, name in enumerate(types):
        if name is None or not formals:
            continue
        formal = formals[min(i, len(formals) - 1)]
        if name not in allowed.get(formal.type_str, {formal.type_str}):
            return f"{op}-{schema.since_version} (in force at opset {opset}) does not take {name} as input {i}"
    return None


def type_string(t: ir.TypeProtocol | None) -> str | None:
    """onnx's name of a type (``tensor(float16)``, ``seq(tensor(int64))``), None where a
    part is unknown."""
    if isinstance(t, ir.TensorType):
        return f"tensor({t.dtype.name.lower()})" if t.dtype != ir.DataType.UNDEFINED else None
    if isinstance(t, (ir.SequenceType, ir.OptionalType)):
        inner = type_string(t.elem_type)
        kind = "seq" if isinstance(t, ir.SequenceType) else "optional"
        return f"{kind}({inner})" if inner is not None else None
    return None


def _dtypes(inputs: Sequence[ir.Value | None]) -> tuple[str | None, ...]:
    return tuple(type_string(v.type) if v is not None else None for v in inputs)


# Another form of an op the target refuses: (builder, op, inputs, name, dtype, shape,
# attrs) -> the value it writes instead, or None to write the op as it is.
Legalize = Callable[..., "ir.Value | None"]


class Builder:
    """Emits default-domain nodes before ``anchor`` in ``graph`` (or appends when
    ``anchor`` is None), under the given opset."""

    def __init__(
        self,
        graph: ir.Graph | ir.Function,
        anchor: ir.Node | None,
        opset: int,
        names: NameAuthority,
        *,
        main_graph: bool,
        after: ir.Node | None = None,
        legalize: Legalize | None = None,
    ) -> None:
        self.graph = graph
        self.anchor = anchor
        # Emit after this node instead (advancing, so emitted nodes keep their order).
        self.after = after
        self.opset = opset
        self.names = names
        self.main_graph = main_graph
        self.nodes: list[ir.Node] = []
        # Asked before each op is written: another form of an op the target refuses, or None.
        self.legalize = legalize

    # -- plumbing -----------------------------------------------------------------

    def _emit(
        self,
        op: str,
        inputs: Sequence[ir.Value | None],
        attrs: dict[str, object] | None = None,
        *,
        outputs: Sequence[str],
        node_name: str,
    ) -> ir.Node:
        if why := unsupported(op, self.opset, _dtypes(inputs)):
            raise ValueError(f"the lowering would emit an op its opset refuses: {why} (internal error)")
        attributes = [ir.convenience.convert_attribute(k, v) for k, v in (attrs or {}).items()]
        node = ir.Node(
            "",
            op,
            inputs,
            attributes,
            outputs=[ir.Value(name=self.names.fresh(n)) for n in outputs],
            name=self.names.fresh(node_name),
        )
        if self.after is not None:
            self.graph.insert_after(self.after, node)
            self.after = node
        elif self.anchor is None:
            self.graph.append(node)
        else:
            self.graph.insert_before(self.anchor, node)
        self.nodes.append(node)
        return node

    @staticmethod
    def _typed(v: ir.Value, dtype: ir.DataType | None, shape: ir.Shape | None) -> ir.Value:
        if dtype is not None:
            v.type = ir.TensorType(dtype)
        v.shape = shape
        return v

    def constant(self, array: np.ndarray, name: str) -> ir.Value:
        key = None
        if array.size <= 64 and array.dtype != object:
            key = (id(self.graph), str(array.dtype), tuple(array.shape), array.tobytes())
            hit = self.names.constant_pool.get(key)
            if hit is not None and self._still_here(hit):
                return hit
        v = self._new_constant(array, name)
        if key is not None:
            self.names.constant_pool[key] = v
        return v

    def _still_here(self, v: ir.Value) -> bool:
        """Whether a pooled constant is still in this graph: a rewrite may have removed
        its Constant node since, or the graph it was made in is gone and another took its
        id (a SequenceMap body lowered into a Loop read a constant no graph held)."""
        producer = v.producer()
        if producer is not None:
            # A Constant node (in a subgraph) must also come before what this builder
            # emits: a rule anchored earlier in the body than the rule that made it would
            # read it before it is defined (a map body's lists, Flat: program 7300358).
            return producer.graph is self.graph and self._precedes(producer)
        return isinstance(self.graph, ir.Graph) and self.graph.initializers.get(v.name) is v  # type: ignore[arg-type]

    def _precedes(self, node: ir.Node) -> bool:
        """Whether ``node`` comes before where this builder emits."""
        at = self.after if self.after is not None else self.anchor
        if at is None:
            return True  # (appended at the end)
        if at is node:
            return self.after is node
        for n in self.graph:
            if n is node:
                return True
            if n is at:
                return False
        return False

    def _new_constant(self, array: np.ndarray, name: str) -> ir.Value:
        if array.dtype == object or array.dtype.kind in "SU":
            # onnx_ir serializes strings only from a StringTensor of bytes.
            data = np.array([s.encode() if isinstance(s, str) else bytes(s) for s in array.reshape(-1)], dtype=object)
            tensor: ir.TensorProtocol = ir.StringTensor(data.reshape(array.shape))
        else:
            tensor = ir.tensor(array)
        if self.main_graph:
            v = ir.Value(
                name=self.names.fresh(name),
                type=ir.TensorType(tensor.dtype),
                shape=ir.Shape(array.shape),
                const_value=tensor,
            )
            assert isinstance(self.graph, ir.Graph)
            self.graph.register_initializer(v)
            return v
        node = self._emit("Constant", [], {"value": tensor}, outputs=[name], node_name=f"{name}_const")
        # Named as its output: what onnx_ir writes once the value is ever an initializer
        # (a lowering of the lowered model must give the same bytes).
        tensor.name = node.outputs[0].name
        return self._typed(node.outputs[0], tensor.dtype, ir.Shape(array.shape))

    def ints(self, values: Sequence[int], name: str) -> ir.Value:
        return self.constant(np.asarray(list(values), dtype=np.int64), name)

    def op(
        self,
        op: str,
        inputs: Sequence[ir.Value | None],
        name: str,
        dtype: ir.DataType | None = None,
        shape: ir.Shape | Sequence[int | str | None] | None = None,
        **attrs: object,
    ) -> ir.Value:
        """One single-output node (default domain); ``dtype`` defaults to the first input's."""
        if self.legalize is not None and (made := self.legalize(self, op, inputs, name, dtype, shape, attrs)) is not None:
            return made
        if op in ("Max", "Min") and len(inputs) == 2 and unsupported(op, self.opset, _dtypes(inputs)):
            # Integer Max/Min exist from opset 12 only.
            a, b = inputs
            assert a is not None and b is not None
            pick = self.op("Greater" if op == "Max" else "Less", [a, b], f"{name}_first", ir.DataType.BOOL)
            return self.op("Where", [pick, a, b], name, dtype, shape)
        node = self._emit(op, inputs, attrs, outputs=[name], node_name=f"{name}_{op.lower()}")
        source = inputs[1] if op == "Where" else inputs[0] if inputs else None
        if dtype is None and source is not None:
            dtype = source.dtype
        if shape is not None and not isinstance(shape, ir.Shape):
            shape = ir.Shape(list(shape))
        return self._typed(node.outputs[0], dtype, shape)

    def reduce(self, op: str, x: ir.Value, axes: Sequence[int] | None, name: str, keepdims: bool) -> ir.Value:
        """ReduceSum/ReduceProd/...; ``axes`` None reduces everything."""
        axes_input = self.opset >= (13 if op == "ReduceSum" else 18)
        attrs: dict[str, object] = {"keepdims": int(keepdims)}
        inputs: list[ir.Value | None] = [x]
        if axes is not None:
            if axes_input:
                inputs.append(self.ints(list(axes), f"{name}_axes"))
            else:
                attrs["axes"] = [int(a) for a in axes]
        return self.op(op, inputs, name, **attrs)

    def slice(self, x: ir.Value, starts: ir.Value, ends: ir.Value, axes: Sequence[int] | ir.Value, name: str) -> ir.Value:
        axes_v = axes if isinstance(axes, ir.Value) else self.ints(list(axes), f"{name}_axes")
        return self.op("Slice", [x, starts, ends, axes_v], name)

    # -- ops ----------------------------------------------------------------------

    def identity(self, x: ir.Value, name: str) -> ir.Value:
        if self.legalize is not None and isinstance(x.type, ir.TensorType) \
                and (made := self.legalize(self, "Identity", [x], name, x.dtype, x.shape, {})) is not None:
            return made
        node = self._emit("Identity", [x], outputs=[name], node_name=f"{name}_identity")
        out = node.outputs[0]
        out.type, out.shape = x.type, x.shape  # a sequence stays a sequence
        return out

    def zeros(self, dtype: ir.DataType, shape: Sequence[int], name: str) -> ir.Value:
        """A constant of zeros (empty strings for STRING) of any dtype."""
        if dtype == ir.DataType.STRING:
            return self.constant(np.full(tuple(shape), "", dtype=object), name)
        return self.constant(np.zeros(tuple(shape), dtype=dtype.numpy()), name)

    def split(
        self, x: ir.Value, sizes: Sequence[int], axis: int, names: Sequence[str], node_name: str
    ) -> list[ir.Value]:
        """Split with explicit sizes along a non-negative ``axis``."""
        sizes = [int(s) for s in sizes]
        if self.opset <= 12:
            node = self._emit("Split", [x], {"axis": axis, "split": sizes}, outputs=names, node_name=node_name)
        else:
            split = self.ints(sizes, f"{node_name}_sizes")
            node = self._emit("Split", [x, split], {"axis": axis}, outputs=names, node_name=node_name)
        outs = []
        for v, size in zip(node.outputs, sizes):
            shape = None
            if x.shape is not None:
                dims = list(x.shape.dims)
                dims[axis] = size
                shape = ir.Shape(dims)
            outs.append(self._typed(v, x.dtype, shape))
        return outs

    def squeeze(self, x: ir.Value, axes: Sequence[int], name: str) -> ir.Value:
        node = self._axes_op("Squeeze", x, axes, name)
        shape = None
        if x.shape is not None:
            drop = {a % x.shape.rank() for a in axes}
            shape = ir.Shape([d for i, d in enumerate(x.shape.dims) if i not in drop])
        return self._typed(node.outputs[0], x.dtype, shape)

    def unsqueeze(self, x: ir.Value, axes: Sequence[int], name: str) -> ir.Value:
        node = self._axes_op("Unsqueeze", x, axes, name)
        shape = None
        if x.shape is not None:
            rank = x.shape.rank() + len(axes)
            ins = {a % rank for a in axes}
            it = iter(x.shape.dims)
            shape = ir.Shape([1 if i in ins else next(it) for i in range(rank)])
        return self._typed(node.outputs[0], x.dtype, shape)

    def reshape(self, x: ir.Value, dims: Sequence[int], name: str, shape: ir.Shape | Sequence | None = None) -> ir.Value:
        """``x`` reshaped to the constant ``dims`` (an attribute before opset 5)."""
        dims = [int(d) for d in dims]
        if self.opset < 5:
            node = self._emit("Reshape", [x], {"shape": dims}, outputs=[name], node_name=f"{name}_reshape")
        else:
            node = self._emit("Reshape", [x, self.ints(dims, f"{name}_dims")], outputs=[name], node_name=f"{name}_reshape")
        return self._typed(node.outputs[0], x.dtype, shape)

    def _axes_op(self, op: str, x: ir.Value, axes: Sequence[int], name: str) -> ir.Node:
        axes = [int(a) for a in axes]
        if self.opset <= 12:
            return self._emit(op, [x], {"axes": axes}, outputs=[name], node_name=f"{name}_{op.lower()}")
        axes_v = self.ints(axes, f"{name}_axes")
        return self._emit(op, [x, axes_v], outputs=[name], node_name=f"{name}_{op.lower()}")

    def concat(self, xs: Sequence[ir.Value], axis: int, name: str, shape: ir.Shape | None) -> ir.Value:
        node = self._emit("Concat", list(xs), {"axis": axis}, outputs=[name], node_name=f"{name}_concat")
        return self._typed(node.outputs[0], xs[0].dtype, shape)
