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


def test_sweep_selects_on_the_pooled_val_splits():
    """select_on="pooled" (FACETS' tuning, one val set per dataset): each setting's val
    metrics on the val OOD splits concatenated (reference: sklearn's AUROC of the KNN scores
    recomputed for each K by NumPy on the same bank), and the chosen K is their argmax."""
    from scorers.sweep import sweep

    rng = np.random.default_rng(5)
    w = rng.normal(size=(3, 8)).astype(np.float32)

    def part(n, scale, usage, labels=True):
        d = {"features": (rng.normal(size=(n, 8)) * scale).astype(np.float32),
             "usage": usage}
        return {**d, "labels": rng.integers(0, 3, n)} if labels else d

    st = ArrayStore(head=(w, np.zeros(3, np.float32)), splits={
        "id/train": part(60, 1.0, "train"), "id/val": part(30, 1.0, "val"),
        "id/test": part(30, 1.0, "test"), "ood/far/v1": part(10, 0.3, "val", False),
        "ood/far/v2": part(40, 1.3, "val", False), "ood/far/t": part(20, 2.0, "test", False)})
    res = sweep(st, "knn", {"K": [1, 5, 20]}, select_on="pooled")
    bank = np.asarray(st.split("id/train").features, dtype=np.float64)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)

    def knn(x, k):
        z = x / np.linalg.norm(x, axis=1, keepdims=True)
        d = np.sqrt(np.maximum(((z[:, None, :] - bank[None]) ** 2).sum(-1), 0))
        return -np.sort(d, axis=1)[:, k - 1]

    x_id = np.asarray(st.split("id/val").features, dtype=np.float64)
    x_ood = np.r_[np.asarray(st.split("ood/far/v1").features),
                  np.asarray(st.split("ood/far/v2").features)].astype(np.float64)
    ref = [_sk(knn(x_id, k), knn(x_ood, k))[0] for k in (1, 5, 20)]
    got = [s["val"]["pooled"]["auroc"] for s in res["settings"]]
    assert got == pytest.approx(ref, abs=1e-6)
    assert res["chosen"]["setting"]["K"] == (1, 5, 20)[int(np.argmax(ref))]
    assert res["chosen"]["val"]["auroc"] == pytest.approx(max(ref), abs=1e-6)
