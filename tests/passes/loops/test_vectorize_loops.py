"""A Loop over a run-time count that carries nothing and whose body is batch-polymorphic
in the iteration number runs once on Range(0, M), for targets without Loop: scan outputs
that depend on the iteration (through a Gather of rows, elementwise ops of mixed ranks,
a Reshape to a constant shape) and ones that do not, zero and negative trip counts; a
body that does not batch keeps its Loop (or Scan)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor.verify import verify
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, INT64, body, const, lower_checked, model, ops_of, seq, t


def _appending(trips_from_input: bool = False, extra_nodes=(), extra_outs=()):
    """for i in range(n): out.append(x[i] * i); also scans i*i and a constant row."""
    nodes = [helper.make_node("Identity", ["c"], ["c_out"]),
             helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
             helper.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
             helper.make_node("Mul", ["row", "i_f"], ["scaled"]),
             helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]),
             helper.make_node("Mul", ["i", "i"], ["i2"]),
             helper.make_node("Identity", ["bias"], ["same"]),
             *extra_nodes]
    b = body(nodes, [t("i", INT64, []), t("c", BOOL, []), seq("acc", FLOAT, ["w"])],
             [t("c_out", BOOL, []), seq("acc_out", FLOAT, ["w"]), t("i2", INT64, []), t("same", FLOAT, [2]), *extra_outs])
    head = [] if trips_from_input else [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["trips"], axis=0)]
    outs = ["rows", "squares", "sames", *[f"{o.name}_all" for o in extra_outs]]
    return model(
        head + [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
                helper.make_node("Loop", ["trips", "", "empty"], outs, body=b, name="steps"),
                helper.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0, new_axis=1)],
        [t("x", FLOAT, ["n", "w"])] + ([t("trips", INT64, [])] if trips_from_input else []),
        [t("y", FLOAT, [None, "w"]), t("squares", INT64, [None]), t("sames", FLOAT, [None, 2]),
         *[t(f"{o.name}_all", o.type.tensor_type.elem_type, [None, *(d.dim_value or None for d in o.type.tensor_type.shape.dim)])
           for o in extra_outs]],
        initializer=[const("zero", 0, np.int64), const("bias", np.array([1.5, -2], np.float32))],
    )


def _feeds(sizes, trips=None):
    return [{"x": np.arange(n * w, dtype=np.float32).reshape(n, w), **({"trips": np.array(trips(n))} if trips else {})}
            for n, w in sizes]


@pytest.mark.parametrize("target", ["tinygrad", "tract"])
def test_an_append_loop_over_a_dim_runs_without_loop_or_scan(target):
    m = _appending()
    feeds = _feeds([(4, 3), (1, 3), (0, 2), (3, 0)])
    low, report = lower_checked(m, inputs=feeds, target=target)
    assert not {"Loop", "Scan"} & set(ops_of(low))
    assert "Loop body run once on every iteration number (batched)" in {r["how"] for r in report.rewrites}
    if target == "tract":
        rep = verify(m, low, inputs=feeds, backend="reference", lowered_backend="tract")
        assert rep.equivalent, rep.to_json()


def test_a_trip_count_from_data_of_any_sign():
    m = _appending(trips_from_input=True)
    feeds = _feeds([(4, 3), (3, 2), (2, 2)], trips=lambda n: {4: 4, 3: 0, 2: -5}[n])
    low, _ = lower_checked(m, inputs=feeds, target="tinygrad")
    assert "Loop" not in ops_of(low)


def test_a_reshape_to_a_constant_shape_batches():
    extra = [helper.make_node("Reshape", ["scaled", "as_column"], ["col"])]
    b_out = [t("col", FLOAT, [None, 1])]
    m = _appending(extra_nodes=extra, extra_outs=b_out)
    m.graph.initializer.append(const("as_column", np.array([-1, 1], np.int64)))
    low, _ = lower_checked(m, inputs=_feeds([(3, 2), (0, 2)]), target="tinygrad")
    assert "Loop" not in ops_of(low)


def test_a_body_that_does_not_batch_keeps_its_loop():
    # Shape of a batched value would give the batch's shape: not batchable.
    extra = [helper.make_node("Shape", ["scaled"], ["shape"])]
    m = _appending(extra_nodes=extra, extra_outs=[t("shape", INT64, [1])])
    low = to_proto(lower_with_report(load_model(m), LowerOptions(target="tinygrad"))[0])
    assert "Loop" in ops_of(low)
    # And the generic target keeps Loops as they are.
    low = to_proto(lower_with_report(load_model(_appending()), LowerOptions())[0])
    assert "Loop" in ops_of(low)
