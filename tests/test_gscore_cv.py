"""Gscore's cross-validated protocol (`--cv K --rounds R`), the split-level targets and the
oracle floor, the 95% intervals, the `--paper` preset and the CLI's configuration echo.
References: scipy.stats.t.interval for the intervals, scorers.metrics.ood_metrics on the
whole OOD split for the split-level targets (independent of the meta-set machinery), numpy
RMSE on the JSON's per-set points."""

from __future__ import annotations

import json

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import gscore as G
from scorers.evaluate import score_splits
from scorers.gscore.results import _agg
from scorers.metrics import ood_metrics
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import graded_store


def test_interval_is_students_t_of_the_mean():
    from scipy import stats

    v = [5.2, 6.1, 4.4, 7.9, 5.5]
    cell = _agg(v)
    lo, hi = stats.t.interval(0.95, len(v) - 1, loc=np.mean(v), scale=stats.sem(v))
    assert cell["mean"] == pytest.approx(np.mean(v))
    assert cell["ci"] == pytest.approx([lo, hi], rel=1e-12)
    assert cell["std"] == pytest.approx(np.std(v, ddof=1)) and cell["values"] == v
    assert _agg([0.1, 0.3], (0.0, np.inf))["ci"][0] == 0.0  # clipped to the range
    assert _agg([3.0])["ci"] is None and _agg([None, float("nan")])["mean"] is None


def test_cv_tests_every_split_every_round_with_split_targets_and_floor(tmp_path):
    st = graded_store(tmp_path / "s", n_ood=6, rows=120)
    res = G.evaluate_gscore([st], methods=["msp"], models=["ude-wasserstein"],
                            targets=["fpr95", "auroc"], repeats=3, sets_per_split=2, cv=3,
                            baselines=False)
    assert res["config"]["protocol"] == "cv" and res["config"]["cv"] == 3
    names = res["splits"]
    for target in ("fpr95", "auroc"):
        cell = res["table"]["msp"][target]["ude-wasserstein"]
        for key in ("rmse", "rmse_split", "floor", "pearson", "spearman"):
            assert cell[key]["n"] == 3 and len(cell[key]["values"]) == 3
            assert cell[key]["ci"][0] <= cell[key]["mean"] <= cell[key]["ci"][1]
        p = res["points"]["msp"][target]["ude-wasserstein"]
        # round 1 tests every OOD split, each with its 2 meta-sets, exactly once
        assert sorted(p["split"]) == sorted(names * 2)
        pred, true = np.array(p["predicted"]), np.array(p["true"])
        assert cell["rmse"]["values"][0] == pytest.approx(np.sqrt(np.mean((pred - true) ** 2)))
        # split-level target: all id/test rows vs every row of the split (ood_metrics direct)
        scores, _, _ = score_splits(st, "msp", {}, ["id/test", *names], True)
        for name, t in zip(p["split"], p["split_true"], strict=True):
            assert t == pytest.approx(ood_metrics(scores["id/test"], scores[name])[target])
        split_true = np.array(p["split_true"])
        assert cell["rmse_split"]["values"][0] == pytest.approx(
            np.sqrt(np.mean((pred - split_true) ** 2)))
        floor = np.array(p["floor"])
        assert cell["floor"]["values"][0] == pytest.approx(np.sqrt(np.mean((floor - true) ** 2)))
        # the oracle is constant within a split (one value per split and round)
        for name in names:
            assert np.ptp(floor[np.array(p["split"]) == name]) == 0


def test_cv_and_random_partitions_bad_options(tmp_path):
    st = graded_store(tmp_path / "s", n_ood=4, rows=60)
    with pytest.raises(UsageError, match="at least 2 folds"):
        G.evaluate_gscore([st], models=["kmeans-l2"], cv=1, baselines=False)
    with pytest.raises(UsageError, match="more folds than the 4 OOD test splits"):
        G.evaluate_gscore([st], models=["kmeans-l2"], cv=5, baselines=False)
    with pytest.raises(UsageError, match="robustness rows"):
        G.evaluate_gscore([st], models=["kmeans-l2"], cv=2, ratios=["1:3"], baselines=False)


def test_paper_preset_sets_every_paper_default(tmp_path):
    st = graded_store(tmp_path / "s", n_ood=6, rows=80)
    res = G.evaluate_gscore([st], methods=["msp"], models=["gmm-wasserstein", "ude-wasserstein"],
                            targets=["fpr95"], repeats=2, baselines=False, paper=True)
    cfg = res["config"]
    assert cfg["paper"] is True and cfg["sets_per_split"] == 1
    assert cfg["ude_kernel"] == "paper" and cfg["clip"] is False
    assert cfg["correlation_sets"] == "meta-train"
    assert "gmm-wasserstein@auto" in cfg["models"]
    assert "section 6.1" in cfg["describe"]["preset"]
    cell = res["table"]["msp"]["fpr95"]["gmm-wasserstein@auto"]
    assert cell["pearson"]["values"] == cell["pearson_train"]["values"]
    assert cell["tau"]["mean"] is not None  # GMM's tau was searched


def test_cli_cv_json_keys_config_first_and_help(tmp_path, capsys):
    st = graded_store(tmp_path / "s", n_ood=4, rows=60)
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--cv", "2", "--rounds", "3",
                         "--sets-per-split", "2", "--models", "ude-wasserstein",
                         "--targets", "fpr95", "--json")
    assert code == 0, err
    doc = json.loads(out)
    cell = doc["table"]["msp"]["fpr95"]["ude-wasserstein"]
    for key in ("rmse", "rmse_split", "floor", "pearson"):
        assert isinstance(cell[key]["mean"], float) and len(cell[key]["ci"]) == 2
        assert len(cell[key]["values"]) == 3
    assert doc["config"]["rounds"] == 3 and doc["config"]["baselines"] is True
    assert "auto_eval" in doc["baselines"]["msp"]["fpr95"]
    sec = doc["seconds"]
    parts = ("drawing_sets", "true_metrics", "tau_search", "modelling_and_regression",
             "baselines", "other")
    assert sum(sec[k] for k in parts) == pytest.approx(sec["protocol"], abs=1e-6)
    assert sec["scoring"] + sec["protocol"] <= sec["total"]
    assert "OOD splits: 4 OOD test splits; each round cuts them into 2 folds" in err
    code, out, err = run(capsys, "gscore", "evaluate", "--help")
    assert "--no-baselines" in out and "--no-no-baselines" not in out
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--cv", "2", "--rounds", "2",
                         "--sets-per-split", "2", "--models", "ude-wasserstein",
                         "--targets", "fpr95", "--no-baselines")
    assert code == 0, err
    assert "rmse_split" in out and "floor" in out
    assert "= scoring and features" in out


def test_fit_cross_validated_rmse_and_predict_interval(tmp_path):
    """Leave-one-split-out (5 splits, 5 folds) with a variant without tau: reference is
    numpy.polyfit on the other splits' (Gscore, truth) points of the saved model."""
    import math

    st = graded_store(tmp_path / "s", n_ood=5, rows=80)
    model = G.fit_gscore([st], "msp", "fpr95", "gmm-wasserstein", sets_per_split=3)
    mt = model.meta_train
    cv = mt["cv"]
    assert cv["folds"] == 5 and cv["n"] == 15
    g, t = np.array(mt["points"]["gscore"]), np.array(mt["points"]["true"])
    split = np.repeat(mt["splits"], 3)  # sets are drawn split by split
    pred = np.empty_like(t)
    for name in mt["splits"]:
        out = split == name
        a, b = np.polyfit(g[~out], t[~out], 1)
        pred[out] = np.clip(a * g[out] + b, 0, 100)
    assert cv["rmse"] == pytest.approx(np.sqrt(np.mean((pred - t) ** 2)), rel=1e-9)
    resid = np.sort(np.abs(pred - t))
    q = resid[min(15, math.ceil(0.95 * 16)) - 1]  # the conformal rank, capped at n
    assert cv["abs_residual_q95"] == pytest.approx(q, rel=1e-9)
    res = G.predict_gscore(model, st, ["id/test", "ood/g0/s0"])
    assert res["interval"] == pytest.approx([max(0.0, res["predicted"] - q),
                                             min(100.0, res["predicted"] + q)])
    assert res["cv_rmse"] == pytest.approx(cv["rmse"])
