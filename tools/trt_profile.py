"""Write seqlower/targets/tensorrt.toml from onnx-tensorrt's operator table.

TensorRT is not installable here (no GPU, and its wheels need CUDA), so its profile is
read off its parser's own documentation, ``docs/operators.md`` of
https://github.com/onnx/onnx-tensorrt, and nothing in it was run:

    git clone https://github.com/onnx/onnx-tensorrt
    python tools/trt_profile.py onnx-tensorrt/docs/operators.md

Every op marked N is lacked; every op marked Y keeps its "Supported Types" (the element
types of its data) as ``types``; the opset range and the restrictions that touch what
seqlower writes or keeps are quirks, in the doc's words (``QUIRKS`` below), with the
detectors and rewrites of ``seqlower/targets/registry.py``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "seqlower" / "targets" / "tensorrt.toml"

# The doc's type names as onnx's TensorProto names them (and its one typo, INF64).
TYPE_NAMES = {"FP32": "FLOAT", "FP16": "FLOAT16", "BF16": "BFLOAT16", "INT32": "INT32", "INT64": "INT64",
              "INF64": "INT64", "UINT8": "UINT8", "BOOL": "BOOL", "INT8": "INT8", "INT4": "INT4",
              "FP8": "FLOAT8E4M3FN", "DOUBLE": "DOUBLE"}

# The restrictions seqlower writes around or names, each quoted from the doc (``{op}``:
# the row's own text).
QUIRKS = [
    ("trt-opset-range", "supports opsets 9 to 20 only: 'TensorRT 10.0 supports operators in the inclusive range "
                        "of opset 9 to opset 20'"),
    ("no-strings", "has no string type: 'TensorRT supports the following ONNX data types: DOUBLE, FLOAT32, FLOAT16, "
                   "BFLOAT16, INT32, INT64, FP8, INT8, INT4, UINT8, and BOOL'"),
    ("trt-axes-initializer", "reads the axes of Slice, Squeeze, Unsqueeze, Pad and every reduction, and CumSum's "
                             "axis, only as weights ('`axes` must be an initializer'; its parser takes a Constant "
                             "node's value as weights too): axes computed at run time are named"),
    ("trt-op-types", "runs each op on the element types of its 'Supported Types' only (NonZero: FP32 and FP16; "
                     "CumSum: FP32, FP16, BF16; And, Or, Not, Xor: BOOL): seqlower counts integer CumSums by a masked "
                     "ReduceSum and casts what NonZero reads to float; any other node past its types is named"),
    ("trt-loop-scan-length", "runs a Loop with scan outputs only at a build-time trip count: 'Scan output length "
                             "cannot be dynamic'"),
    ("trt-loop-carried-shape", "needs what a Loop carries to keep its shape: 'The shape of Loop carried "
                               "dependencies must be the same across all loop iterations'"),
    ("trt-if-branches", "needs If branches to agree: 'Output tensors of the two conditional branches must have the "
                        "same rank and must have different names': seqlower gives a branch output that is also "
                        "the other branch's a name of its own; outputs of different ranks are named"),
    ("trt-constant-attributes", "reads no Constant of '`sparse_value`, `value_string`, and `value_strings` "
                                "attributes'"),
    ("trt-topk", "runs TopK only sorted and small: '`sorted` must be 1. `K` input must be less than 3840.'"),
    ("trt-uint8-io", "has UINT8 values only at the model's boundary: 'UINT8 is only supported as network input or "
                     "output tensor types'"),
    ("trt-double", "runs DOUBLE in float32: 'TensorRT will attempt to cast DOUBLE down to FLOAT, clamping values "
                   "to +-FLT_MAX if necessary'"),
]


def read_table(doc: str) -> tuple[list[str], dict[str, list[str]]]:
    lacks, types = [], {}
    for line in doc.splitlines():
        if not line.startswith("| ") or line.startswith(("| Operator", "|---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        op, supported = cells[0], cells[1] if len(cells) > 1 else ""
        if supported == "N":
            lacks.append(op)
        elif supported == "Y":
            names = [t.strip() for t in (cells[2] if len(cells) > 2 else "").split(",") if t.strip()]
            types[op] = sorted({TYPE_NAMES[t] for t in names})
    return lacks, types


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("operators_md", type=Path)
    args = ap.parse_args()
    doc = args.operators_md.read_text()
    version = re.search(r"TensorRT ([\d.]+) supports operators in the inclusive range of opset (\d+) to opset (\d+)", doc)
    assert version is not None, "the doc no longer says its opset range"
    lacks, types = read_table(doc)
    out = ["name = \"tensorrt\"",
           f'description = "TensorRT {version[1]}\'s ONNX parser, read off onnx-tensorrt\'s docs/operators.md '
           f'(TensorRT is not installable here: nothing was run on it); no sequence or optional op"',
           "sequences = false",
           f"opsets = [{version[2]}, {version[3]}]",
           "# Marked N in the operator table.",
           "lacks = [" + ", ".join(f'"{op}"' for op in lacks) + "]",
           ""]
    for qid, text in QUIRKS:
        out += ["[[quirks]]", f'id = "{qid}"', f"text = {json.dumps(text)}", ""]
    out += ["# Marked Y, with the element types of their data ('Supported Types').", "[types]"]
    out += [f'{op} = [{", ".join(f"{t!r}" for t in ts)}]'.replace("'", '"') for op, ts in types.items()]
    OUT.write_text("\n".join(out) + "\n")
    print(f"{OUT}: {len(lacks)} ops lacked, {len(types)} with their types, opsets {version[2]}..{version[3]}")


if __name__ == "__main__":
    main()
