"""An initializer that is also a graph input (IR >= 4) is a default the caller may
override: it is read at run time at every depth, never folded, and the lowered model keeps
both the input and its default. onnx's own backend models (``test_sequence_model*``) feed
positions this way."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor, compare_values
from seqlower.io.models import to_proto
from seqlower.fastpath.pipeline import lower_proto_with_report
from tests.helpers import FLOAT, INT64, body, const, lower_checked, model, seq, t


def _model_cases() -> list:
    from onnx.backend.test.case.model import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.name.startswith("test_sequence_model")]


MODEL_CASES = _model_cases()


def _both_ways(m: onnx.ModelProto) -> list[tuple[str, onnx.ModelProto, list[str]]]:
    whole, report = lower_with_report(load_model(m), LowerOptions())
    copy = onnx.ModelProto()
    copy.CopyFrom(m)
    region, region_report = lower_proto_with_report(copy, LowerOptions())
    region = region if isinstance(region, onnx.ModelProto) else to_proto(region)
    return [("whole", to_proto(whole), report.notes), ("region", region, region_report.notes)]


def test_the_backend_model_cases_are_there():
    assert len(MODEL_CASES) >= 8
    assert sum(bool({i.name for i in c.model.graph.initializer} & {i.name for i in c.model.graph.input})
               for c in MODEL_CASES) >= 4


@pytest.mark.parametrize("case", MODEL_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", ["reference", "onnxruntime"])
def test_backend_model_case_lowers_and_keeps_its_defaults(case, backend):
    overridable = {i.name for i in case.model.graph.initializer} & {i.name for i in case.model.graph.input}
    for way, low, notes in _both_ways(case.model):
        assert not any(n.op_type.startswith("Sequence") or n.op_type.endswith("Sequence") for n in low.graph.node)
        onnx.checker.check_model(low, full_check=True)
        # Each overridable input is still an input, and still has its default.
        assert overridable <= {i.name for i in low.graph.input} & {t.name for t in low.graph.initializer}, way
        assert all(any(repr(x) in n for n in notes) for x in overridable), (way, notes)
        ex = Executor(low, backend=backend)
        names = [p.name for p in ex.inputs]
        for inputs, expected in case.data_sets:
            # The data sets feed the inputs without a default only: the defaults apply.
            result = ex.run(dict(zip(names, inputs)))
            for port, want in zip(ex.outputs, expected):
                rep = compare_values(port.name, want, result.outputs[port.name], 1e-6, 1e-7)
                assert rep.ok, f"{case.name} ({way}) {port.name}: {rep.detail}"


def _override_feeds(case) -> list[dict]:
    """Every value of the overridable positions the model accepts, fed over the defaults."""
    m = case.model
    names = [i.name for i in m.graph.input]
    base = dict(zip(names, case.data_sets[0][0]))
    overridable = [i.name for i in m.graph.initializer if i.name in names]
    feeds = []
    for values in np.ndindex(*(7,) * len(overridable)):
        f = dict(base)
        f.update({x: np.array(v - 3, np.int64) for x, v in zip(overridable, values)})
        try:
            Executor(m).run(f)
        except Exception:  # noqa: BLE001 - a position out of range: the original refuses it too
            continue
        feeds.append(f)
    return feeds


@pytest.mark.parametrize("case", [c for c in MODEL_CASES if {i.name for i in c.model.graph.initializer}
                                  & {i.name for i in c.model.graph.input}], ids=lambda c: c.name)
def test_an_overridden_default_is_what_the_lowered_model_reads(case):
    feeds = _override_feeds(case)
    assert len(feeds) >= 3  # more than the default: the test could tell a folded position
    for way, low, _ in _both_ways(case.model):
        for backend in ("reference", "onnxruntime"):
            orig, ex = Executor(case.model), Executor(low, backend=backend)
            for f in feeds:
                want, got = orig.run(f).outputs, ex.run(f).outputs
                for name, w in want.items():
                    rep = compare_values(name, w, got[name], 1e-6, 1e-7)
                    assert rep.ok, f"{case.name} ({way}, {backend}) fed {f}: {rep.detail}"


def _nested_default_model() -> onnx.ModelProto:
    """A position with a default, read by a SequenceInsert inside a Loop body and by a
    SequenceAt inside an If branch (outer-scope reads): a list of x's rows."""
    loop_body = body(
        [helper.make_node("SequenceInsert", ["s_in", "x", "pos"], ["s_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        [t("i", INT64, []), t("c", onnx.TensorProto.BOOL, []), seq("s_in", FLOAT, [3])],
        [t("c_out", onnx.TensorProto.BOOL, []), seq("s_out", FLOAT, [3])])
    then = body([helper.make_node("SequenceAt", ["grown", "at"], ["picked"])], [], [t("picked", FLOAT, [3])])
    other = body([helper.make_node("SequenceAt", ["grown", "zero"], ["first"])], [], [t("first", FLOAT, [3])])
    nodes = [
        helper.make_node("SequenceConstruct", ["x0", "x1"], ["start"]),
        helper.make_node("Loop", ["trips", "", "start"], ["grown"], body=loop_body),
        helper.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=other),
    ]
    inputs = [t("x", FLOAT, [3]), t("x0", FLOAT, [3]), t("x1", FLOAT, [3]), t("flag", onnx.TensorProto.BOOL, []),
              t("pos", INT64, []), t("at", INT64, [])]
    return model(nodes, inputs, [t("out", FLOAT, [3])],
                 initializer=[const("pos", 1, np.int64), const("at", -1, np.int64), const("trips", 2, np.int64),
                              const("zero", 0, np.int64)])


def test_a_default_read_in_subgraphs_is_read_at_run_time():
    m = _nested_default_model()
    rng = np.random.default_rng(0)
    base = {k: rng.standard_normal(3).astype(np.float32) for k in ("x", "x0", "x1")}
    feeds = [{**base, "flag": np.array(f)} for f in (True, False)]  # the defaults
    feeds += [{**base, "flag": np.array(True), "pos": np.array(p, np.int64), "at": np.array(a, np.int64)}
              for p, a in [(2, 0), (2, 1), (0, 0), (-1, -2), (0, 3)]]
    low, report = lower_checked(m, inputs=feeds)
    assert {"pos", "at"} <= {i.name for i in low.graph.input} & {t.name for t in low.graph.initializer}
    assert any("'pos'" in n for n in report.notes) and any("'at'" in n for n in report.notes)
    # Not folded: other positions give other numbers, as in the original.
    outs = {tuple(Executor(low).run(f).outputs["out"].tolist()) for f in feeds[2:]}
    assert len(outs) >= 3
