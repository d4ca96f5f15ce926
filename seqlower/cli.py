"""The ``seqlower`` command line. Exit codes: 0 ok, 1 not equivalent / check failed,
2 bad usage or an unreadable/invalid model."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from seqlower import __version__
from seqlower.errors import ModelWarning, SeqlowerError

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


# -- shared option groups ----------------------------------------------------------------


def _add_exec_options(p: argparse.ArgumentParser, inputs_help: str) -> None:
    from seqlower.executor import BACKENDS, KEEPDIMS_POLICIES
    from seqlower.executor.onnxruntime_backend import OPT_LEVELS

    g = p.add_argument_group("execution")
    g.add_argument("--inputs", action="append", metavar="X", help=inputs_help)
    g.add_argument("--backend", choices=BACKENDS, default="reference",
                   help="reference: onnx's evaluator with seqlower's spec-exact kernels (default); "
                        "onnxruntime: run in a child process, so a native crash is reported, not fatal")
    g.add_argument("--keepdims-policy", choices=KEEPDIMS_POLICIES, default="auto",
                   help="SplitToSequence with a scalar split and keepdims=0: spec = keepdims ignored; "
                        "onnxruntime = chunks squeezed when split == 1; auto (default) = onnxruntime's "
                        "squeeze for split == 1, the spec otherwise")
    g.add_argument("--ort-opt-level", choices=OPT_LEVELS, default="all",
                   help="onnxruntime graph optimization level (default: all)")
    g.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a symbolic dim for synthesized inputs (repeatable; default size 3)")
    g.add_argument("--seq-len", type=_nonneg_int, default=3, metavar="N",
                   help="length of synthesized sequence inputs (default: 3)")
    g.add_argument("--seed", type=int, default=0, help="seed of the first synthesized sample (default: 0)")


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _pos_int(text: str) -> int:
    value = _nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive integer")
    return value


# -- verify -------------------------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace) -> int:
    from seqlower.executor import Executor, load_inputs, parse_dims, verify

    dims = parse_dims(args.dim)
    given = None
    if args.inputs:
        ports = Executor(args.original, backend="reference").inputs
        given = [load_inputs(x, ports) for x in args.inputs]
    report = verify(
        args.original,
        args.lowered,
        inputs=given,
        samples=args.samples,
        seed=args.seed,
        dims=dims,
        seq_len=args.seq_len,
        backend=args.backend,
        rtol=args.rtol,
        atol=args.atol,
        keepdims_policy=args.keepdims_policy,
        ort_opt_level=args.ort_opt_level,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_verify(report, args.original, args.lowered)
    return EXIT_OK if report.equivalent else EXIT_FAIL


def _print_verify(report: Any, a: str, b: str) -> None:
    print(f"verify {a} vs {b} on {report.backend}")
    if report.interface_error:
        print(f"NOT EQUIVALENT: {report.interface_error}")
        return
    for s in report.samples:
        print(f"sample {s.index} ({s.source}): {s.status}" + (f": {s.error}" if s.error else ""))
        if s.outputs:
            rows = [("output", "expected", "actual", "max abs", "max rel", "verdict")]
            for o in s.outputs:
                rows.append((o.name, o.expected, o.actual, f"{o.max_abs:.3g}", f"{o.max_rel:.3g}",
                             "ok" if o.ok else "DIFFERENT"))
            _print_table(rows, indent="  ")
            for o in s.outputs:
                if not o.ok:
                    print(f"  {o.name}: {o.detail}")
    for n in report.notes:
        print(f"note: {n}")
    if report.equivalent:
        print(f"EQUIVALENT ({report.compared} of {len(report.samples)} samples compared)")
    elif report.compared == 0:
        print("NOT PROVEN: the original model rejected every sample; give inputs with --inputs")
    else:
        print("NOT EQUIVALENT")


def _print_table(rows: list[tuple[str, ...]], indent: str = "") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


# -- run ----------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    from seqlower.executor import Executor, describe_value, load_inputs, parse_dims, save_values, synthesize_inputs

    ex = Executor(args.model, backend=args.backend, keepdims_policy=args.keepdims_policy,
                  ort_opt_level=args.ort_opt_level, use_abi=not args.raw)
    if args.inputs and len(args.inputs) > 1:
        raise SeqlowerError("run takes one --inputs")
    feeds = (load_inputs(args.inputs[0], ex.inputs) if args.inputs
             else synthesize_inputs(ex.inputs, args.seed, parse_dims(args.dim), args.seq_len))
    result = ex.run(feeds)
    if args.save:
        save_values(args.save, "input", ex.inputs, [feeds[p.name] for p in ex.inputs])
        save_values(args.save, "output", ex.outputs, [result.outputs[p.name] for p in ex.outputs])
    if args.json:
        print(json.dumps({"outputs": {k: _jsonable(v) for k, v in result.outputs.items()}, "notes": result.notes},
                         indent=2))
    else:
        for name, value in result.outputs.items():
            print(f"{name}: {describe_value(value)}")
            for line in _format_value(value).splitlines():
                print(f"  {line}")
        for n in result.notes:
            print(f"note: {n}")
        if args.save:
            print(f"saved input_*.pb and output_*.pb in {args.save}")
    return EXIT_OK


def _format_value(value: Any) -> str:
    if value is None:
        return "(empty optional)"
    if isinstance(value, list):
        return "\n".join(f"[{i}] {np.array2string(np.asarray(v), threshold=20)}" for i, v in enumerate(value)) or "(empty)"
    return np.array2string(np.asarray(value), threshold=40)


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    arr = np.asarray(value)
    data = arr.astype(np.float64) if arr.dtype.kind not in "biufcOUS" else arr
    return {"dtype": str(arr.dtype), "shape": list(arr.shape), "data": data.tolist() if arr.dtype.kind != "c" else str(arr)}


# -- inspect / check ----------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    from seqlower.inventory import take_inventory
    from seqlower.model_io import read_model_proto

    from seqlower.model_io import load_model
    from seqlower.pipeline import LowerOptions, describe_sequences

    inv = take_inventory(read_model_proto(args.model, load_external_data=False), infer=True)
    seqs = describe_sequences(load_model(args.model), LowerOptions(max_unroll=args.max_unroll,
                                                                   keepdims_policy=args.keepdims_policy))
    if args.json:
        print(json.dumps({**inv.to_json(), "sequences": seqs}, indent=2))
        return EXIT_OK
    print(f"{args.model}: {len(inv.ops)} sequence/optional ops, {len(inv.values)} sequence/optional values")
    if inv.ops:
        print("ops:")
        for op in inv.ops:
            print(f"  {op.node}  in {op.graph}")
            for n in op.notes:
                print(f"    note: {n}")
    if inv.values:
        print("values (types as onnx shape inference knows them: element type and merged shape, no length):")
        for v in inv.values:
            origin = f"from {v.producer}" if v.producer else v.role
            uses = f"; used by {', '.join(v.consumers)}" if v.consumers else ""
            print(f"  {v.name}: {v.type}  in {v.graph}; {origin}{uses}")
    if seqs:
        print("sequence analysis (length, element shapes; one decision per web of connected sequences):")
        for s in seqs:
            info = s["info"] or {}
            length = "?" if info.get("length") is None else info["length"]
            if info.get("shapes") is not None:
                shapes = ", ".join(_fmt_shape(sh) for sh in info["shapes"])
            else:
                shapes = ("all " if info.get("uniform") else "merged ") + _fmt_shape(info.get("elem_shape"))
            dtype = (info.get("dtype") or "?").lower()
            const = " constant" if info.get("constant") else ""
            # For a Flat web the reason says why it is not Unrolled; for a kept one, why it stays.
            verdict = s["lowering"] if s["reason"] is None else f"{s['lowering']}: {s['reason']}"
            print(f"  {s['name']}: seq<{dtype}> length {length} [{shapes}]{const}  in {s['graph']}  (web {s['web']})")
            print(f"      {verdict}")
    return EXIT_OK


def _fmt_shape(dims: list | None) -> str:
    if dims is None:
        return "?"
    return "(" + ",".join("?" if d is None else str(d) for d in dims) + ")"


def _cmd_check(args: argparse.Namespace) -> int:
    from seqlower.inventory import take_inventory
    from seqlower.model_io import load_model, read_model_proto
    from seqlower.pipeline import kept_loop_reasons
    from seqlower.targets import load_target, target_gaps

    target = load_target(args.target)
    results, gaps = {}, {}
    for path in args.models:
        proto = read_model_proto(path, load_external_data=False)
        results[path] = take_inventory(proto)
        # Why a Loop stays, as lower would have said (shapes inferred on a copy); a model
        # whose sequences do not even infer still gets its gaps named.
        try:
            reasons = kept_loop_reasons(load_model(proto), target.name) if "Loop" in target.lacks else {}
        except SeqlowerError:
            reasons = {}
        gaps[path] = target_gaps(proto, target, reasons)
    ok = not any(gaps.values())
    if args.json:
        print(json.dumps({
            "tensor_only": all(inv.clean for inv in results.values()), "target": target.name, "runs_on_target": ok,
            "models": {p: {**i.to_json(), "gaps": [g.to_json() for g in gaps[p]]} for p, i in results.items()},
        }, indent=2))
    else:
        for path, inv in results.items():
            if not gaps[path]:
                print(f"{path}: tensor-only" if target.name == "generic" else f"{path}: nothing {target.name} lacks")
                continue
            if not inv.clean and not target.sequences:
                print(f"{path}: {len(inv.ops)} sequence/optional ops and {len(inv.values)} sequence/optional values remain")
                for op in inv.ops:
                    print(f"  op    {op.node}  in {op.graph}")
                for v in inv.values:
                    print(f"  value {v.name}: {v.type}  in {v.graph} ({v.role})")
            others = [g for g in gaps[path] if not g.sequence]
            if others:
                print(f"{path}: {len(others)} node(s) {target.name} cannot run")
                for g in others:
                    print(f"  op    {g.where}  in {g.graph}: {g.why}")
    return EXIT_OK if ok else EXIT_FAIL


# -- lower --------------------------------------------------------------------------------


def _cmd_lower(args: argparse.Namespace) -> int:
    from seqlower.model_io import check_model, load_model, read_model_proto, stage_model, weightless_proto
    from seqlower.pipeline import LowerOptions, lower_with_report

    src, dst = Path(args.model), Path(args.output)
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise SeqlowerError(f"{dst}: the output path is the input model; choose another")
    model = load_model(src)
    lowered, report = lower_with_report(model, LowerOptions(max_unroll=args.max_unroll,
                                                            keepdims_policy=args.keepdims_policy, target=args.target))
    from seqlower.targets import load_target, target_gaps

    target = load_target(args.target)
    gaps = target_gaps(weightless_proto(lowered), target, report.kept_loops)
    # The model is written whole beside its destination first, so that the check and
    # --verify see it with its weights exactly where they will be; then renamed in place.
    staged = stage_model(lowered, dst)
    try:
        if staged.external_data:
            check_model(read_model_proto(staged.path, load_external_data=False, check=False), str(dst),
                        base_dir=str(staged.folder), what="fails the ONNX checker")
        verdict = None
        if args.verify:
            from seqlower.executor import parse_dims, verify

            with warnings.catch_warnings():
                # The source warned when it was loaded; the staged copy inherits the same.
                warnings.simplefilter("ignore", ModelWarning)
                verdict = verify(str(src), str(staged.path), samples=args.samples, seed=args.seed,
                                 dims=parse_dims(args.dim), seq_len=args.seq_len, backend=args.backend,
                                 keepdims_policy=args.keepdims_policy, ort_opt_level=args.ort_opt_level)
        doc = report.to_json()
        doc["target"] = {"name": target.name, "gaps": [g.to_json() for g in gaps]}
        if verdict is not None:
            doc["verify"] = verdict.to_json()
        # The report is staged first and committed after the model: a report that cannot
        # be written leaves no model behind, and a model that cannot be written no report.
        staged_report = _stage_text(Path(args.report), json.dumps(doc, indent=2) + "\n") if args.report else None
        existed = dst.exists()
        try:
            if verdict is None or verdict.equivalent:
                staged.commit()
            if staged_report is not None:
                _commit_text(Path(args.report), staged_report)
        except BaseException:
            if staged_report is not None:
                _unlink_quietly(staged_report)
            if not existed and (verdict is None or verdict.equivalent):
                _unlink_quietly(dst)
            raise
    finally:
        staged.discard()
    _print_lower(report, verdict, src, dst)
    if verdict is not None and not verdict.equivalent:
        return EXIT_FAIL
    lacking = [g for g in gaps if not g.sequence]
    if lacking:
        print(f"  target {target.name}: {len(lacking)} node(s) it cannot run")
        for g in lacking:
            print(f"    {g.where}  in {g.graph}: {g.why}")
    if args.strict and gaps:
        print(f"  strict: {len(gaps)} op(s) or value(s) {target.name} cannot run; exit {EXIT_FAIL}")
        return EXIT_FAIL
    return EXIT_OK


def _add_target_option(p: argparse.ArgumentParser) -> None:
    from seqlower.targets import TARGETS

    p.add_argument("--target", choices=TARGETS, default="generic",
                   help="the runtime the model is for (seqlower/targets/NAME.toml says what it lacks;"
                        " default: generic, any runtime without sequences)")


def _print_lower(report: Any, verdict: Any, src: Path, dst: Path) -> None:
    print(f"lowered {src} -> {dst}" if verdict is None or verdict.equivalent else
          f"{src}: the lowered model is NOT equivalent; nothing written")
    print(f"  rewrites: {len(report.rewrites)}")
    if report.remaining:
        print(f"  left as is: {len(report.remaining)}")
        for r in report.remaining:
            what = r.get("node") or f"value {r.get('value')!r}"
            print(f"    {what} in {r['graph']}: {r['reason']}")
    else:
        print("  tensor-only: yes")
    for n in report.notes:
        print(f"  note: {n}")
    if verdict is not None:
        print(f"  verify ({verdict.backend}): {'EQUIVALENT' if verdict.equivalent else 'NOT EQUIVALENT'} "
              f"on {verdict.compared} of {len(verdict.samples)} samples")


def _write_text_atomically(path: Path, text: str) -> None:
    _commit_text(path, _stage_text(path, text))


def _stage_text(path: Path, text: str) -> str:
    """``text`` in a temporary file beside ``path`` (its name), to be committed later.
    Created with the user's umask, as the file it becomes should be."""
    folder = path.parent if str(path.parent) else Path(".")
    tmp = None
    try:
        for _ in range(100):
            tmp = str(folder / f".{path.name}.{secrets.token_hex(4)}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return tmp
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            _unlink_quietly(tmp)
        raise SeqlowerError(f"{path}: cannot write the report ({e.strerror or e})") from None


def _commit_text(path: Path, tmp: str) -> None:
    try:
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        raise SeqlowerError(f"{path}: cannot write the report ({e.strerror or e})") from None


def _unlink_quietly(p: str | Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


# -- demo ---------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    import onnx

    from seqlower.demo import build_demo_model
    from seqlower.executor import verify
    from seqlower.inventory import take_inventory
    from seqlower.model_io import save_model, to_proto
    from seqlower.pipeline import lower_with_report

    import onnx_ir as ir

    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="seqlower-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    original = build_demo_model()
    src, dst = folder / "demo.onnx", folder / "demo.lowered.onnx"
    save_model(original, src)
    lowered, report = lower_with_report(ir.serde.deserialize_model(original))
    lowered_proto = to_proto(lowered)
    save_model(lowered_proto, dst)
    before, after = take_inventory(original), take_inventory(lowered_proto)
    print("seqlower demo: split x[6,4] into chunks of 1, 2, 3 rows; insert y[2,4] at 1; erase the last;")
    print("               add a bias to each chunk (SequenceMap); count them; concatenate")
    print(f"  original: {src}  ({len(original.graph.node)} nodes; sequence ops: "
          f"{', '.join(o.op_type for o in before.ops) or 'none'})")
    print(f"  lowered:  {dst}  ({len(lowered_proto.graph.node)} nodes; sequence ops left: "
          f"{', '.join(o.op_type for o in after.ops) or 'none'})")
    for r in report.remaining:
        if "node" in r:
            print(f"    left as is: {r['node']}: {r['reason']}")
    onnx.checker.check_model(lowered_proto, full_check=True)
    print("  checker (full_check): passed")
    result = verify(src, lowered_proto, samples=args.samples, backend=args.backend)
    _print_verify(result, str(src), str(dst))
    return EXIT_OK if result.equivalent else EXIT_FAIL


# -- parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from seqlower.executor import KEEPDIMS_POLICIES
    from seqlower.pipeline import DEFAULT_MAX_UNROLL

    parser = argparse.ArgumentParser(
        prog="seqlower",
        description="Lower ONNX sequence ops into tensor-only models, and prove the numbers are unchanged.",
        epilog="exit codes: 0 ok; 1 not equivalent / check failed; 2 bad usage or unreadable model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"seqlower {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("lower", help="lower a model's sequence ops", formatter_class=fmt,
                       description="Load a model, run the lowering passes, check and save it atomically.",
                       epilog=_examples("""
                           seqlower lower model.onnx -o model.lowered.onnx
                           seqlower lower model.onnx -o out.onnx --verify --report report.json
                           seqlower lower model.onnx -o out.onnx --max-unroll 16 --keepdims-policy spec
                       """))
    p.add_argument("model", help="input model (never modified)")
    p.add_argument("-o", "--output", required=True, help="output model (written atomically)")
    p.add_argument("--report", metavar="R.json", help="write every rewrite and every op left, with the reason")
    p.add_argument("--max-unroll", type=_nonneg_int, default=DEFAULT_MAX_UNROLL, metavar="N",
                   help=f"longest sequence lowered to one value per element (longer ones and those known"
                        f" only at run time become packed or Flat tensors), and most trips of a Loop unrolled"
                        f" for a --target without Loop (default: {DEFAULT_MAX_UNROLL})")
    p.add_argument("--verify", action="store_true", help="run both models and write only if they agree")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when anything stays that the --target cannot run: a sequence, or an op it"
                        " lacks (the output is still written, valid)")
    _add_target_option(p)
    p.add_argument("--samples", type=_pos_int, default=3, help="samples for --verify (default: 3)")
    _add_exec_options(p, "(unused by lower)")
    p.set_defaults(func=_cmd_lower)

    p = sub.add_parser("verify", help="prove two models compute the same numbers", formatter_class=fmt,
                       description="Run both models on the same inputs and compare every output.",
                       epilog=_examples("""
                           seqlower verify model.onnx model.lowered.onnx
                           seqlower verify a.onnx b.onnx --inputs x.npz --rtol 1e-4 --json
                           seqlower verify a.onnx b.onnx --samples 10 --dim batch=0 --dim seq=7
                           seqlower verify a.onnx b.onnx --backend onnxruntime --inputs test_data_set_0/
                       """))
    p.add_argument("original")
    p.add_argument("lowered")
    p.add_argument("--samples", type=_pos_int, default=3,
                   help="synthesized samples when no --inputs are given (default: 3)")
    p.add_argument("--rtol", type=float, help="relative tolerance for floats (default: by dtype)")
    p.add_argument("--atol", type=float, help="absolute tolerance for floats (default: by dtype)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    _add_exec_options(p, ".npz file or backend test-data folder (input_J.pb); repeat for several samples")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("run", help="run one model on the executor", formatter_class=fmt,
                       description="Run a model and print its outputs, or save them as .pb files.",
                       epilog=_examples("""
                           seqlower run model.onnx
                           seqlower run model.onnx --inputs x.npz --backend onnxruntime
                           seqlower run model.onnx --inputs test_data_set_0/ --save out/
                       """))
    p.add_argument("model")
    p.add_argument("--save", metavar="DIR", help="write input_J.pb and output_J.pb (backend test-data layout)")
    p.add_argument("--raw", action="store_true", help="show a lowered model's ABI tensors, not sequences")
    p.add_argument("--json", action="store_true", help="outputs as JSON")
    _add_exec_options(p, ".npz file or backend test-data folder (input_J.pb)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("inspect", help="list every sequence value and op", formatter_class=fmt,
                       description="Every sequence/optional value and op, subgraphs and functions included, "
                                   "with what onnx shape inference knows about it, then seqlower's analysis of "
                                   "each sequence value (length, per-element shapes, constants) and whether it "
                                   "lowers statically or why not.",
                       epilog=_examples("""
                           seqlower inspect model.onnx
                           seqlower inspect model.onnx --json
                       """))
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    p.add_argument("--max-unroll", type=_nonneg_int, default=DEFAULT_MAX_UNROLL, metavar="N",
                   help=f"longest sequence to lower statically, as for lower (default: {DEFAULT_MAX_UNROLL})")
    p.add_argument("--keepdims-policy", choices=KEEPDIMS_POLICIES, default="auto",
                   help="as for lower (decides whether keepdims=0 chunks lose their axis)")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("check", help="CI gate: exit 1 while sequences remain", formatter_class=fmt,
                       description="Exit 1 while any sequence op, sequence type or optional type remains "
                                   "anywhere (subgraphs and functions included), or any op the --target "
                                   "lacks; 0 otherwise.",
                       epilog=_examples("""
                           seqlower check model.lowered.onnx
                           seqlower check model.lowered.onnx --target tract
                           seqlower check models/*.onnx --json
                       """))
    p.add_argument("models", nargs="+", metavar="model")
    p.add_argument("--json", action="store_true")
    _add_target_option(p)
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("demo", help="lower and verify the bundled example", formatter_class=fmt,
                       description="Build the bundled example model, lower it, verify it, print the report.",
                       epilog=_examples("""
                           seqlower demo
                           seqlower demo --out demo/ --backend onnxruntime
                       """))
    p.add_argument("--out", metavar="DIR", help="where to write demo.onnx and demo.lowered.onnx (default: a temp dir)")
    p.add_argument("--samples", type=_pos_int, default=3)
    p.add_argument("--backend", choices=("reference", "onnxruntime"), default="reference")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
        # A model read several times (verify, inspect) warns once.
        if str(message) not in shown:
            shown.add(str(message))
            print(f"seqlower: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ModelWarning)
        warnings.showwarning = show
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except SeqlowerError as e:
        print(f"seqlower: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("seqlower: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:
        if args.debug:
            raise
        print(f"seqlower: internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
