"""CFOOD (scorers/methods/cfood.py). References: (1) a NumPy transcription of the formula
(every count_j summed directly over the n x J radii, no binary search); (2) OpenOOD's own
computation, `openood/postprocessors/cfood_postprocessor.py` at 3c35632 (`setup`'s self-kNN
loop and `postprocess`'s per-sample loop, float32 torch as they run it) on the scorer's own
reference subset (OpenOOD's is an unseeded torch.randperm): the kappas agree on >= 99% of
rows (float32 vs float64 distances may break a near-tie differently) and AUROC within 0.01;
(3) the cfood.yml grid against separate fits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def unit(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-10)


def ref_cfood(store, scorer, split: str, alpha: float = 0.1, k: float = 0.01) -> np.ndarray:
    """NumPy: radii by full sorts, count_j = mean_r [R[r, j] >= d_r], first j >= k."""
    ref = unit(refs.feats(store, "id/train")[scorer.reference(alpha).rows])
    n = len(ref)
    kval = np.concatenate((np.linspace(0.001, 0.1, 100), np.linspace(0.105, 0.5, 81),
                           np.linspace(0.51, 0.99, 49)))
    kpos = np.array(kval * n - 1, dtype=int)
    keep = np.concatenate(([True], kpos[:-1] < kpos[1:]))
    kval, kpos = kval[keep], kpos[keep]
    radii = np.sort(((ref[:, None, :] - ref[None, :, :]) ** 2).sum(axis=2), axis=1)[:, kpos + 1]
    u = unit(refs.feats(store, split))
    d = ((u[:, None, :] - ref[None, :, :]) ** 2).sum(axis=2)           # (b, n)
    count = (radii[None, :, :] >= d[:, :, None]).mean(axis=1)           # (b, J)
    hit = count >= k
    return -np.where(hit.any(axis=1), kval[hit.argmax(axis=1)], 1.0)


def openood_cfood(store, scorer, splits, alpha=0.1, k=0.01) -> list[np.ndarray]:
    """cfood_postprocessor.py@3c35632 setup + postprocess, float32 torch, on our subset."""
    feats = torch.from_numpy(np.asarray(store.split("id/train").features, dtype=np.float32))
    feats = feats / (torch.norm(feats, dim=1, keepdim=True) + 1e-10)
    ref = feats[torch.from_numpy(scorer.reference(alpha).rows)].contiguous()
    n = ref.size(0)
    kval = np.concatenate((np.linspace(0.001, 0.1, 100), np.linspace(0.105, 0.5, 81),
                           np.linspace(0.51, 0.99, 49)))
    kpos = np.array(kval * n - 1, dtype=int)
    keep = np.concatenate(([True], kpos[:-1] < kpos[1:]))
    kval, kpos = kval[keep], kpos[keep]
    knndst = torch.zeros((n, len(kpos)), dtype=torch.float32)
    for i in range(n):
        knndst[i, :] = torch.sort(torch.sum((ref[i] - ref) ** 2, dim=1), dim=0).values[kpos + 1]
    out = []
    for split in splits:
        feat = torch.from_numpy(np.asarray(store.split(split).features, dtype=np.float32))
        feat = feat / (torch.norm(feat, dim=1, keepdim=True) + 1e-10)
        kv = torch.from_numpy(kval)
        scores = []
        for v in feat:
            dst = torch.sum((v - ref) ** 2, dim=1)
            count = (knndst >= dst.view(n, 1)).sum(dim=0).float() / float(n)
            pos = torch.nonzero(count >= k, as_tuple=False)
            scores.append(kv[pos[0, 0]] if pos.numel() > 0 else torch.tensor(1.0))
        out.append(-torch.stack(scores).double().numpy())
    return out


def test_matches_numpy_formula(shared_store):
    scorer = kit.fitted("cfood", shared_store)
    for split in kit.EVAL_SPLITS:
        for setting, got in scorer.score_grid(shared_store.split(split),
                                              {"alpha": [0.1, 0.5], "k": [0.005, 0.05]}):
            np.testing.assert_array_equal(got, ref_cfood(shared_store, scorer, split, **setting),
                                          err_msg=f"{split} {setting}")


def test_matches_openood_code(shared_store):
    scorer = kit.fitted("cfood", shared_store)
    splits = ["id/test", "ood/near/blend", "ood/far/faint"]
    want = openood_cfood(shared_store, scorer, splits)
    got = [scorer.score(shared_store.split(s)) for s in splits]
    for s, g, w in zip(splits, got, want, strict=True):
        assert np.mean(g == w) >= 0.99, s
    for i in (1, 2):
        y = np.r_[np.ones(len(got[0])), np.zeros(len(got[i]))]
        assert abs(roc_auc_score(y, np.r_[got[0], got[i]])
                   - roc_auc_score(y, np.r_[want[0], want[i]])) < 0.01


def test_grid_sign_and_catalogue(shared_store):
    kit.assert_grid_equals_separate(shared_store, "cfood", {},
                                    grid={"alpha": [0.1, 0.5], "k": [0.01, 0.05]})
    kit.assert_id_mean_above(shared_store, "cfood")
    row = {r["name"]: r for r in list_scorers()}["cfood"]
    assert row["defaults"] == {"alpha": 0.1, "k": 0.01, "seed": 0}
    assert row["grid"] == {"alpha": [0.1, 0.5, 1], "k": [0.001, 0.005, 0.01, 0.05]}


def test_bad_params(make_store):
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\] \(got 0\)"):
        get_scorer("cfood", alpha=0)
    st = make_store("few", num_classes=2, dim=4, n_train=10, n_val=4, n_test=4, n_ood=4)
    with pytest.raises(ValueError, match=r"alpha=0.1 keeps 1 of the 10 rows of 'id/train'"):
        get_scorer("cfood", alpha=0.1).fit(st)
