"""Every subcommand and exit code of the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower.cli import main
from seqlower.demo import build_demo_model
from tests.conftest import requires_ort
from tests.helpers import FLOAT, INT64, model, seq, t


@pytest.fixture
def seq_model(tmp_path):
    p = tmp_path / "seq.onnx"
    onnx.save(build_demo_model(), p)
    return p


@pytest.fixture
def tensor_model(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [t("x", FLOAT, ["n", 3])], [t("y", FLOAT, ["n", 3])])
    p = tmp_path / "relu.onnx"
    onnx.save(m, p)
    return p


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_exit_codes(capsys, seq_model, tensor_model):
    code, out, _ = cli(capsys, "check", seq_model)
    assert code == 1 and "SplitToSequence node 'split'" in out
    code, out, _ = cli(capsys, "check", tensor_model)
    assert code == 0 and "tensor-only" in out
    code, out, _ = cli(capsys, "check", tensor_model, seq_model, "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["tensor_only"] and doc["models"][str(tensor_model)]["tensor_only"]


def test_check_sees_subgraphs_functions_and_optional_types(capsys, tmp_path):
    then_b = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"])], "then", [], [seq("s")])
    else_b = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "else", [], [seq("s")])
    fn = helper.make_function("local", "f", ["a"], ["b"], [helper.make_node("OptionalHasElement", ["a"], ["b"])],
                              opset_imports=[helper.make_opsetid("", 18)])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then_b, else_branch=else_b),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
             helper.make_node("f", ["y"], ["has"], domain="local")]
    m = model(nodes, [t("c", 9, []), t("x", FLOAT, [2])], [t("y", FLOAT, [None]), t("has", 9, [])],
              opset=18, functions=[fn])
    p = tmp_path / "nested.onnx"
    onnx.save(m, p)
    code, out, _ = cli(capsys, "check", p, "--json")
    ops = json.loads(out)["models"][str(p)]["ops"]
    graphs = {o["op_type"]: o["graph"] for o in ops}
    assert code == 1
    assert "then_branch" in graphs["SequenceConstruct"] and graphs["OptionalHasElement"] == "function local::f"


def test_inspect(capsys, seq_model):
    code, out, _ = cli(capsys, "inspect", seq_model)
    assert code == 0 and "chunks: seq(tensor(float" in out and "from SplitToSequence node 'split'" in out
    code, out, _ = cli(capsys, "inspect", seq_model, "--json")
    doc = json.loads(out)
    assert {v["name"] for v in doc["values"]} >= {"chunks", "with_y", "trimmed", "shifted_seq"}
    assert doc["seqlower_version"] and doc["input"] == str(seq_model)


def test_inspect_reports_keepdims_policy_nodes(capsys, tmp_path):
    m = model([helper.make_node("SplitToSequence", ["x", "k"], ["s"], keepdims=0),
               helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)],
              [t("x", FLOAT, [3, 2]), t("k", INT64, [])], [t("y", FLOAT, [3, 2])])
    p = tmp_path / "unbind.onnx"
    onnx.save(m, p)
    code, out, _ = cli(capsys, "inspect", p)
    assert code == 0 and "keepdims policy decides" in out


def test_verify_same_model_prints_report(capsys, seq_model):
    code, out, _ = cli(capsys, "verify", seq_model, seq_model)
    assert code == 0 and "max abs" in out and "joined" in out
    # By default on both backends.
    assert ("EQUIVALENT on reference (3 of 3 samples compared) and onnxruntime (3 of 3 samples compared)"
            in out.splitlines()[-1])
    code, out, _ = cli(capsys, "verify", seq_model, seq_model, "--json", "--samples", "2", "--backend", "reference")
    doc = json.loads(out)
    assert doc["equivalent"] and doc["compared"] == 2
    [only] = doc["backends"]
    assert only["backend"] == "reference" and only["samples"][0]["outputs"][0]["name"] == "joined"
    assert doc["seqlower_version"] and doc["original"] == str(seq_model) and only["interface_error"] is None


def test_verify_different_models_exits_1(capsys, tmp_path, seq_model):
    m = build_demo_model()
    other = onnx.numpy_helper.from_array(np.linspace(-1, 1.5, 4, dtype=np.float32), "bias")
    m.graph.initializer[-1].CopyFrom(other)
    p = tmp_path / "other.onnx"
    onnx.save(m, p)
    code, out, _ = cli(capsys, "verify", seq_model, p)
    assert code == 1 and "NOT EQUIVALENT" in out and "DIFFERENT" in out
    code, out, _ = cli(capsys, "verify", seq_model, p, "--atol", "1")
    assert code == 0


def test_verify_interface_mismatch(capsys, seq_model, tensor_model):
    code, out, _ = cli(capsys, "verify", seq_model, tensor_model)
    assert code == 1 and "inputs differ" in out


def test_verify_with_given_inputs_and_dims(capsys, tmp_path, tensor_model):
    np.savez(tmp_path / "x.npz", x=np.arange(-3, 3, dtype=np.float32).reshape(2, 3))
    code, out, _ = cli(capsys, "verify", tensor_model, tensor_model, "--inputs", tmp_path / "x.npz")
    assert code == 0 and "given #0" in out
    code, out, _ = cli(capsys, "verify", tensor_model, tensor_model, "--dim", "n=0", "--samples", "1")
    assert code == 0 and "float[0,3]" in out


def test_verify_original_rejecting_every_sample(capsys, tmp_path):
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("SequenceAt", ["s", "p"], ["y"])],
              [t("x", FLOAT, [2]), t("p", INT64, [])], [t("y", FLOAT, [2])])
    p = tmp_path / "at.onnx"
    onnx.save(m, p)
    np.savez(tmp_path / "bad.npz", x=np.ones(2, np.float32), p=np.array(5))
    code, out, _ = cli(capsys, "verify", p, p, "--inputs", tmp_path / "bad.npz")
    # No backend could compare anything: not "not equivalent" (exit 1) but not proven (2).
    assert code == 2 and "original failed" in out and "NOT PROVEN" in out and "NOT RUN on reference" in out
    code, out, _ = cli(capsys, "lower", p, "-o", tmp_path / "o.onnx", "--verify", "--inputs", tmp_path / "bad.npz")
    assert code == 2 and "could not be verified; nothing written" in out and not (tmp_path / "o.onnx").exists()


def test_run_prints_and_saves(capsys, tmp_path, seq_model):
    code, out, _ = cli(capsys, "run", seq_model, "--save", tmp_path / "out")
    assert code == 0 and "joined: float[5,4]" in out and "count: int64[]" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "input_0.pb", "input_1.pb", "output_0.pb", "output_1.pb"]
    code, out2, _ = cli(capsys, "run", seq_model, "--inputs", tmp_path / "out", "--json")
    doc = json.loads(out2)
    assert code == 0 and doc["outputs"]["count"]["data"] == 3
    saved = onnx.numpy_helper.to_array(onnx.load_tensor(tmp_path / "out" / "output_0.pb"))
    assert np.allclose(saved, np.array(doc["outputs"]["joined"]["data"], np.float32))


def test_run_reports_kernel_errors_with_exit_2(capsys, tmp_path):
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")],
              [t("x", FLOAT, [2]), t("p", INT64, [])], [t("y", FLOAT, [2])])
    p = tmp_path / "at.onnx"
    onnx.save(m, p)
    np.savez(tmp_path / "bad.npz", x=np.ones(2, np.float32), p=np.array(5))
    code, _, err = cli(capsys, "run", p, "--inputs", tmp_path / "bad.npz")
    assert code == 2 and "SequenceAt node 'pick': position 5 is out of range" in err and err.count("\n") == 1


@requires_ort
def test_run_on_onnxruntime(capsys, seq_model):
    code, out, _ = cli(capsys, "run", seq_model, "--backend", "onnxruntime")
    assert code == 0 and "joined: float[5,4]" in out


def test_lower_writes_output_and_report(capsys, tmp_path, seq_model):
    out_path, report = tmp_path / "low.onnx", tmp_path / "r.json"
    before = seq_model.read_bytes()
    code, out, _ = cli(capsys, "lower", seq_model, "-o", out_path, "--report", report, "--verify")
    assert code == 0 and out_path.exists() and seq_model.read_bytes() == before
    doc = json.loads(report.read_text())
    assert "verify" in doc and doc["verify"]["equivalent"]
    assert doc["tensor_only"] and doc["remaining"] == []
    assert {r["op"] for r in doc["rewrites"]} >= {"SplitToSequence", "SequenceMap", "ConcatFromSequence"}
    lowered = onnx.load(out_path)
    onnx.checker.check_model(lowered, full_check=True)
    assert {n.op_type for n in lowered.graph.node} <= {"Split", "Add", "Concat", "Identity"}


def test_lower_refuses_overwriting_its_input(capsys, seq_model):
    code, _, err = cli(capsys, "lower", seq_model, "-o", seq_model)
    assert code == 2 and "output path is the input model" in err


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"), (b"not a model at all", "not an ONNX model"), (None, "no such file")])
def test_bad_model_files_exit_2_with_one_line(capsys, tmp_path, content, message):
    p = tmp_path / "bad.onnx"
    if content is not None:
        p.write_bytes(content)
    for argv in (["check", p], ["inspect", p], ["run", p], ["verify", p, p], ["lower", p, "-o", tmp_path / "o.onnx"]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and message in err and str(p) in err and err.count("\n") == 1, argv
    assert not (tmp_path / "o.onnx").exists()


def test_truncated_model_and_missing_external_data(capsys, tmp_path, seq_model):
    data = seq_model.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) - 40])
    code, _, err = cli(capsys, "check", cut)
    assert code == 2 and "cut.onnx" in err
    m = build_demo_model()
    onnx.save_model(m, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()
    code, _, err = cli(capsys, "lower", tmp_path / "ext.onnx", "-o", tmp_path / "o.onnx")
    assert code == 2 and "external data file 'ext.bin' is missing" in err
    assert not (tmp_path / "o.onnx").exists()


def test_demo(capsys, tmp_path):
    code, out, _ = cli(capsys, "demo", "--out", tmp_path)
    assert code == 0 and "EQUIVALENT" in out and (tmp_path / "demo.lowered.onnx").exists()


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify", "only-one.onnx"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["run", "m.onnx", "--seq-len", "-1"])
    assert info.value.code == 2


def test_every_subcommand_help_has_examples(capsys):
    for cmd in ("lower", "verify", "run", "inspect", "check", "demo"):
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0 and "examples:" in out and f"seqlower {cmd}" in out


def test_console_script_gives_no_traceback(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x08\x96\x01junk")
    proc = subprocess.run([sys.executable, "-m", "seqlower", "check", str(p)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "junk.onnx" in proc.stderr


@pytest.mark.parametrize("split, message", [
    ([1, 2, 4], "SplitToSequence node 'split': split [1, 2, 4] sums to 7 but the dimension is 6"),
    (0, "SplitToSequence node 'split': scalar split must be positive, got 0"),
])
def test_lower_refuses_invalid_constants_and_writes_nothing(capsys, tmp_path, split, message):
    m = build_demo_model()
    for init in m.graph.initializer:
        if init.name == "sizes":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(split, np.int64), "sizes"))
    p, out = tmp_path / "bad.onnx", tmp_path / "out.onnx"
    onnx.save(m, p)
    before = p.read_bytes()
    code, _, err = cli(capsys, "lower", p, "-o", out)
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and p.read_bytes() == before
    assert list(tmp_path.iterdir()) == [p]


def test_lower_out_of_range_position_exit_2(capsys, tmp_path):
    m = build_demo_model()
    for init in m.graph.initializer:
        if init.name == "one":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(7, np.int64), "one"))
    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    code, _, err = cli(capsys, "lower", p, "-o", tmp_path / "o.onnx")
    assert code == 2 and "SequenceInsert node 'insert_y': position 7 is out of range [-3, 3]" in err


def test_inspect_shows_lengths_shapes_and_decisions(capsys, seq_model):
    code, out, _ = cli(capsys, "inspect", seq_model)
    assert code == 0
    assert "chunks: seq<float> length 3 [(1,4), (2,4), (3,4)]" in out and "unrolled (static)" in out
    code, out, _ = cli(capsys, "inspect", seq_model, "--max-unroll", "2", "--json")
    doc = json.loads(out)
    chunks = next(s for s in doc["sequences"] if s["name"] == "chunks")
    assert chunks["info"]["length"] == 3 and chunks["info"]["shapes"] == [[1, 4], [2, 4], [3, 4]]
    # Chunks that differ along axis 0 only: Ragged.
    assert chunks["lowering"] == "ragged (data + lengths along axis 0)" and "more than --max-unroll 2" in chunks["reason"]
    code, out, _ = cli(capsys, "inspect", seq_model, "--max-unroll", "2")
    assert "ragged (data + lengths along axis 0): 'chunks' has 3 elements, more than --max-unroll 2" in out and "kept" not in out


def test_lower_past_max_unroll_goes_ragged_and_verifies(capsys, tmp_path, seq_model):
    report = tmp_path / "r.json"
    code, out, _ = cli(capsys, "lower", seq_model, "-o", tmp_path / "o.onnx", "--report", report, "--max-unroll", "2", "--verify")
    doc = json.loads(report.read_text())
    assert code == 0 and doc["tensor_only"], out
    assert any(r["op"] == "SequenceLength" and r["how"] == "folded" for r in doc["rewrites"])
    assert {r["op"] for r in doc["rewrites"] if r["into"] == "ragged"} == {
        "SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceMap", "ConcatFromSequence"}
    # The report and the output say where --max-unroll stopped the unrolled lowering.
    stopped = [n for n in doc["notes"] if n.startswith("--max-unroll stopped unrolling: ")]
    assert stopped and "more than --max-unroll 2; lowered as packed tensors instead" in stopped[0]
    assert stopped[0] in out
    assert cli(capsys, "check", tmp_path / "o.onnx")[0] == 0


def test_lower_report_lists_what_stays(capsys, tmp_path):
    m = model(
        [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, name="split"),
         helper.make_node("Foo", ["s"], ["y"], domain="my", name="foo")],
        [t("x", FLOAT, ["N"])], [t("y", FLOAT, ["N"])],
    )
    m.opset_import.append(helper.make_opsetid("my", 1))
    src = tmp_path / "custom.onnx"
    onnx.save(m, src)
    report = tmp_path / "r.json"
    code, out, _ = cli(capsys, "lower", src, "-o", tmp_path / "o.onnx", "--report", report)
    doc = json.loads(report.read_text())
    assert code == 0 and not doc["tensor_only"]
    assert [r["op"] for r in doc["remaining"]] == ["SplitToSequence"]
    assert "consumed by Foo node 'foo'" in doc["remaining"][0]["reason"]
    code, _, _ = cli(capsys, "check", tmp_path / "o.onnx")
    assert code == 1
    code, out, _ = cli(capsys, "lower", src, "-o", tmp_path / "s.onnx", "--strict")
    assert code == 1 and "strict: 2 op(s) or value(s) generic cannot run" in out and (tmp_path / "s.onnx").exists()


def test_lower_prints_op_counts_before_and_after(capsys, tmp_path, seq_model):
    code, out, _ = cli(capsys, "lower", seq_model, "-o", tmp_path / "o.onnx")
    assert code == 0
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()[2:] if len(ln.split()) == 3}
    # Sequence ops first, then what replaced them, with counts that add up.
    assert rows["SplitToSequence"] == ["1", "0"] and rows["SequenceMap"] == ["1", "0"]
    assert rows["Split"][0] == "0" and int(rows["Split"][1]) >= 1
    names = [ln.split()[0] for ln in out.splitlines()[2:] if len(ln.split()) == 3]
    assert names.index("ConcatFromSequence") < names.index("Split")
    lowered = onnx.load(tmp_path / "o.onnx")
    assert int(rows["total"][1]) == len(lowered.graph.node) + sum(
        len(a.g.node) for n in lowered.graph.node for a in n.attribute if a.HasField("g"))
    assert out.splitlines()[0].startswith(f"lowered {seq_model} -> ") and out.splitlines()[0].endswith(" s")
    code, out, err = cli(capsys, "lower", seq_model, "-o", tmp_path / "q.onnx", "--quiet")
    assert code == 0 and out == "" and err == "" and (tmp_path / "q.onnx").exists()


def test_lower_verify_uses_exactly_the_given_inputs(capsys, tmp_path, seq_model):
    feeds = {"x": np.ones((6, 4), np.float32), "y": np.zeros((2, 4), np.float32)}
    np.savez(tmp_path / "a.npz", **feeds)
    np.savez(tmp_path / "b.npz", **{k: v + 1 for k, v in feeds.items()})
    code, out, _ = cli(capsys, "lower", seq_model, "-o", tmp_path / "o.onnx", "--verify", "--backend", "reference",
                       "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "b.npz", "--report", tmp_path / "r.json")
    assert code == 0 and "EQUIVALENT on reference (2 of 2 samples compared)" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [s["source"] for s in doc["verify"]["backends"][0]["samples"]] == ["given #0", "given #1"]
    for bad in (tmp_path / "missing.npz", tmp_path / "r.json"):
        code, _, err = cli(capsys, "lower", seq_model, "-o", tmp_path / "n.onnx", "--verify", "--inputs", bad)
        assert code == 2 and str(bad) in err and err.count("\n") == 1
        assert not (tmp_path / "n.onnx").exists()


def test_lower_to_stdout_and_report_to_stdout(capsysbinary, tmp_path, seq_model):
    code = main(["lower", str(seq_model), "-o", "-"])
    out, err = capsysbinary.readouterr()
    assert code == 0 and b"lowered" in err and b"SplitToSequence" in err
    lowered = onnx.load_from_string(out)
    onnx.checker.check_model(lowered, full_check=True)
    assert not (tmp_path / "-").exists()
    code = main(["lower", str(seq_model), "-o", str(tmp_path / "o.onnx"), "--report", "-"])
    out, err = capsysbinary.readouterr()
    doc = json.loads(out)  # nothing else on stdout
    assert code == 0 and doc["output"] == str(tmp_path / "o.onnx") and doc["input"] == str(seq_model)
    assert doc["seqlower_version"] and doc["timings"]["total"] > 0 and doc["verify"] is None
    assert doc["ops"]["before"]["SplitToSequence"] == 1 and "SplitToSequence" not in doc["ops"]["after"]

    def values(d):
        if isinstance(d, dict):
            for v in d.values():
                yield from values(v)
        elif isinstance(d, list):
            for v in d:
                yield from values(v)
        else:
            yield d

    assert "" not in list(values(doc))  # absent values are null
    assert main(["lower", str(seq_model), "-o", "-", "--report", "-"]) == 2


def test_verify_calls_a_model_onnxruntime_refuses_not_equivalent(capsys, tmp_path, seq_model):
    # Slice with repeated axes: undefined in the spec; the reference backend runs it,
    # onnxruntime refuses the model. A gate must not pass it.
    m = model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [t("x", FLOAT, [4, 4])], [t("y", FLOAT, None)],
              initializer=[onnx.numpy_helper.from_array(np.array(v, np.int64), k)
                           for k, v in (("s", [0, 1]), ("e", [2, 3]), ("a", [0, 0]))])
    good = model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [t("x", FLOAT, [4, 4])], [t("y", FLOAT, None)],
                 initializer=[onnx.numpy_helper.from_array(np.array(v, np.int64), k)
                              for k, v in (("s", [0, 1]), ("e", [2, 3]), ("a", [0, 1]))])
    onnx.save(m, tmp_path / "bad.onnx")
    onnx.save(good, tmp_path / "good.onnx")
    code, out, _ = cli(capsys, "verify", tmp_path / "good.onnx", tmp_path / "bad.onnx")
    assert code == 1 and "onnxruntime refuses the second model" in out


def test_inspect_draws_the_webs_as_dot(capsys, tmp_path):
    src = tmp_path / "loop.onnx"
    onnx.save(onnx.load("tests/data/exported/ts_list_mutations_loop_opset17.onnx"), src)
    code, _, _ = cli(capsys, "inspect", src, "--dot", tmp_path / "w.dot")
    dot = (tmp_path / "w.dot").read_text()
    assert code == 0 and dot.startswith("digraph webs {") and dot.rstrip().endswith("}")
    # A cluster per graph holding sequences (main, the Loop body, the If branches), a
    # box per sequence value filled by its representation, an edge per op between them.
    code, out, _ = cli(capsys, "inspect", src, "--json")
    seqs = json.loads(out)["sequences"]
    assert dot.count("subgraph cluster_") == len({s["graph"] for s in seqs}) == 8
    assert dot.count("fillcolor=") == len(seqs) and dot.count('fillcolor="#a1c9e1"') == len(seqs)  # all stacked
    assert '-> ' in dot and '[label="SequenceInsert"]' in dot and '[label="SequenceErase"]' in dot


def test_inspect_svg_needs_graphviz(capsys, tmp_path, seq_model, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = cli(capsys, "inspect", seq_model, "--svg", tmp_path / "w.svg")
    assert code == 2 and "needs Graphviz's dot" in err and not (tmp_path / "w.svg").exists()


@pytest.mark.parametrize("tree", [False, True])
def test_every_subcommand_takes_a_model_importing_only_ai_onnx_ml(capsys, tmp_path, tree):
    from tests.passes.lowering.test_lower_zip_map import _ml_only

    src = tmp_path / "clf.onnx"
    onnx.save(_ml_only([3, 5], tree=tree), src)
    before = src.read_bytes()
    for argv, code in [(["inspect", src], 0), (["check", src], 1), (["run", src], 0),
                       (["lower", src, "-o", tmp_path / "out.onnx", "--verify", "-q"], 0),
                       (["check", tmp_path / "out.onnx"], 0), (["verify", src, tmp_path / "out.onnx"], 0),
                       (["lower", src, "-o", tmp_path / "ort.onnx", "--target", "onnxruntime", "-q"], 0)]:
        got, out, err = cli(capsys, *argv)
        assert got == code and "internal error" not in err, (argv, out, err)
    assert src.read_bytes() == before


def test_lower_for_a_target_verifies_on_its_own_runtime_or_says_it_did_not(capsys, tmp_path):
    from tests.test_quirks import _chosen_lengths

    src = tmp_path / "m.onnx"
    onnx.save(_chosen_lengths(True), src)
    code, out, _ = cli(capsys, "lower", src, "-o", tmp_path / "ov.onnx", "--target", "openvino", "--verify",
                       "--report", "-", "-q")
    doc = json.loads(out)
    assert code == 0 and [b["backend"] for b in doc["verify"]["backends"]] == [
        "reference", "onnxruntime", "reference vs openvino"]
    assert all(b["equivalent"] for b in doc["verify"]["backends"])
    code, out, _ = cli(capsys, "lower", src, "-o", tmp_path / "tg.onnx", "--target", "tinygrad", "--verify")
    assert code == 0 and "tinygrad's own runtime is not one the executor drives" in out


def _unary(tmp_path, op: str) -> str:
    path = str(tmp_path / f"{op}.onnx")
    onnx.save(model([helper.make_node(op, ["x"], ["y"])], [t("x", FLOAT, [4])], [t("y", FLOAT, [4])]), path)
    return path


def test_verify_saves_each_failing_sample_as_backend_test_data(capsys, tmp_path):
    """verify --save-failures (Stage 13, item 6): a sample that differs is written as a
    backend test-data folder (inputs, the original's outputs, the lowered model's); run
    back, each model gives what was saved. Equal samples write nothing."""
    from seqlower.executor import Executor, load_inputs

    relu, absolute = _unary(tmp_path, "Relu"), _unary(tmp_path, "Abs")
    out = tmp_path / "failed"
    code, text, _ = cli(capsys, "verify", relu, absolute, "--backend", "reference", "--samples", "3",
                        "--save-failures", str(out))
    assert code == 1 and "saved 3 failing sample(s)" in text
    folders = sorted((out / "reference").iterdir())
    assert [f.name for f in folders] == ["sample_0", "sample_1", "sample_2"]
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == ["input_0.pb", "lowered_output_0.pb", "output_0.pb"]
        ex_a, ex_b = Executor(relu), Executor(absolute)
        feeds = load_inputs(str(folder), ex_a.inputs)
        saved = {p.name: onnx.numpy_helper.to_array(onnx.load_tensor(str(p))) for p in folder.glob("*output_0.pb")}
        np.testing.assert_array_equal(ex_a.run(feeds).outputs["y"], saved["output_0.pb"])
        np.testing.assert_array_equal(ex_b.run(feeds).outputs["y"], saved["lowered_output_0.pb"])
    code, text, _ = cli(capsys, "verify", relu, absolute, "--backend", "reference", "--samples", "2",
                        "--save-failures", str(tmp_path / "again"), "--json")
    assert json.loads(text)["saved_failures"] == [str(tmp_path / "again" / "reference" / f"sample_{k}") for k in (0, 1)]
    same = tmp_path / "none"
    code, text, _ = cli(capsys, "verify", relu, relu, "--backend", "reference", "--save-failures", str(same))
    assert code == 0 and "saved 0 failing sample(s)" in text and not same.exists()


def test_verify_save_failures_to_a_file_is_one_line_and_exit_2(capsys, tmp_path):
    relu, absolute = _unary(tmp_path, "Relu"), _unary(tmp_path, "Abs")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code, _, err = cli(capsys, "verify", relu, absolute, "--backend", "reference", "--save-failures", str(blocker))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot write the failing samples" in err
