"""`featstore run` over existing stores and existing models
(featstore/workflows/experiments/existing.py).

References: each run's AUROC recomputed with sklearn's roc_auc_score on the store's logits
(MSP = max softmax, transcribed here; the scorer's log form ranks alike); mean ± std by NumPy
(population std, ddof = 0); no training happens (trainer.train replaced by a function that
fails the test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import InputError
from tests.helpers.cli import run_cli as run


def _msp(logits) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).max(1)


def _store(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    c, d = 4, 6
    w, b = rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32)
    splits = {}
    for name, n, shift in (("id/train", 40, 2.0), ("id/val", 30, 2.0), ("id/test", 30, 2.0),
                           ("ood/far/x", 30, 0.0)):
        labels = np.arange(n) % c
        logits = rng.normal(size=(n, c)) + shift * np.eye(c)[labels] * rng.uniform(0.5, 1.5)
        entry = {"features": rng.normal(size=(n, d)).astype(np.float32),
                 "logits": logits.astype(np.float32)}
        if name.startswith("id"):
            entry["labels"] = labels
        splits[name] = entry
    Store.from_arrays(path, head=(w, b), splits=splits).close()
    return path


def _no_training(monkeypatch):
    import featstore.training.trainer as trainer

    def fail(*_a, **_k):
        raise AssertionError("an experiment over existing stores / models trained a model")
    monkeypatch.setattr(trainer, "train", fail)


def _auroc_msp(store_path) -> float:
    with Store.open(store_path) as st:
        pos = _msp(st.split("id/test").logits)
        neg = _msp(st.split("ood/far/x").logits)
    return 100.0 * roc_auc_score(np.r_[np.ones(pos.size), np.zeros(neg.size)], np.r_[pos, neg])


def test_rows_over_existing_stores_aggregate_mean_std(tmp_path, monkeypatch, capsys):
    """Three stores (one per seed, no model) -> MSP and Energy rows; the aggregate's AUROC
    mean ± std is NumPy's over the three sklearn AUROCs; nothing is trained."""
    _no_training(monkeypatch)
    paths = [_store(tmp_path / f"s{i}", seed=i) for i in range(3)]
    exp = tmp_path / "exp.toml"
    exp.write_text('name = "mine"\n[data]\nstores = ["s0", "s1", "s2"]\n'
                   '[[method]]\nname = "MSP"\nscorer = "msp"\n'
                   '[[method]]\nname = "Energy"\nscorer = "energy"\n'
                   'params = { temperature = 1.0 }\n')
    code, text, err = run(capsys, "run", exp, "--out", tmp_path / "out", "--json")
    assert code == 0, err
    import json

    result = json.loads(text)
    want = [_auroc_msp(p) for p in paths]
    got = result["aggregate"]["stores"]["MSP"]
    assert got["n"] == 3 and got["seeds"] == [0, 1, 2]
    assert got["groups"]["far"]["auroc"]["mean"] == pytest.approx(np.mean(want), abs=1e-9)
    assert got["groups"]["far"]["auroc"]["std"] == pytest.approx(np.std(want), abs=1e-9)
    runs = [r for r in result["runs"] if r["method"] == "MSP"]
    assert [r["store"] for r in runs] == [str(p) for p in paths]
    assert all(r["train_s"] == 0.0 and r["extract_s"] == 0.0 for r in runs)
    assert result["aggregate"]["stores"]["Energy"]["n"] == 3


def test_rows_over_an_existing_model_and_checkpoints(tmp_path, user_spec, monkeypatch):
    """model = "tests.helpers.tiny_models:tiny_cnn" with two checkpoints (two seeds): each is
    extracted over the spec, never trained; each run's AUROC equals sklearn's on its store's
    logits, and the two runs differ (different weights)."""
    from featstore.workflows.experiments import load_experiment, run_experiment
    from tests.helpers.tiny_models import TinyCNN

    _no_training(monkeypatch)
    for i in range(2):
        model = TinyCNN()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * i * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
        torch.save(model.state_dict(), tmp_path / f"seed{i}.pt")
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text('model = "tests.helpers.tiny_models:tiny_cnn"\n'
                        'checkpoint = ["seed0.pt", "seed1.pt"]\n'
                        'device = "cpu"\n[data]\nspec = "bench.toml"\n'
                        '[[method]]\nname = "MSP"\nscorer = "msp"\n')
    exp = load_experiment(exp_file)
    result = run_experiment(exp, tmp_path / "out")
    runs = result["runs"]
    assert [r["status"] for r in runs] == ["ok", "ok"]
    aurocs = []
    for r in runs:
        with Store.open(r["store"]) as st:
            pos, neg = _msp(st.split("id/test").logits), _msp(st.split("ood/far/brick").logits)
        want = 100.0 * roc_auc_score(np.r_[np.ones(pos.size), np.zeros(neg.size)],
                                     np.r_[pos, neg])
        assert r["groups"]["far"]["auroc"] == pytest.approx(want, abs=1e-9)
        aurocs.append(want)
    assert aurocs[0] != aurocs[1]
    agg = result["aggregate"]["spec"]["MSP"]["groups"]["far"]["auroc"]
    assert agg["mean"] == pytest.approx(np.mean(aurocs)) and agg["n"] == 2


@pytest.mark.parametrize(("body", "message"), [
    ('[data]\nstores = ["nowhere"]\n', r"stores: '.*nowhere' is not a featstore store"),
    ('model = "tests.helpers.tiny_models:tiny_cnn"\ncheckpoint = "missing.pt"\n[data]\n'
     'spec = "b.toml"\n',
     r"checkpoint '.*missing.pt': file not found"),
    ('model = "no_such_module_xyz:build"\n[data]\nspec = "b.toml"\n',
     r"module 'no_such_module_xyz' cannot be found"),
    ('model = "resnet18"\n[data]\nspec = "b.toml"\n', r"without checkpoint would evaluate"),
    ('[data]\nstores = ["s0"]\n[train]\nepochs = 1\n', r"'train' does not apply"),
    ('[data]\nstores = ["s0"]\nseeds = [0, 1]\n', r"one seed per store \(1\)"),
])
def test_bad_existing_experiment_files_fail_before_work(tmp_path, body, message):
    """Each bad path / key is a one-line InputError naming the file, raised at parse time."""
    from featstore.workflows.experiments import load_experiment

    _store(tmp_path / "s0", seed=0)
    (tmp_path / "b.toml").write_text("")
    text = body.replace("seeds = [0, 1]\n", "")
    if "seeds = [0, 1]" in body:
        text = "seeds = [0, 1]\n" + text
    f = tmp_path / "exp.toml"
    f.write_text(text + '[[method]]\nscorer = "msp"\n')
    with pytest.raises(InputError, match=message):
        load_experiment(f)


def test_rows_that_train_are_refused_over_existing_stores(tmp_path):
    from featstore.workflows.experiments import load_experiment

    _store(tmp_path / "s0", seed=0)
    f = tmp_path / "exp.toml"
    f.write_text('[data]\nstores = ["s0"]\n[[method]]\nname = "CB"\ntrain = "confbranch"\n'
                 'scorer = "confbranch"\n')
    with pytest.raises(InputError, match="row 'CB': train = 'confbranch' needs training"):
        load_experiment(f)


def test_ten_method_preset_scores_mcd_by_the_papers_eq14():
    """The remote-sensing preset's MCD row uses eq. 14 (d = H(p1) - H(p2), the scorer's
    "entropy" variant), not the scorer's L1 default; reference: the entropies by hand."""
    from featstore.workflows.experiments.presets import ten_method_rows
    from scorers.methods.mcd import mcd_scores

    row = {r.name: r for r in ten_method_rows()}["MCD"]
    assert row.params == {"variant": "entropy"} and row.scorer == "mcd"
    l1, l2 = np.array([[2.0, 0.0, 0.0]]), np.array([[0.0, 0.0, 0.0]])
    p1 = np.exp(l1) / np.exp(l1).sum()
    h1, h2 = -(p1 * np.log(p1)).sum(), np.log(3.0)
    assert mcd_scores(l1, l2, row.params["variant"])[0] == pytest.approx(-(h1 - h2), abs=1e-12)


def test_vim_row_on_rank_deficient_features_is_clamped_not_skipped(tmp_path, monkeypatch,
                                                                   capsys):
    """An existing store whose D = 63 features have rank 20: the ViM row (tuned on val over
    its default dims, scaled to D = 63: [1, 4, 8, 16, 31]) runs with 31 clamped to 19 =
    rank - 1 instead of being skipped, the run says so (a warning line naming dim=1000 ->
    dim=19 and the rank, "adjusted" in the run's JSON), and its AUROC is that of `featstore
    sweep`'s choice (the same rule)."""
    import json

    from scorers.sweep import sweep
    from tests.helpers.stores import rank_deficient_store

    _no_training(monkeypatch)
    rank_deficient_store(tmp_path / "s0", 20).close()
    exp = tmp_path / "exp.toml"
    exp.write_text('[data]\nstores = ["s0"]\n[[method]]\nname = "ViM"\nscorer = "vim"\n')
    code, text, err = run(capsys, "run", exp, "--out", tmp_path / "out", "--json")
    assert code == 0, err
    (vim,) = [r for r in json.loads(text)["runs"] if r["method"] == "ViM"]
    assert vim["status"] == "ok"
    assert [a["used"]["dim"] for a in vim["adjusted"]] == [1, 4, 8, 16, 19]
    assert "dim=1000 -> dim=19" in err + text and "rank(S) - 1 = 19" in err + text
    with Store.open(tmp_path / "s0") as st:
        res = sweep(st, "vim")
    assert vim["chosen"] == res["chosen"]["setting"]
    assert vim["splits"]["ood/near/t"]["auroc"] == pytest.approx(
        res["test"]["splits"]["ood/near/t"]["auroc"], abs=1e-9)


def test_ten_method_preset_tunes_vim_over_five_dims_on_val_auroc(tmp_path):
    """The ten-method preset's ViM row is tuned on val by AUROC over ViM's five default dims,
    on D = 63 (rank 60) scaled by 63 / 2048 to [1, 4, 8, 16, 31] (by hand: round(42 * 63 /
    2048) = 1, ...); the chosen dim is the argmax of the val AUROC (id/val vs ood/near/v)
    computed independently: the plain NumPy ViM (`references.ref_vim_parts`) and
    scikit-learn's roc_auc_score (the best dim wins by > 0.5 points, above float32 noise)."""
    from featstore.workflows.experiments.presets import ten_method_rows
    from featstore.workflows.experiments.runner import score_row
    from tests.helpers import references as refs
    from tests.helpers.stores import rank_deficient_store

    (row,) = [r for r in ten_method_rows() if r.name == "ViM"]
    assert row.grid is None and row.params == {}   # the scorer's default grid, tuned
    st = rank_deficient_store(tmp_path / "s", 60)
    dims = [1, 4, 8, 16, 31]
    val = []
    for dim in dims:
        u, ns, alpha = refs.ref_vim_parts(st, dim)

        def vim(split, u=u, ns=ns, alpha=alpha):
            r = np.linalg.norm((refs.feats(st, split) - u) @ ns, axis=1)
            return refs.energy(refs.logits(st, split)) - alpha * r
        a, b = vim("id/val"), vim("ood/near/v")
        val.append(100 * roc_auc_score(np.r_[np.ones(a.size), np.zeros(b.size)], np.r_[a, b]))
    best = int(np.argmax(val))
    assert sorted(val)[-1] - sorted(val)[-2] > 0.5
    got = score_row(st, row, "val", "auroc")
    assert got["tuned"] and got["chosen"] == {"dim": dims[best]}
    assert got["val"]["auroc"] == pytest.approx(val[best], abs=0.05)
    assert [a["used"] for a in got["adjusted"]] == [{"dim": d} for d in dims]
