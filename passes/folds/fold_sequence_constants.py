"""Fold what the sequence analysis proves constant, wherever the sequence itself stays.

1. ``SequenceLength`` whose sequence has a known length -> an int64 constant, even when
   the elements are unknown (``SplitToSequence`` with a constant 1-D split, a
   length-preserving Loop...).
2. ``SequenceAt`` at a constant position of a known constant element -> that constant.
3. ``ConcatFromSequence`` of a sequence whose every element is constant -> the constant.
4. ``ReverseSequence`` with constant inputs -> the constant.

Sequences lowered Unrolled fold as they are lowered (``lower_unrolled_sequences``);
this pass covers the ones that stay sequences (dynamic webs, model boundaries), so the
report shows fewer ops left for Stage 3.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from seqlower.passes._rewrite import REPORT_KEY, Scope, replace_output, rewrite_record, subgraph_scopes, walk_scopes
from seqlower.analysis.analyzer import Analysis, analyze_reusing, const_array, keep_for_next_pass, const_position, is_default_domain, node_label
from seqlower.ir.builder import NameAuthority
from seqlower.errors import ModelError

__all__ = ["FoldSequenceConstantsPass", "reverse_sequence"]

logger = logging.getLogger(__name__)


# Where a tensor read out of a list flows without the analysis reading its value: into a
# list as an element (the analysis took the element's constant from the read), or into
# tensor ops it does not look into. Control flow and positions read constants anew.
_READS_CONSTANTS = frozenset({"Loop", "If", "Scan", "SequenceMap", "SequenceAt", "SequenceInsert", "SequenceErase",
                              "SplitToSequence", "ConcatFromSequence", "SequenceLength", "SequenceEmpty", "ReverseSequence"})


def _still_holds(node: ir.Node, value: np.ndarray, analysis: Analysis) -> bool:
    """Whether ``analysis`` still describes the model once ``node`` is folded to
    ``value``: a SequenceAt whose constant the analysis knew (``consts_of``), read only
    where the analysis uses that constant as it is. Removing a read at a constant
    position changes no list and no decision."""
    out = node.outputs[0]
    if node.op_type != "SequenceAt" or analysis.consts_of.get(out) is not value:
        return False
    for use in out.uses():
        reader = use.node
        if not is_default_domain(reader):
            return False
        if reader.op_type == "SequenceConstruct" or (reader.op_type == "SequenceInsert" and use.idx == 1):
            continue  # an element
        if reader.op_type in _READS_CONSTANTS or reader.graph is not node.graph:
            return False
    return True


def reverse_sequence(x: np.ndarray, lens: np.ndarray, batch_axis: int, time_axis: int, where: str) -> np.ndarray:
    """ReverseSequence in numpy (SEMANTICS.md): row b's first lens[b] steps reversed."""
    if x.ndim < 2:
        raise ModelError(f"{where}: input must have rank >= 2, got {x.ndim}")
    if {batch_axis, time_axis} != {0, 1}:
        raise ModelError(f"{where}: batch_axis and time_axis must be 0 and 1 in some order")
    if lens.dtype != np.int64 or lens.shape != (x.shape[batch_axis],):
        raise ModelError(f"{where}: sequence_lens must be int64 of shape [{x.shape[batch_axis]}]")
    steps = x.shape[time_axis]
    out = x.copy()
    for b, n in enumerate(lens.tolist()):
        if not 0 <= n <= steps:
            raise ModelError(f"{where}: sequence_lens[{b}] = {n} is out of range [0, {steps}]")
        idx = [slice(None)] * x.ndim
        idx[batch_axis] = b
        idx[time_axis] = slice(0, n)
        src = [slice(None)] * x.ndim
        src[batch_axis] = b
        src[time_axis] = slice(n - 1, None, -1) if n else slice(0, 0)
        out[tuple(idx)] = x[tuple(src)]
    return out


class FoldSequenceConstantsPass(ir.passes.InPlacePass):
    """Replace sequence reads and ReverseSequence by constants where the analysis proves them."""

    def __init__(self, keepdims_policy: str = "auto", max_unroll: int = 0, packed: bool = True) -> None:
        super().__init__()
        self.keepdims_policy = keepdims_policy
        # The fold reads only what the analysis knows of each list, not its decisions;
        # analysed as the Unrolled lowering after it will be, so that when nothing folds
        # that lowering reuses this analysis.
        self.params = dict(max_unroll=max_unroll, keepdims_policy=keepdims_policy, packed=packed, runtime_ranks=True)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        analysis = analyze_reusing(model, **self.params)
        names = NameAuthority(model)
        records: list[dict[str, str]] = []
        self.analysis_holds = True
        for scope in walk_scopes(model):
            self._graph(scope, analysis, names, records)
        model.meta.setdefault(REPORT_KEY, []).extend(records)
        if self.analysis_holds:
            keep_for_next_pass(model, analysis, **self.params)
        return ir.passes.PassResult(model, bool(records))

    def _graph(self, scope: Scope, analysis: Analysis, names: NameAuthority, records: list[dict[str, str]]) -> None:
        folded: list[ir.Node] = []
        for node in list(scope.graph):
            for sub in subgraph_scopes(node, scope):
                self._graph(sub, analysis, names, records)
            if not is_default_domain(node):
                continue
            value = self._try_fold(node, analysis)
            if value is None:
                continue
            out = node.outputs[0]
            self.analysis_holds &= _still_holds(node, value, analysis)
            b = scope.builder(node, names)
            new = b.constant(value, out.name or "folded")
            replace_output(out, new, scope, names, node, owned=not scope.main)
            records.append(rewrite_record(node, scope, "constant", "folded"))
            folded.append(node)
        for node in reversed(folded):
            scope.graph.remove(node, safe=True)

    def _try_fold(self, node: ir.Node, analysis: Analysis) -> np.ndarray | None:
        op = node.op_type
        if op == "ReverseSequence":
            return self._try_reverse_sequence(node)
        if op not in ("SequenceLength", "SequenceAt", "ConcatFromSequence") or not node.inputs:
            return None
        info = analysis.info.get(node.inputs[0]) if node.inputs[0] is not None else None
        if info is None or info.length is None:
            return None
        if op == "SequenceLength":
            return np.array(info.length, dtype=np.int64)
        if op == "SequenceAt":
            pos = const_position(node.inputs[1], node) if len(node.inputs) > 1 else None
            if pos is None or not -info.length <= pos < info.length or info.consts is None:
                return None
            return info.consts[pos]
        if not info.all_const or info.length == 0:
            return None
        axis = node.attributes["axis"].as_int() if "axis" in node.attributes else None
        if axis is None:
            return None
        new_axis = node.attributes["new_axis"].as_int() if "new_axis" in node.attributes else 0
        arrays = list(info.consts or ())
        try:
            out = np.stack(arrays, axis=axis) if new_axis else np.concatenate(arrays, axis=axis)
        except (ValueError, np.exceptions.AxisError) as e:
            raise ModelError(f"{node_label(node)}: elements do not fit together ({e})") from None
        return out.astype(arrays[0].dtype, copy=False)

    def _try_reverse_sequence(self, node: ir.Node) -> np.ndarray | None:
        if len(node.inputs) != 2:
            return None
        x, lens = const_array(node.inputs[0]), const_array(node.inputs[1])
        if x is None or lens is None:
            return None
        batch_axis = node.attributes["batch_axis"].as_int() if "batch_axis" in node.attributes else 1
        time_axis = node.attributes["time_axis"].as_int() if "time_axis" in node.attributes else 0
        return reverse_sequence(x, lens, batch_axis, time_axis, node_label(node))
