"""Export scikit-learn classifiers through skl2onnx, as committed test fixtures.

    pip install scikit-learn skl2onnx onnxmltools  # not dependencies of seqlower or of its tests
    python tools/export_sklearn.py                  # writes tests/data/sklearn/*
    python tools/export_sklearn.py --onnxmltools    # writes tests/data/onnxmltools/*

skl2onnx ends a classifier in ZipMap: ``output_probability`` is a
``seq(map(label, float))``, the most common sequence type in deployed models. Each
classifier here (binary and multiclass; int64 and string labels; linear and tree
models) is fitted on a small synthetic data set, converted with ZipMap (skl2onnx's
default), and run by scikit-learn itself at several batch sizes. For each it writes
``<name>.onnx`` and ``<name>.cases.npz``: case ``k`` stores the input ``X`` under
``k/in/X`` and scikit-learn's ``predict`` and ``predict_proba`` under
``k/out/output_label`` and ``k/out/probabilities``; ``classes`` holds the class labels
in column order. No case has zero rows: scikit-learn refuses to predict on none.

``--onnxmltools`` converts through onnxmltools at target opset 7, which writes IR 3
models in the older ai.onnx.ml forms (LinearClassifier + ZipMap for a logistic
regression, SVMClassifier + ZipMap for an SVC with probabilities), to
``tests/data/onnxmltools/`` with the same cases.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
OUT = DATA / "sklearn"
BATCHES = (1, 2, 7)


def _data(classes: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, (classes, features))
    y = rng.integers(0, classes, 120)
    x = centers[y] + rng.normal(0, 1, (120, features))
    return x.astype(np.float32), y


def _classifiers() -> list[tuple[str, object, int, int, list | None]]:
    """(name, estimator, classes, features, string labels or None)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.ensemble import RandomForestClassifier

    return [
        ("logreg_binary_int", LogisticRegression(max_iter=500), 2, 4, None),
        ("logreg_multiclass_int", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)), 3, 5, None),
        ("tree_binary_str", DecisionTreeClassifier(max_depth=3, random_state=0), 2, 3, ["no", "yes"]),
        ("forest_multiclass_str", RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0), 4, 4,
         ["cat", "dog", "eel", "fox"]),
    ]


def _onnxmltools_classifiers() -> list[tuple[str, object, int, int, list | None]]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    return [
        ("linear_binary_int", LogisticRegression(max_iter=500), 2, 4, None),
        ("linear_multiclass_str", LogisticRegression(max_iter=500), 3, 5, ["a", "b", "c"]),
        ("svm_binary_int", SVC(probability=True, random_state=0), 2, 3, None),
    ]


def _convert(clf: object, features: int, opset: int, onnxmltools: bool) -> onnx.ModelProto:
    if onnxmltools:
        from onnxmltools import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType

        onx = convert_sklearn(clf, initial_types=[("X", FloatTensorType([None, features]))], target_opset=7)
        onx.producer_name = "onnxmltools (tools/export_sklearn.py)"
        return onx
    from skl2onnx import to_onnx

    onx = to_onnx(clf, np.zeros((1, features), np.float32), target_opset={"": opset, "ai.onnx.ml": 3})
    onx.producer_name = "skl2onnx (tools/export_sklearn.py)"
    return onx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--onnxmltools", action="store_true", help="convert through onnxmltools (IR 3) instead")
    args = ap.parse_args()
    out = DATA / "onnxmltools" if args.onnxmltools else OUT
    out.mkdir(parents=True, exist_ok=True)
    for seed, (name, clf, classes, features, labels) in enumerate(
            _onnxmltools_classifiers() if args.onnxmltools else _classifiers()):
        x, y = _data(classes, features, seed)
        target = np.array(labels, dtype=object)[y] if labels else y.astype(np.int64)
        clf.fit(x, target)
        onx = _convert(clf, features, args.opset, args.onnxmltools)
        ops = {(n.domain, n.op_type) for n in onx.graph.node}
        assert ("ai.onnx.ml", "ZipMap") in ops, f"{name}: no ZipMap in the conversion"
        onnx.checker.check_model(onx, full_check=True)
        arrays: dict[str, np.ndarray] = {"classes": np.array([str(c) for c in clf.classes_])}
        rng = np.random.default_rng(100 + seed)
        for k, n in enumerate(BATCHES):
            xs = (x[rng.integers(0, len(x), n)] + rng.normal(0, 0.5, (n, features))).astype(np.float32)
            label = clf.predict(xs)
            arrays[f"{k}/in/X"] = xs
            arrays[f"{k}/out/output_label"] = label.astype(str) if labels else label.astype(np.int64)
            arrays[f"{k}/out/probabilities"] = clf.predict_proba(xs).astype(np.float32)
        onnx.save(onx, out / f"{name}.onnx")
        np.savez(out / f"{name}.cases.npz", **arrays)
        print(f"{name}: {len(onx.graph.node)} nodes ({', '.join(sorted(o for _, o in ops))}); "
              f"{len(BATCHES)} cases")


if __name__ == "__main__":
    main()
