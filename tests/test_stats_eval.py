"""Intervals, paired tests and rankings wired through eval, sweep, compare, rank and their CLI,
on a real small store. References: each interval endpoint recomputed from scratch (the
documented resample streams drawn again, scorers.metrics.ood_metrics on the resampled rows,
np.quantile); DeLong p-values from scorers.stats.delong_test on the stored scores; AURC/AUGRC
from scorers.selective on the same scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scorers.compare import compare, rank_results
from scorers.evaluate import evaluate, score_splits
from scorers.metrics import OOD_METRIC_NAMES, ood_metrics
from scorers.selective import selective_metrics
from scorers.stats import BootstrapSpec, delong_test, holm
from scorers.stats.resample import blocks, stratum_rng
from scorers.sweep import sweep_all
from tests.helpers.cli import run_cli


def _indices(seed: int, name: str, n: int, n_boot: int) -> np.ndarray:
    """The resample indices of one stratum, drawn as scorers.stats.resample documents."""
    rng = stratum_rng(seed, name)
    return np.concatenate([rng.integers(0, n, (size, n)) for size in blocks(n_boot)])


def test_eval_intervals_equal_a_from_scratch_bootstrap(structured_store):
    spec = BootstrapSpec(0.9, 120, "percentile", seed=5)
    result = evaluate(structured_store, ["msp", "knn"], ci=spec)
    assert result["ci"]["method"] == "percentile" and result["ci"]["resamples"] == 120
    assert result["ci"]["seed"] == 5 and "stratified" in result["ci"]["resampling"]
    scores = {m: score_splits(structured_store, m, {}, ["id/test", *result["ood_splits"]])[0]
              for m in ("msp", "knn")}
    n_id = scores["msp"]["id/test"].size
    id_idx = _indices(5, "id/test", n_id, 120)
    for split in result["ood_splits"]:
        n = scores["msp"][split].size
        ood_idx = _indices(5, split, n, 120)
        dist = np.array([[ood_metrics(scores["knn"]["id/test"][i], scores["knn"][split][j])[m]
                          for m in OOD_METRIC_NAMES] for i, j in zip(id_idx, ood_idx,
                                                                     strict=True)])
        got = result["methods"]["knn"]["splits"][split]
        for c, m in enumerate(OOD_METRIC_NAMES):
            want = np.quantile(dist[:, c], [0.05, 0.95])
            np.testing.assert_allclose(got[f"{m}_ci"], want, rtol=1e-10, atol=1e-10)
    # group "near" holds one split: its interval is that split's
    near = [s for s in result["ood_splits"] if s.startswith("ood/near/")]
    assert (result["methods"]["msp"]["groups"]["near"]["auroc_ci"]
            == result["methods"]["msp"]["splits"][near[0]]["auroc_ci"])
    # ID accuracy over the ID resamples
    split = structured_store.split("id/test")
    correct = np.argmax(np.asarray(split.logits), 1) == np.asarray(split.labels)
    acc = 100 * correct[id_idx].mean(axis=1)
    np.testing.assert_allclose(result["id_acc_ci"], np.quantile(acc, [0.05, 0.95]))
    # AURC / AUGRC beside the misclassification AUROC, with intervals
    sel = selective_metrics(scores["msp"]["id/test"], split.logits, split.labels)
    msp = result["methods"]["msp"]
    assert msp["aurc"] == pytest.approx(sel["aurc"]) and msp["augrc"] == pytest.approx(
        sel["augrc"])
    for key in ("misclassification_auroc", "aurc", "augrc"):
        lo, hi = msp[f"{key}_ci"]
        assert lo <= msp[key] <= hi
    # deterministic, and plain JSON
    again = evaluate(structured_store, ["msp", "knn"], ci=spec)
    strip = ("fit_seconds", "score_seconds", "cached", "diagnostics")
    for r in (result, again):
        for m in r["methods"].values():
            for k in strip:
                m.pop(k)
    assert json.dumps(result, allow_nan=False) == json.dumps(again, allow_nan=False)


def test_eval_without_ci_has_no_intervals_and_bca_runs(structured_store):
    plain = evaluate(structured_store, ["energy"])
    assert plain["ci"] is None
    assert not any(k.endswith("_ci") for k in plain["methods"]["energy"]["groups"]["far"])
    bca = evaluate(structured_store, ["energy"], ci=BootstrapSpec(0.95, 200, "bca", 0))
    far = bca["methods"]["energy"]["groups"]["far"]
    assert bca["ci"]["method"] == "bca"
    assert far["auroc_ci"][0] < far["auroc"] < far["auroc_ci"][1]


def test_tuned_eval_carries_intervals(structured_store):
    result = sweep_all(structured_store, ["msp", "knn"], ci=BootstrapSpec(0.95, 100))
    assert result["ci"]["resamples"] == 100
    knn = result["methods"]["knn"]
    assert len(knn["groups"]["near"]["fpr95_ci"]) == 2 and knn["aurc_ci"] is not None


def test_compare_delong_and_paired_bootstrap(structured_store):
    res = compare(structured_store, ["msp", "energy", "knn"], spec=BootstrapSpec(0.95, 200))
    split = "ood/near/blend"
    scores = {m: score_splits(structured_store, m, {}, ["id/test", split])[0]
              for m in ("msp", "energy", "knn")}
    rows = res["splits"][split]["delong_auroc"]
    assert [(r["a"], r["b"]) for r in rows] == [("msp", "energy"), ("msp", "knn"),
                                                ("energy", "knn")]
    raw = [delong_test(scores[r["a"]]["id/test"], scores[r["a"]][split],
                       scores[r["b"]]["id/test"], scores[r["b"]][split]).p_value for r in rows]
    np.testing.assert_allclose([r["p"] for r in rows], raw, rtol=1e-12)
    np.testing.assert_allclose([r["p_holm"] for r in rows], holm(np.array(raw)), rtol=1e-12)
    boot = res["groups"]["near"]["bootstrap"]["auroc"]
    ev = res["evaluation"]["methods"]
    for r in boot:
        assert r["diff"] == pytest.approx(ev[r["a"]]["groups"]["near"]["auroc"]
                                          - ev[r["b"]]["groups"]["near"]["auroc"])
        assert 2 / 201 <= r["p"] <= 1.0 and r["p_holm"] >= r["p"]
    knn_vs_msp = next(r for r in boot if r["b"] == "knn" and r["a"] == "msp")
    assert knn_vs_msp["diff_ci"][1] < 0 and knn_vs_msp["p"] == pytest.approx(2 / 201)


def test_rank_results_over_two_results(structured_store, make_store):
    other = make_store("other", seed=1)
    methods = ["msp", "energy", "knn", "mls"]
    results = [evaluate(structured_store, methods), evaluate(other, methods)]
    res = rank_results(results, "fpr95")
    assert res["n_blocks"] == 4 and res["direction"] == "min"
    table = np.array([[r["methods"][m]["splits"][s]["fpr95"] for m in methods]
                      for r in results for s in r["ood_splits"]])
    from scipy.stats import rankdata

    np.testing.assert_allclose([res["mean_ranks"][m] for m in methods],
                               rankdata(table, axis=1).mean(axis=0))
    with pytest.raises(ValueError, match="unknown metric"):
        rank_results(results, "nope")


def test_cli_eval_compare_rank_and_bad_options(structured_store, capsys, tmp_path):
    store = str(structured_store.path)
    code, out, err = run_cli(capsys, "eval", store, "--method", "msp", "--method", "knn",
                             "--boot", "50", "--out", tmp_path / "r.json")
    assert code == 0, err
    assert "95% percentile intervals" in out and "AURC" in out
    # an interval in msp's row: value±h since the 100-column eval table (d25dec9); [lo, hi]
    # with --wide (tests/test_cli_terminal.py)
    assert "±" in out.split("msp")[1].split("\n")[0]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ci"]["resamples"] == 50 and "auroc_ci" in data["methods"]["msp"]["groups"]["far"]
    code, out, _ = run_cli(capsys, "eval", store, "--method", "msp", "--ci", "0", "--json")
    assert code == 0 and json.loads(out)["ci"] is None
    code, out, err = run_cli(capsys, "compare", store, "--method", "msp", "--method", "knn",
                             "--method", "energy", "--boot", "50", "--json")
    assert code == 0, err
    assert json.loads(out)["splits"]["ood/far/faint"]["delong_auroc"][0]["a"] == "msp"
    code, out, err = run_cli(capsys, "compare", store, "--method", "msp", "--method", "knn",
                             "--boot", "50")
    assert code == 0 and "DeLong" in out and "paired bootstrap" in out
    json_path = tmp_path / "r.json"
    three = evaluate(structured_store, ["msp", "knn", "energy"])
    json_path.write_text(json.dumps(three))
    code, out, err = run_cli(capsys, "rank", json_path, "--metric", "auroc")
    assert code == 0 and "Friedman" in out and "critical difference" in out
    (tmp_path / "bad.json").write_text("{not json")
    for args, code_want, fragment in [
        (["eval", store, "--method", "msp", "--ci", "1.5"], 2, "--ci"),
        (["eval", store, "--method", "msp", "--boot", "1"], 2, "--boot"),
        (["eval", store, "--method", "msp", "--ci-method", "basic"], 2, "--ci-method"),
        (["sweep", store, "--method", "knn", "--ci", "-0.2"], 2, "--ci"),
        (["report", store, "--boot", "0", "--out", tmp_path / "x.html"], 2, "--boot"),
        (["compare", store, "--method", "msp"], 2, "at least two different methods"),
        (["compare", store, "--method", "msp", "--method", "nope"], 2, "unknown scorer 'nope'"),
        (["compare", store, "--method", "msp", "--method", "knn", "--ci", "0"], 2, "--ci"),
        (["rank", tmp_path / "bad.json"], 1, "is not a results JSON"),
        (["rank", json_path, "--metric", "nope"], 2, "unknown metric 'nope'"),
    ]:
        code, _, err = run_cli(capsys, *args)
        assert code == code_want, (args, err)
        assert fragment in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "x.html").exists()
