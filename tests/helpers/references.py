"""Independent references the tests compare against: a store's arrays read as float64, and
plain NumPy / Python transcriptions of the papers' formulas (ViM's principal space, class
Mahalanobis distances, softmax and entropy of a row, the WordNet similarity by hand)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.covariance import EmpiricalCovariance

from featstore import Store


def feats(store: Store, split: str) -> np.ndarray:
    """A split's features as float64."""
    return np.asarray(store.split(split).features, dtype=np.float64)


def logits(store: Store, split: str) -> np.ndarray:
    """A split's logits as float64."""
    return np.asarray(store.split(split).logits, dtype=np.float64)


def labels(store: Store, split: str) -> np.ndarray:
    return np.asarray(store.split(split).labels)


def head(store: Store) -> tuple[np.ndarray, np.ndarray]:
    """The store's head (W, b) as float64."""
    w, b = store.head
    return np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows over their L2 norm (+ 1e-10), as KNN-OOD normalizes."""
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-10)


def energy(z: np.ndarray) -> np.ndarray:
    """log sum_k exp(z_k) per row (scipy.special.logsumexp): the energy score at T = 1."""
    from scipy.special import logsumexp

    return logsumexp(z, axis=1)


def softmax_row(v: Any) -> list[float]:
    """softmax of one row, in plain Python floats (math.exp; max-subtracted)."""
    e = [math.exp(x - max(v)) for x in v]
    return [x / sum(e) for x in e]


def entropy_row(p: Any) -> float:
    """-sum p log p of one probability row, plain Python (0 log 0 = 0)."""
    return -sum(x * math.log(x) for x in p if x > 0)


def vim_dim(d: int, dim: int | None) -> int:
    """The ViM paper's default principal dimension."""
    if dim is not None:
        return dim
    return 1000 if d >= 2048 else 512 if d >= 768 else d // 2


def ref_vim_parts(store: Store, dim: int | None):
    """Wang et al. 2022: origin -pinv(W) b, null space of the uncentered covariance about it.
    The structured head's rows sum to zero (rank C-1); its float32 rounding leaves a ~1e-8
    singular value that pinv must treat as zero (float32 precision of the stored head)."""
    w, b = head(store)
    u = -np.linalg.pinv(w, rtol=max(w.shape) * np.finfo(np.float32).eps) @ b
    xtr = feats(store, "id/train") - u
    cov = xtr.T @ xtr / len(xtr)
    evals, evecs = np.linalg.eigh(cov)
    ns = evecs[:, np.argsort(-evals)[vim_dim(w.shape[1], dim):]]
    max_logit = logits(store, "id/train").max(axis=1).mean()
    alpha = max_logit / np.linalg.norm(xtr @ ns, axis=1).mean()
    return u, ns, alpha


def class_means_and_cov(train: np.ndarray, y: np.ndarray):
    """OpenOOD's MDS setup: per-class means; EmpiricalCovariance of class-centered features."""
    classes = np.unique(y)
    means = {}
    centered = []
    for c in classes:
        rows = train[y == c]
        means[c] = rows.mean(axis=0)
        centered.append(rows - means[c])
    cov = EmpiricalCovariance(assume_centered=False).fit(np.concatenate(centered)).covariance_
    return means, cov


def ref_class_maha(train: np.ndarray, y: np.ndarray, test: np.ndarray) -> np.ndarray:
    """(n, C) squared Mahalanobis distances to each class mean, explicit loops, np.linalg.pinv."""
    means, cov = class_means_and_cov(train, y)
    prec = np.linalg.pinv(cov)
    out = np.empty((test.shape[0], len(means)))
    for j, c in enumerate(sorted(means)):
        for i, x in enumerate(test):
            d = x - means[c]
            out[i, j] = d @ prec @ d
    return out


def small_store_parts(make_store):
    """N = 40 labelled id/train rows in D = 64 (the covariances have rank < N; the fit takes
    the thin-SVD route, `whitener_from_rows`): the store, its train rows/labels, class means
    and the precision (sklearn EmpiricalCovariance, scipy pinvh) of the class-centered rows."""
    st = make_store("small", dim=64, n_train=40)
    train, y = feats(st, "id/train"), labels(st, "id/train")
    means, _ = class_means_and_cov(train, y)
    centered = train - np.stack([means[c] for c in y])
    prec = EmpiricalCovariance().fit(centered).precision_
    return st, train, means, prec


def class_distances(test: np.ndarray, means: dict, prec: np.ndarray) -> np.ndarray:
    return np.stack([np.einsum("ij,jk,ik->i", test - means[c], prec, test - means[c])
                     for c in sorted(means)], axis=1)


def hand_sim(d: int, wup: float) -> float:
    """(path + LCH / LCH_max + Wu-Palmer) / 3 with D = 19."""
    return (1.0 / (d + 1) + 1.0 - math.log(d + 1) / math.log(38.0) + wup) / 3.0


def gen_score(logit_rows: np.ndarray, gamma: float, m: int) -> np.ndarray:
    """GEN (Liu, Lochman & Zach 2023): -sum over the top-M probabilities of p^g (1 - p)^g,
    transcribed in logs with SciPy so that no term saturates: log p = log_softmax (np.sort's
    top M, M > C keeping all C as the paper's code), log(1 - p) = log1p(-p) for every entry
    but the largest, whose 1 - p is the sum of the others' probabilities (logsumexp of their
    log p), and each term exp(g (log p + log(1 - p)))."""
    from scipy.special import log_softmax
    from scipy.special import logsumexp as sp_logsumexp

    lp = np.sort(log_softmax(np.asarray(logit_rows, dtype=np.float64), axis=1), axis=1)
    rest = sp_logsumexp(lp[:, :-1], axis=1) if lp.shape[1] > 1 else np.full(len(lp), -np.inf)
    with np.errstate(divide="ignore"):
        log1m = np.log1p(-np.exp(lp))
    log1m[:, -1] = rest
    top = (lp + log1m)[:, -m:]
    return -np.exp(gamma * top).sum(axis=1)
