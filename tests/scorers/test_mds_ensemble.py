"""MDS ensemble (scorers/methods/mds_ensemble.py). References, on the store's own arrays:
(1) a NumPy transcription of the formula (class means, 1/N tied covariance, pinv, per-row
loops over classes, summed over layers); (2) OpenOOD v1.5's computation transcribed from
`openood/postprocessors/mds_ensemble_postprocessor.py` at 3c35632 (`get_MDS_stat` with
feature type "mean" and reduce_dim "none": sklearn EmpiricalCovariance on the class-centred
rows; `compute_Mahalanobis_score` with noise 0; alpha_list [1] per layer), in float64 torch."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn.covariance
import torch

from featstore.errors import FeatstoreError
from scorers import get_scorer
from tests.helpers.views import view_store


def numpy_reference(train: dict, rows: dict, layers: list[str]) -> np.ndarray:
    total = np.zeros(next(iter(rows.values())).shape[0])
    y = train["labels"]
    for layer in layers:
        x = train[layer].astype(np.float64)
        means = np.stack([x[y == k].mean(axis=0) for k in range(4)])
        d = x - means[y]
        prec = np.linalg.pinv(d.T @ d / len(x), hermitian=True)
        f = rows[layer].astype(np.float64)
        best = np.full(len(f), -np.inf)
        for k in range(4):
            z = f - means[k]
            best = np.maximum(best, -0.5 * np.einsum("ij,jk,ik->i", z, prec, z))
        total += best
    return total


def openood_reference(train: dict, rows: dict, layers: list[str]) -> np.ndarray:
    """get_MDS_stat + compute_Mahalanobis_score (magnitude 0), transcribed."""
    group_lasso = sklearn.covariance.EmpiricalCovariance(assume_centered=False)
    labels = train["labels"]
    scores = []
    for layer in layers:
        feature_sub = train[layer].astype(np.float64)
        mean_list = [np.mean(feature_sub[labels == k], axis=0) for k in range(4)]
        X = np.concatenate([feature_sub[labels == k] - mean_list[k] for k in range(4)])
        group_lasso.fit(X)
        precision = torch.tensor(group_lasso.precision_)
        sample_mean = torch.tensor(np.stack(mean_list))
        out_features = torch.tensor(rows[layer], dtype=torch.float64)
        gaussian = []
        for i in range(4):
            zero_f = out_features - sample_mean[i]
            gaussian.append(-0.5 * torch.mm(torch.mm(zero_f, precision), zero_f.t()).diag())
        scores.append(torch.stack(gaussian, 1).max(dim=1).values)
    alpha = torch.ones(len(layers), dtype=torch.float64)
    return torch.matmul(torch.stack(scores, 1), alpha).numpy()


def _views(split, layers):
    return {layer: np.asarray(split.extra(f"layer_features/{layer}")) for layer in layers}


def test_mds_ensemble_against_numpy_and_openood(tmp_path):
    st, _ = view_store(tmp_path / "s")
    layers = ["l1", "l2"]
    train_split = st.split("id/train")
    train = {**_views(train_split, layers), "labels": np.asarray(train_split.labels)}
    for precision, rtol in (("float64", 1e-9), ("float32", 1e-5)):
        s = get_scorer("mds_ensemble", layers=",".join(layers), precision=precision).fit(st)
        for name in ("id/test", "ood/far/x"):
            rows = _views(st.split(name), layers)
            got = s.score(st.split(name))
            scale = np.abs(got).max()
            np.testing.assert_allclose(got, numpy_reference(train, rows, layers),
                                       rtol=rtol, atol=rtol * scale)
            np.testing.assert_allclose(got, openood_reference(train, rows, layers),
                                       rtol=rtol, atol=rtol * scale)
    every = get_scorer("mds_ensemble").fit(st)           # default: every stored layer
    assert every.layers == ["l1", "l2"]


def test_mds_ensemble_missing_layer(tmp_path):
    st, _ = view_store(tmp_path / "s")
    with pytest.raises(FeatstoreError, match="no 'layer_features' view of layer 'x'"):
        get_scorer("mds_ensemble", layers="l1,x").fit(st)
