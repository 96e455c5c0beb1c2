"""IP TS MLV, FACETS (scorers/methods/ip_ts_mlv.py). References: max_c l'_c / T of the stored
ODIN-perturbed logits as a plain Python max per row; every stored (T, eps) pair in
`score_grid`; the AUROC of max l' by scikit-learn `roc_auc_score` (equal ranking)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from featstore.errors import UsageError
from featstore.store.extra_keys import odin_name
from scorers import get_scorer, list_scorers
from scorers.evaluate import evaluate
from tests.helpers import stores
from tests.helpers.stores import ODIN_GRID, odin_extras

RNG = np.random.default_rng(7)


def test_ip_ts_mlv_is_the_max_of_the_perturbed_logits_over_t(tmp_path):
    """Every stored (T, eps) pair in score_grid; a missing pair names the --odin-grid to
    extract; ranks like max l' (AUROC by sklearn equal)."""
    st = stores.extras_store(tmp_path / "ip", RNG, odin_extras)
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        for t, e in ODIN_GRID:
            lp = np.asarray(sp.extra(odin_name(t, e)), dtype=np.float64)
            expect = [max(row) / t for row in lp.tolist()]
            got = get_scorer("ip_ts_mlv", temperature=t, epsilon=e).fit(st).score(sp)
            np.testing.assert_allclose(got, expect, rtol=1e-15, atol=0)
    s = get_scorer("ip_ts_mlv").fit(st)
    assert s.params == {"temperature": 1000.0, "epsilon": 0.0014}
    assert sorted((g["temperature"], g["epsilon"]) for g, _ in s.score_grid(
        st.split("id/test"))) == sorted(ODIN_GRID)
    idl = np.asarray(st.split("id/test").extra(odin_name(1000.0, 0.0014)), dtype=np.float64)
    odl = np.asarray(st.split("ood/far/x").extra(odin_name(1000.0, 0.0014)), dtype=np.float64)
    ref = 100 * roc_auc_score(np.r_[np.ones(len(idl)), np.zeros(len(odl))],
                              np.r_[idl.max(1), odl.max(1)])
    res = evaluate(st, ["ip_ts_mlv"], use_cache=False)
    assert res["methods"]["ip_ts_mlv"]["splits"]["ood/far/x"]["auroc"] == pytest.approx(ref)
    with pytest.raises(UsageError, match=r"odin_grid=\(\(1, 0.0014\),\)"):
        get_scorer("ip_ts_mlv", temperature=1).fit(st)


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["ip_ts_mlv"]
    assert entry["paper"]
