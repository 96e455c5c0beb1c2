"""Gram (scorers/methods/gram.py). References, on the store's own arrays: (1) a NumPy
transcription of the formula, per row and per class in loops; (2) OpenOOD v1.5's computation
transcribed from `openood/postprocessors/gram_postprocessor.py` at 3c35632 (`sample_estimator`'s
class-wise min / max on the training part and its normalise factors on the held-out part,
`delta`, `get_deviations`' -deviations / confs), given the stored Gram row sums as its
`G_p` outputs and the scorer's held-out rows as its `val_idxs` (OpenOOD draws them with
random.sample), in float64 torch (OpenOOD runs float32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer
from scorers.methods.gram import held_out_rows
from tests.helpers.views import view_store


def numpy_reference(grams_train, labels, held, grams, logits, powers):
    dev = np.zeros(len(logits))
    for gt, g in zip(grams_train, grams, strict=True):
        gt, g = gt[:, :powers].astype(np.float64), g[:, :powers].astype(np.float64)
        fit = ~held
        lo = np.stack([gt[fit & (labels == k)].min(0) for k in range(4)])
        hi = np.stack([gt[fit & (labels == k)].max(0) for k in range(4)])

        def delta(k, row, lo=lo, hi=hi):
            return float((np.maximum(lo[k] - row, 0) / np.abs(lo[k] + 1e-6)).sum()
                         + (np.maximum(row - hi[k], 0) / np.abs(hi[k] + 1e-6)).sum())

        norm = np.mean([delta(labels[i], gt[i]) for i in np.flatnonzero(held)])
        pred = logits.argmax(1)
        dev += np.array([delta(pred[i], g[i]) for i in range(len(g))]) / norm
    p = np.exp(logits - logits.max(1, keepdims=True))
    return -dev / (p / p.sum(1, keepdims=True)).max(1)


def openood_delta(mins, maxs, x):
    dev = (F.relu(mins - x) / torch.abs(mins + 10 ** -6)).sum(dim=1, keepdim=True)
    dev += (F.relu(x - maxs) / torch.abs(maxs + 10 ** -6)).sum(dim=1, keepdim=True)
    return dev


def openood_reference(grams_train, labels, held, grams, logits, powers):
    """sample_estimator (after G_p) + get_deviations, transcribed."""
    mins, maxs, normalize_factors = {}, {}, []
    for layer_idx, gt in enumerate(grams_train):
        total_delta = None
        for class_ in range(4):
            rows = np.flatnonzero(labels == class_)
            val = list(np.flatnonzero(held[rows]))
            trn = list(set(range(len(rows))) - set(val))
            class_deltas = 0
            for power in range(1, powers + 1):
                feats = torch.tensor(gt[rows, power - 1], dtype=torch.float64)
                mins[layer_idx, power, class_] = feats[trn].min(dim=0, keepdim=True)[0]
                maxs[layer_idx, power, class_] = feats[trn].max(dim=0, keepdim=True)[0]
                class_deltas += openood_delta(mins[layer_idx, power, class_],
                                              maxs[layer_idx, power, class_], feats[val])
            total_delta = class_deltas if total_delta is None else torch.cat(
                [total_delta, class_deltas], dim=0)
        normalize_factors.append(total_delta.mean(dim=0, keepdim=True))
    normalize_factors = torch.cat(normalize_factors, dim=1)
    logits = torch.tensor(logits, dtype=torch.float64)
    deviations = torch.zeros(logits.shape[0], 1, dtype=torch.float64)
    confs, preds = F.softmax(logits, dim=1).max(dim=1)
    for layer_idx, g in enumerate(grams):
        n = normalize_factors[:, layer_idx].item()
        for power in range(1, powers + 1):
            gram_feature = torch.tensor(g[:, power - 1], dtype=torch.float64)
            for class_ in range(logits.shape[1]):
                deviations[preds == class_] += openood_delta(
                    mins[layer_idx, power, class_], maxs[layer_idx, power, class_],
                    gram_feature[preds == class_]) / n
    return (-deviations / confs[:, None])[:, 0].numpy()


@pytest.mark.parametrize("layers, powers", [("l1,l2", 3), ("l2", 2)])
def test_gram_against_numpy_and_openood(tmp_path, layers, powers):
    st, _ = view_store(tmp_path / "s")
    names = layers.split(",")
    train = st.split("id/train")
    labels = np.asarray(train.labels)
    held = held_out_rows(labels, 4, 0.1, 0)
    assert held.sum() == 4 * int(0.1 * 30)
    grams_train = [np.asarray(train.extra(f"layer_gram/{n}")) for n in names]
    s = get_scorer("gram", layers=layers, powers=powers).fit(st)
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        grams = [np.asarray(sp.extra(f"layer_gram/{n}")) for n in names]
        logits = np.asarray(sp.logits, dtype=np.float64)
        got = s.score(sp)
        np.testing.assert_allclose(got, numpy_reference(grams_train, labels, held, grams,
                                                        logits, powers), rtol=1e-9)
        np.testing.assert_allclose(got, openood_reference(grams_train, labels, held, grams,
                                                          logits, powers), rtol=1e-9)


def test_gram_bad_settings(tmp_path):
    st, _ = view_store(tmp_path / "s")
    with pytest.raises(UsageError, match=r"powers=5 but 1 <= powers <= 3"):
        get_scorer("gram", powers=5).fit(st)
    with pytest.warns(Warning, match="powers"):             # the default is clamped to 3
        assert get_scorer("gram").fit(st).params["powers"] == 3
    with pytest.raises(UsageError, match=r"val_fraction=0 must be in \(0, 1\)"):
        get_scorer("gram", val_fraction=0)
    with pytest.raises(FeatstoreError, match="no id/train rows are held out"):
        get_scorer("gram", val_fraction=0.01, powers=3).fit(st)
