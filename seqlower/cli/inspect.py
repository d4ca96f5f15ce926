"""``seqlower inspect`` (with a Graphviz picture of the sequence webs) and ``seqlower check``."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from seqlower.cli._common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Console, Progress, find_models, nulls, worst, \
    write_text_atomically
from seqlower.errors import SeqlowerError

# Fill colours of a sequence value in the picture, by the representation chosen.
_COLOURS = {"unrolled": "#b7e1a1", "stacked": "#a1c9e1", "ragged": "#c9b7e1", "flat": "#f2d49b", "kept": "#f4a3a3"}


def cmd_inspect(args: argparse.Namespace) -> int:
    from seqlower.io.inventory import take_inventory
    from seqlower.io.models import load_model, read_model_proto
    from seqlower.fastpath.pipeline import LowerOptions, describe_sequences

    inv = take_inventory(read_model_proto(args.model, load_external_data=False), infer=True)
    seqs = describe_sequences(load_model(args.model), LowerOptions(max_unroll=args.max_unroll,
                                                                   keepdims_policy=args.keepdims_policy))
    if args.dot or args.svg:
        dot = to_dot(Path(args.model).name, seqs)
        if args.dot:
            write_text_atomically(Path(args.dot), dot)
        if args.svg:
            _render_svg(dot, Path(args.svg))
    if args.json:
        from seqlower import __version__

        doc = {"seqlower_version": __version__, "input": args.model, **inv.to_json(), "sequences": seqs}
        print(json.dumps(nulls(doc), indent=2))
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


def _quote(*lines: str) -> str:
    """A DOT string of one or more lines."""
    return '"' + "\\n".join(ln.replace("\\", "\\\\").replace('"', '\\"') for ln in lines) + '"'


def to_dot(title: str, seqs: list[dict[str, Any]]) -> str:
    """The sequence webs as Graphviz DOT: a box per sequence value, filled by the
    representation chosen (red: kept, with why in its tooltip), an edge per op that
    makes one sequence from another, a cluster per graph (bodies and branches)."""
    ids = {(s["graph"], s["name"]): f"v{i}" for i, s in enumerate(seqs)}
    lines = ["digraph webs {", f"  label={_quote(f'{title}: sequence webs')}; labelloc=t; rankdir=LR;",
             "  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=10];",
             "  edge [fontname=Helvetica, fontsize=9];"]
    by_graph: dict[str, list[dict[str, Any]]] = {}
    for s in seqs:
        by_graph.setdefault(s["graph"], []).append(s)
    for n, (graph, members) in enumerate(sorted(by_graph.items())):
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={_quote(graph)}; style=dashed; color=gray50;")
        for s in members:
            kind = s["lowering"].split(" ")[0]
            info = s["info"] or {}
            length = "?" if info.get("length") is None else info["length"]
            tip = s["reason"] or s["lowering"]
            lines.append(f"    {ids[(s['graph'], s['name'])]} [label={_quote(s['name'], f'length {length}', s['lowering'])}, "
                         f"fillcolor={_quote(_COLOURS.get(kind, '#dddddd'))}, tooltip={_quote(tip)}];")
        lines.append("  }")
    for s in seqs:
        for graph, name in s.get("from", []):
            src = ids.get((graph, name))
            if src is not None:
                lines.append(f"  {src} -> {ids[(s['graph'], s['name'])]} [label={_quote(s.get('op') or '')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _render_svg(dot: str, path: Path) -> None:
    exe = shutil.which("dot")
    if exe is None:
        raise SeqlowerError(f"{path}: --svg needs Graphviz's dot on PATH (apt install graphviz); --dot FILE writes"
                            " the DOT source without it")
    proc = subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SeqlowerError(f"{path}: dot failed: {(proc.stderr.strip().splitlines() or ['?'])[0]}")
    write_text_atomically(path, proc.stdout)


# -- check ----------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from seqlower.targets import load_target

    target = load_target(args.target)
    for p in args.models:
        if not Path(p).exists():
            raise SeqlowerError(f"{p}: no such file")
    models = find_models(args.models)
    if not models:
        raise SeqlowerError(f"no .onnx model in {', '.join(args.models)}")
    batch = len(models) > 1 or any(Path(p).is_dir() for p in args.models)
    out = Console(stdout_taken=args.json)
    results: dict[str, dict[str, Any]] = {}
    progress = Progress(len(models), "checking")
    cases = []
    for path, _ in models:
        start = time.perf_counter()
        try:
            doc, lines = _check_one(str(path), target)
            code = EXIT_OK if not doc["gaps"] else EXIT_FAIL
            reason = "" if code == EXIT_OK else f"{len(doc['gaps'])} thing(s) {target.name} cannot run, first " \
                                                 f"{doc['gaps'][0]['where']} in {doc['gaps'][0]['graph']}"
        except SeqlowerError as e:
            if not batch:
                raise
            doc, lines, code, reason = {"error": str(e)}, [f"{path}: error: {e}"], EXIT_USAGE, str(e)
        results[str(path)] = {**doc, "exit_code": code, "seconds": round(time.perf_counter() - start, 4)}
        cases.append((str(path), code, reason, time.perf_counter() - start, lines))
        progress.step(str(path))
        for line in lines:
            out(line)
    progress.close()
    if batch:
        failed = sum(c[1] == EXIT_FAIL for c in cases)
        refused = sum(c[1] not in (EXIT_OK, EXIT_FAIL) for c in cases)
        out(f"{len(cases)} model(s): {len(cases) - failed - refused} pass, {failed} fail, {refused} unreadable")
    if args.junit:
        from seqlower.cli.junit import Case, write_junit

        write_junit(Path(args.junit), f"seqlower check --target {target.name}",
                    [Case(name, code, reason, secs, "\n".join(lines)) for name, code, reason, secs, lines in cases])
    code = worst(c[1] for c in cases)
    if args.json:
        from seqlower import __version__

        print(json.dumps(nulls({
            "seqlower_version": __version__,
            "tensor_only": all(r.get("tensor_only") for r in results.values()), "target": target.name,
            "runs_on_target": code == EXIT_OK, "models": results,
        }), indent=2))
    return code


def _kept_loop_reasons(proto: Any, target: Any) -> dict[str, str]:
    """Why each Loop stays, for a target without Loop: only a model with a Loop loads the
    passes (a check of 500 small models pays no pass imports)."""
    from seqlower.io.inventory import walk_graphs

    if "Loop" not in target.lacks or not any(n.op_type == "Loop" for _, g, _ in walk_graphs(proto) for n in g.node):
        return {}
    from seqlower.io.models import load_model
    from seqlower.fastpath.pipeline import kept_loop_reasons

    return kept_loop_reasons(load_model(proto), target.name)


def _check_one(path: str, target: Any) -> tuple[dict[str, Any], list[str]]:
    from seqlower.io.inventory import take_inventory
    from seqlower.io.models import read_model_proto
    from seqlower.targets import target_gaps

    proto = read_model_proto(path, load_external_data=False)
    inv = take_inventory(proto)
    # Why a Loop stays, as lower would have said (shapes inferred on a copy); a model
    # whose sequences do not even infer still gets its gaps named.
    try:
        reasons = _kept_loop_reasons(proto, target)
    except SeqlowerError:
        reasons = {}
    gaps = target_gaps(proto, target, reasons)
    lines = []
    if not gaps:
        lines.append(f"{path}: tensor-only" if target.name == "generic" else f"{path}: nothing {target.name} lacks")
    else:
        if not inv.clean and not target.sequences:
            lines.append(f"{path}: {len(inv.ops)} sequence/optional ops and {len(inv.values)} sequence/optional values remain")
            lines += [f"  op    {op.node}  in {op.graph}" for op in inv.ops]
            lines += [f"  value {v.name}: {v.type}  in {v.graph} ({v.role})" for v in inv.values]
        others = [g for g in gaps if not g.sequence]
        if others:
            lines.append(f"{path}: {len(others)} node(s) {target.name} cannot run")
            lines += [f"  op    {g.where}  in {g.graph}: {g.why}" for g in others]
    return {**inv.to_json(), "gaps": [g.to_json() for g in gaps]}, lines
