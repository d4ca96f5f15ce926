"""A Loop of independent iterations that append results of data-dependent length (the
nonzero positions of each row) runs once on all rows for targets without Loop: no Loop,
no Scan. The TorchScript export it comes from, against PyTorch's outputs on the
reference backend and onnxruntime; a body it cannot batch keeps its Loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from seqlower import LowerOptions, load_model, lower_with_report
from seqlower.executor import Executor
from seqlower.io.models import to_proto
from tests.helpers import BOOL, FLOAT, INT64, body, cases_match, const, model, ops_of, t
from tests.test_exported_models import load_cases

BATCHED = "Loop of ragged appends run once on all rows (batched, no Loop)"
DATA = Path(__file__).resolve().parents[2] / "data" / "exported"


def _lower(m, target="tinygrad"):
    out, report = lower_with_report(load_model(m), LowerOptions(target=target))
    low = to_proto(out)
    onnx.checker.check_model(low, full_check=True)
    return low, report


@pytest.mark.parametrize("name", ["ts_nonzero_rows_loop_opset13", "ts_nonzero_rows_loop_opset17"])
@pytest.mark.parametrize("target", ["tinygrad", "onnx2torch", "tract"])
def test_torchscript_nonzero_rows_run_without_loop(name, target):
    """``for i in range(n): out.append(x[i].nonzero()[:, 0] + i * 10)``, then cat."""
    path = DATA / f"{name}.onnx"
    low, report = _lower(onnx.load(path), target)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and BATCHED in [r["how"] for r in report.rewrites]
    for backend in ("reference", "onnxruntime", *(["tract"] if target == "tract" else [])):
        ex = Executor(low, backend=backend)
        for k, (feeds, expected) in enumerate(load_cases(path)):
            out = ex.run(feeds).outputs
            for key, want in expected.items():
                np.testing.assert_array_equal(out[key], want, err_msg=f"{backend} case {k}")


def _appending(extra: list, piece: str) -> onnx.ModelProto:
    """Rows' positive positions plus a per-row offset, appended to a flat buffer, and
    their counts to another; ``extra`` nodes may compute a different piece."""
    b = body([helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
              helper.make_node("Greater", ["row", "zero_f"], ["pos"]),
              helper.make_node("NonZero", ["pos"], ["nz"]),
              helper.make_node("Squeeze", ["nz", "axis0"], ["cols"]),
              helper.make_node("Mul", ["i", "hundred"], ["offset"]),
              helper.make_node("Add", ["cols", "offset"], ["shifted"]),
              *extra,
              helper.make_node("Shape", [piece], ["piece_dims"]),
              helper.make_node("Concat", ["acc", piece], ["acc_out"], axis=0),
              helper.make_node("Concat", ["lens", "piece_dims"], ["lens_out"], axis=0),
              helper.make_node("Identity", ["c"], ["c_out"])],
             [t("i", INT64, []), t("c", BOOL, []), t("acc", INT64, [None]), t("lens", INT64, [None])],
             [t("c_out", BOOL, []), t("acc_out", INT64, [None]), t("lens_out", INT64, [None])],
             initializer=[const("hundred", np.int64(100)), const("axis0", np.array([0], np.int64)),
                          const("zero_f", np.float32(0))])
    return model([helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Gather", ["dims", "zero"], ["n"], axis=0),
                  helper.make_node("Loop", ["n", "", "empty", "empty"], ["flat", "lengths"], body=b, name="rows")],
                 [t("x", FLOAT, ["n", "w"])], [t("flat", INT64, [None]), t("lengths", INT64, [None])],
                 initializer=[const("zero", np.int64(0)), const("empty", np.zeros(0, np.int64))])


FEEDS = [{"x": np.array(v, np.float32).reshape(shape)} for v, shape in [
    ([1, -1, 2, 0, 3, 3], (2, 3)), ([-1, -2, -3], (3, 1)), ([], (0, 4)), ([], (3, 0)), ([5, 6, -7, 8], (1, 4))]]


def _same(m, low):
    for backend in ("reference", "onnxruntime"):
        a, b = Executor(m, backend=backend), Executor(low, backend=backend)
        for f in FEEDS:
            want, got = a.run(f).outputs, b.run(f).outputs
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{backend} {f['x'].shape} {k}")


def test_positions_plus_a_per_row_offset_batch():
    m = _appending([], "shifted")
    low, report = _lower(m)
    assert "Loop" not in ops_of(low) and BATCHED in [r["how"] for r in report.rewrites]
    _same(m, low)


def test_a_body_it_cannot_batch_keeps_its_loop():
    """A per-row sort (TopK over a row's own count) is not one of its rules."""
    m = _appending([helper.make_node("Shape", ["shifted"], ["k"]),
                    helper.make_node("TopK", ["shifted", "k"], ["sorted", "order"])], "sorted")
    low, report = _lower(m)
    assert "Loop" in ops_of(low) and BATCHED not in [r["how"] for r in report.rewrites]
    _same(m, low)


def _rows_loop(piece_nodes: list, piece: str, inputs: list, feeds: list[dict], *, scan: str | None = None,
               rows_dtype: int = FLOAT, row_rank: int = 1, initializer=(), opset: int = 17) -> tuple:
    """``for i in range(n)``: the body's ``piece`` (computed from row i by ``piece_nodes``)
    is appended, flattened, to one buffer and its dims to a [n, rank] table; ``scan``, if
    given, is a per-iteration scan output. ``n`` is the first input's first dim."""
    outs = [t("c_out", BOOL, []), t("acc_out", rows_dtype, [None]), t("dims_out", INT64, [None, row_rank])]
    nodes = [*piece_nodes,
             helper.make_node("Reshape", [piece, "minus1"], ["piece_flat"]),
             helper.make_node("Shape", [piece], ["piece_dims"]),
             helper.make_node("Unsqueeze", ["piece_dims", "axis0"], ["piece_row"]),
             helper.make_node("Concat", ["acc", "piece_flat"], ["acc_out"], axis=0),
             helper.make_node("Concat", ["dims", "piece_row"], ["dims_out"], axis=0),
             helper.make_node("Identity", ["c"], ["c_out"])]
    if scan:
        outs.append(t("scan_out", INT64, []))
        nodes.append(helper.make_node("Identity", [scan], ["scan_out"]))
    b = body(nodes, [t("i", INT64, []), t("c", BOOL, []), t("acc", rows_dtype, [None]), t("dims", INT64, [None, row_rank])],
             outs, initializer=[const("minus1", np.array([-1], np.int64)), const("axis0", np.array([0], np.int64)),
                                const("one", np.array([1], np.int64)), *initializer])
    graph_outs = [t("flat", rows_dtype, [None]), t("dims_table", INT64, [None, row_rank])]
    loop_outs = ["flat", "dims_table"]
    if scan:
        graph_outs.append(t("scanned", INT64, [None]))
        loop_outs.append("scanned")
    first = inputs[0].name
    m = model([helper.make_node("Shape", [first], ["first_dims"]), helper.make_node("Gather", ["first_dims", "zero"], ["n"], axis=0),
               helper.make_node("Loop", ["n", "", "empty", "empty_dims"], loop_outs, body=b, name="rows")],
              inputs, graph_outs, opset=opset,
              initializer=[const("zero", np.int64(0)), const("empty", np.zeros(0, helper.tensor_dtype_to_np_dtype(rows_dtype))),
                           const("empty_dims", np.zeros((0, row_rank), np.int64))])
    return m, feeds


def _matches(m, feeds):
    low, report = _lower(m)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and BATCHED in [r["how"] for r in report.rewrites], report.kept_loops
    for backend in ("reference", "onnxruntime"):
        a, b = Executor(m, backend=backend), Executor(low, backend=backend)
        for f in feeds:
            want, got = a.run(f).outputs, b.run(f).outputs
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=f"{backend} {[v.shape for v in f.values()]} {k}")
                assert got[k].dtype == want[k].dtype
    return low


def _splits(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


RAGGED_FEEDS = [{"splits": _splits(ls), "values": np.arange(sum(ls) * 2, dtype=np.float32).reshape(-1, 2) * 0.5 - 3}
                for ls in ([2, 0, 3], [1], [0, 0], [4, 1, 1, 2])]


@pytest.mark.parametrize("reduce_op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
def test_rows_of_a_ragged_tensor_by_splits_reduced_and_broadcast(reduce_op):
    """tf2onnx's map_fn over a RaggedTensor: row i is ``values[splits[i]:splits[i+1]]``
    ([len_i, 2]); ``row - reduce(row, axis 0)``, appended flat, its dims to a table and
    the row's length as a scan output. Empty rows and no rows at all included."""
    nodes = [helper.make_node("Unsqueeze", ["i", "axis0"], ["i1"]),
             helper.make_node("Gather", ["splits", "i1"], ["start"]),
             helper.make_node("Add", ["i1", "one"], ["i_next"]),
             helper.make_node("Gather", ["splits", "i_next"], ["end"]),
             helper.make_node("Slice", ["values", "start", "end", "axis0"], ["row"]),
             helper.make_node(reduce_op, ["row", "axis0"], ["stat"], keepdims=0),
             helper.make_node("Sub", ["row", "stat"], ["centred"]),
             helper.make_node("Shape", ["centred"], ["row_dims"]),
             helper.make_node("Gather", ["row_dims", "zero0"], ["row_len"], axis=0)]
    m, feeds = _rows_loop(nodes, "centred", [t("splits", INT64, ["s"]), t("values", FLOAT, ["v", 2])],
                          RAGGED_FEEDS, scan="row_len", row_rank=2, opset=18,
                          initializer=[const("zero0", np.int64(0))])
    # n is splits' length; the Loop runs len(splits) - 1 times.
    m.graph.node.insert(2, helper.make_node("Sub", ["n", "one_s"], ["n_rows"]))
    m.graph.node[3].input[0] = "n_rows"
    m.graph.initializer.append(const("one_s", np.int64(1)))
    feeds = [f for f in feeds if reduce_op in ("ReduceSum", "ReduceMean") or all(np.diff(f["splits"]) > 0)]
    with np.errstate(all="ignore"):
        _matches(m, feeds + [{"splits": np.array([0], np.int64), "values": np.zeros((0, 2), np.float32)}])


def test_per_row_bounds_with_negative_and_out_of_range_ends():
    """Slice of row i of a dense [n, w] input from b[i] to e[i]: negative bounds count
    from the row's end, bounds past it clamp, an end before the start gives nothing."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
             helper.make_node("Gather", ["b", "i"], ["bi"], axis=0),
             helper.make_node("Gather", ["e", "i"], ["ei"], axis=0),
             helper.make_node("Unsqueeze", ["bi", "axis0"], ["bi1"]),
             helper.make_node("Unsqueeze", ["ei", "axis0"], ["ei1"]),
             helper.make_node("Slice", ["row", "bi1", "ei1"], ["part"]),
             helper.make_node("Mul", ["part", "part"], ["sq"])]
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    feeds = [{"x": x, "b": np.array([0, -2, 3, 9], np.int64), "e": np.array([5, 100, 1, 10], np.int64)},
             {"x": x[:1], "b": np.array([-9], np.int64), "e": np.array([-1], np.int64)},
             {"x": np.zeros((0, 5), np.float32), "b": np.zeros(0, np.int64), "e": np.zeros(0, np.int64)},
             {"x": np.zeros((3, 0), np.float32), "b": np.array([0, 1, -1], np.int64), "e": np.array([1, 2, 3], np.int64)}]
    m, feeds = _rows_loop(nodes, "sq", [t("x", FLOAT, ["n", "w"]), t("b", INT64, ["n"]), t("e", INT64, ["n"])], feeds)
    _matches(m, feeds)


@pytest.mark.parametrize("dtype", [INT64, FLOAT])
def test_a_range_per_row(dtype):
    """``Range(start_i, limit_i, delta_i)`` per row (tf.ragged.range's map): negative
    deltas, empty ranges, fractional steps for floats."""
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    nodes = [helper.make_node("Gather", ["starts", "i"], ["s"], axis=0),
             helper.make_node("Gather", ["limits", "i"], ["l"], axis=0),
             helper.make_node("Gather", ["deltas", "i"], ["d"], axis=0),
             helper.make_node("Range", ["s", "l", "d"], ["r"])]
    deltas = [2, -1, 1, 3] if dtype == INT64 else [0.5, -1.5, 1, 3]
    feeds = [{"starts": np.array([0, 5, 3, -4], np_t), "limits": np.array([7, 1, 3, 4], np_t), "deltas": np.array(deltas, np_t)},
             {"starts": np.zeros(0, np_t), "limits": np.zeros(0, np_t), "deltas": np.zeros(0, np_t)},
             {"starts": np.array([1], np_t), "limits": np.array([0], np_t), "deltas": np.array([1], np_t)}]
    m, feeds = _rows_loop(nodes, "r", [t(n, dtype, ["n"]) for n in ("starts", "limits", "deltas")], feeds, rows_dtype=dtype)
    _matches(m, feeds)


def test_a_row_compressed_by_its_own_mask():
    """``Compress(row, row > 0)``: tf.boolean_mask per row as tf2onnx writes it."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
             helper.make_node("Greater", ["row", "zero_f"], ["keep"]),
             helper.make_node("Compress", ["row", "keep"], ["kept"], axis=0),
             helper.make_node("Neg", ["kept"], ["neg"])]
    feeds = [{"x": np.array([[1, -1, 2], [0, 0, 0], [3, 3, -3]], np.float32)}, {"x": np.zeros((0, 3), np.float32)},
             {"x": np.zeros((2, 0), np.float32)}]
    m, feeds = _rows_loop(nodes, "neg", [t("x", FLOAT, ["n", "w"])], feeds, initializer=[const("zero_f", np.float32(0))])
    _matches(m, feeds)


TF = Path(__file__).resolve().parents[2] / "data" / "tensorflow"


@pytest.mark.parametrize("name", ["tf_ragged_map_elementwise", "tf_ragged_map_scaled_rows"])
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("target", ["tinygrad", "onnx2torch"])
def test_tensorflow_maps_over_ragged_rows_run_without_loop(name, opset, target):
    """tf.map_fn over a RaggedTensor (row i read as ``values[splits[i]:splits[i+1]]``,
    ``row * row + 1`` or ``row - mean(row)``, a ragged result): no Loop, TensorFlow's
    numbers on every stored case the export itself runs (tf2onnx's form fails with no
    rows, and onnxruntime's Mod by zero on the mean one's empty rows)."""
    path = TF / f"{name}_opset{opset}.onnx"
    low, report = _lower(onnx.load(path), target)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and BATCHED in [r["how"] for r in report.rewrites]
    ran = sum(cases_match(onnx.load(path), low, path, backend, atol=1e-6) for backend in ("reference", "onnxruntime"))
    assert ran >= 7


@pytest.mark.parametrize("while_loop", [False, True])
def test_a_list_grown_row_by_row_runs_without_loop(while_loop):
    """The Flat list a TorchScript ``for``/``while`` loop grows by ``x[i]`` and its length
    (a [n, 1] table): the rows themselves and their dims, stacked. The same loop where a
    row depends on what came before keeps its Loop."""
    from tests.helpers import growing_loop_model

    m = growing_loop_model(while_loop)
    low, report = _lower(m)
    assert not {"Loop", "Scan"} & set(ops_of(low)) and BATCHED in [r["how"] for r in report.rewrites]
    for backend in ("reference", "onnxruntime"):
        a, b = Executor(m, backend=backend), Executor(low, backend=backend)
        for shape in [(0, 3), (1, 3), (3, 3), (2, 0)]:
            x = {"x": np.arange(np.prod(shape), dtype=np.float32).reshape(shape)}
            want, got = a.run(x).outputs, b.run(x).outputs
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{backend} {shape} {k}")
    kept, report = _lower(growing_loop_model(while_loop, dependent=True))
    assert "Loop" in ops_of(kept) and BATCHED not in [r["how"] for r in report.rewrites]


@pytest.mark.parametrize("values_type,reduce_op", [(onnx.TensorProto.FLOAT16, "ReduceMean"), (onnx.TensorProto.DOUBLE, "ReduceMax"),
                                                   (INT64, "ReduceSum"), (onnx.TensorProto.INT32, "ReduceMin"),
                                                   (onnx.TensorProto.BFLOAT16, "ReduceSum")])
@pytest.mark.parametrize("splits_type", [INT64, onnx.TensorProto.INT32])
def test_ragged_rows_of_every_dtype(values_type, reduce_op, splits_type):
    """The split rows of the first test in other dtypes, bounds int32 or int64."""
    nodes = [helper.make_node("Unsqueeze", ["i", "axis0"], ["i1"]),
             helper.make_node("Cast", ["i1"], ["i1t"], to=splits_type),
             helper.make_node("Gather", ["splits", "i1t"], ["start"]),
             helper.make_node("Add", ["i1", "one"], ["i_next"]),
             helper.make_node("Gather", ["splits", "i_next"], ["end"]),
             helper.make_node("Slice", ["values", "start", "end", "axis0t"], ["row"]),
             helper.make_node(reduce_op, ["row", "axis0"], ["stat"], keepdims=1),
             helper.make_node("Sub", ["row", "stat"], ["centred"])]
    np_t = helper.tensor_dtype_to_np_dtype(values_type)
    feeds = [{"splits": _splits(ls).astype(helper.tensor_dtype_to_np_dtype(splits_type)),
              "values": (np.arange(sum(ls) * 2).reshape(-1, 2) * 3 - 5).astype(np_t)}
             for ls in ([2, 1, 3], [1], [4, 1, 1, 2])]
    m, feeds = _rows_loop(nodes, "centred", [t("splits", splits_type, ["s"]), t("values", values_type, ["v", 2])],
                          feeds, rows_dtype=values_type, row_rank=2, opset=18,
                          initializer=[const("axis0t", np.array([0], helper.tensor_dtype_to_np_dtype(splits_type)))])
    m.graph.node.insert(2, helper.make_node("Sub", ["n", "one_s"], ["n_rows"]))
    m.graph.node[3].input[0] = "n_rows"
    m.graph.initializer.append(const("one_s", np.int64(1)))
    if values_type == onnx.TensorProto.BFLOAT16:
        low, report = _lower(m)
        assert not {"Loop", "Scan"} & set(ops_of(low))
        ref, got = Executor(m, backend="reference"), Executor(low, backend="reference")
        for f in feeds:
            np.testing.assert_array_equal(got.run(f).outputs["flat"].astype(np.float32), ref.run(f).outputs["flat"].astype(np.float32))
        return
    _matches(m, feeds)
