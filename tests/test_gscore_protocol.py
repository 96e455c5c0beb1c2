"""Gscore's evaluation protocol defaults and options (scorers/gscore/protocol.py): disjoint ID
pools, tau tuned on MSP and reused, heterogeneous meta-sets (supplementary C), FPR@TPR80/60
targets, OOD split selection, and the config echo in JSON and in the human output.
References: sklearn.metrics.roc_curve for FPR@TPR, scorers.metrics.ood_metrics for FPR95,
set arithmetic on the drawn row indices."""

from __future__ import annotations

import json

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import gscore as G
from scorers.gscore.metasets import StorePools, fpr_at_tpr, hetero_sizes, id_pools, select_splits
from scorers.metrics import ood_metrics
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import graded_store


def test_fpr_at_tpr_equals_sklearn_roc_curve_and_fpr95():
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(0)
    for n_id, n_ood in ((100, 80), (37, 53), (5, 9), (1000, 7)):
        a = np.round(rng.normal(1.0, 1.0, n_id), 1)  # ties included
        b = np.round(rng.normal(0.0, 1.0, n_ood), 1)
        y = np.r_[np.ones(n_id), np.zeros(n_ood)]
        fpr, tpr, _ = roc_curve(y, np.r_[a, b], drop_intermediate=False)
        for level in (60, 80, 95):
            ref = 100 * fpr[np.argmax(tpr >= level / 100 - 1e-12)]
            assert fpr_at_tpr(a, b, level) == pytest.approx(ref, abs=1e-9), (n_id, level)
        assert fpr_at_tpr(a, b, 95) == pytest.approx(ood_metrics(a, b)["fpr95"], abs=1e-9)


def test_disjoint_id_pools_never_share_a_row():
    data = [StorePools(0, None, "a", "x", [], 301, {}, {}, 301),
            StorePools(1, None, "b", "x", [], 40, {}, {}, 40)]
    for seed in range(5):
        tr, te = id_pools(data, 0.5, np.random.default_rng(seed))
        for sd, p_tr, p_te in zip(data, tr, te, strict=True):
            assert not set(p_tr) & set(p_te)
            assert sorted([*p_tr, *p_te]) == list(range(sd.n_id))
            assert abs(len(p_tr) - round(0.5 * sd.n_id)) <= 1
    tr, te = id_pools(data, None, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(tr, te, strict=True))


def test_heterogeneous_sizes_follow_supplementary_c():
    rng = np.random.default_rng(0)
    big = np.array([hetero_sizes(5000, 3000, rng) for _ in range(2000)])
    assert big[:, 0].min() >= 100 and big[:, 0].max() <= 5000
    assert big[:, 1].min() >= 100 and big[:, 1].max() <= 3000
    small = np.array([hetero_sizes(150, 200, rng) for _ in range(2000)])
    assert small[:, 0].min() >= 15 and small[:, 1].min() >= 20  # a tenth of the pool
    ratios = small[:, 0] / small[:, 1]
    assert ratios.min() < 0.2 and ratios.max() > 4  # varied IND:OOD ratios


def test_select_splits_patterns_and_errors():
    names = ["ood/a/x", "ood/a/y", "ood/b/z"]
    assert select_splits(names) == names
    assert select_splits(names, ["ood/a/*"]) == ["ood/a/x", "ood/a/y"]
    assert select_splits(names, None, ["ood/a/y"]) == ["ood/a/x", "ood/b/z"]
    with pytest.raises(UsageError, match="--splits 'ood/c/\\*': matches no OOD test split"):
        select_splits(names, ["ood/c/*"])
    with pytest.raises(UsageError, match="leave no OOD test split"):
        select_splits(names, ["ood/a/*"], ["ood/a/*"])


def test_defaults_disjoint_pools_tau_from_msp_and_config(tmp_path):
    st = graded_store(tmp_path / "s", n_ood=6, rows=200)
    res = G.evaluate_gscore([st], methods=["msp", "energy"], models=["ude-wasserstein"],
                            targets=["fpr95", "fpr@tpr80"], repeats=2, sets_per_split=2,
                            baselines=False, exclude=["ood/g2/*"])
    cfg = res["config"]
    assert cfg["id_pools"] == "disjoint" and cfg["id_train_fraction"] == 0.5
    assert cfg["tau_from"] == "msp" and "reused for every detector" in cfg["describe"]["tau"]
    assert cfg["splits_exclude"] == ["ood/g2/*"] and cfg["n_splits"] == 4
    assert not any(s.startswith("ood/g2/") for s in res["splits"])
    # 1:1 meta-test sets hold half of id/test (240 rows) and as many OOD rows
    assert cfg["mean_n_id"] == pytest.approx(120, abs=1)
    for target in ("fpr95", "fpr@tpr80"):
        tau_msp = res["table"]["msp"][target]["ude-wasserstein"]["tau"]
        tau_energy = res["table"]["energy"][target]["ude-wasserstein"]["tau"]
        assert tau_msp == tau_energy  # the same tau, tuned on MSP, in every repeat
    each = G.evaluate_gscore([st], methods=["energy"], models=["ude-wasserstein"], repeats=1,
                             sets_per_split=2, baselines=False, tau_from=None,
                             id_train_fraction=None)
    assert each["config"]["tau_from"] == "each detector"
    assert each["config"]["id_pools"] == "shared"
    assert each["config"]["mean_n_id"] == pytest.approx(200, abs=1)  # 1:1, 200 OOD rows


def test_heterogeneous_main_and_robustness_rows(tmp_path):
    st = graded_store(tmp_path / "s", n_ood=4, rows=80)
    res = G.evaluate_gscore([st], models=["ude-wasserstein", "gmm-wasserstein"], repeats=1,
                            sets_per_split=3, baselines=False, heterogeneous=True,
                            robust_heterogeneous=True, ratios=["1:3"])
    assert res["config"]["heterogeneous"] is True
    assert "random size and IND:OOD ratio" in res["config"]["describe"]["meta_sets"]
    kinds = [r["kind"] for r in res["robustness"]]
    assert kinds == ["ratio", "heterogeneous"]
    cell = res["robustness"][1]["results"]["msp"]["fpr95"]["ude-wasserstein"]
    assert cell["rmse"]["mean"] is not None
    fits = res["gmm_fits"]["msp"]
    assert fits["sets"] > 0 and fits["not_converged"] == 0


def test_cli_evaluate_echoes_config_and_escapes_headers(tmp_path, capsys):
    st = graded_store(tmp_path / "s", n_ood=4, rows=60)
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--repeats", "1",
                         "--sets-per-split", "2", "--no-baselines", "--models",
                         "ude-wasserstein", "--splits", "ood/g0/*,ood/g1/*")
    assert code == 0, err
    lines = out.splitlines()
    head = "\n".join(lines[:8])
    assert "ID pools: disjoint" in head and "tau: tuned on msp" in head
    assert "--splits ood/g0/*, ood/g1/*" in head
    assert "[95% interval]" in out  # not eaten by rich markup
    # the defaults in --json: disjoint ID pools and tau tuned on MSP, stated in `config`
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--json", "--repeats", "1",
                         "--sets-per-split", "2", "--no-baselines", "--models",
                         "ude-wasserstein")
    assert code == 0, err
    cfg = json.loads(out)["config"]
    assert cfg["id_pools"] == "disjoint" and cfg["id_train_fraction"] == 0.5
    assert cfg["describe"]["id_pools"].startswith("disjoint: each repeat splits id/test")
    assert cfg["tau_from"] == "msp"
    assert cfg["describe"]["tau"].startswith("tuned on msp's meta-train sets")
    assert "reused for every detector" in cfg["describe"]["tau"]
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--json", "--repeats", "1",
                         "--sets-per-split", "2", "--no-baselines", "--id-pools", "shared",
                         "--tau-from", "each", "--targets", "fpr@tpr60")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["config"]["id_pools"] == "shared" and doc["config"]["tau_from"] == "each detector"
    assert doc["config"]["targets"] == ["fpr@tpr60"]
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--exclude", "ood/zz/*")
    assert code != 0 and "--exclude 'ood/zz/*': matches no OOD test split" in err
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--id-pools", "half")
    assert code != 0 and "--id-pools 'half'" in err


def test_report_include_renders_gscore_evaluate_json(tmp_path, capsys):
    """`report --include` of `gscore evaluate --json`: the RMSE table (values as in the JSON),
    the correlation table with its [meta-train r] header and one scatter per detector and
    target; an unrecognised JSON is an error. Reference: the evaluate JSON itself."""
    import re

    from featstore.workflows.report import write_report

    st = graded_store(tmp_path / "s", n_ood=4, rows=60)
    code, out, err = run(capsys, "gscore", "evaluate", st.path, "--json", "--repeats", "2",
                         "--sets-per-split", "2", "--no-baselines", "--methods", "msp,energy",
                         "--models", "ude-wasserstein,kmeans-l2", "--out", tmp_path / "e.json")
    assert code == 0, err
    res = json.loads((tmp_path / "e.json").read_text())
    html_path, md_path = write_report(st.path, tmp_path / "r.html", methods=["msp"],
                                      include=[tmp_path / "e.json"])
    html = html_path.read_text()
    md = md_path.read_text()
    cell = res["table"]["energy"]["fpr95"]["kmeans-l2"]["rmse"]
    assert f"{cell['mean']:.2f} [{cell['ci'][0]:.2f}, {cell['ci'][1]:.2f}]" in html
    assert "Gscore: RMSE (%) of predicted FPR@TPR95 on meta-test sets" in md
    # Markdown escapes brackets in titles (md_text), so they show as text, never as a link
    assert "Gscore: error on AUROC beside the noise floor" in md
    assert "mean \\[95% interval\\] over 2 partitions" in md
    n_pt = len(re.findall(r"!\[\w+: Gscore \(\w+ \+ [\w ]+\), predicted vs true", md))
    assert n_pt == 2 * 2  # detectors x targets: predicted vs true per test set, with the floor
    assert "ID pools: " not in md and "disjoint: each repeat splits id/test" in md
    n_scatter = len(re.findall(r"!\[\w+: Gscore \(\w+ \+ [\w ]+\) vs true", md))
    assert n_scatter == 2 * 2  # detectors x targets
    (tmp_path / "bad.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(Exception, match="report --include #1: not a result featstore can"):
        write_report(st.path, tmp_path / "r2.html", methods=["msp"],
                     include=[tmp_path / "bad.json"])


def test_gbench_runs_the_protocol_on_a_users_stores(tmp_path, capsys):
    """`gscore gbench STORE...`: the Gbench preset (robustness rows for 6 ratios, 2 sizes and
    heterogeneous sets) over the union of the stores' OOD splits."""
    a = graded_store(tmp_path / "a", seed=0, n_ood=4, rows=60)
    b = graded_store(tmp_path / "b", seed=1, n_ood=6, rows=60)
    code, out, err = run(capsys, "gscore", "gbench", a.path, b.path, "--json", "--methods",
                         "msp", "--repeats", "1", "--exclude", "ood/g2/*", "--results",
                         tmp_path / "g.json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc == json.loads((tmp_path / "g.json").read_text())
    assert sorted(doc["splits"]) == ["ood/g0/s0", "ood/g0/s3", "ood/g1/s1", "ood/g1/s4"]
    assert [s["ood_splits"] for s in doc["stores"]] == [3, 4]
    kinds = [(r["kind"], r["ratio"], r["size"]) for r in doc["robustness"]]
    assert kinds == [("ratio", r, None) for r in ("1:100", "1:10", "1:3", "3:1", "10:1",
                                                   "100:1")] + [
        ("size", "1:1", 100), ("size", "1:1", 50), ("heterogeneous", "random", "random")]
    assert set(doc["table"]["msp"]) == {"fpr95", "auroc"}
