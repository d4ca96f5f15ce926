"""Export scikit-learn classifiers through skl2onnx, as committed test fixtures.

    pip install scikit-learn skl2onnx   # not dependencies of seqlower or of its tests
    python tools/export_sklearn.py      # writes tests/data/sklearn/*

skl2onnx ends a classifier in ZipMap: ``output_probability`` is a
``seq(map(label, float))``, the most common sequence type in deployed models. Each
classifier here (binary and multiclass; int64 and string labels; linear and tree
models) is fitted on a small synthetic data set, converted with ZipMap (skl2onnx's
default), and run by scikit-learn itself at several batch sizes. For each it writes
``<name>.onnx`` and ``<name>.cases.npz``: case ``k`` stores the input ``X`` under
``k/in/X`` and scikit-learn's ``predict`` and ``predict_proba`` under
``k/out/output_label`` and ``k/out/probabilities``; ``classes`` holds the class labels
in column order. No case has zero rows: scikit-learn refuses to predict on none.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sklearn"
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    from skl2onnx import to_onnx

    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, clf, classes, features, labels) in enumerate(_classifiers()):
        x, y = _data(classes, features, seed)
        target = np.array(labels, dtype=object)[y] if labels else y.astype(np.int64)
        clf.fit(x, target)
        onx = to_onnx(clf, x[:1], target_opset={"": args.opset, "ai.onnx.ml": 3})
        onx.producer_name = "skl2onnx (tools/export_sklearn.py)"
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
        onnx.save(onx, OUT / f"{name}.onnx")
        np.savez(OUT / f"{name}.cases.npz", **arrays)
        print(f"{name}: {len(onx.graph.node)} nodes ({', '.join(sorted(o for _, o in ops))}); "
              f"{len(BATCHES)} cases")


if __name__ == "__main__":
    main()
