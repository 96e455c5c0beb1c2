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
    # issue 46.5: section 5.2's tau refinement +-0.5 at step 0.01, section 5.1's Lloyd Kmeans
    assert cfg["tau_halfwidth"] == 0.5 and cfg["kmeans"] == "lloyd (seed 0)"
    assert "tau + 0.5" in cfg["describe"]["preset"] and "section 5.1" in cfg["describe"]["preset"]
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


def test_paper_tau_refinement_spans_half_a_unit_at_step_001():
    """Gscore section 5.2 (issue 46.5): after the 0.1 grid, "repeat the process from tau - 0.5
    to tau + 0.5 ... with an interval of 0.01": with the engine's half-width 0.5 (`--paper`)
    the fine taus are every 0.01 in [tau0 - 0.5, tau0 + 0.5] clipped to [0, 1] (by hand:
    tau0 = 0.3 gives 0.00 ... 0.80, 81 values); the default keeps +-0.1 (21 values)."""
    from scorers.gscore.regression import search_tau

    p = np.arange(5, dtype=float)
    g_of = lambda ts: np.array([p * (1 + 10 * (t - 0.3) ** 2) + (t - 0.3) ** 2  # noqa: E731
                                for t in ts])
    res = search_tau(g_of, p, halfwidth=0.5)
    fine = [t for t, _ in res["trace"] if round(t * 10) != t * 10]
    assert res["tau_coarse"] == 0.3
    assert min(t for t, _ in res["trace"]) == 0.0 and max(fine) == pytest.approx(0.79)
    assert len([t for t, _ in res["trace"] if t <= 0.8 + 1e-9]) == 81
    narrow = search_tau(g_of, p)
    assert max(t for t, _ in narrow["trace"] if t < 0.45) == pytest.approx(0.4)
    assert len([t for t, _ in narrow["trace"] if 0.2 - 1e-9 <= t <= 0.4 + 1e-9]) == 21


def test_paper_kmeans_is_lloyd_from_two_random_centroids():
    """Gscore section 5.1 (issue 46.5): "Kmeans starts with two random centroids and
    iteratively updates the centroids". Reference: a plain-Python Lloyd's algorithm from the
    same two starting samples (`lloyd_starts`), assign to the nearer centroid (ties to the
    first), recompute means, until no assignment changes. A set where Lloyd stops in a local
    optimum (starts 0 and 1 over {0, 1, 2, 6, 7, 8, 20}: {0, 1, 2} | {6, 7, 8, 20}, by hand)
    differs from the exact 2-means ({0, ..., 8} | {20})."""
    from scorers.gscore.clustering import kmeans_rows, lloyd_rows, lloyd_starts

    rng = np.random.default_rng(3)
    sets = [rng.normal(size=40), np.r_[rng.normal(0, 1, 30), rng.normal(5, 1, 10)],
            np.array([0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 20.0])]
    width = max(len(s) for s in sets)
    x = np.zeros((len(sets), width))
    n = np.array([len(s) for s in sets])
    for i, s in enumerate(sets):
        x[i, :len(s)] = s
    starts = lloyd_starts(n, 7)
    starts[2] = (0, 1)  # the local-optimum start, by hand
    got = lloyd_rows(x, n, starts)
    for i, s in enumerate(sets):
        c = [float(s[starts[i, 0]]), float(s[starts[i, 1]])]
        first = None
        while True:
            a = [abs(v - c[0]) <= abs(v - c[1]) for v in s]
            if a == first:
                break
            first = a
            c = [float(np.mean([v for v, f in zip(s, a, strict=True) if f])),
                 float(np.mean([v for v, f in zip(s, a, strict=True) if not f]))]
        lo, hi = sorted([[v for v, f in zip(s, first, strict=True) if f],
                         [v for v, f in zip(s, first, strict=True) if not f]], key=np.mean)
        ref = [np.mean(lo), np.std(lo), len(lo), np.mean(hi), np.std(hi), len(hi)]
        assert got[i] == pytest.approx(ref, abs=1e-12)
    assert got[2][2] == 3 and kmeans_rows(x, n)[2][2] == 6


def test_gbench_paper_scores_odin_with_input_perturbation(tmp_path):
    """Gscore's ODIN (ref. [33], issue 46.5) perturbs its input: `gbench_protocol(paper=
    True)` evaluates `odin_perturbed` (T = 1000, eps = 0.0014) in ODIN's place, with
    `evaluate --paper`'s settings; on a store without those logits it is skipped, named, and
    the build extracts them (GBENCH_PAPER_ODIN)."""
    from scorers.gscore.spec import GBENCH_PAPER_METHODS, GBENCH_PAPER_ODIN

    st = graded_store(tmp_path / "s", n_ood=6, rows=80)
    res = G.gbench_protocol([st], paper=True, ratios=(), sizes=(), robust_heterogeneous=False,
                            repeats=1, models=["kmeans-l2"], baselines=False,
                            targets=["fpr95"])
    assert GBENCH_PAPER_METHODS == ("msp", "odin_perturbed", "energy", "mls")
    assert res["config"]["paper"] is True and res["config"]["kmeans"] == "lloyd (seed 0)"
    assert "ODIN-perturbed logits at temperature=1000" in res["skipped"]["odin_perturbed"]
    assert GBENCH_PAPER_ODIN == ((1000.0, 0.0014),)
