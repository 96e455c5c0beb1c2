"""GradNorm (scorers/methods/gradnorm.py). References: Huang et al. 2021's ||d KL(u ||
softmax(h W^T + b)) / dW||_1 transcribed here in full-matrix NumPy (`scipy.special.softmax`),
compared at rtol 1e-6 with the scorer in 97-row chunks; torch autograd per sample (rtol 1e-9);
a separate construct/fit/score per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax as sp_softmax

from featstore import Store
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_gradnorm(store: Store, split: str) -> np.ndarray:
    """Huang et al. 2021: ||d KL(u || softmax(h W^T + b)) / dW||_1."""
    w, b = refs.head(store)
    x = refs.feats(store, split)
    grad = (sp_softmax(x @ w.T + b, axis=1) - 1.0 / len(b))[:, :, None] * x[:, None, :]
    return np.abs(grad).sum(axis=(1, 2))


def test_matches_reference(shared_store):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "gradnorm", {}, ref_gradnorm)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "gradnorm")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "gradnorm", {})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["gradnorm"]
    assert row["defaults"] == {} and row["grid"] == {}
    assert row["paper"]


def test_no_parameters():
    with pytest.raises(ValueError, match="unknown parameter"):
        get_scorer("gradnorm", temperature=2)


def test_gradnorm_matches_torch_autograd(shared_store):
    """Per sample: nn.Linear with the head, loss sum_c -(1/C) log_softmax, backward, L1 norm
    of weight.grad (the bias gradient is not part of the score, as in the official code)."""
    torch = pytest.importorskip("torch")
    w, b = refs.head(shared_store)
    fc = torch.nn.Linear(w.shape[1], w.shape[0], dtype=torch.float64)
    with torch.no_grad():
        fc.weight.copy_(torch.from_numpy(w))
        fc.bias.copy_(torch.from_numpy(b))
    scorer = kit.fitted("gradnorm", shared_store)
    for split in ("id/test", "ood/far/faint"):
        x = torch.from_numpy(refs.feats(shared_store, split))
        expected = []
        for row in x:
            fc.zero_grad()
            loss = torch.sum(-(1.0 / w.shape[0]) * torch.log_softmax(fc(row[None]), dim=-1))
            loss.backward()
            expected.append(float(fc.weight.grad.abs().sum()))
        np.testing.assert_allclose(scorer.score(shared_store.split(split)), expected,
                                   rtol=1e-9)
