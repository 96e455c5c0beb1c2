"""Pooled group metrics (issue 46.1): a group's metric on its OOD splits CONCATENATED, as
FACETS (Recalcati et al., DSAA 2023, §IV Tables II-V: one OOD "Total" per dataset; §VI Table
VI one cell per dataset) computes it, beside featstore's unweighted mean over the splits.

References: scikit-learn's roc_auc_score / roc_curve on the concatenated scores (the pooled
value); NumPy's np.repeat of the rows by the bootstrap's own per-stratum multiplicities
(`Stratum.counts`, the same streams the lanes use) for each resample of the pooled interval,
recomputed with `ood_metrics` on the repeated rows."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from featstore.store.arraystore import ArrayStore
from featstore.workflows.protocols.facets import facets_table, paper_markdown
from scorers.evaluate import evaluate
from scorers.metrics import ood_metrics
from scorers.stats.bootstrap import BootstrapSpec, bootstrap_evaluation
from scorers.stats.resample import Stratum


def _store(seed: int = 3) -> ArrayStore:
    """3 classes, 8 dims; OOD group "far": a small easy split (20 rows far out) and a large
    hard one (200 rows near the ID rows), so mean and pooled differ."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(3, 8)).astype(np.float32)

    def x(n: int, scale: float) -> np.ndarray:
        return (rng.normal(size=(n, 8)) * scale).astype(np.float32)

    return ArrayStore(head=(w, np.zeros(3, np.float32)), splits={
        "id/train": {"features": x(60, 2.0), "labels": rng.integers(0, 3, 60)},
        "id/test": {"features": x(80, 2.0), "labels": rng.integers(0, 3, 80)},
        "ood/far/small": {"features": x(20, 0.2)},
        "ood/far/large": {"features": x(200, 1.6)},
        "ood/near/one": {"features": x(30, 1.0)}})


def _sk(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    y = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    s = np.r_[pos, neg]
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return 100 * roc_auc_score(y, s), 100 * float(fpr[np.argmax(tpr >= 0.95)])


def test_evaluate_pooled_is_the_metric_on_the_concatenated_splits() -> None:
    st = _store()
    kept: dict = {}
    res = evaluate(st, ["mls"], keep_scores=kept)["methods"]["mls"]
    sc = kept["mls"]
    auc, fpr = _sk(sc["id/test"], np.r_[sc["ood/far/small"], sc["ood/far/large"]])
    assert res["pooled"]["far"]["auroc"] == pytest.approx(auc, abs=1e-9)
    assert res["pooled"]["far"]["fpr95"] == pytest.approx(fpr, abs=1e-9)
    mean = np.mean([_sk(sc["id/test"], sc[s])[0] for s in ("ood/far/small", "ood/far/large")])
    assert res["groups"]["far"]["auroc"] == pytest.approx(mean, abs=1e-9)
    assert abs(res["groups"]["far"]["auroc"] - res["pooled"]["far"]["auroc"]) > 1.0
    # a one-split group: both forms are that split's metrics
    assert res["pooled"]["near"] == pytest.approx(res["groups"]["near"], abs=1e-9)


def test_pooled_bootstrap_resamples_each_split_within_the_pool() -> None:
    st = _store()
    kept: dict = {}
    evaluate(st, ["mls"], keep_scores=kept)
    sc = kept["mls"]
    groups = {"far": ["ood/far/small", "ood/far/large"], "near": ["ood/near/one"]}
    spec = BootstrapSpec(n_boot=40, seed=7)
    dist, iv = bootstrap_evaluation(spec, "id/test", kept, groups, None, None)
    c_id = Stratum("id/test", 80, 7).counts(40)
    c_small = Stratum("ood/far/small", 20, 7).counts(40)
    c_large = Stratum("ood/far/large", 200, 7).counts(40)
    for b in (0, 17, 39):
        ref = ood_metrics(np.repeat(sc["id/test"], c_id[b]),
                          np.r_[np.repeat(sc["ood/far/small"], c_small[b]),
                                np.repeat(sc["ood/far/large"], c_large[b])])
        assert dist.pooled["mls"]["far"][b] == pytest.approx(list(ref.values()), abs=1e-9)
    lo, hi = iv["methods"]["mls"]["pooled"]["far"]["auroc"]
    assert lo <= ood_metrics(sc["id/test"], np.r_[sc["ood/far/small"],
                                                  sc["ood/far/large"]])["auroc"] <= hi


def test_facets_cells_are_pooled_and_the_paper_layout_has_tables_vi_and_vii() -> None:
    st = _store()
    table = facets_table([("A", st)], ["msp", "mls"], tune=False)
    kept: dict = {}
    evaluate(st, ["mls"], keep_scores=kept)
    sc = kept["mls"]
    auc, fpr = _sk(sc["id/test"], np.r_[sc["ood/far/small"], sc["ood/far/large"]])
    far = next(r for r in table["rows"] if r["group"] == "far")
    assert far["cells"]["mls"]["auroc"] == pytest.approx(auc, abs=1e-9)
    assert far["cells"]["mls"]["fpr95"] == pytest.approx(fpr, abs=1e-9)
    assert table["group_form"] == "pooled"
    md = paper_markdown(table)
    assert "## Table VI: OOD detection" in md and "## Table VII" in md
    assert "| A far |" in md and "| A near |" in md and "concatenated" in md
    vii = md.split("## Table VII")[1]
    assert vii.count("| A |") == 1
