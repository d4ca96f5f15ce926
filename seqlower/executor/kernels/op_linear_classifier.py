from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel


class LinearClassifier(SeqKernel):
    """ai.onnx.ml LinearClassifier, at every IR and opset the domain has (1).

    The spec says what the scores are (``X @ coefficients.T + intercepts``, one column per
    intercept) and leaves the binary case, the label rule and the transforms' details to
    the runtime; this follows onnxruntime, which scikit-learn's converters are tested
    against. onnx's reference kernel differs: it infers the number of classes from X's
    width (a model and an input of other widths broadcast into nonsense), mirrors a
    binary score as ``[-s, s]`` where onnxruntime writes ``[1 - s, s]``, transforms the
    binary scores, and picks labels after the transform.

    - X: float, double, int32 or int64, rank 1 (one row) or 2; computed in float32.
    - Labels: with one score column (two labels needed), ``classlabels[1]`` when the
      score is > 0 else ``classlabels[0]``; otherwise the label of the first largest raw
      score.
    - Scores: one column becomes ``[1 - p, p]``, p the score or, with LOGISTIC, its
      logistic (PROBIT has no layout there: refused); several columns get the transform
      row by row.
    """

    op_domain = "ai.onnx.ml"

    def _run(self, x, classlabels_ints=None, classlabels_strings=None, coefficients=None, intercepts=None,
             multi_class=None, post_transform=None):
        x = np.asarray(x)
        if x.dtype not in (np.float32, np.float64, np.int32, np.int64):
            self.fail(f"X must be float, double, int32 or int64, got {x.dtype}")
        if x.ndim not in (1, 2):
            self.fail(f"X must have rank 1 or 2, got shape {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if coefficients is None:
            self.fail("needs the coefficients attribute")
        intercepts = np.asarray(intercepts if intercepts is not None else [], np.float32)
        targets, features = len(intercepts), rows.shape[1]
        coef = np.asarray(coefficients, np.float32)
        if targets == 0 or coef.size != targets * features:
            self.fail(f"{coef.size} coefficients do not make {max(targets, 1)} class(es) x {features} feature(s) of X")
        scores = rows.astype(np.float32) @ coef.reshape(targets, features).T + intercepts
        labels = self._labels(scores, classlabels_ints, classlabels_strings)
        transform = post_transform.decode() if isinstance(post_transform, bytes) else (post_transform or "NONE")
        if targets == 1:
            if transform == "PROBIT":
                # (onnxruntime writes the N probits into the first N of its 2N entries)
                self.fail("PROBIT of a one-column (binary) classifier has no defined layout")
            p = post_transformed(scores, "LOGISTIC") if transform == "LOGISTIC" else scores
            return labels, np.concatenate([1 - p, p], axis=1)
        return labels, post_transformed(scores, transform)

    @staticmethod
    def _classes(ints, strings) -> list:
        if strings is not None and len(strings):
            return [s.decode() if isinstance(s, bytes) else str(s) for s in strings]
        return [int(i) for i in ints] if ints is not None else []

    def _labels(self, scores: np.ndarray, ints, strings) -> np.ndarray:
        classes = self._classes(ints, strings)
        strings_given = strings is not None and len(strings) > 0
        if scores.shape[1] == 1:
            if len(classes) != 2:
                self.fail(f"one score column needs exactly 2 class labels, got {len(classes)}")
            picked = [classes[1] if s > 0 else classes[0] for s in scores[:, 0]]
        else:
            if len(classes) < scores.shape[1]:
                self.fail(f"{len(classes)} class labels for {scores.shape[1]} score columns")
            picked = [classes[i] for i in np.argmax(scores, axis=1)] if len(scores) else []
        return np.array(picked, dtype=object if strings_given else np.int64).reshape(len(scores))


def post_transformed(scores: np.ndarray, transform: str) -> np.ndarray:
    """A classifier's scores, several per row, under ``post_transform`` as onnxruntime
    applies it (row by row; shared with SVMClassifier)."""
    if transform == "LOGISTIC":
        return (1 / (1 + np.exp(-scores))).astype(np.float32)
    if transform == "SOFTMAX":
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if transform == "SOFTMAX_ZERO":
        return _softmax_zero(scores)
    if transform == "PROBIT":
        return _probit(scores)
    return scores


def _softmax_zero(scores: np.ndarray) -> np.ndarray:
    """Softmax in which a score of (about) zero stays zero."""
    top = scores.max(axis=1, keepdims=True)
    zero = np.abs(scores) <= 1e-7
    e = np.where(zero, scores * np.exp(-top), np.exp(scores - top))
    total = np.where(zero, 0, e).sum(axis=1, keepdims=True)
    return (e / total).astype(np.float32)


def _probit(scores: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2p - 1) by Winitzki's approximation, as onnxruntime computes it."""
    x = (2 * scores.astype(np.float32) - 1).astype(np.float32)
    sign = np.where(x < 0, -1.0, 1.0).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        ln = np.log((1 - x) * (1 + x))
        v = 2 / (3.14159 * 0.147) + 0.5 * ln
        inv = sign * np.sqrt(-v + np.sqrt(v * v - ln / 0.147))
    return (1.41421356 * inv).astype(np.float32)
