"""ConfBranch (scorers/methods/confbranch.py). References: the stored confidence extra itself
(DeVries & Taylor 2018: S(x) = c), compared as plain Python floats; AUROC by the library's
evaluation on disjoint confidence ranges (must be 100)."""

from __future__ import annotations

import numpy as np

from scorers import get_scorer, list_scorers
from scorers.evaluate import evaluate
from tests.helpers import stores

RNG = np.random.default_rng(7)


def test_confbranch_is_the_stored_confidence(tmp_path):
    st = stores.extras_store(tmp_path / "s", RNG, lambda n, iid: {
        "confidence": (RNG.uniform(0.6, 1.0, n) if iid else RNG.uniform(0.0, 0.5, n))
        .astype(np.float32)})
    s = get_scorer("confbranch").fit(st)
    for split in ("id/test", "ood/far/x"):
        conf = np.asarray(st.split(split).extra("confidence"))
        got = s.score(st.split(split))
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, [float(c) for c in conf])
    # sign: confident rows (ID) score higher than unconfident ones (OOD)
    assert s.score(st.split("id/test")).min() > s.score(st.split("ood/far/x")).max()
    res = evaluate(st, ["confbranch"], use_cache=False)
    assert res["methods"]["confbranch"]["groups"]["far"]["auroc"] == 100.0


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["confbranch"]
    assert entry["needs"] == ["extra:confidence"]
    assert entry["paper"]
