"""The ``seqlower`` command line. Exit codes: 0 ok, 1 not equivalent / check failed,
2 bad usage or an unreadable/invalid model.

This module imports nothing heavy: each subcommand's module (and onnx, numpy, the
passes) is imported when that subcommand runs, so ``--help`` starts at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
import warnings
from typing import Any

from seqlower import __version__
from seqlower.cli._common import EXIT_OK, EXIT_USAGE
from seqlower.errors import ModelWarning, SeqlowerError
from seqlower.options import BACKENDS, DEFAULT_MAX_UNROLL, KEEPDIMS_POLICIES, OPT_LEVELS, TARGETS

__all__ = ["main", "build_parser"]


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _dim_bound(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=N with a non-negative integer N, got {text!r}")
    return name.strip(), int(value)


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    # rpartition: a tf2onnx input is named like "input:0" and never holds "=" in its dims.
    name, sep, value = text.rpartition("=")
    dims = value.strip().strip("[]").replace(" ", "")
    if not sep or not name.strip() or not all(d.isdigit() for d in dims.split(",") if dims) \
            or (dims and "" in dims.split(",")):
        raise argparse.ArgumentTypeError(
            f"expected NAME=D0,D1,... with non-negative integer dims (NAME= for a scalar), got {text!r}")
    return name.strip(), tuple(int(d) for d in dims.split(",")) if dims else ()


def _pos_int(text: str) -> int:
    value = _nonneg_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive integer")
    return value


def _add_exec_options(p: argparse.ArgumentParser, inputs_help: str, *, compare: bool) -> None:
    g = p.add_argument_group("execution")
    g.add_argument("--inputs", action="append", metavar="X", help=inputs_help)
    if compare:
        g.add_argument("--backend", choices=BACKENDS, default=None,
                       help="compare on this backend only (default: on the reference backend and on onnxruntime;"
                            " a model either refuses is not equivalent)")
    else:
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


def _add_target_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=TARGETS, default="generic",
                   help="the runtime the model is for (seqlower/targets/NAME.toml says what it lacks;"
                        " default: generic, any runtime without sequences)")


def build_parser() -> argparse.ArgumentParser:
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
    _add_lower(sub, fmt)
    _add_verify(sub, fmt)
    _add_run(sub, fmt)
    _add_reduce(sub, fmt)
    _add_inspect(sub, fmt)
    _add_check(sub, fmt)
    _add_demo(sub, fmt)
    return parser


def _add_shape_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", type=_input_shape, action="append", metavar="NAME=D0,D1,...",
                   help="lower the model for this shape of graph input NAME only (repeatable; a sequence input's:"
                        " its elements'): what becomes static folds (Shape to constants), Loops with a constant"
                        " trip count unroll within --max-unroll, and lists lower one value per element; the ABI"
                        " and the report say what was fixed, and --verify runs at those shapes")
    p.add_argument("--fix-dim", type=_dim_bound, action="append", metavar="NAME=VALUE",
                   help="the symbolic dim NAME is VALUE in every input and output that has it (repeatable); as"
                        " --input-shape")


def _add_lower(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("lower", help="lower a model's sequence ops (or every model below a folder)",
                       formatter_class=fmt,
                       description="Load a model, run the lowering passes, check and save it atomically, and "
                                   "print the op counts before and after. Given a folder (or several models), "
                                   "lower every .onnx below it into -o DIR, keeping relative paths and external "
                                   "data; the exit code is the worst model's.",
                       epilog=_examples("""
                           seqlower lower model.onnx -o model.lowered.onnx
                           seqlower lower model.onnx -o out.onnx --verify --inputs x.npz --report report.json
                           seqlower lower model.onnx -o - --quiet > lowered.onnx
                           seqlower lower models/ -o lowered/ -j 2 --junit lower.xml
                           seqlower lower model.onnx -o out.onnx --max-unroll 16 --keepdims-policy spec
                           seqlower lower model.onnx -o out.onnx --target tinygrad --dim-max seq=128
                           seqlower lower model.onnx -o out.onnx --target tvm --input-shape x=1,3,224,224 --verify
                           seqlower lower model.onnx -o out.onnx --fix-dim batch=1 --fix-dim seq=16
                       """))
    p.add_argument("models", nargs="+", metavar="model", help="input model(s) or folder(s) (never modified)")
    p.add_argument("-o", "--output", required=True,
                   help="output model (written atomically; its weights go to OUTPUT.data when the input's were "
                        "external or pass 2 GiB); '-' writes the model to stdout; a folder for several models")
    p.add_argument("--report", metavar="R.json",
                   help="write every rewrite and every op left, with the reason, op counts and timings ('-': "
                        "stdout, which then holds nothing else); a folder for several models")
    p.add_argument("--max-unroll", type=_nonneg_int, default=DEFAULT_MAX_UNROLL, metavar="N",
                   help=f"longest sequence lowered to one value per element (longer ones and those known"
                        f" only at run time become packed or Flat tensors; a list only cut, edited and joined"
                        f" back along its cut is one Gather at any length), and most trips of a Loop unrolled"
                        f" for a --target without Loop (default: {DEFAULT_MAX_UNROLL})")
    p.add_argument("--max-trips", type=_pos_int, metavar="N",
                   help="for a --target without Loop, or that runs only Loops of fixed shapes (tensorrt): unroll"
                        " a Loop whose trip count is known only at run time (and that no other rewrite removes, or"
                        " that grows what it carries) into N predicated steps; the lowered model gets a"
                        " bool output seqlower_trips_exceeded, true when a run needed more steps (its outputs are"
                        " then those of the first N)")
    p.add_argument("--dim-max", type=_dim_bound, action="append", metavar="NAME=N",
                   help="the largest size of the model input dim NAME (repeatable): a Loop whose trip count is"
                        " that dim (plus a constant) gets that many steps, as with --max-trips")
    _add_shape_options(p)
    p.add_argument("--no-optimize", dest="optimize", action="store_false",
                   help="skip onnxscript's optimizer (constant folding, common subexpressions, identity removal),"
                        " which otherwise runs on what seqlower rewrote, never on the model's other nodes")
    p.add_argument("--no-validate", dest="validate", action="store_false",
                   help="skip the validation lower does by default: the lowered model run against the original"
                        " (on onnxruntime, else the reference) on two synthesized samples, a web whose lowering"
                        " fails or differs kept as it was and reported")
    p.add_argument("--verify", action="store_true",
                   help="run both models (on --inputs, or synthesized samples) and write only if they agree")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when anything stays that the --target cannot run: a sequence, or an op it"
                        " lacks (the output is still written, valid)")
    _add_target_option(p)
    p.add_argument("--samples", type=_pos_int, default=3, help="synthesized samples for --verify (default: 3)")
    p.add_argument("-j", "--jobs", type=_pos_int, default=1, metavar="N",
                   help="lower N models at once, in a process pool (several models only; default: 1)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML: one testcase per model")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but warnings and errors")
    _add_exec_options(p, "inputs for --verify: .npz file or backend test-data folder (input_J.pb); repeat for"
                         " several samples", compare=True)
    p.set_defaults(func="lower:cmd_lower")


def _add_verify(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("verify", help="prove two models compute the same numbers", formatter_class=fmt,
                       description="Run both models on the same inputs and compare every output, on the reference "
                                   "backend and on onnxruntime unless --backend picks one.",
                       epilog=_examples("""
                           seqlower verify model.onnx model.lowered.onnx
                           seqlower verify a.onnx b.onnx --inputs x.npz --rtol 1e-4 --json
                           seqlower verify a.onnx b.onnx --samples 10 --dim batch=0 --dim seq=7
                           seqlower verify a.onnx b.onnx --backend onnxruntime --inputs test_data_set_0/
                           seqlower verify a.onnx b.onnx --save-failures failed/
                       """))
    p.add_argument("original")
    p.add_argument("lowered")
    p.add_argument("--samples", type=_pos_int, default=3,
                   help="synthesized samples when no --inputs are given (default: 3)")
    p.add_argument("--rtol", type=float, help="relative tolerance for floats (default: by dtype)")
    p.add_argument("--atol", type=float, help="absolute tolerance for floats (default: by dtype)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--save-failures", metavar="DIR",
                   help="write each sample that differs, or that the lowered model fails, to "
                        "DIR/BACKEND/sample_K/ in the backend test-data layout: input_J.pb, the original's "
                        "output_J.pb and the lowered model's lowered_output_J.pb")
    _add_exec_options(p, ".npz file or backend test-data folder (input_J.pb); repeat for several samples",
                      compare=True)
    p.set_defaults(func="verify:cmd_verify")


def _add_run(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
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
    _add_exec_options(p, ".npz file or backend test-data folder (input_J.pb)", compare=False)
    p.set_defaults(func="verify:cmd_run")


def _add_reduce(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("reduce", help="cut a model that fails or differs on a runtime to the smallest that still does",
                       formatter_class=fmt,
                       description="Run the model on the reference backend and on --backend; find the first value "
                                   "whose own nodes alone fail or give other numbers there, and replace each of "
                                   "its nodes by the reference's values while it still goes wrong the same way. "
                                   "Prints one line saying what fails; exit 0 with a reproducer, 1 when nothing "
                                   "fails or no value alone does.",
                       epilog=_examples("""
                           seqlower reduce model.lowered.onnx --backend openvino -o repro/
                           seqlower reduce model.lowered.onnx --backend tract --inputs failed/tract/sample_0/
                       """))
    p.add_argument("model")
    p.add_argument("--backend", choices=[b for b in BACKENDS if b != "reference"], required=True,
                   help="the runtime the model fails or differs on")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write DIR/reproducer.onnx and DIR/test_data_set_0/ (its inputs, and the reference's"
                        " output_0.pb); DIR must not exist or be empty")
    p.add_argument("--inputs", metavar="X", help=".npz file or backend test-data folder (input_J.pb); default: one"
                                                 " synthesized sample")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a symbolic dim for the synthesized sample (repeatable; default size 3)")
    p.add_argument("--seq-len", type=_nonneg_int, default=3, metavar="N",
                   help="length of synthesized sequence inputs (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthesized sample (default: 0)")
    p.set_defaults(func="reduce:cmd_reduce")


def _add_inspect(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("inspect", help="list every sequence value and op", formatter_class=fmt,
                       description="Every sequence/optional value and op, subgraphs and functions included, "
                                   "with what onnx shape inference knows about it, then seqlower's analysis of "
                                   "each sequence value (length, per-element shapes, constants) and whether it "
                                   "lowers statically or why not.",
                       epilog=_examples("""
                           seqlower inspect model.onnx
                           seqlower inspect model.onnx --json
                           seqlower inspect model.onnx --dot webs.dot --svg webs.svg
                       """))
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    p.add_argument("--dot", metavar="FILE",
                   help="write the sequence webs as Graphviz DOT: a box per sequence value coloured by its "
                        "representation (red: kept), an edge per op, a cluster per graph")
    p.add_argument("--svg", metavar="FILE", help="render that picture to SVG (needs Graphviz's dot)")
    p.add_argument("--max-unroll", type=_nonneg_int, default=DEFAULT_MAX_UNROLL, metavar="N",
                   help=f"longest sequence to lower statically, as for lower (default: {DEFAULT_MAX_UNROLL})")
    p.add_argument("--keepdims-policy", choices=KEEPDIMS_POLICIES, default="auto",
                   help="as for lower (decides whether keepdims=0 chunks lose their axis)")
    p.set_defaults(func="inspect:cmd_inspect")


def _add_check(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("check", help="CI gate: exit 1 while sequences remain", formatter_class=fmt,
                       description="Exit 1 while any sequence op, sequence type or optional type remains "
                                   "anywhere (subgraphs and functions included), or any op the --target "
                                   "lacks; 0 otherwise. Given a folder, every .onnx below it; the exit code "
                                   "is the worst model's.",
                       epilog=_examples("""
                           seqlower check model.lowered.onnx
                           seqlower check model.lowered.onnx --target tract
                           seqlower check lowered/ --junit check.xml
                           seqlower check models/*.onnx --json
                       """))
    p.add_argument("models", nargs="+", metavar="model", help="model(s) or folder(s)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML: one testcase per model")
    _add_target_option(p)
    p.set_defaults(func="inspect:cmd_check")


def _add_demo(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("demo", help="lower and verify the bundled example", formatter_class=fmt,
                       description="Build the bundled example model, lower it, verify it, print the report.",
                       epilog=_examples("""
                           seqlower demo
                           seqlower demo --out demo/ --backend onnxruntime
                       """))
    p.add_argument("--out", metavar="DIR", help="where to write demo.onnx and demo.lowered.onnx (default: a temp dir)")
    p.add_argument("--samples", type=_pos_int, default=3)
    p.add_argument("--backend", choices=("reference", "onnxruntime"), default="reference")
    p.set_defaults(func="demo:cmd_demo")

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
        module, name = args.func.split(":")
        return getattr(importlib.import_module(f"seqlower.cli.{module}"), name)(args)
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
