"""Export small PyTorch models that use sequences, as committed test fixtures.

    pip install torch==2.13.0        # not a dependency of seqlower or of its tests
    python tools/export_models.py    # writes tests/data/exported/*

For each model and exporter, writes ``<name>.onnx``, ``<name>.inputs.npz`` (the inputs,
by graph input name) and ``<name>.expected.npz`` (PyTorch's eager outputs, by graph
output name). Only exports that contain sequence ops are kept: the point is models as
exporters really emit them. TorchScript (``dynamo=False``) emits sequences for
scripted list code; dynamo emits ``SplitToSequence`` for split/chunk/unbind when its
optimizer (which folds them) is off.
"""

from __future__ import annotations

import argparse
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import onnx

SEQUENCE_OPS = {
    "SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceMap", "SequenceEmpty",
    "SequenceConstruct", "SequenceAt", "SequenceLength", "ConcatFromSequence",
}
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported"


def _models():
    import torch
    from typing import List

    @torch.jit.script
    def split_insert_cat(x: torch.Tensor) -> torch.Tensor:
        parts = x.split(2, dim=0)
        out: List[torch.Tensor] = [parts[0], parts[-1]]
        out.insert(1, x[:1])
        return torch.cat(out, 0) + len(parts)

    @torch.jit.script
    def unbind_del_append_stack(x: torch.Tensor) -> torch.Tensor:
        rows = x.unbind(0)
        picked: List[torch.Tensor] = [rows[2], rows[0]]
        del picked[0]
        picked.append(rows[1] * 3)
        return torch.stack(picked, 1)

    @torch.jit.script
    def chunk_pop_cat(x: torch.Tensor) -> torch.Tensor:
        parts = list(x.chunk(3, dim=1))
        last = parts.pop()
        parts[0] = parts[0] * 2
        return torch.cat(parts, 1) - last.sum()

    class SplitInsertCat(torch.nn.Module):
        def forward(self, x):
            return split_insert_cat(x)

    class UnbindDelAppendStack(torch.nn.Module):
        def forward(self, x):
            return unbind_del_append_stack(x)

    class ChunkPopCat(torch.nn.Module):
        def forward(self, x):
            return chunk_pop_cat(x)

    class SplitChunkUnbind(torch.nn.Module):
        def forward(self, x):
            a = x.split([1, 2, 3], dim=0)
            b = x.chunk(3, dim=1)
            c = torch.unbind(x, 1)
            return torch.cat([a[2], a[0] * 2], 0), b[-1] + 1, torch.stack(c, 0)

    g = torch.Generator().manual_seed(0)
    return [
        ("ts_split_insert_cat", SplitInsertCat(), (torch.randn(5, 2, generator=g),), "torchscript", (13, 17)),
        ("ts_unbind_del_append_stack", UnbindDelAppendStack(), (torch.randn(3, 4, generator=g),), "torchscript", (13, 17)),
        ("ts_chunk_pop_cat", ChunkPopCat(), (torch.randn(2, 6, generator=g),), "torchscript", (13, 17)),
        ("dynamo_split_chunk_unbind", SplitChunkUnbind(), (torch.randn(6, 3, generator=g),), "dynamo", (18,)),
    ]


def export(out: Path = OUT) -> list[Path]:
    import torch

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, module, args, exporter, opsets in _models():
        expected = module(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for opset in opsets:
            if exporter == "dynamo":
                proto = torch.onnx.export(module, args, dynamo=True, optimize=False, opset_version=opset, verbose=False).model_proto
            else:
                buf = io.BytesIO()
                torch.onnx.export(module, args, buf, dynamo=False, opset_version=opset)
                proto = onnx.load_from_string(buf.getvalue())
            ops = {n.op_type for n in proto.graph.node}
            if not ops & SEQUENCE_OPS:
                print(f"skip {name} opset {opset}: the exporter emitted no sequence op")
                continue
            onnx.checker.check_model(proto, full_check=True)
            stem = out / f"{name}_opset{opset}"
            onnx.save(proto, f"{stem}.onnx")
            np.savez(f"{stem}.inputs.npz", **{i.name: a.numpy() for i, a in zip(proto.graph.input, args)})
            np.savez(f"{stem}.expected.npz", **{o.name: e.detach().numpy() for o, e in zip(proto.graph.output, expected)})
            written.append(Path(f"{stem}.onnx"))
            print(f"wrote {stem}.onnx  ({', '.join(sorted(ops & SEQUENCE_OPS))})")
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    export(parser.parse_args().out)
