"""Write the ``[converters]`` table of seqlower/targets/onnx2torch.toml from onnx2torch's
own converter registry.

onnx2torch looks a node's converter up by the op and the version its schema has at the
model's opset (``defs.get_schema(op, max_inclusive_version=opset).since_version``), and
fails a model with any node whose version has none ('Converter is not implemented'):
an opset-19 model fails on its first Constant. The table lists, per default-domain op,
the versions onnx2torch has converters for; ``Target.refuses`` and ``check --target
onnx2torch`` (quirk no-converter) read it. onnx2torch is no dependency of seqlower:

    pip install onnx2torch --no-deps   # (its torchvision is stubbed: see tools/runtimes.py)
    python tools/onnx2torch_profile.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parent.parent / "seqlower" / "targets" / "onnx2torch.toml"
HEADER = "[converters]"


def converters() -> dict[str, list[int]]:
    """Default-domain op -> the schema versions onnx2torch converts, from its registry."""
    from runtimes import _stub_torchvision

    _stub_torchvision()
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY

    table: dict[str, set[int]] = defaultdict(set)
    for d in _CONVERTER_REGISTRY:
        if d.domain in ("", "ai.onnx"):
            table[d.operation_type].add(d.version)
    return {op: sorted(vs) for op, vs in sorted(table.items())}


def render(table: dict[str, list[int]], version: str) -> str:
    lines = [f"# The schema versions onnx2torch {version} has a converter for, per op (tools/onnx2torch_profile.py).",
             HEADER]
    lines += [f"{op} = [{', '.join(map(str, vs))}]" for op, vs in table.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    from importlib.metadata import version

    text = OUT.read_text()
    head = text.split("\n# The schema versions onnx2torch")[0].split(f"\n{HEADER}")[0].rstrip("\n")
    OUT.write_text(head + "\n\n" + render(converters(), version("onnx2torch")))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
