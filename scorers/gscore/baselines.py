"""The paper's baselines, on the same meta-sets as Gscore: the confidence score (the metric
against MSP > 0.9 pseudo-labels, `confidence_baseline`) and auto-evaluation (the Fréchet
distance to the id/train feature Gaussian regressed to the metric, Deng & Zheng 2021,
`auto_eval_distances`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from featstore.errors import UsageError

from ..metrics import ood_metrics
from .metasets import MetaSets, StorePools, fpr_at_tpr
from .spec import CONFIDENCE_THRESHOLD, FPR_AT_TPR, ID_TEST, ID_TRAIN


def _chance(target: str, share_id: float) -> float:
    """The metric when every sample is pseudo-labelled on one side: AUROC 50, FPR95 95 (FPR at
    TPR p: p), detection error 50, AUPR-In / AUPR-Out 100 x the pseudo-ID / pseudo-OOD share."""
    if target == "aupr_in":
        return 100.0 * share_id
    if target == "aupr_out":
        return 100.0 * (1.0 - share_id)
    if target in FPR_AT_TPR:
        return float(FPR_AT_TPR[target])
    return {"auroc": 50.0, "fpr95": 95.0, "detection_error": 50.0}[target]


def confidence_baseline(x: np.ndarray, msp: np.ndarray, sets: MetaSets,
                         targets: Sequence[str]) -> np.ndarray:
    """The paper's confidence-score baseline: (M, len(targets)) metric of the detector's scores
    x against pseudo-labels, a sample ID where its MSP (from the same store's logits,
    whatever the detector) > CONFIDENCE_THRESHOLD (0.9); where every sample falls on one
    side the metric is undefined and the chance value (`_chance`) is used."""
    out = np.empty((sets.m, len(targets)))
    for i in range(sets.m):
        n = sets.n[i]
        s, pseudo = x[i, :n], msp[i, :n] > CONFIDENCE_THRESHOLD
        k = int(pseudo.sum())
        if 0 < k < n:
            vals = ood_metrics(s[pseudo], s[~pseudo])
            for t, level in FPR_AT_TPR.items():
                vals[t] = fpr_at_tpr(s[pseudo], s[~pseudo], level)
            out[i] = [vals[t] for t in targets]
        else:
            out[i] = [_chance(t, k / n) for t in targets]
    return out


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray,
                     cov2: np.ndarray) -> float:
    """Reference Fréchet distance with scipy.linalg.sqrtm (Deng & Zheng / FID formula):
    ||mu1 - mu2||^2 + tr cov1 + tr cov2 - 2 tr sqrtm(cov1 cov2)."""
    from scipy import linalg  # lazy: the reference Fréchet distance only

    covmean = linalg.sqrtm(np.asarray(cov1) @ np.asarray(cov2))
    covmean = np.real(covmean)
    diff = np.asarray(mu1) - np.asarray(mu2)
    return float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2.0 * np.trace(covmean))


def _psd_factor(cov: np.ndarray) -> np.ndarray:
    """F (D, r) with F F^T = cov (negative rounding-level eigenvalues clipped to 0), from
    eigh; only the r columns of positive eigenvalues are kept."""
    w, v = np.linalg.eigh(np.asarray(cov, dtype=np.float64))
    keep = w > 0
    return v[:, keep] * np.sqrt(w[keep])


def _fd_one(rows: np.ndarray, feats: np.ndarray, proj: np.ndarray, sq: np.ndarray,
            ref_mu: np.ndarray, tr_ref: float) -> float:
    """The Fréchet distance of one set (its row indices), n x n form (`frechet_distances`)."""
    k = rows.size
    mu = feats[rows].mean(axis=0, dtype=np.float64)
    denom = max(k - 1.0, 1.0)
    tr_s = max(float(sq[rows].sum()) - k * float(mu @ mu), 0.0) / denom
    z = proj[rows]
    zc = z - z.mean(axis=0)
    gram = zc @ zc.T if zc.shape[0] <= zc.shape[1] else zc.T @ zc
    eig = np.linalg.eigvalsh(gram / denom)
    diff = mu - ref_mu
    return float(diff @ diff) + tr_ref + tr_s - 2.0 * float(np.sqrt(np.clip(eig, 0.0, None)).sum())


def frechet_distances(ref_mu: np.ndarray, ref_cov: np.ndarray | None, feats: np.ndarray,
                      idx: np.ndarray, n: np.ndarray, ref_factor: np.ndarray | None = None,
                      proj: np.ndarray | None = None, workers: int | None = None) -> np.ndarray:
    """Fréchet distance between N(ref_mu, ref_cov) and the Gaussian (np.cov, ddof 1) of each
    set's feature rows feats[idx[i, :n[i]]] (the formula of `frechet_distance`), exact
    through n x n matrices: no D x D product per set.

    With ref_cov = F F^T (`ref_factor` F (D, r), else from eigh of ref_cov) and the set's
    centred rows X_c (n, D): tr sqrtm(ref_cov S) = sum sqrt(eig(Z_c Z_c^T / (n - 1))) with
    Z_c = X_c F (the nonzero eigenvalues of F^T S F, i.e. of A S A for A = ref_cov^(1/2); the
    r x r Gram Z_c^T Z_c when r < n); tr S = (sum ||x_i||^2 - n ||mu||^2) / (n - 1);
    tr ref_cov = ||F||_F^2. `proj`: the precomputed feats @ F. Sets are spread over
    `workers` threads (default: the CPU count), BLAS single-threaded inside each (small
    matrices: one thread each is faster than OpenBLAS's threads on every product)."""
    from ..rowmap import blas_controller

    f_ref = _psd_factor(ref_cov) if ref_factor is None else np.asarray(ref_factor, np.float64)
    feats = np.asarray(feats)
    z_all = feats.astype(np.float64) @ f_ref if proj is None else proj
    sq = np.einsum("ij,ij->i", feats, feats, dtype=np.float64)
    tr_ref = float((f_ref * f_ref).sum())
    ref_mu = np.asarray(ref_mu, dtype=np.float64)
    sets = [np.asarray(idx[i, :n[i]]) for i in range(idx.shape[0])]
    workers = max(1, min(workers or os.cpu_count() or 1, len(sets)))
    with blas_controller().limit(limits=1, user_api="blas"):
        if workers == 1:
            vals = [_fd_one(r, feats, z_all, sq, ref_mu, tr_ref) for r in sets]
        else:
            with ThreadPoolExecutor(workers) as pool:
                vals = list(pool.map(lambda r: _fd_one(r, feats, z_all, sq, ref_mu, tr_ref),
                                     sets))
    return np.asarray(vals, dtype=np.float64)


def load_features(sd: StorePools) -> None:
    """Into `sd`: the pooled features (id/test + OOD splits, float32), the id/train Gaussian
    of the store as its mean and a factor F of its covariance (np.cov, ddof 1: F = the
    centred id/train rows / sqrt(N - 1) when N <= D, else from eigh), and the pooled rows
    projected on F (`frechet_distances`' `proj`)."""
    if sd.features is not None:
        return
    st = sd.store
    if not st.has_split(ID_TRAIN):
        raise UsageError(f"store {sd.path!r} has no id/train split (auto-evaluation baseline)")
    train = np.asarray(st.split(ID_TRAIN).features, dtype=np.float64)
    if train.shape[0] < 2:
        raise UsageError(f"store {sd.path!r}: id/train needs at least 2 rows for the "
                         "auto-evaluation baseline's covariance")
    mu = train.mean(axis=0)
    if train.shape[0] <= train.shape[1]:
        factor = (train - mu).T / np.sqrt(train.shape[0] - 1.0)
    else:
        factor = _psd_factor(np.cov(train, rowvar=False))
    parts = [np.asarray(st.split(ID_TEST).features)] + [np.asarray(st.split(s).features)
                                                        for s in sd.ood]
    sd.features = np.concatenate(parts).astype(np.float32)
    sd.train_gauss = (mu, factor, sd.features.astype(np.float64) @ factor)


def auto_eval_distances(stores: Sequence[StorePools], sets: MetaSets,
                        offsets: Sequence[int] | np.ndarray) -> np.ndarray:
    """The auto-evaluation baseline's predictor (Deng & Zheng, CVPR 2021): (M,) the Fréchet
    distance between the Gaussian of each set's store's id/train features and the Gaussian
    of the set's features (`frechet_distances`); a line fitted on meta-train sets maps it to
    the metric."""
    out = np.empty(sets.m)
    for sd, base in zip(stores, offsets, strict=True):
        rows = np.flatnonzero(sets.store == sd.index)
        if rows.size == 0:
            continue
        load_features(sd)
        assert sd.train_gauss is not None and sd.features is not None
        local = np.where(np.arange(sets.idx.shape[1])[None, :] < sets.n[rows, None],
                         sets.idx[rows] - base, 0)
        out[rows] = frechet_distances(sd.train_gauss[0], None, sd.features, local,
                                      sets.n[rows], ref_factor=sd.train_gauss[1],
                                      proj=sd.train_gauss[2])
    return out
