"""CADRef (scorers/methods/cadref.py). References: (1) a NumPy transcription of the formula
-(E+ / S(l) + E- / mean_train S) for each logit score; (2) the authors' own computation,
`ood_methods/CADRef.py` and `utils/get_stat.py` of LingAndZero/CADRef at 121f74b, transcribed
line for line in torch (float32, as they run it: maxLogits, gen, energy, msp), compared at
rtol 1e-5; (3) score_grid against separate fits (1e-9)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

KINDS = ["energy", "msp", "maxlogit", "gen"]


def np_logit_score(lg: np.ndarray, kind: str) -> np.ndarray:
    z = lg - lg.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    if kind == "energy":
        return lg.max(axis=1) + np.log(np.exp(z).sum(axis=1))
    if kind == "msp":
        return p.max(axis=1)
    if kind == "maxlogit":
        return lg.max(axis=1)
    m = min(lg.shape[1], max(10, lg.shape[1] // 10))
    top = np.sort(p, axis=1)[:, -m:]
    return 1.0 / np.sum(top ** 0.1 * (1 - top) ** 0.1, axis=1)


def ref_cadref(store, split: str, logit_score: str = "energy") -> np.ndarray:
    """NumPy: E+ / S + E- / mean_train S, negated."""
    xt, lt = refs.feats(store, "id/train"), refs.logits(store, "id/train")
    pt = lt.argmax(axis=1)
    means = np.stack([xt[pt == k].mean(axis=0) for k in range(lt.shape[1])])
    w, _ = refs.head(store)
    x, lg = refs.feats(store, split), refs.logits(store, split)
    c = lg.argmax(axis=1)
    d = (x - means[c]) * np.sign(w[c])
    n1 = np.abs(x).sum(axis=1)
    e_pos, e_neg = np.maximum(d, 0).sum(axis=1) / n1, np.maximum(-d, 0).sum(axis=1) / n1
    return -(e_pos / np_logit_score(lg, logit_score)
             + e_neg / np_logit_score(lt, logit_score).mean())


def authors_cadref(store, split: str, kind: str) -> np.ndarray:
    """LingAndZero/CADRef@121f74b CADRef.get_state + CADRef.eval, float32 torch."""
    def t(a):
        return torch.from_numpy(np.asarray(a, dtype=np.float32))

    def logit_score(o):
        if kind == "maxlogit":
            return o.max(dim=1).values
        if kind == "gen":
            m = max(10, o.shape[-1] // 10)
            probs = torch.sort(F.softmax(o, dim=1), dim=1).values[:, -m:]
            return 1 / torch.sum(probs ** 0.1 * (1 - probs) ** 0.1, axis=1)
        if kind == "energy":
            return torch.logsumexp(o, dim=1)
        return torch.max(F.softmax(o, dim=1), dim=1).values

    tx, tl = t(store.split("id/train").features), t(store.split("id/train").logits)
    pred = tl.argmax(1)
    train_mean = torch.stack([tx[pred == k].mean(dim=0) for k in range(tl.shape[1])])
    global_mean = torch.mean(torch.cat([logit_score(tl[pred == k])
                                        for k in range(tl.shape[1])]), dim=0)
    w = t(store.head[0])
    feature, logit = t(store.split(split).features), t(store.split(split).logits)
    class_ids = torch.argmax(torch.softmax(logit, dim=1), dim=1).numpy()
    dist = feature - train_mean[class_ids]
    sg = w[class_ids].sign()
    ep = dist * sg
    ep[ep < 0] = 0
    en = dist * (-sg)
    en[en < 0] = 0
    nrm = feature.norm(dim=1, p=1)
    score = ep.norm(dim=1, p=1) / nrm / logit_score(logit) + en.norm(dim=1, p=1) / nrm / global_mean
    return -score.numpy().astype(np.float64)


def test_grid_matches_numpy_formula(shared_store):
    """score_grid over the four logit scores (one fit, 97-row chunks) == the NumPy formula."""
    scorer = kit.fitted("cadref", shared_store)
    for split in kit.EVAL_SPLITS:
        for setting, got in scorer.score_grid(shared_store.split(split)):
            np.testing.assert_allclose(got, ref_cadref(shared_store, split, **setting),
                                       rtol=1e-9, err_msg=f"{setting} {split}")


@pytest.mark.parametrize("kind", ["energy", "gen"])
def test_matches_authors_code(shared_store, kind):
    scorer = kit.fitted("cadref", shared_store, logit_score=kind)
    for split in kit.EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(shared_store.split(split)),
                                   authors_cadref(shared_store, split, kind), rtol=2e-5,
                                   err_msg=f"{kind} {split}")


def test_grid_equals_separate_runs_and_sign(shared_store):
    kit.assert_grid_equals_separate(shared_store, "cadref", {})
    kit.assert_id_mean_above(shared_store, "cadref")


def test_catalogue_and_bad_param():
    row = {r["name"]: r for r in list_scorers()}["cadref"]
    assert row["defaults"] == {"logit_score": "energy"}
    assert row["grid"] == {"logit_score": KINDS}
    with pytest.raises(ValueError, match=r"logit_score='softmax' is not one of energy, msp"):
        get_scorer("cadref", logit_score="softmax")
