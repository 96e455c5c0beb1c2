"""The paper's baselines: the confidence score (MSP > 0.9 pseudo-labels) and
auto-evaluation (Fréchet distance to the id/train feature Gaussian, Deng & Zheng 2021)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from featstore.errors import UsageError

from ..metrics import ood_metrics
from .metasets import _Sets, _StoreData, fpr_at_tpr
from .spec import CONFIDENCE_THRESHOLD, FPR_AT_TPR, ID_TEST, ID_TRAIN


def _chance(target: str, share_id: float) -> float:
    if target == "aupr_in":
        return 100.0 * share_id
    if target == "aupr_out":
        return 100.0 * (1.0 - share_id)
    if target in FPR_AT_TPR:
        return float(FPR_AT_TPR[target])
    return {"auroc": 50.0, "fpr95": 95.0, "detection_error": 50.0}[target]


def _confidence_baseline(x: np.ndarray, msp: np.ndarray, sets: _Sets,
                         targets: Sequence[str]) -> np.ndarray:
    """(M, len(targets)) metric of the detector's scores against MSP > 0.9 pseudo-labels."""
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


# =============================================================================== Fréchet


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray,
                     cov2: np.ndarray) -> float:
    """Reference Fréchet distance with scipy.linalg.sqrtm (Deng & Zheng / FID formula)."""
    from scipy import linalg  # lazy: the reference Fréchet distance only

    covmean = linalg.sqrtm(np.asarray(cov1) @ np.asarray(cov2))
    covmean = np.real(covmean)
    diff = np.asarray(mu1) - np.asarray(mu2)
    return float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2.0 * np.trace(covmean))


def _sqrt_psd(cov: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(cov)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distances(ref_mu: np.ndarray, ref_cov: np.ndarray, feats: np.ndarray,
                      idx: np.ndarray, n: np.ndarray, chunk: int = 128,
                      ref_sqrt: np.ndarray | None = None) -> np.ndarray:
    """Fréchet distance between N(ref_mu, ref_cov) and the Gaussian (np.cov, ddof 1) of each
    set's feature rows feats[idx[i, :n[i]]]; batched (see module docstring). `ref_sqrt`: the
    precomputed ref_cov^(1/2), if any."""
    a = _sqrt_psd(np.asarray(ref_cov, dtype=np.float64)) if ref_sqrt is None else ref_sqrt
    tr_ref = float(np.trace(ref_cov))
    out = np.empty(idx.shape[0])
    cols = np.arange(idx.shape[1])
    for start in range(0, idx.shape[0], chunk):
        sl = slice(start, min(start + chunk, idx.shape[0]))
        nn = n[sl].astype(np.float64)
        f = np.where((cols[None, :] < n[sl, None])[..., None], feats[idx[sl]], 0.0)
        mu = f.sum(axis=1) / nn[:, None]
        scatter = f.transpose(0, 2, 1) @ f - nn[:, None, None] * (mu[:, :, None] * mu[:, None, :])
        cov = scatter / np.maximum(nn - 1.0, 1.0)[:, None, None]
        inner = a[None] @ cov @ a[None]
        eig = np.linalg.eigvalsh(inner)
        tr_sqrt = np.sqrt(np.clip(eig, 0.0, None)).sum(axis=1)
        diff = mu - ref_mu[None, :]
        out[sl] = ((diff * diff).sum(axis=1) + tr_ref + np.trace(cov, axis1=1, axis2=2)
                   - 2.0 * tr_sqrt)
    return out


def _load_features(sd: _StoreData) -> None:
    """Pooled features (id/test + OOD splits) and the id/train Gaussian of one store."""
    if sd.features is not None:
        return
    st = sd.store
    if not st.has_split(ID_TRAIN):
        raise UsageError(f"store {sd.path!r} has no id/train split (auto-evaluation baseline)")
    train = np.asarray(st.split(ID_TRAIN).features, dtype=np.float64)
    cov = np.cov(train, rowvar=False)
    sd.train_gauss = (train.mean(axis=0), cov, _sqrt_psd(cov))
    parts = [np.asarray(st.split(ID_TEST).features)] + [np.asarray(st.split(s).features)
                                                        for s in sd.ood]
    sd.features = np.concatenate(parts).astype(np.float32)


def _auto_eval_fd(stores: Sequence[_StoreData], sets: _Sets, offsets: Sequence[int]) -> np.ndarray:
    out = np.empty(sets.m)
    for sd, base in zip(stores, offsets, strict=True):
        rows = np.flatnonzero(sets.store == sd.index)
        if rows.size == 0:
            continue
        _load_features(sd)
        assert sd.train_gauss is not None and sd.features is not None
        local = np.where(np.arange(sets.idx.shape[1])[None, :] < sets.n[rows, None],
                         sets.idx[rows] - base, 0)
        out[rows] = frechet_distances(sd.train_gauss[0], sd.train_gauss[1], sd.features,
                                      local, sets.n[rows], ref_sqrt=sd.train_gauss[2])
    return out


# =============================================================================== the model
