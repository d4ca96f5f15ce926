"""Export small PyTorch models that use lists, as committed test fixtures.

    pip install torch==2.13.0        # not a dependency of seqlower or of its tests
    python tools/export_models.py    # writes tests/data/exported/*

Every model is exported with dynamic axes, then run eagerly at several sizes of every
dynamic dim, 0 and 1 included. For each model, exporter and opset this writes
``<name>.onnx`` and ``<name>.cases.npz``: case ``k`` stores input ``x`` under
``k/in/x`` and PyTorch's eager output ``y`` under ``k/out/y``. Only exports that
contain sequence ops are kept: the point is models as exporters really emit them.
TorchScript (``dynamo=False``) emits sequences for scripted list code; dynamo emits
them for ``split``/``chunk`` (with its optimizer off) and for ``embedding_bag``.
"""

from __future__ import annotations

import argparse
import io
import logging
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import onnx

SEQUENCE_OPS = {
    "SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceMap", "SequenceEmpty",
    "SequenceConstruct", "SequenceAt", "SequenceLength", "ConcatFromSequence",
}
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported"
# (n, w) sizes for a model over x[n, w]: each dim takes 0 and 1 somewhere.
NW_SIZES = [(0, 3), (1, 3), (2, 1), (5, 3), (3, 0), (1, 1)]


class Spec(NamedTuple):
    name: str
    module: Any
    cases: list[tuple]  # eager arguments; the first is the export example
    dynamic: dict[str, dict[int, str]]  # input name -> {axis: dim name}
    exporter: str
    opsets: tuple[int, ...]


def _script_models() -> list[Spec]:
    import torch
    from typing import List

    @torch.jit.script
    def split_insert_loop_cat(x: torch.Tensor) -> torch.Tensor:
        parts = x.split(2, dim=0)
        out: List[torch.Tensor] = [x[:1]]
        for p in parts:
            out.insert(0, p * 2)
        return torch.cat(out, 0) + len(parts)

    @torch.jit.script
    def unbind_del_append_stack(x: torch.Tensor) -> torch.Tensor:
        rows = x.unbind(0)
        picked: List[torch.Tensor] = [x.sum(0), x.sum(0) * 2]
        for i in range(len(rows)):
            picked.append(rows[i] * i)
        del picked[0]
        return torch.stack(picked, 1)

    @torch.jit.script
    def chunk_pop_cat(x: torch.Tensor) -> torch.Tensor:
        parts = list(x.chunk(3, dim=1))
        last = parts.pop()
        parts[0] = parts[0] * 2
        return torch.cat(parts, 1) - last.sum()

    @torch.jit.script
    def list_mutations_loop(x: torch.Tensor) -> torch.Tensor:
        # A setitem under an `if` inside a loop is dropped by the TorchScript exporter
        # (both If branches become Identity), so this one is unconditional.
        out: List[torch.Tensor] = [x.sum(0)]
        for i in range(x.size(0)):
            out.append(x[i] * i)
            out[0] = out[0] + x[i]
            if i % 3 == 1:
                out.insert(0, x[i] + 1)
            if i % 4 == 2:
                del out[1]
            if i % 5 == 3:
                out.pop()
        last = out.pop()
        return torch.cat(out + [last], 0)

    @torch.jit.script
    def conditional_append_cat(x: torch.Tensor) -> torch.Tensor:
        out: List[torch.Tensor] = [torch.zeros(1, x.size(1))]
        for r in x.unbind(0):
            if bool(r.sum() > 0):
                out.append(r.unsqueeze(0))
        return torch.cat(out, 0)

    @torch.jit.script
    def nested_list_loops(x: torch.Tensor) -> torch.Tensor:
        outer: List[torch.Tensor] = []
        for i in range(x.size(0)):
            inner: List[torch.Tensor] = []
            for j in range(x.size(1)):
                inner.append(x[i, j] * j)
            outer.append(torch.stack(inner + [x[i].sum()], 0))
        return torch.stack(outer + [torch.zeros(x.size(1) + 1)], 0)

    @torch.jit.script
    def split_dynamic_sizes(x: torch.Tensor) -> torch.Tensor:
        n = x.size(0)
        parts = x.split([n // 2, n - n // 2], 0)
        return torch.cat([parts[1], parts[0] * 2], 0)

    @torch.jit.script
    def chunk_dynamic_dim(x: torch.Tensor) -> torch.Tensor:
        parts = x.chunk(3, 1)
        return torch.cat([parts[-1], parts[0]], 1)

    @torch.jit.script
    def nonzero_rows_loop(x: torch.Tensor) -> torch.Tensor:
        # Per-row data-dependent sizes: the indices of each row's positive entries.
        out: List[torch.Tensor] = []
        for i in range(x.size(0)):
            idx = torch.nonzero(x[i] > 0)
            out.append(idx.squeeze(1) + i * 10)
        return torch.cat(out + [torch.zeros(1, dtype=torch.long)], 0)

    @torch.jit.script
    def loop_collect_steps(x: torch.Tensor) -> torch.Tensor:
        h = x.sum(0) * 0
        steps: List[torch.Tensor] = []
        for t in range(x.size(0)):
            h = torch.tanh(x[t] + 0.5 * h)
            steps.append(h)
        steps.append(h * 2)
        return torch.stack(steps, 0)

    @torch.jit.script
    def list_under_if_split(x: torch.Tensor) -> torch.Tensor:
        # The list's length depends on the branch taken; then its concat is split again.
        if bool(x.sum() > 0):
            out: List[torch.Tensor] = [x * 2.0, x, x + 1.0]
        else:
            out = [x - 1.0]
        parts = torch.cat(out, 0).split(2, 0)
        return torch.cat([parts[-1], parts[0] * 3.0], 0)

    def wrap(fn: Callable) -> torch.nn.Module:
        class Scripted(torch.nn.Module):
            def forward(self, x):
                return fn(x)

        return Scripted()

    g = torch.Generator().manual_seed(0)

    def nw(sizes=NW_SIZES):
        return [(torch.randn(n, w, generator=g),) for n, w in sizes]

    both = {"x": {0: "n", 1: "w"}}
    ts = []
    for fn, cases, dynamic in [
        (split_insert_loop_cat, nw(), both),
        (unbind_del_append_stack, nw(), both),
        (chunk_pop_cat, nw([(2, 6), (0, 6), (1, 6), (4, 6)]), {"x": {0: "n"}}),
        (list_mutations_loop, nw([(6, 2), (0, 3), (1, 1), (9, 0), (12, 3)]), both),
        (conditional_append_cat, nw(), both),
        (nested_list_loops, nw(), both),
        (split_dynamic_sizes, nw(), both),
        # Only the w where the export is faithful (see EXPORTER_LIMITS).
        (chunk_dynamic_dim, nw([(2, 7), (2, 0), (0, 5), (1, 3), (3, 6), (1, 5)]), both),
        (loop_collect_steps, nw(), both),
        (nonzero_rows_loop, nw(), both),
        (list_under_if_split, nw([(3, 2), (1, 3), (1, 1), (4, 0), (5, 3), (2, 4)]), both),
    ]:
        ts.append(Spec(f"ts_{fn.name}", wrap(fn), cases, dynamic, "torchscript", (13, 17)))
    return ts


def _fuzz_regressions() -> list[Spec]:
    """Programs tools/fuzz_torch.py found failing (the seed in each name), each exported at
    the opset it failed at. They are the regression tests of what was fixed."""
    import torch
    from typing import List, Tuple

    @torch.jit.script
    def guarded_pop_of_empty_1039(x: torch.Tensor) -> torch.Tensor:
        # The pop's branch reads an empty list when it is not taken: no error there.
        l1: List[torch.Tensor] = []
        l2: List[torch.Tensor] = list(x.unbind(1))
        if len(l1) > 0:
            del l1[len(l1) - 1]
        x = x + float(len(l1))
        return torch.cat(l1 + [x[:0]], 0) + torch.stack(l2 + [x.sum(1)], 0).sum()

    @torch.jit.script
    def split_or_chunk_then_loop_1070(x: torch.Tensor) -> torch.Tensor:
        # chunk's run-time sizes are a Concat whose rank onnx does not infer.
        if bool(x.sum() > 1.0):
            a2: List[torch.Tensor] = list(x.split(1, 1))
        else:
            a2 = list(x.chunk(2, 1))
        m4: List[torch.Tensor] = []
        for b3 in a2:
            m4.append(b3 * 2.0)
        return torch.cat(m4 + [x[:, :0]], 1)

    @torch.jit.script
    def unbind_rewritten_in_loop_1136(x: torch.Tensor) -> torch.Tensor:
        # The unbound rows (squeezed by the keepdims policy) carried through a Loop.
        l1: List[torch.Tensor] = list(x.unbind(0))
        for i in range(len(l1)):
            l1[i] = l1[i] * 2.0 + float(i)
        m2: List[torch.Tensor] = []
        for i, t in enumerate(l1):
            m2.append(t.sum() * float(i + 1))
        if len(m2) > 0:
            del m2[len(m2) - 1]
        return torch.stack(l1 + [x.sum(0)], 1) + torch.stack(m2 + [x.sum()]).sum()

    @torch.jit.script
    def first_chunk_unbound_1021(x: torch.Tensor) -> torch.Tensor:
        l1: List[torch.Tensor] = list(x.split(1, 0)[0].unbind(0))
        if len(l1) > 0:
            del l1[-1]
        m2: List[torch.Tensor] = []
        for t in l1:
            if bool(t.sum() > 0):
                m2.append(t.sum())
        return torch.stack(m2 + [x.sum()])

    @torch.jit.script
    def loops_over_empty_lists_1037(x: torch.Tensor) -> torch.Tensor:
        # A while and a zip over a list nothing appends to: loops that run no iteration.
        l1: List[torch.Tensor] = []
        while len(l1) > 2:
            l1.pop()
        z6 = [t * 2.0 for t in l1]
        m7: List[torch.Tensor] = []
        for a, b in zip(l1, z6):
            m7.append(a - b)
        return torch.cat(m7 + [x[:0]], 0) + x.sum()

    @torch.jit.script
    def rows_of_no_trip_appended_2177(x: torch.Tensor) -> torch.Tensor:
        # A comprehension over no row: a Loop scan output whose trailing dims the spec
        # leaves open after no iteration, unbound and appended to.
        l2: List[torch.Tensor] = [x[i] for i in range(x.size(0))]
        return torch.stack(l2 + [x.sum(0)], 0)

    @torch.jit.script
    def masked_rows_of_no_trip_2282(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        # The same with elements of different lengths (Flat): after no iteration the scan
        # output may have another rank than the body's output.
        l1: List[torch.Tensor] = [x[i][x[i] > 0] for i in range(x.size(0))]
        m2: List[torch.Tensor] = []
        for t in l1:
            m2.append(t.sum())
        return torch.cat(l1 + [x.reshape(-1)[:1]], 0), (m2 + [x.sum()])[0]

    @torch.jit.script
    def one_chunk_appended_2352(x: torch.Tensor) -> torch.Tensor:
        # chunk(1)'s sizes hold an Expand to a computed [0]: onnxruntime's optimizer
        # counts it as one element once the lowering reads the sizes' Shape.
        l2: List[torch.Tensor] = list(x.chunk(1, 0))
        for i in range(x.size(0)):
            l2.append(x[i : i + 1] * float(i))
        return torch.cat(l2 + [x.sum(0, keepdim=True)], 0)

    @torch.jit.script
    def unbind_or_sum_under_if_2255(x: torch.Tensor) -> torch.Tensor:
        # The then branch unbinds (squeezed by the keepdims policy) where the exporter
        # declared the branch's list by the spec: the If's list takes the policy's rank.
        if bool(x.sum() > 0):
            a2: List[torch.Tensor] = list(x.unbind(0))
        else:
            a2 = [x.sum(0)]
        m4: List[torch.Tensor] = []
        for b3 in a2:
            m4.append(b3 * 2.0)
        for i in range(len(m4)):
            m4[i] = m4[i] * 2.0 + float(i)
        return torch.stack(m4 + [x.sum(0)], 1)

    @torch.jit.script
    def zip_of_empty_lists_2436(x: torch.Tensor) -> torch.Tensor:
        # zip's trip count is a min of constant lengths (0): the loop reading an empty
        # list of elements of no known rank runs no iteration.
        l2: List[torch.Tensor] = []
        z5 = [t * 2.0 for t in l2]
        m6: List[torch.Tensor] = []
        for a, b in zip(l2, z5):
            m6.append(a - b)
        return torch.cat(m6 + [x.sum(0, keepdim=True)], 0)

    @torch.jit.script
    def columns_joined_along_them_2561(x: torch.Tensor) -> torch.Tensor:
        # A Loop growing a list of columns, then a chain of Concats: OpenVINO read
        # garbage from the If that guarded the Loop against no iteration.
        l1: List[torch.Tensor] = [x[:, j : j + 1] for j in range(x.size(1))]
        l2: List[torch.Tensor] = [x, x[:, :1]]
        l1 = l1 + l2
        return torch.cat(l1 + [x[:, :0]], 1)

    @torch.jit.script
    def row_prefixes_appended_under_if_2258(x: torch.Tensor) -> torch.Tensor:
        l1: List[torch.Tensor] = [x[i][: i + 1] for i in range(x.size(0))]
        if bool(x.sum() > 0):
            l1.append(x.reshape(-1)[:3])
        else:
            l1 = l1 + [x.reshape(-1)[:3]]
        if len(l1) > 0:
            l1.pop()
        m2: List[torch.Tensor] = []
        for t in l1:
            m2.append(t * 3.0)
        return torch.cat(m2 + [x.reshape(-1)[:1]], 0)

    @torch.jit.script
    def max_of_unbound_rows_3041(x: torch.Tensor) -> torch.Tensor:
        # The unbound list's input has no declared shape yet when the keepdims policy is
        # applied (x * scale): the squeeze is written in the spec's form all the same.
        x = x * torch.tensor([1.5])
        l1: List[torch.Tensor] = [r.max() for r in x.unbind(0)]
        return torch.stack(l1 + [x.sum()])

    @torch.jit.script
    def columns_kept_when_positive_3134(x: torch.Tensor) -> torch.Tensor:
        # Static shapes: the loop over the columns is unrolled for OpenVINO, into Ifs of
        # [?, 5] lists (run as selects) and the Shapes of its empty start (folded).
        l1: List[torch.Tensor] = list(x.split(1, 1))
        x = x + float(len(l1))
        m2: List[torch.Tensor] = []
        for t in l1:
            if bool(t.sum() > 0):
                m2.append(t.sum(1))
        if bool(x.sum() > 0):
            m2.append(x.sum(1))
        else:
            m2 = m2 + [x.sum(1) * 3.0]
        return torch.stack(m2 + [x.sum(1)], 1)

    @torch.jit.script
    def columns_rewritten_in_loop_4845(x: torch.Tensor) -> torch.Tensor:
        # Static shapes: the Loop body declares its list as the last append's [5, 3],
        # where three of four elements are [5, 1] columns.
        l2: List[torch.Tensor] = [x[:, j : j + 1] for j in range(x.size(1))]
        l2.append(x * 0.5)
        for i in range(len(l2)):
            l2[i] = l2[i] * 2.0 + float(i)
        if len(l2) > 0:
            l2[len(l2) - 1] = x[:, :1]
        return torch.cat(l2 + [x[:, :0]], 1)

    @torch.jit.script
    def chunks_and_rows_under_if_4773(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        # Static shapes: both If branches declare their list as the [1, 3] row each appends.
        l1: List[torch.Tensor] = list(x.split(3, 0))
        for i in range(x.size(0)):
            l1.append(x[i : i + 1] * float(i))
        if bool(x.sum() > 0):
            l1.append(x[:1])
        else:
            l1 = l1 + [x[:1]]
        m2: List[torch.Tensor] = []
        for t in l1:
            if bool(t.sum() > 0):
                m2.append(t * 2.0)
        return torch.cat(l1 + [x.sum(0, keepdim=True)], 0), torch.cat(m2 + [x.sum(0, keepdim=True)], 0)

    @torch.jit.script
    def row_masks_zipped_6244(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        # Static shapes: each row keeps its own number of values, and the lists the Ifs
        # return are declared at one of them.
        l1: List[torch.Tensor] = [torch.nonzero(x[i] > 0).squeeze(1).float() for i in range(x.size(0))]
        if bool(x.sum() > 0):
            l1.append(x.reshape(-1)[:3])
        else:
            l1 = l1 + [x.reshape(-1)[:3]]
        z2 = [t * 2.0 for t in l1]
        m3: List[torch.Tensor] = []
        for a, b in zip(l1, z2):
            m3.append(a - b)
        if x.size(0) > 2:
            m3.append(x.sum(0)[x.sum(0) > 0])
        else:
            m3.insert(0, x.reshape(-1)[:3])
        return torch.cat(l1 + [x.reshape(-1)[:1]], 0), torch.cat(m3 + [x.reshape(-1)[:1]], 0)

    @torch.jit.script
    def rows_popped_then_zipped_5447(x: torch.Tensor) -> torch.Tensor:
        # The while loop's list of rows may run no iteration: OpenVINO's zero-trip sizing
        # sliced its [?, 2] shape rows on both axes, and a row read from them was of
        # dynamic rank there (a Reshape its CPU plugin refuses).
        x = x * torch.tensor([1.5])
        l1: List[torch.Tensor] = [x[i : i + 1] for i in range(x.size(0))]
        while len(l1) > 1:
            l1.pop()
        z3 = [t * 2.0 for t in l1]
        m4: List[torch.Tensor] = []
        for a, b in zip(l1, z3):
            m4.append(a - b)
        m5: List[torch.Tensor] = []
        for i, t in enumerate(m4):
            m5.append(t * 2.0 * float(i + 1))
        return torch.cat(m5 + [x.sum(0, keepdim=True)], 0)

    @torch.jit.script
    def empty_rows_appended_5166(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        # x[:0] unsqueezed into an empty list's data: OpenVINO gave that Unsqueeze of
        # an empty slice [1, 0, 0] where ONNX says [1, 0, w], and the Concat failed.
        l1: List[torch.Tensor] = []
        if len(l1) > 1:
            l1.insert(-1, x * 2.0)
        m2: List[torch.Tensor] = []
        for i, t in enumerate(l1):
            m2.append(t.sum(0) * float(i + 1))
        return torch.cat(m2 + [x.sum(0)], 0), torch.cat(l1 + [x[:0]], 0)

    @torch.jit.script
    def masks_mapped_and_zipped_10323(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        # Lowered for OpenVINO, a row's mask read back from the Flat buffer by a Slice to
        # a computed end, mapped, and its length read as the next list's bounds: OpenVINO
        # took that length for the whole buffer's (wrong numbers, no error).
        x = x * 1.5
        l1: List[torch.Tensor] = [torch.nonzero(x[i] > 0).squeeze(1).float() for i in range(x.size(0))]
        z2 = [t * 2.0 for t in l1]
        m3: List[torch.Tensor] = []
        for a, b in zip(l1, z2):
            m3.append(a - b)
        m3.append(x.reshape(-1)[:3])
        if x.size(0) > 0:
            l1.append(x.sum(0)[x.sum(0) > 0])
        return torch.cat(m3 + [x.reshape(-1)[:1]], 0), torch.cat(l1 + [x.reshape(-1)[:1]], 0)

    @torch.jit.script
    def mapped_then_summed_4603(x: torch.Tensor) -> torch.Tensor:
        # The second loop's trip count is the first list's length, a constant only once
        # that list is lowered: for tract it became a Scan over a constant Range, which
        # tract fails given no rows ("Scan: No scan input").
        l1: List[torch.Tensor] = [x.sum(1), x.sum(1) * 2.0]
        m2: List[torch.Tensor] = []
        for t in l1:
            m2.append(t * 0.5)
        m3: List[torch.Tensor] = []
        for t in m2:
            m3.append(t.sum())
        return torch.stack(m3 + [x.sum()], 0)

    def wrap(fn: Callable) -> torch.nn.Module:
        class Scripted(torch.nn.Module):
            def forward(self, x):
                return fn(x)

        return Scripted()

    g = torch.Generator().manual_seed(3)
    sizes = [(0, 3), (1, 1), (2, 4), (5, 3), (3, 0), (1, 3)]
    cases = [(torch.randn(n, w, generator=g),) for n, w in sizes]
    both = {"x": {0: "n", 1: "w"}}
    rows = [c for c in cases if c[0].shape[0] > 0]  # (see EXPORTER_LIMITS)
    # TorchScript makes a per-row mask a Loop scan output: right only where every row
    # keeps as many values.
    static = [(torch.randn(5, 3, generator=g) + shift,) for shift in (0.0, 3.0, -3.0, 0.5)]
    same_count = [(torch.zeros(0, 3),), (torch.rand(2, 3, generator=g) + 0.1,), (-torch.rand(3, 2, generator=g),),
                  (torch.randn(1, 4, generator=g),), (torch.zeros(2, 0),), (torch.randn(1, 1, generator=g),)]
    return [Spec(f"ts_{fn.name}", wrap(fn), c, dynamic, "torchscript", (opset,)) for fn, c, dynamic, opset in [
        (guarded_pop_of_empty_1039, cases, both, 14),
        (split_or_chunk_then_loop_1070, cases, both, 17),
        (unbind_rewritten_in_loop_1136, cases, both, 17),
        (first_chunk_unbound_1021, rows, both, 19),
        (loops_over_empty_lists_1037, cases, both, 15),
        (rows_of_no_trip_appended_2177, cases, both, 11),
        (masked_rows_of_no_trip_2282, same_count, both, 12),
        (one_chunk_appended_2352, cases, both, 18),
        (unbind_or_sum_under_if_2255, cases, both, 16),
        (zip_of_empty_lists_2436, cases, both, 19),
        (columns_joined_along_them_2561, cases, both, 20),
        (row_prefixes_appended_under_if_2258, cases, both, 16),
        (max_of_unbound_rows_3041, [c for c in cases if c[0].shape[1] > 0], both, 14),
        (columns_kept_when_positive_3134, static, {}, 18),
        (columns_rewritten_in_loop_4845, static, {}, 16),
        (chunks_and_rows_under_if_4773, static, {}, 17),
        (rows_popped_then_zipped_5447, cases, both, 17),
        (empty_rows_appended_5166, cases, both, 18),
        (row_masks_zipped_6244, [(torch.randn(4, 2, generator=g) + shift,) for shift in (0.0, 1.0, -1.0)], {}, 19),
        (mapped_then_summed_4603, cases, both, 18),
        (masks_mapped_and_zipped_10323, [(torch.randn(3, 2, generator=g) + shift,) for shift in (0.0, 1.0, -1.0)], {}, 19),
    ]]


def _dynamo_models() -> list[Spec]:
    import torch
    import torch.nn.functional as F

    class SplitChunkUnbind(torch.nn.Module):
        # Static shapes: dynamo specializes the number of chunks anyway.
        def forward(self, x):
            a = x.split([1, 2, 3], dim=0)
            b = x.chunk(3, dim=1)
            c = torch.unbind(x, 1)
            return torch.cat([a[2], a[0] * 2], 0), b[-1] + 1, torch.stack(c, 0)

    class ChunkDynamicBatch(torch.nn.Module):
        def forward(self, x):
            b = x.chunk(2, dim=1)
            return b[0] + 1, b[-1] * b[0]

    class EmbeddingBags(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(10, 3, generator=torch.Generator().manual_seed(1)))

        def forward(self, idx, offsets):
            # Not mode="mean": onnxruntime 1.31's optimizer (level basic and up) crashes
            # with SIGSEGV on that export, with or without seqlower.
            return F.embedding_bag(idx, self.weight, offsets, mode="sum"), F.embedding_bag(idx, self.weight, offsets, mode="max")

    g = torch.Generator().manual_seed(2)
    bags = [([1, 2, 4, 5, 4, 3, 2, 9], [0, 4]), ([7], [0]), ([], [0]), ([3, 3], [0, 1]), ([1, 2, 3], [0, 0, 3])]
    return [
        Spec("dynamo_split_chunk_unbind", SplitChunkUnbind(), [(torch.randn(6, 3, generator=g),)], {}, "dynamo", (18,)),
        Spec("dynamo_chunk_dynamic_batch", ChunkDynamicBatch(),
             [(torch.randn(n, 4, generator=g),) for n in (3, 0, 1, 6)], {"x": {0: "n"}}, "dynamo", (18,)),
        Spec("dynamo_embedding_bag", EmbeddingBags(),
             [(torch.tensor(i, dtype=torch.int64), torch.tensor(o, dtype=torch.int64)) for i, o in bags],
             {"idx": {0: "l"}, "offsets": {0: "b"}}, "dynamo", (18,)),
    ]


def _export(spec: Spec, opset: int) -> onnx.ModelProto:
    import torch

    args = spec.cases[0]
    names = list(spec.dynamic) or [f"input_{i}" for i in range(len(args))]
    if spec.exporter == "dynamo":
        dims = {name: {axis: torch.export.Dim(d, min=0) for axis, d in axes.items()} for name, axes in spec.dynamic.items()}
        proto = torch.onnx.export(spec.module, args, dynamo=True, optimize=False, opset_version=opset, verbose=False,
                                  input_names=names, dynamic_shapes=dims or None).model_proto
        _strip_node_metadata(proto.graph)
        return proto
    outs = spec.module(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    out_names = [f"y{i}" for i in range(len(outs))]
    # Every output dim is dynamic: its size follows the inputs' dynamic dims.
    axes = dict(spec.dynamic) | {o: {a: f"{o}_{a}" for a in range(t.dim())} for o, t in zip(out_names, outs)}
    buf = io.BytesIO()
    torch.onnx.export(spec.module, args, buf, dynamo=False, opset_version=opset, input_names=names,
                      output_names=out_names, dynamic_axes=axes)
    return onnx.load_from_string(buf.getvalue())


def _strip_node_metadata(graph: onnx.GraphProto) -> None:
    """Dynamo records a stack trace (local paths) on every node: most of the file, no test value."""
    for n in graph.node:
        del n.metadata_props[:]
        for a in n.attribute:
            if a.HasField("g"):
                _strip_node_metadata(a.g)


def _ops(graph: onnx.GraphProto) -> set[str]:
    ops = set()
    for n in graph.node:
        ops.add(n.op_type)
        for a in n.attribute:
            if a.HasField("g"):
                ops |= _ops(a.g)
    return ops


def _check_faithful(spec: Spec, opset: int, k: int, proto: onnx.ModelProto, args: tuple, outs: tuple) -> None:
    """The exported model must compute what PyTorch does on every stored case, or the
    fixture's expected outputs would test the exporter instead of seqlower."""
    from seqlower.executor import Executor

    feeds = {i.name: a.numpy() for i, a in zip(proto.graph.input, args)}
    got = Executor(proto).run(feeds).outputs
    for o, e in zip(proto.graph.output, outs):
        want = e.detach().numpy()
        if got[o.name].shape != want.shape or not np.allclose(got[o.name], want, rtol=1e-5, atol=1e-6):
            raise SystemExit(f"{spec.name} opset {opset} case {k}: the export differs from PyTorch on {o.name}")


EXPORTER_LIMITS = {
    # The export is what it is; these sizes are left out of the fixture (the test knows).
    "ts_chunk_dynamic_dim": "x.chunk(3, 1) is exported as split [c, c, w - 2c] with c = ceil(w / 3): "
    "[1, 1, -1] for w = 1 (an invalid split) and a trailing empty chunk for w = 2 or 4, where "
    "PyTorch makes fewer chunks",
    "dynamo_embedding_bag": "with no offsets (zero bags) the exported Loop runs no iteration and its "
    "ConcatFromSequence of an empty sequence fails, where PyTorch returns a [0, 3] tensor",
    "ts_first_chunk_unbound_1021": "x.split(1, 0)[0] of zero rows is an empty chunk in PyTorch and a read "
    "past the end of the export's empty sequence: no case with n = 0",
    "ts_list_under_if_split": "x.split(2, 0) of zero rows is one empty chunk in PyTorch and none in the "
    "export's SplitToSequence, so parts[-1] fails: no case with n = 0",
}


def export(out: Path = OUT, only: list[str] | None = None, specs: list[Spec] | None = None) -> list[Path]:
    """Write the fixtures of ``specs`` (default: this module's models) to ``out``."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in specs if specs is not None else _script_models() + _fuzz_regressions() + _dynamo_models():
        if only and spec.name not in only:
            continue
        for opset in spec.opsets:
            proto = _export(spec, opset)
            ops = _ops(proto.graph) | {op for f in proto.functions for op in _ops(f)}
            if not ops & SEQUENCE_OPS:
                print(f"skip {spec.name} opset {opset}: the exporter emitted no sequence op")
                continue
            onnx.checker.check_model(proto)
            try:
                onnx.checker.check_model(proto, full_check=True)
            except onnx.shape_inference.InferenceError as e:
                # Kept as exported: TorchScript's unbind squeezes, which onnx's spec reading
                # of keepdims does not, so the declared shapes disagree with its inference.
                print(f"note {spec.name} opset {opset}: onnx's full check rejects it: {str(e).splitlines()[0][:120]}")
            arrays: dict[str, np.ndarray] = {}
            for k, args in enumerate(spec.cases):
                outs = spec.module(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                _check_faithful(spec, opset, k, proto, args, outs)
                arrays |= {f"{k}/in/{i.name}": a.numpy() for i, a in zip(proto.graph.input, args)}
                arrays |= {f"{k}/out/{o.name}": e.detach().numpy() for o, e in zip(proto.graph.output, outs)}
            stem = out / f"{spec.name}_opset{opset}"
            onnx.save(proto, f"{stem}.onnx")
            np.savez(f"{stem}.cases.npz", **arrays)
            written.append(Path(f"{stem}.onnx"))
            print(f"wrote {stem}.onnx  ({len(spec.cases)} cases; {', '.join(sorted(ops & SEQUENCE_OPS))})")
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", help="export only these models (by name, e.g. ts_chunk_pop_cat)")
    args = parser.parse_args()
    export(args.out, args.only)
