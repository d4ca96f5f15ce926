"""``seqlower demo``: build the bundled example, lower it, check it, verify it."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from seqlower.cli._common import EXIT_FAIL, EXIT_OK, Console


def cmd_demo(args: argparse.Namespace) -> int:
    import onnx

    from seqlower.cli.lower import count_ops, op_table
    from seqlower.cli._common import print_table
    from seqlower.cli.verify import Verdict, print_verdict
    from seqlower.demo import build_demo_model
    from seqlower.executor import verify
    from seqlower.io.models import from_proto, save_model, to_proto
    from seqlower.fastpath.pipeline import lower_with_report

    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="seqlower-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    original = build_demo_model()
    src, dst = folder / "demo.onnx", folder / "demo.lowered.onnx"
    save_model(original, src)
    model = from_proto(original)
    before = count_ops(model)
    lowered, report = lower_with_report(model)
    lowered_proto = to_proto(lowered)
    save_model(lowered_proto, dst)
    print("seqlower demo: split x[6,4] into chunks of 1, 2, 3 rows; insert y[2,4] at 1; erase the last;")
    print("               add a bias to each chunk (SequenceMap); count them; concatenate")
    print(f"  original: {src}")
    print(f"  lowered:  {dst}")
    print_table(op_table(before, count_ops(lowered)), indent="    ", right=(1, 2))
    for r in report.remaining:
        if "node" in r:
            print(f"    left as is: {r['node']}: {r['reason']}")
    onnx.checker.check_model(lowered_proto, full_check=True)
    print("  checker (full_check): passed")
    result = Verdict([verify(src, lowered_proto, samples=args.samples, backend=args.backend)], [])
    print_verdict(result, str(src), str(dst), Console())
    return EXIT_OK if result.equivalent else EXIT_FAIL
