"""MCD (scorers/methods/mcd.py). References: Yu & Aizawa 2019 / the remote-sensing benchmark's
eq. 14 as plain Python per row (softmax with math.exp, L1 discrepancy, entropy difference);
hand-built rows for the sign."""

from __future__ import annotations

import numpy as np

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import stores

RNG = np.random.default_rng(7)


def test_mcd_variants_against_numpy(tmp_path):
    def extras(n, iid):
        return {"head2_logits": stores.random_logits(RNG, n, 2.0)}

    st = stores.extras_store(tmp_path / "m", RNG, extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        l1 = np.asarray(sp.logits, dtype=np.float64)
        l2 = np.asarray(sp.extra("head2_logits"), dtype=np.float64)
        p1 = [refs.softmax_row(r) for r in l1]
        p2 = [refs.softmax_row(r) for r in l2]
        pairs = list(zip(p1, p2, strict=True))
        l1_ref = [-sum(abs(a - b) for a, b in zip(r1, r2, strict=True)) for r1, r2 in pairs]
        ent_ref = [-(refs.entropy_row(r1) - refs.entropy_row(r2)) for r1, r2 in pairs]
        np.testing.assert_allclose(get_scorer("mcd").fit(st).score(sp), l1_ref, rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(get_scorer("mcd", variant="entropy").fit(st).score(sp),
                                   ent_ref, rtol=1e-10, atol=1e-12)


def test_mcd_sign():
    from scorers.methods.mcd import mcd_scores

    same = np.array([[3.0, 0.0, 0.0, 0.0]])
    agree = mcd_scores(same, same, "l1")
    disagree = mcd_scores(same, np.array([[0.0, 3.0, 0.0, 0.0]]), "l1")
    assert agree[0] == 0.0 and disagree[0] < agree[0]
    # eq. 14: head 1 uncertain, head 2 confident (what training does on OOD) -> low score
    flat = np.zeros((1, 4))
    assert mcd_scores(flat, same, "entropy")[0] < mcd_scores(same, same, "entropy")[0]


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["mcd"]
    assert entry["needs"] == ["logits", "extra:head2_logits"]
    assert entry["paper"]
