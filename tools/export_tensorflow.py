"""Export small TensorFlow functions that use lists through tf2onnx, as test fixtures.

    python -m venv /tmp/tfenv                                   # tf2onnx pins protobuf 3.20,
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1   # so its own venv
    /tmp/tfenv/bin/python tools/export_tensorflow.py            # writes tests/data/tensorflow/*

Neither TensorFlow nor tf2onnx is a dependency of seqlower or of its tests: the committed
fixtures are what the suite uses. Each function is traced with a dynamic batch (and
width) dim, converted by tf2onnx, and run by TensorFlow at several sizes, 0 and 1
included. For each model and opset this writes ``<name>_opset<N>.onnx`` and
``<name>_opset<N>.cases.npz`` (``k/in/<input>`` and ``k/out/<output>``, the outputs
being TensorFlow's own). Every export is checked with onnx's checker (outputs without a
shape, which tf2onnx writes and onnxruntime runs, are let through). tf2onnx emits
sequence ops only where a loop builds a ragged result (``tf.map_fn`` with a ragged
output signature: SequenceEmpty, SequenceInsert in the Loop, ConcatFromSequence); the
other exports are kept too, tensor-only, as models users bring (their Loops matter to
targets without Loop).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tensorflow"
SEQUENCE_OPS = {"SplitToSequence", "SequenceInsert", "SequenceErase", "SequenceMap", "SequenceEmpty",
                "SequenceConstruct", "SequenceAt", "SequenceLength", "ConcatFromSequence"}


class Spec(NamedTuple):
    name: str
    fn: Callable[..., Any]
    signature: list[Any]  # tf.TensorSpec per input
    cases: list[tuple[np.ndarray, ...]]


def _rows(n: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, w)).astype(np.float32)


def _specs() -> list[Spec]:
    import tensorflow as tf

    nw = [(0, 3), (1, 3), (2, 1), (5, 3), (3, 0), (4, 4)]
    x_spec = [tf.TensorSpec([None, None], tf.float32, name="x")]
    x_cases = [(_rows(n, w, i),) for i, (n, w) in enumerate(nw)]

    def map_fn_fixed(x):
        return tf.map_fn(lambda row: row * 2.0 + tf.reduce_sum(row), x)

    def map_fn_ragged_mask(x):
        # Per-row boolean mask: a ragged result, returned as values and row lengths.
        r = tf.map_fn(lambda row: tf.RaggedTensor.from_tensor(tf.expand_dims(tf.boolean_mask(row, row > 0), 0)),
                      x, fn_output_signature=tf.RaggedTensorSpec([1, None], tf.float32, ragged_rank=1))
        r = r.merge_dims(1, 2) if r.shape.rank == 3 else r
        return tf.identity(r.flat_values, name="values"), tf.identity(r.row_lengths(), name="lengths")

    def tensor_array_while(x):
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=tf.TensorShape([None]))

        def body(i, ta):
            return i + 1, ta.write(i, x[i] * tf.cast(i + 1, tf.float32))

        _, ta = tf.while_loop(lambda i, ta: i < n, body, (tf.constant(0), ta))
        return ta.stack()

    def tensor_array_prefix_sums(x):
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=n, element_shape=tf.TensorShape([None]))

        def body(i, acc, ta):
            acc = acc + x[i]
            return i + 1, acc, ta.write(i, acc)

        _, _, ta = tf.while_loop(lambda i, acc, ta: i < n, body, (tf.constant(0), tf.zeros_like(x[0]), ta))
        return ta.stack()

    def map_fn_ragged_range(x):
        # Per-row ranges: row i gives range(count of its positive entries).
        r = tf.map_fn(lambda row: tf.RaggedTensor.from_tensor(tf.expand_dims(
                          tf.range(tf.reduce_sum(tf.cast(row > 0, tf.int64))), 0)),
                      x, fn_output_signature=tf.RaggedTensorSpec([1, None], tf.int64, ragged_rank=1))
        r = r.merge_dims(1, 2) if r.shape.rank == 3 else r
        return tf.identity(r.flat_values, name="values"), tf.identity(r.row_lengths(), name="lengths")

    def map_fn_ragged_to_tensor(x):
        # The ragged result padded back to a dense [n, max] tensor, as models return it.
        r = tf.map_fn(lambda row: tf.RaggedTensor.from_tensor(tf.expand_dims(tf.boolean_mask(row * 3.0, row < 0), 0)),
                      x, fn_output_signature=tf.RaggedTensorSpec([1, None], tf.float32, ragged_rank=1))
        r = r.merge_dims(1, 2) if r.shape.rank == 3 else r
        return r.to_tensor(default_value=0.0)

    def ragged_range_to_tensor(lengths):
        r = tf.ragged.range(lengths)
        return r.to_tensor(default_value=-1), r.flat_values

    def ragged_mask_to_tensor(x):
        r = tf.ragged.boolean_mask(x, x > 0)
        return r.to_tensor(), r.row_lengths()

    def unstack_stack(x):
        rows = tf.unstack(x, num=3, axis=0)
        return tf.stack([rows[2], rows[0] + rows[1], rows[1]], axis=1)

    def split_runtime_sizes(x, sizes):
        parts = tf.split(x, sizes, axis=0, num=3)
        return tf.concat([parts[2], parts[0] * 2.0, parts[1]], axis=0)

    def ragged_map_elementwise(splits, values):
        # tf2onnx's own tested form: map_fn over a ragged input gives a ragged output,
        # built in the Loop as a sequence (SequenceInsert) and concatenated after it.
        x = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
        y = tf.map_fn(lambda row: row * row + 1.0, x)
        return tf.identity(y.row_splits, name="splits_out"), tf.identity(y.flat_values, name="values_out")

    def ragged_map_scaled_rows(splits, values):
        x = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
        y = tf.map_fn(lambda row: row - tf.reduce_mean(row, axis=0), x)
        return y.to_tensor(default_value=-9.0)

    ragged_cases = []
    for i, lengths in enumerate([[], [0], [3], [2, 0, 4], [1, 1, 1, 1], [0, 0]]):
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ragged_cases.append((splits, _rows(int(splits[-1]), 2, 50 + i)))
    ragged_spec = [tf.TensorSpec([None], tf.int64, name="splits"), tf.TensorSpec([None, 2], tf.float32, name="values")]
    lengths_cases = [(np.array(v, np.int64),) for v in ([], [0], [3], [2, 0, 4], [1, 1, 1, 1])]
    split_cases = [(_rows(sum(s), 2, i), np.array(s, np.int64)) for i, s in enumerate([(0, 0, 0), (1, 0, 0),
                                                                                         (2, 3, 1), (0, 4, 1)])]
    return [
        Spec("tf_map_fn_fixed", map_fn_fixed, x_spec, x_cases),
        Spec("tf_ragged_map_elementwise", ragged_map_elementwise, ragged_spec, ragged_cases),
        Spec("tf_ragged_map_scaled_rows", ragged_map_scaled_rows, ragged_spec, ragged_cases),
        Spec("tf_map_fn_ragged_mask", map_fn_ragged_mask, x_spec, x_cases),
        Spec("tf_map_fn_ragged_range", map_fn_ragged_range, x_spec, x_cases),
        Spec("tf_map_fn_ragged_to_tensor", map_fn_ragged_to_tensor, x_spec, x_cases),
        Spec("tf_tensor_array_while", tensor_array_while, x_spec, x_cases),
        Spec("tf_tensor_array_prefix_sums", tensor_array_prefix_sums, x_spec, x_cases),
        Spec("tf_ragged_range_to_tensor", ragged_range_to_tensor, [tf.TensorSpec([None], tf.int64, name="lengths")],
             lengths_cases),
        Spec("tf_ragged_mask_to_tensor", ragged_mask_to_tensor, x_spec, x_cases),
        Spec("tf_unstack_stack", unstack_stack, [tf.TensorSpec([3, None], tf.float32, name="x")],
             [(_rows(3, w, w),) for w in (0, 1, 4)]),
        Spec("tf_split_runtime_sizes", split_runtime_sizes,
             [tf.TensorSpec([None, 2], tf.float32, name="x"), tf.TensorSpec([3], tf.int64, name="sizes")],
             split_cases),
    ]


def export(spec: Spec, opset: int) -> tuple[str, str]:
    import onnx
    import tensorflow as tf
    import tf2onnx

    fn = tf.function(spec.fn, input_signature=spec.signature)
    model, _ = tf2onnx.convert.from_function(fn, input_signature=spec.signature, opset=opset)
    model.producer_name = f"tf2onnx {tf2onnx.__version__} (tools/export_tensorflow.py)"
    note = ""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        # tf2onnx leaves the shape off outputs of unknown rank; onnxruntime runs them and
        # so must seqlower. Anything else is a broken export.
        if "Field 'shape' of 'type' is required but missing" not in str(e):
            raise
        note = " (outputs without a shape, as tf2onnx writes them)"
        # The checker stops at its first complaint: check the rest on a copy where
        # every shapeless output has one.
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for v in [*copy.graph.input, *copy.graph.output]:
            v.type.tensor_type.shape.SetInParent()
        onnx.checker.check_model(copy)
    ops = {n.op_type for n in model.graph.node}
    for n in model.graph.node:
        for a in n.attribute:
            if a.HasField("g"):
                ops |= {m.op_type for m in a.g.node}
    found = sorted(ops & SEQUENCE_OPS)
    name = f"{spec.name}_opset{opset}"
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    arrays: dict[str, np.ndarray] = {}
    k = 0
    limits = []
    for args in spec.cases:
        try:
            result = fn(*args)
        except tf.errors.OpError:
            # TensorFlow's own limit (TensorListStack of zero elements of unknown
            # shape): no outputs to compare with, so no case.
            limits.append("x".join(str(d) for d in args[0].shape))
            continue
        result = result if isinstance(result, (tuple, list)) else (result,)
        for n, a in zip(in_names, args):
            arrays[f"{k}/in/{n}"] = a
        for n, r in zip(out_names, result):
            arrays[f"{k}/out/{n}"] = r.numpy()
        k += 1
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(model, OUT / f"{name}.onnx")
    np.savez(OUT / f"{name}.cases.npz", **arrays)
    seqs = f"sequence ops {', '.join(found)}" if found else "no sequence op (tf2onnx made it tensor-only)"
    skipped = f" (TensorFlow itself fails at {', '.join(limits)})" if limits else ""
    return name, f"{len(model.graph.node)} nodes, {seqs}; {k} cases{skipped}{note}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opsets", type=int, nargs="+", default=[13, 17])
    ap.add_argument("--only", nargs="*", help="names to export (default: all)")
    args = ap.parse_args()
    for spec in _specs():
        if args.only and spec.name not in args.only:
            continue
        for opset in args.opsets:
            try:
                name, what = export(spec, opset)
            except Exception as e:  # noqa: BLE001 - report and go on with the next export
                name, what = f"{spec.name}_opset{opset}", f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"{name}: {what}")


if __name__ == "__main__":
    main()
