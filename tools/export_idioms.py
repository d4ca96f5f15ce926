"""Export the list idioms of real decoding and post-processing code (Stage 14's held-out
exports failed on them), as committed fixtures in tools/export_models.py's format.

    pip install torch==2.13.0        # not a dependency of seqlower or of its tests
    python tools/export_idioms.py    # writes tests/data/idioms/ts_idiom_*

Greedy decoding with an end-of-sequence ``break``, Viterbi backpointers walked back with
``insert(0, ...)``, a per-sample loop of a length read from the data, a list filtered in
a loop and concatenated, ``pop(i)`` / ``del`` / ``lst[i] =`` at run-time positions,
per-class non-maximum suppression collecting boxes in a list. Each is a TorchScript
function of one input ``x`` exported with dynamic axes (opsets 13 and 17) and stored with
PyTorch's own outputs at several sizes (tools/export_models.py's format and checks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_models import Spec, export  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "idioms"


def _idioms() -> list[Spec]:
    import torch
    from typing import List

    @torch.jit.script
    def greedy_decode_eos(x: torch.Tensor) -> torch.Tensor:
        # x: [steps, vocab] logits per step; stop after the first token 0 (EOS).
        tokens: List[torch.Tensor] = []
        h = torch.zeros(x.size(1))
        for t in range(x.size(0)):
            h = torch.tanh(x[t] + 0.5 * h)
            tok = torch.argmax(h)
            tokens.append(tok)
            if bool(tok == 0):
                break
        tokens.append(torch.tensor(-1))
        return torch.stack(tokens, 0)

    @torch.jit.script
    def viterbi_backtrack(x: torch.Tensor) -> torch.Tensor:
        # x: [steps, tags] emission scores; transitions are x's first row's outer sum.
        trans = x[0].unsqueeze(1) - x[0].unsqueeze(0)
        score = x[0]
        backpointers: List[torch.Tensor] = []
        for t in range(1, x.size(0)):
            total = score.unsqueeze(1) + trans
            best, idx = total.max(0)
            backpointers.append(idx)
            score = best + x[t]
        last = torch.argmax(score)
        path: List[torch.Tensor] = [last]
        # (a list slice, backpointers[::-1], is exported as a Slice of a sequence: invalid)
        for k in range(len(backpointers) - 1, -1, -1):
            last = backpointers[k][last]
            path.insert(0, last)
        return torch.stack(path, 0)

    @torch.jit.script
    def per_row_length_loop(x: torch.Tensor) -> torch.Tensor:
        # Each row's length is its count of positive entries; a recurrence over that many steps.
        outs: List[torch.Tensor] = []
        for i in range(x.size(0)):
            n = int((x[i] > 0).sum())
            h = torch.zeros(1)
            for t in range(n):
                h = torch.tanh(h + x[i, t])
            outs.append(h)
        outs.append(torch.ones(1))
        return torch.cat(outs, 0)

    @torch.jit.script
    def filtered_rows_cat(x: torch.Tensor) -> torch.Tensor:
        kept: List[torch.Tensor] = []
        for r in x.unbind(0):
            if bool(r.max() > 0.5):
                kept.append(r * 2)
        kept.append(torch.zeros(x.size(1)))
        return torch.cat(kept, 0)

    @torch.jit.script
    def runtime_positions(x: torch.Tensor) -> torch.Tensor:
        rows: List[torch.Tensor] = list(x.unbind(0))
        rows.append(x.sum(0))
        rows.append(x.sum(0) * 2)
        i = len(rows) // 2
        taken = rows.pop(i)
        j = len(rows) - 1
        rows[j] = rows[j] + taken
        del rows[0]
        return torch.stack(rows, 0)

    @torch.jit.script
    def per_class_nms(x: torch.Tensor) -> torch.Tensor:
        # x: [boxes, 1 + classes]: column 0 a coordinate, the others class scores; per
        # class the boxes over 0.5, the best first, none closer than 0.3 to a kept one.
        kept: List[torch.Tensor] = []
        for c in range(1, x.size(1)):
            mask = x[:, c] > 0.5
            coords = x[:, 0][mask]
            scores = x[:, c][mask]
            order = torch.argsort(scores, descending=True)
            chosen: List[torch.Tensor] = []
            for k in range(order.size(0)):
                p = coords[order[k]]
                ok = True
                for q in chosen:
                    if bool((p - q).abs() < 0.3):
                        ok = False
                if ok:
                    chosen.append(p)
            for p in chosen:
                kept.append(torch.stack([p, torch.tensor(float(c))]))
        kept.append(torch.zeros(2))
        return torch.stack(kept, 0)

    def wrap(fn: Callable) -> torch.nn.Module:
        class Scripted(torch.nn.Module):
            def forward(self, x):
                return fn(x)

        return Scripted()

    g = torch.Generator().manual_seed(14)

    def rand(sizes):
        return [(torch.randn(n, w, generator=g),) for n, w in sizes]

    both = {"x": {0: "n", 1: "w"}}
    specs = []
    for fn, cases in [
        (greedy_decode_eos, rand([(6, 4), (1, 3), (9, 5), (3, 2), (12, 6)])),
        (viterbi_backtrack, rand([(5, 3), (2, 4), (7, 2), (3, 5), (1, 3)])),
        (per_row_length_loop, rand([(4, 5), (1, 3), (3, 1), (6, 4), (2, 6)])),
        (filtered_rows_cat, rand([(5, 3), (1, 2), (0, 3), (7, 4), (3, 1)])),
        (runtime_positions, rand([(4, 3), (1, 2), (6, 1), (2, 5)])),
        (per_class_nms, rand([(8, 3), (1, 2), (12, 4), (5, 1), (3, 3)])),
    ]:
        specs.append(Spec(f"ts_idiom_{fn.name}", wrap(fn), cases, both, "torchscript", (13, 17)))
    return specs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    export(args.out, specs=_idioms())
