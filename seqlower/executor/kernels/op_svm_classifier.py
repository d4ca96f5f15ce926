from __future__ import annotations

import numpy as np

from seqlower.executor.kernels._base import SeqKernel
from seqlower.executor.kernels.op_linear_classifier import post_transformed


class SVMClassifier(SeqKernel):
    """ai.onnx.ml SVMClassifier, as onnxruntime computes it where the spec is silent
    (scikit-learn's converters are tested against it; onnx's reference kernel refuses some
    binary SVCs and gives a multiclass SVC other probabilities).

    - Linear mode (no support vectors): one score per class, ``kernel(x, coef_c) + rho[0]``.
    - SVC mode: a score per pair of classes (i < j), the support vectors' kernels
      combined with the coefficients plus ``rho``; a vote for i when > 0, else for j. The
      label is the most voted class (the first on ties); with ``prob_a``/``prob_b`` the
      scores are the pairs' sigmoid probabilities coupled by libsvm's
      ``multiclass_probability``, one per class.
    - Binary: without probabilities the pair's score becomes ``[-s, s]`` (``[1 - s, s]``
      under a transform); in linear mode a positive score picks the second label.
    """

    op_domain = "ai.onnx.ml"

    def _run(self, x, classlabels_ints=None, classlabels_strings=None, coefficients=None, kernel_params=None,
             kernel_type=None, post_transform=None, prob_a=None, prob_b=None, rho=None, support_vectors=None,
             vectors_per_class=None):
        x = np.asarray(x)
        if x.dtype not in (np.float32, np.float64, np.int32, np.int64) or x.ndim not in (1, 2):
            self.fail(f"X must be a float, double, int32 or int64 tensor of rank 1 or 2, got {x.dtype}{list(x.shape)}")
        rows = (x.reshape(1, -1) if x.ndim == 1 else x).astype(np.float32)
        strings = classlabels_strings is not None and len(classlabels_strings) > 0
        classes = ([s.decode() if isinstance(s, bytes) else str(s) for s in classlabels_strings] if strings
                   else [int(i) for i in (classlabels_ints or [])])
        if not classes or coefficients is None or rho is None:
            self.fail("needs class labels, coefficients and rho")
        kind = (kernel_type.decode() if isinstance(kernel_type, bytes) else kernel_type) or "LINEAR"
        params = [float(p) for p in (kernel_params or [])] + [0.0, 0.0, 0.0]
        transform = (post_transform.decode() if isinstance(post_transform, bytes) else post_transform) or "NONE"
        coef = np.asarray(coefficients, np.float32)
        rho = np.asarray(rho, np.float32)
        per_class = [int(v) for v in (vectors_per_class or [])]
        if sum(per_class) == 0:
            if coef.size % len(classes) or coef.size // len(classes) != rows.shape[1]:
                self.fail(f"{coef.size} coefficients do not make {len(classes)} classes x {rows.shape[1]} features")
            scores = _kernel("LINEAR", params, rows, coef.reshape(len(classes), -1)) + rho[0]
            labels = [self._linear_label(s, classes, bool((coef >= 0).all())) for s in scores]
            return self._labels(labels, strings), post_transformed(scores, transform)
        sv = np.asarray(support_vectors, np.float32).reshape(sum(per_class), -1)
        if sv.shape[1] != rows.shape[1]:
            self.fail(f"support vectors of {sv.shape[1]} features for X of {rows.shape[1]}")
        pairs, votes = _pairs(_kernel(kind, params, rows, sv), coef.reshape(len(classes) - 1, -1), rho, per_class)
        labels = [classes[int(np.argmax(v))] for v in votes]
        if prob_a is not None and len(prob_a):
            probs = np.stack([_coupled(p, np.asarray(prob_a, np.float32), np.asarray(prob_b, np.float32), len(classes))
                              for p in pairs]) if len(pairs) else np.zeros((0, len(classes)), np.float32)
            return self._labels(labels, strings), post_transformed(probs, transform)
        if len(classes) == 2:
            s = pairs[:, :1]
            return self._labels(labels, strings), np.concatenate(
                [-s if transform == "NONE" else 1 - s, s], axis=1).astype(np.float32)
        return self._labels(labels, strings), post_transformed(pairs, transform)

    @staticmethod
    def _linear_label(scores: np.ndarray, classes: list, all_positive: bool):
        best = int(np.argmax(scores))
        if len(classes) == 2:
            top = float(scores[best])
            if (all_positive and top >= 0.5) or (not all_positive and top > 0):
                return classes[1]
        return classes[best]

    @staticmethod
    def _labels(labels: list, strings: bool) -> np.ndarray:
        return np.array(labels, dtype=object if strings else np.int64).reshape(len(labels))


def _kernel(kind: str, params: list[float], x: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    gamma, coef0, degree = np.float32(params[0]), np.float32(params[1]), params[2]
    if kind == "RBF":
        d = x[:, None, :] - vectors[None, :, :]
        return np.exp(-gamma * (d * d).sum(-1)).astype(np.float32)
    dot = (x @ vectors.T).astype(np.float32)
    if kind == "POLY":
        return np.power(gamma * dot + coef0, int(degree)).astype(np.float32)
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0).astype(np.float32)
    return dot


def _pairs(kernels: np.ndarray, coef: np.ndarray, rho: np.ndarray, per_class: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's score per pair of classes (i < j) and its votes per class."""
    start = np.concatenate([[0], np.cumsum(per_class)]).astype(int)
    n, k = len(kernels), len(per_class)
    scores = np.zeros((n, k * (k - 1) // 2), np.float32)
    votes = np.zeros((n, k), np.int64)
    c = 0
    for i in range(k - 1):
        for j in range(i + 1, k):
            si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
            total = (kernels[:, si].astype(np.float64) @ coef[j - 1, si].astype(np.float64)
                     + kernels[:, sj].astype(np.float64) @ coef[i, sj].astype(np.float64) + rho[c])
            scores[:, c] = total
            votes[np.arange(n), np.where(total > 0, i, j)] += 1
            c += 1
    return scores, votes


def _coupled(pair_scores: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray, k: int) -> np.ndarray:
    """One row's class probabilities: each pair's sigmoid probability, coupled by libsvm's
    multiclass_probability (Wu, Lin and Weng's second method), in float32."""
    f32 = np.float32
    r = np.zeros((k, k), f32)
    c = 0
    for i in range(k - 1):
        for j in range(i + 1, k):
            v = f32(pair_scores[c]) * prob_a[c] + prob_b[c]
            logistic = f32(1) / (f32(1) + np.exp(-abs(v), dtype=f32))
            p = f32(1) - (f32(1) - logistic if v < 0 else logistic)
            p = min(max(p, f32(1e-7)), f32(1) - f32(1e-7))
            r[i, j], r[j, i] = f32(p), f32(1) - f32(p)
            c += 1
    q = np.zeros((k, k), f32)
    for t in range(k):
        for j in range(t):
            q[t, t] += r[j, t] * r[j, t]
            q[t, j] = q[j, t]
        for j in range(t + 1, k):
            q[t, t] += r[j, t] * r[j, t]
            q[t, j] = -r[j, t] * r[t, j]
    p = np.full(k, f32(1) / f32(k), f32)
    eps = f32(0.005) / f32(k)
    for _ in range(100):
        qp = (q @ p).astype(f32)
        pqp = f32((p * qp).sum(dtype=f32))
        if float(np.abs(qp - pqp).max()) < eps:
            break
        for t in range(k):
            diff = (-qp[t] + pqp) / q[t, t]
            p[t] += diff
            pqp = (pqp + diff * (diff * q[t, t] + f32(2) * qp[t])) / (f32(1) + diff) / (f32(1) + diff)
            qp = ((qp + diff * q[t, :]) / (f32(1) + diff)).astype(f32)
            p = (p / (f32(1) + diff)).astype(f32)
    return p.astype(f32)
