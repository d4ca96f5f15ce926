"""Target profiles (seqlower/targets/*.toml) and what `check`/`lower --target` make of them."""

from __future__ import annotations

import re

import json

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.cli import main
from seqlower.errors import ModelError
from seqlower.targets import TARGETS, load_target, target_gaps
from tests.helpers import BOOL, FLOAT, INT64, body, const, model, seq, t

ISSUE_TARGETS = {"onnxruntime", "openvino", "tensorrt", "tract", "onnx2torch", "tinygrad", "tvm", "generic"}


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", TARGETS)
def test_every_profile_loads_and_names_real_ops(name):
    target = load_target(name)
    assert target.name == name and target.description
    known = {s.name for s in onnx.defs.get_all_schemas()}
    assert target.lacks <= known, target.lacks - known
    assert all(qid and text for qid, text in target.quirks)


def test_the_issue_targets_exist_and_unknown_ones_are_refused():
    assert ISSUE_TARGETS <= set(TARGETS)
    assert load_target("onnxruntime").sequences and not load_target("generic").sequences
    assert {"Loop", "Scan"} <= load_target("tinygrad").lacks and "Scan" not in load_target("tract").lacks
    with pytest.raises(ModelError, match="unknown target 'nope'"):
        load_target("nope")


def _loop_model() -> onnx.ModelProto:
    """A tensor-only model with a Loop (what a lowered list loop looks like)."""
    b = body([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["a_in", "one"], ["a_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("a_in", FLOAT, [])], [t("c_out", BOOL, []), t("a_out", FLOAT, [])])
    return model([helper.make_node("Loop", ["n", "", "a"], ["y"], body=b, name="steps")],
                 [t("n", INT64, []), t("a", FLOAT, [])], [t("y", FLOAT, [])], initializer=[const("one", 1.0, np.float32)])


def test_gaps_name_each_node_and_why():
    m = _loop_model()
    assert target_gaps(m, load_target("generic")) == []
    assert target_gaps(m, load_target("openvino")) == []
    [gap] = target_gaps(m, load_target("tract"))
    assert (gap.what, gap.where, gap.graph, gap.why) == ("op", "Loop node 'steps'", "main", "tract has no Loop")
    s = model([helper.make_node("SplitToSequence", ["x"], ["s"], name="split")], [t("x", FLOAT, ["N"])], [seq("s", FLOAT)])
    assert target_gaps(s, load_target("onnxruntime")) == []
    assert {g.why for g in target_gaps(s, load_target("tvm"))} == {"tvm runs no sequence or optional op", "tvm has no sequence or optional type"}


def test_check_and_lower_with_a_target(capsys, tmp_path):
    p = tmp_path / "loop.onnx"
    onnx.save(_loop_model(), p)
    code, out, _ = cli(capsys, "check", p)
    assert code == 0 and "tensor-only" in out
    code, out, _ = cli(capsys, "check", p, "--target", "tract")
    assert code == 1 and "Loop node 'steps'  in main: tract has no Loop" in out
    code, out, _ = cli(capsys, "check", p, "--target", "onnx2torch", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["target"] == "onnx2torch" and not doc["runs_on_target"] and doc["tensor_only"]
    assert [g["why"] for g in doc["models"][str(p)]["gaps"]] == [
        "onnx2torch has no Loop, and it cannot be unrolled: its trip count is known only at run time (--max-trips N unrolls it into N predicated steps)"]
    report = tmp_path / "r.json"
    code, out, _ = cli(capsys, "lower", p, "-o", tmp_path / "o.onnx", "--target", "tinygrad", "--strict", "--report", report)
    assert code == 1 and "tinygrad: 1 node(s) it cannot run" in out and (tmp_path / "o.onnx").exists()
    assert json.loads(report.read_text())["target"]["gaps"][0]["where"] == "Loop node 'steps'"
    code, _, _ = cli(capsys, "lower", p, "-o", tmp_path / "o2.onnx", "--target", "openvino", "--strict")
    assert code == 0
    with pytest.raises(SystemExit) as info:
        main(["check", str(p), "--target", "nope"])
    assert info.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(ISSUE_TARGETS))
def test_every_fixture_lowers_for_every_target_or_the_report_names_each_node_and_why(name):
    """The Stage 4 promise, for every target: the lowered fixture has nothing the target
    lacks (for OpenVINO and tract, tests/executor/test_native_backends.py also runs it),
    or each gap names its node and says why it could not be lowered away."""
    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.errors import describe_node
    from seqlower.io.inventory import walk_graphs
    from seqlower.io.models import to_proto
    from tests.test_exported_models import MODELS

    target = load_target(name)
    kept = {}
    for path in MODELS:
        lowered, report = lower_with_report(load_model(onnx.load(path)), LowerOptions(target=name))
        gaps = target_gaps(to_proto(lowered), target, report.kept_loops)
        assert not any(g.sequence for g in gaps), (path.stem, gaps)  # every sequence is lowered, for every target
        for g in gaps:
            op = g.where.split(" node ")[0]
            if g.why.endswith(")") and "(quirk " in g.why:
                # A quirk no rewrite avoids, found before anything runs.
                assert g.why.rsplit("(quirk ", 1)[1][:-1] in dict(target.quirks), (path.stem, g)
                continue
            assert op in target.lacks and g.why.startswith(f"{name} has no {op}"), (path.stem, g)
            if op == "Loop":
                # Why neither the unrolling nor (with Scan) a Scan could take it.
                assert ", and it cannot be " in g.why, (path.stem, g)
        kept[path.stem] = [g.where for g in gaps if "(quirk " not in g.why]
        if name == "tensorrt":
            # Of the types and axes its parser's documentation excludes, nothing is on a
            # node seqlower wrote: each such node is the user's own.
            # (A Loop unrolled for it copies the user's body nodes as NAME_map, NAME_map_K.)
            mine = {describe_node(n.op_type, n.name, list(n.output)) for _, g, _ in walk_graphs(onnx.load(path))
                    for n in g.node}
            wrote = [g for g in gaps if g.why.endswith(("(quirk trt-op-types)", "(quirk trt-axes-initializer)"))
                     and re.sub(r"_map(_\d+)?'$", "'", g.where) not in mine]
            assert wrote == [], (path.stem, wrote)
    # What is left is Loops, for targets without Loop only, and fewer where Scan is.
    if "Loop" not in target.lacks:
        assert not any(kept.values())
    else:
        # (and Ifs, for a target without If: onnx2torch)
        assert all(w.split(" node ")[0] in {"Loop", "If"} & target.lacks for ws in kept.values() for w in ws)


def test_lower_for_a_target_says_why_a_loop_stays(capsys, tmp_path):
    from tests.helpers import growing_loop_model

    src, dst = tmp_path / "grow.onnx", tmp_path / "grow.tract.onnx"
    onnx.save(growing_loop_model(dependent=True), src)
    code, out, _ = cli(capsys, "lower", src, "-o", dst, "--target", "tract", "--strict", "--report", tmp_path / "r.json")
    assert code == 1 and dst.exists()
    assert ("Loop node 'grow'  in main: tract has no Loop, and it cannot be a Scan: the tensor it carries ('f_in') "
            "is not proven to keep one shape across iterations (it may grow), and a Scan state must") in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["kept_loops"] == {"Loop node 'grow'": doc["target"]["gaps"][0]["why"].split(", and ", 1)[1]}
    code, out, _ = cli(capsys, "check", dst, "--target", "tract")
    assert code == 1 and "Loop node 'grow'  in main: tract has no Loop, and it cannot be a Scan: the tensor it carries" in out
    # check works it out from the file alone, for the original as well.
    code, out, _ = cli(capsys, "check", src, "--target", "tinygrad")
    assert code == 1 and "tinygrad has no Loop, and it cannot be unrolled: its trip count is known only at run time (--max-trips N unrolls it into N predicated steps)" in out


def test_onnx2torch_converters_are_looked_up_by_schema_version():
    """Its profile's converter table (read off its registry): a node whose op has no
    converter at the version the model's opset gives it is named, and the lowering writes
    an Identity it has none for as an Expand to no new dims (the numbers unchanged)."""
    from onnx import helper

    from seqlower import LowerOptions, load_model, lower_with_report
    from seqlower.io.models import to_proto
    from tests.helpers import FLOAT, INT64, lower_checked, model, ops_of, t

    o2t = load_target("onnx2torch")
    assert o2t.converts("Constant", 18) and not o2t.converts("Constant", 19)
    assert o2t.refuses("Identity", 19, "FLOAT") and not o2t.refuses("Identity", 18, "FLOAT")
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [2.0]))
    m = model([const, helper.make_node("Mul", ["x", "c"], ["y"])], [t("x", FLOAT, [2])], [t("y", FLOAT, [2])], opset=19)
    gaps = target_gaps(m, o2t)
    assert [g.where for g in gaps] == ["Constant node (output 'c')"] and "(quirk no-converter)" in gaps[0].why \
        and "Constant-19" in gaps[0].why
    assert target_gaps(m, load_target("generic")) == []
    # torch holds no strings (quirk no-strings: random programs failed unnamed on them).
    words = model([helper.make_node("Identity", ["w"], ["v"])], [t("w", onnx.TensorProto.STRING, [2])],
                  [t("v", onnx.TensorProto.STRING, [2])], opset=17)
    assert any("(quirk no-strings)" in g.why for g in target_gaps(words, o2t))
    # A list unbound and stacked back at opset 19: its outputs come out of the Builder's
    # Identity, which onnx2torch has no converter for there.
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceAt", ["s", "k"], ["y"]),
             helper.make_node("ConcatFromSequence", ["s"], ["z"], axis=0, new_axis=1)]
    seq = model(nodes, [t("x", FLOAT, [3, 2]), t("k", INT64, [])], [t("y", FLOAT, [2]), t("z", FLOAT, [3, 2])], opset=19)
    feeds = [{"x": np.arange(6, dtype=np.float32).reshape(3, 2), "k": np.array(k, np.int64)} for k in (0, -1)]
    low, report = lower_checked(seq, inputs=feeds, target="onnx2torch")
    assert "Identity" not in ops_of(low) and not report.gaps, report.gaps
    # (for a target with that converter, the same lowering writes the Identity and Reshape)
    generic = to_proto(lower_with_report(load_model(seq), LowerOptions())[0])
    assert {"Identity", "Reshape"} <= set(ops_of(generic))


def test_the_onnx2torch_profile_tool_writes_the_table_the_profile_reads(tmp_path, monkeypatch):
    """tools/onnx2torch_profile.py's rendering round-trips through the profile's reader,
    and rewriting a profile keeps everything before the table (onnx2torch itself is not
    needed: the registry is stood in for)."""
    import sys
    import tomllib
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import onnx2torch_profile as tool

    table = {"Add": [1, 6, 7, 13, 14], "Constant": [9, 11, 12, 13]}
    assert tomllib.loads(tool.render(table, "9.9"))["converters"] == table
    profile = tmp_path / "onnx2torch.toml"
    head = 'name = "onnx2torch"\n\n[[quirks]]\nid = "no-converter"\ntext = "t"\n'
    profile.write_text(head + "\n" + tool.render({"Old": [1]}, "0.1"))
    monkeypatch.setattr(tool, "OUT", profile)
    monkeypatch.setattr(tool, "converters", lambda: table)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "9.9")
    tool.main()
    doc = tomllib.loads(profile.read_text())
    assert doc["converters"] == table and doc["quirks"] == [{"id": "no-converter", "text": "t"}]
    # The committed profile's table is what Target.converts reads.
    o2t = load_target("onnx2torch")
    assert o2t.converters["Constant"] == (9, 11, 12, 13) and "Loop" not in o2t.converters
