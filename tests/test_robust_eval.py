"""Issue 21: evaluation runs that never die on one scorer, never drop one quietly, and fit
data-dependent defaults to the store by one rule.

The store: a 1000-class head (an ImageNet-1k head) over D = 150 features with 5 ID classes and
60 id/train rows, the situation of a real pretrained network evaluated on a 5-class subset.
SHE cannot run (995 head classes have no train row), ViM/Residual's default dim (D // 2 = 75)
is not below the 60 train rows, NNGuide's K = 100 exceeds its 1-row bank (1% of 60), and
the extras-based scorers lack their extras. References: sklearn's roc_auc_score for the
metrics, the scorers run directly with the clamped parameter for the clamped scores.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from scorers import REGISTRY, get_scorer
from scorers.adapt import fit_defaults
from scorers.evaluate import evaluate
from scorers.sweep import plan_settings, sweep, sweep_all
from tests.helpers.cli import run_cli as run

NUM_HEAD, DIM, NUM_ID = 1000, 150, 5


def head_1000_arrays(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    means = np.maximum(rng.normal(0, 2, (NUM_ID, DIM)), 0) + 0.2
    weight = rng.normal(0, 0.02, (NUM_HEAD, DIM)).astype(np.float32)
    centred = means - means.mean(0)
    weight[:NUM_ID] = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    bias = np.zeros(NUM_HEAD, np.float32)

    def id_rows(n: int) -> dict:
        y = np.arange(n) % NUM_ID
        x = np.maximum(means[y] + rng.normal(0, 0.8, (n, DIM)), 0).astype(np.float32)
        return {"features": x, "labels": y.astype(np.int64)}

    def noise(n: int, **kw) -> dict:
        return {"features": np.abs(rng.normal(0, 1, (n, DIM))).astype(np.float32), **kw}

    return {"head": (weight, bias),
            "splits": {"id/train": id_rows(60), "id/val": id_rows(30), "id/test": id_rows(40),
                       "ood/far/noise": noise(50), "ood/far/noise_val": noise(30, usage="val")}}


@pytest.fixture(scope="module")
def head_store(tmp_path_factory) -> Store:
    path = tmp_path_factory.mktemp("h1000") / "store"
    arrays = head_1000_arrays()
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


# SHE (995 head classes without a train row) and every scorer that needs an extra the store
# does not carry (confidence branch, G-ODIN h/g, second head, MC-Dropout / ODIN-perturbed
# logits, feature maps)
EXPECTED_SKIPPED = {"she", "confbranch", "godin", "mcd", "mcdropout", "odin_perturbed",
                    "ip_ts_mlv", "rankfeat",
                    # the views written by `extract --feature-layers` / `--adascale-o`
                    "mds_ensemble", "gram", "featurenorm", "adascale_a", "adascale_l"}


def test_eval_all_json_exits_0_with_every_scorer_scored_or_skipped(head_store, capsys):
    """Done-when criterion of issue 21 (item 1: SHE used to stop the whole run)."""
    code, out, err = run(capsys, "eval", head_store.path, "--all", "--json")
    assert code == 0, err
    result = json.loads(out)
    ran, skipped = set(result["methods"]), set(result["skipped"])
    assert ran | skipped == set(REGISTRY) and not ran & skipped
    assert all(isinstance(v, str) and v for v in result["skipped"].values())
    assert "no labelled row in 'id/train' (995 classes have none)" in result["skipped"]["she"]
    assert skipped == EXPECTED_SKIPPED
    assert "featstore extract --feature-maps" in result["skipped"]["rankfeat"]
    # the numbers of a scorer that ran: MSP's AUROC against sklearn
    st = head_store
    msp = get_scorer("msp").fit(st)
    s_id, s_ood = msp.score(st.split("id/test")), msp.score(st.split("ood/far/noise"))
    ref = 100 * roc_auc_score(np.r_[np.ones(s_id.size), np.zeros(s_ood.size)], np.r_[s_id, s_ood])
    assert result["methods"]["msp"]["splits"]["ood/far/noise"]["auroc"] == pytest.approx(ref)


def test_plain_eval_and_tune_and_report_skip_she(head_store, capsys, tmp_path):
    code, out, err = run(capsys, "eval", head_store.path)  # cached scores of the test above
    assert code == 0, err
    assert f"skipped: {len(EXPECTED_SKIPPED)} scorers could not run on this store" in out
    assert "she" in out.split("skipped:")[1]
    tuned = sweep_all(head_store, ["msp", "she", "vim"])   # `eval --tune`'s call, no --method
    assert "995 classes have none" in tuned["skipped"]["she"] and "msp" in tuned["methods"]
    code, out, err = run(capsys, "report", head_store.path, "--out", tmp_path / "r.html",
                         "--method", "msp", "--method", "nnguide")
    assert code == 0, err
    code, out, err = run(capsys, "report", head_store.path, "--out", tmp_path / "all.html")
    assert code == 0, err
    html = (tmp_path / "all.html").read_text()
    md = (tmp_path / "all.md").read_text()
    skipped_table = html.split('<table id="skipped">')[1].split("</table>")[0]
    assert skipped_table.count("<tr>") == 1 + len(EXPECTED_SKIPPED)
    assert "995 classes have none" in skipped_table
    assert f"## Skipped: {len(EXPECTED_SKIPPED)} scorers could not run on this store" in md
    assert "| she | scorer &#x27;she&#x27;" not in md and "| she | scorer 'she'" in md
    adjusted = html.split('<table id="adjusted">')[1].split("</table>")[0]
    assert "nnguide" in adjusted and "K=100" in adjusted and "K=1" in adjusted
    assert "## Defaults adjusted to this store" in md


def test_named_scorer_that_cannot_run_is_an_error(head_store, capsys, tmp_path):
    """`eval --method she` and `report --method msp --method she` stop with SHE's reason
    (exit 1) instead of dropping it (item 4: report used to exit 0 without it)."""
    for args in (["eval", head_store.path, "--method", "msp", "--method", "she"],
                 ["eval", head_store.path, "--tune", "--method", "she"],
                 ["report", head_store.path, "--out", tmp_path / "r.html", "--method", "msp",
                  "--method", "she"]):
        code, out, err = run(capsys, *args)
        assert code == 1 and "scorer 'she': class 5 has no labelled row" in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()
    code, _, err = run(capsys, "eval", head_store.path, "--method", "rankfeat")
    assert code == 1 and "needs 'extra:feature_maps'" in err


def test_report_param(head_store, capsys, tmp_path):
    """Item 4: `report` takes --param like eval; the setting shows in the report's settings
    table (since #35 the leaderboard holds the metrics only; settings and timings have their
    own table, id "settings")."""
    code, _, err = run(capsys, "report", head_store.path, "--out", tmp_path / "r.html",
                       "--method", "knn", "--param", "knn.K=3")
    assert code == 0, err
    table = (tmp_path / "r.html").read_text().split('<table id="settings">')[1]
    row = table.split("</table>")[0].split('<td class="text">knn</td>')[1].split("</tr>")[0]
    assert "K=3," in row
    code, _, err = run(capsys, "report", head_store.path, "--out", tmp_path / "r.html",
                       "--param", "knn.Q=3")
    assert code == 2 and "unknown parameter 'Q'" in err


def test_defaults_are_clamped_by_one_rule(head_store):
    """Item 3: vim/residual's default dim 75 >= 60 train rows -> 59; nnguide K=100 over a
    1-row bank -> 1. The clamped scores equal the scorer run with that value directly; the same
    clamp appears in eval, sweep and report (the same `scorers.adapt` call)."""
    st = head_store
    res = evaluate(st, ["vim", "residual", "nnguide", "knn"], use_cache=False)
    for name, param, default, used in (("vim", "dim", 75, 59), ("residual", "dim", 75, 59),
                                       ("nnguide", "K", 100, 1)):
        r = res["methods"][name]
        assert r["params"][param] == used
        assert [(a["setting"], a["used"]) for a in r["adjusted"]] == [({param: default},
                                                                        {param: used})]
        direct = get_scorer(name, **{param: used}).fit(st)
        ref = direct.score(st.split("id/test"))
        s_ood = direct.score(st.split("ood/far/noise"))
        auroc = 100 * roc_auc_score(np.r_[np.ones(ref.size), np.zeros(s_ood.size)],
                                    np.r_[ref, s_ood])
        assert r["splits"]["ood/far/noise"]["auroc"] == pytest.approx(auroc)
    assert res["methods"]["knn"]["adjusted"] == []        # K = 50 <= 60: untouched
    assert "1 <= dim < min(D, N) = 60" in res["methods"]["vim"]["adjusted"][0]["reason"]
    sw = sweep(st, "nnguide")
    assert sw["chosen"]["params"]["K"] == 1 and sw["adjusted"][0]["used"] == {"K": 1, "alpha": 0.01}
    tuned = sweep_all(st, ["vim"])   # ViM's dims scaled to D = 150 (x 150 / 2048), the last
    settings = plan_settings(st, "vim")[1]    # (1000 -> 73) clamped to 59
    assert [s["dim"] for s in settings] == [3, 9, 19, 38, 59]
    assert tuned["methods"]["vim"]["chosen"] == sweep(st, "vim")["chosen"]["setting"]


def test_score_command_follows_the_same_rule(head_store, capsys):
    code, out, err = run(capsys, "score", head_store.path, "--method", "vim", "--split",
                         "id/test", "--json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["params"] == {} and doc["params_used"]["dim"] == 59
    assert doc["adjusted"][0]["used"] == {"dim": 59}
    ref = get_scorer("vim", dim=59).fit(head_store).score(head_store.split("id/test"))
    assert doc["splits"]["id/test"]["mean"] == pytest.approx(float(ref.mean()), rel=1e-12)


def test_a_value_the_user_gave_is_never_clamped(head_store, capsys):
    with pytest.raises(UsageError, match=r"dim=75 is not below the 60 rows"):
        evaluate(head_store, ["vim"], {"vim": {"dim": 75}}, use_cache=False, strict=True)
    params, adjusted = fit_defaults(get_scorer("knn", K=50), {"K": 50}, head_store)
    assert params["K"] == 50 and adjusted == []
    code, _, err = run(capsys, "eval", head_store.path, "--method", "nnguide", "--param",
                       "nnguide.K=100")
    assert code == 2 and "K=100 is larger than the train bank (1 rows" in err
    # skipped (not an error) when every scorer is asked for and the user's value cannot fit
    res = evaluate(head_store, ["msp", "vim"], {"vim": {"dim": 75}}, use_cache=False)
    assert "dim=75 is not below" in res["skipped"]["vim"] and "msp" in res["methods"]


def test_skipping_never_hides_a_bug(head_store, monkeypatch):
    """Only the library's own errors become skips: a RuntimeError inside a scorer propagates."""
    def broken(self, store):
        raise RuntimeError("a bug")

    monkeypatch.setattr(REGISTRY["energy"], "_fit", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        evaluate(head_store, ["msp", "energy"], use_cache=False)


def test_no_scorer_ran_is_an_error_listing_every_reason(head_store):
    with pytest.raises(FeatstoreError, match=r"no scorer could run on store .*rankfeat: .*"
                                             r"feature_maps.*she: .*no labelled row"):
        evaluate(head_store, ["rankfeat", "she"], use_cache=False)
