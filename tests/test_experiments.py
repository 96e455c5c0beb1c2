"""The experiment runner (featstore.workflows.experiments, `featstore run`) on real data and real
models.

References: the aggregate mean ± std is recomputed by hand from the per-run numbers (NumPy
mean and population std, ddof = 0); a run's AUROC is recomputed with sklearn's roc_auc_score
on the stored logits (MSP = max softmax, transcribed here); the resume test counts the
trainings and scorings a rerun does after an interruption."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import InputError
from tests.helpers.cli import run_cli as run

TEN = ["MSP", "ViM", "KNN", "ConfBranch", "LogitNorm", "G-ODIN", "OE", "MCD", "MC-Dropout",
       "TempScaling"]
METRICS = ("auroc", "fpr95", "aupr_in", "aupr_out")


def _toml(value) -> str:
    from featstore.specs.toml import toml_value

    return toml_value(value)


def ten_method_tables() -> str:
    """The ten rows of the remote-sensing preset as [[method]] tables of an experiment file."""
    from featstore.workflows.experiments.presets import ten_method_rows

    text = ""
    for r in ten_method_rows():
        text += (f"\n[[method]]\nname = {_toml(r.name)}\ntrain = {_toml(r.train)}\n"
                 f"scorer = {_toml(r.scorer)}\n")
        for key in ("params", "train_params", "extract"):
            if getattr(r, key):
                text += f"{key} = {_toml(getattr(r, key))}\n"
        if r.grid is not None:
            text += f"grid = {_toml(r.grid)}\n"
    return text


def _msp(logits) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).max(1)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny models: a thread pool costs more than it gives
    yield
    torch.set_num_threads(threads)


def test_remote_sensing_osr_protocol_tiny(tmp_path, capsys):
    """The remote-sensing paper's protocol from one experiment file at a tiny size: all ten
    methods, OSR 7/3 and 5/5 on the demo digits, 2 seeds (1 epoch, a tiny CNN, 8x8 inputs,
    few rows). Structure of results.json; every aggregate = the per-run numbers aggregated by
    hand; MSP's AUROC = sklearn's on the stored logits; the training seed follows the split's."""
    exp = tmp_path / "rs.toml"
    exp.write_text(
        'name = "remote-sensing OSR, tiny"\narch = "tests.helpers.tiny_models:TinyCNN"\n'
        'seeds = [0, 1]\ndevice = "cpu"\n\n[data]\n'
        'osr = { data = "digits", ratios = ["7/3", "5/5"], image_size = 8, '
        'fractions = { train = 0.1, val = 0.05, test = 0.05 } }\n'
        'aux = { builtin = "patches", images = ["camera", "coins"], count = 10, '
        'part = "train" }\n\n[train]\npreset = "remote-sensing"\nepochs = 1\nbatch_size = 32\n'
        '\n[tune]\nrule = "val"\nselect_by = "auroc"\n' + ten_method_tables())
    code, stdout, err = run(capsys, "run", str(exp), "--out", str(tmp_path / "out"), "--json")
    assert code == 0, err
    res = json.loads(stdout)
    assert res == json.loads((tmp_path / "out" / "results.json").read_text()) | {
        "seconds": res["seconds"]}
    assert [r["name"] for r in res["experiment"]["rows"]] == TEN
    assert len(res["runs"]) == 2 * 2 * 10
    assert res["skipped"] == [r for r in res["skipped"] if r["reason"]]
    ok = [r for r in res["runs"] if r["status"] == "ok"]
    assert len(ok) == 40, res["skipped"]
    assert list(res["aggregate"]) == ["7/3", "5/5"]
    for split, methods in res["aggregate"].items():
        assert list(methods) == TEN
        for name, agg in methods.items():
            runs = [r for r in ok if r["split"] == split and r["method"] == name]
            assert agg["n"] == 2 and agg["seeds"] == [0, 1]
            for m in METRICS:
                vals = np.array([r["groups"]["osr"][m] for r in runs])
                assert agg["groups"]["osr"][m]["mean"] == pytest.approx(vals.mean(), abs=1e-12)
                assert agg["groups"]["osr"][m]["std"] == pytest.approx(vals.std(ddof=0),
                                                                       abs=1e-12)
            for key in ("id_acc", "train_s", "extract_s", "score_s"):
                vals = np.array([r[key] for r in runs])
                assert agg[key]["mean"] == pytest.approx(vals.mean(), abs=1e-12)
                assert agg[key]["std"] == pytest.approx(vals.std(ddof=0), abs=1e-12)
            total = np.array([r["train_s"] + r["extract_s"] + r["score_s"] for r in runs])
            assert agg["total_s"]["mean"] == pytest.approx(total.mean())
    for r in ok:
        assert set(METRICS) <= set(r["groups"]["osr"])
        assert r["closed"] and r["open"] and not set(r["closed"]) & set(r["open"])
        if r["method"] == "KNN":   # tuned on ood/osr/open_val: the chosen K is recorded
            assert r["tuned"] and "K" in r["chosen"]
        if r["method"] == "ViM":   # tuned too (the paper's five values), its dim recorded
            assert r["tuned"] and "dim" in r["chosen"]
        if r["method"] == "MSP":
            st = Store.open(r["store"])
            ref = 100 * roc_auc_score(
                np.r_[np.ones(st.split("id/test").num_rows),
                      np.zeros(st.split("ood/osr/open").num_rows)],
                np.r_[_msp(st.split("id/test").logits), _msp(st.split("ood/osr/open").logits)])
            assert r["groups"]["osr"]["auroc"] == pytest.approx(ref, abs=1e-9)
            ckpt = torch.load(Path(r["store"]).parent / "model.pt", weights_only=True)
            assert ckpt["config"]["seed"] == r["seed"]
            assert ckpt["config"]["nesterov"] is False and ckpt["config"]["lr"] == 0.01
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| AUROC | osr |" in md and "none: every run was scored" in md


def test_user_spec_resumes_without_recomputing_finished_runs(tmp_path, user_spec, capsys,
                                                             monkeypatch):
    """An ImageFolder spec, 2 seeds, 3 rows (KNN tuned on val, ConfBranch trained, IPTS
    unscorable: its (T, eps) pair was not extracted). The run is interrupted after its 2nd
    finished run (as a kill between runs); the rerun trains nothing already trained, scores
    only the runs that had not finished, reads back the finished ones unchanged, and its
    results equal an uninterrupted run's. The unscorable runs are listed with the reason in
    the JSON, the Markdown report and the terminal table."""
    from featstore.workflows.experiments import load_experiment, run_experiment, runner

    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(
        'name = "user spec"\narch = "tests.helpers.tiny_models:TinyCNN"\nseeds = [0, 1]\n'
        'device = "cpu"\n'
        '[data]\nspec = "bench.toml"\n[train]\nepochs = 1\nbatch_size = 8\n'
        '[[method]]\nname = "KNN"\nscorer = "knn"\ngrid = { K = [1, 3, 5] }\n'
        '[[method]]\nname = "ConfBranch"\ntrain = "confbranch"\nscorer = "confbranch"\n'
        '[[method]]\nname = "IPTS"\nscorer = "ip_ts_mlv"\n'
        'params = { temperature = 10.0, epsilon = 0.0014 }\n'
        'extract = { odin_grid = "1000:0.0014" }\n')
    exp = load_experiment(exp_file)
    calls = {"train": 0, "score": 0}
    real_score = runner.score_row

    def counting_score(*a, **k):
        calls["score"] += 1
        return real_score(*a, **k)

    import featstore.training.trainer as trainer

    real_train = trainer.train

    def counting_train(*a, **k):
        calls["train"] += 1
        return real_train(*a, **k)

    monkeypatch.setattr(runner, "score_row", counting_score)
    monkeypatch.setattr(trainer, "train", counting_train)
    done: list[dict] = []

    def interrupt(record):
        done.append(record)
        if len(done) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, tmp_path / "out", on_run=interrupt)
    assert calls == {"train": 2, "score": 2}    # seed 0: ce + confbranch; KNN, ConfBranch
    finished = {r["method"]: r for r in done}
    calls.update(train=0, score=0)
    result = run_experiment(exp, tmp_path / "out")
    # seed 0: nothing retrained, IPTS tried (unscorable); seed 1: 2 models, 3 tries
    assert calls == {"train": 2, "score": 1 + 3}
    for name, old in finished.items():
        new = next(r for r in result["runs"] if r["seed"] == 0 and r["method"] == name)
        assert new == old
    skipped = [s for s in result["skipped"]]
    assert [(s["seed"], s["method"]) for s in skipped] == [(0, "IPTS"), (1, "IPTS")]
    assert all("no ODIN-perturbed logits at temperature=10" in s["reason"] for s in skipped)
    assert result["aggregate"]["spec"]["IPTS"]["n"] == 0
    assert "IPTS: ip_ts_mlv: " in (tmp_path / "out" / "results.md").read_text()
    # an uninterrupted run of the same file gives the same numbers
    fresh = run_experiment(load_experiment(exp_file), tmp_path / "fresh")
    for a, b in zip(result["runs"], fresh["runs"], strict=True):
        assert a.get("groups") == b.get("groups") and a.get("chosen") == b.get("chosen")
    # every run record carries its 95% stratified-bootstrap intervals beside the values
    knn = next(r for r in result["runs"] if r["method"] == "KNN")
    for metrics in knn["groups"].values():
        lo, hi = metrics["auroc_ci"]
        assert lo <= metrics["auroc"] <= hi
    assert knn["ci"]["resamples"] == 1000 and len(knn["id_acc_ci"]) == 2
    # the CLI prints the skipped runs with their reasons
    code, stdout, err = run(capsys, "run", str(exp_file), "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert "skipped runs" in stdout and "no ODIN-perturbed logits" in stdout


@pytest.mark.parametrize("body, message", [
    ('seeds = [0]\n[data]\nspec = "x.toml"\n', "spec '"),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "nope"\n',
     "unknown scorer 'nope'"),
    ('[data]\nosr = { data = "digits" }\nfoo = 1\n[[method]]\nscorer = "msp"\n',
     "[data]: unknown key 'foo' (valid: spec, osr, stores, aux, aux_name)"),
    ('[data]\nosr = { data = "digits" }\n[train]\nepoch = 3\n[[method]]\nscorer = "msp"\n',
     "[train]: unknown key 'epoch'"),
    ('[data]\nosr = { data = "digits" }\n[tune]\nrule = "test"\n[[method]]\nscorer = "msp"\n',
     "[tune]: rule 'test'"),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\ntrain = "nope"\n',
     "unknown training method"),
    ('[data]\nosr = { data = "digits" }\n', "expected at least one [[method]] table"),
    ('seeds = [0, 0]\n[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\n',
     "repeat a seed"),
    ('[data]\nosr = { data = "digits", ratios = ["7-3"] }\n[[method]]\nscorer = "msp"\n',
     "--ratios: '7-3'"),
    # fail fast: every scorer setting, extra and outlier split checked before any training
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "knn"\nparams = { k = 5 }\n',
     "[[method]] #1: params: "),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "knn"\ngrid = { k = [1, 5] }\n',
     "grid: scorer 'knn' has no parameter 'k' (valid: "),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "vim"\ngrid = { dim = [4, -1] }\n',
     "grid dim = -1: "),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "rankfeat"\n',
     "scorer 'rankfeat' reads 'feature_maps'; add extract = { feature_maps = ... }"),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "godin"\n',
     "which only a 'godin' model has; set train = 'godin'"),
    ('[data]\nosr = { data = "digits" }\n[[method]]\ntrain = "oe"\nscorer = "msp"\n',
     "row 'oe+msp' trains on auxiliary outliers, but there is none"),
    ('[data]\nosr = { data = "digits" }\n[train]\npreset = "nope"\n[[method]]\nscorer = "msp"\n',
     "[train]: preset 'nope' is not a training preset (valid: "),
])
def test_bad_experiment_files_are_one_line_errors(tmp_path, capsys, body, message):
    f = tmp_path / "e.toml"
    f.write_text(body)
    code, _, err = run(capsys, "run", str(f), "--out", str(tmp_path / "o"))
    assert code in (1, 2) and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "results.json").exists()
    with pytest.raises(InputError if code == 1 else ValueError):
        from featstore.workflows.experiments import load_experiment

        load_experiment(f)


def _fpr95_deterr(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """Brute force over every threshold (positives = ID / correct, score >= t accepted):
    FPR at the highest threshold keeping >= 95% of positives; min 0.5(1 - TPR) + 0.5 FPR with
    the end points."""
    ts = np.unique(np.r_[pos, neg])[::-1]
    tpr = np.array([(pos >= t).mean() for t in ts])
    fpr = np.array([(neg >= t).mean() for t in ts])
    fpr95 = fpr[np.argmax(tpr >= 0.95)]
    det = min(0.5, *(0.5 * (1 - tpr) + 0.5 * fpr))
    return 100 * fpr95, 100 * det


def _ts_1000(z):
    """FACETS' TS: max softmax at T = 1000 (log-space NumPy reference, via scipy)."""
    from scipy.special import log_softmax

    return log_softmax(np.asarray(z, dtype=np.float64) / 1000.0, axis=1).max(1)


def test_facets_table_by_hand(tmp_path, capsys):
    """Two datasets (stores) x (OOD group + misclassification row) x methods; every cell's
    FPR95 / detection error / AUROC recomputed by brute force and sklearn; ip_ts_mlv skipped
    with its reason on the store without perturbed logits; terminal, JSON and Markdown."""
    from featstore.store.extra_keys import odin_name

    rng = np.random.default_rng(4)
    w = rng.normal(size=(3, 6)).astype(np.float32)
    b = np.zeros(3, dtype=np.float32)

    def make(name: str, odin: bool) -> Path:
        splits = {}
        for split, n, shift in (("id/train", 60, 2.0), ("id/val", 30, 2.0),
                                ("id/test", 50, 2.0), ("ood/wordnet/t", 40, 0.3)):
            f = (rng.normal(size=(n, 6)) * shift).astype(np.float32)
            entry = {"features": f, "labels": (np.argmax(f @ w.T, 1) + (rng.random(n) < 0.3)
                                               ) % 3 if split.startswith("id") else None}
            if odin:
                entry["extras"] = {odin_name(1000, 0.0014): (f @ w.T * 1.1).astype(np.float32)}
            splits[split] = {k: v for k, v in entry.items() if v is not None}
        Store.from_arrays(tmp_path / name, head=(w, b), splits=splits)
        return tmp_path / name

    a, c = make("a", True), make("c", False)
    code, stdout, err = run(capsys, "protocol", "facets-table", f"T40={a}", f"T45={c}",
                            "--method", "msp", "--method", "odin", "--method", "mls",
                            "--method", "ip_ts_mlv", "--out", str(tmp_path / "f.md"),
                            "--json")
    assert code == 0, err
    table = json.loads(stdout)
    assert [(r["dataset"], r["kind"]) for r in table["rows"]] == [
        ("T40", "ood"), ("T40", "misclassification"), ("T45", "ood"),
        ("T45", "misclassification")]
    assert "feature" not in table["skipped"].get("T40", {})
    assert "odin_logits" in table["skipped"]["T45"]["ip_ts_mlv"]
    for r in table["rows"]:
        st = Store.open(a if r["dataset"] == "T40" else c)
        idt = st.split("id/test")
        lg, y = np.asarray(idt.logits, dtype=np.float64), np.asarray(idt.labels)
        for m in ("msp", "odin", "mls"):
            score = {"msp": _msp, "odin": _ts_1000,
                     "mls": lambda z: np.asarray(z).max(1)}[m]
            if r["kind"] == "ood":
                pos, neg = score(lg), score(np.asarray(st.split("ood/wordnet/t").logits))
            else:
                ok = lg.argmax(1) == y
                pos, neg = score(lg)[ok], score(lg)[~ok]
            fpr, det = _fpr95_deterr(pos, neg)
            auc = 100 * roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))],
                                      np.r_[pos, neg])
            cell = r["cells"][m]
            assert cell["fpr95"] == pytest.approx(fpr, abs=1e-9)
            assert cell["detection_error"] == pytest.approx(det, abs=1e-9)
            # FACETS' Detection Error at the achieved TPR: 0.5 (1 - TPR(t*)) + 0.5 FPR(t*)
            t_star = np.unique(np.r_[pos, neg])[::-1]
            tpr_star = next((pos >= t).mean() for t in t_star if (pos >= t).mean() >= 0.95)
            assert cell["detection_error_tpr95"] == pytest.approx(
                50 * (1 - tpr_star) + fpr / 2, abs=1e-9)
            assert cell["auroc"] == pytest.approx(auc, abs=1e-9)
        assert (r["cells"]["ip_ts_mlv"] is None) == (r["dataset"] == "T45")
        for key, better in (("auroc", max), ("fpr95", min)):
            vals = {m: v[key] for m, v in r["cells"].items() if v}
            assert r["best"][key] == [m for m in vals if vals[m] == better(vals.values())]
    assert table["labels"] == {"msp": "MSP", "odin": "TS", "mls": "MLV",
                               "ip_ts_mlv": "IP TS MLV"}
    assert table["params"]["odin"] == {"temperature": 1000.0}
    md = (tmp_path / "f.md").read_text()
    assert "FPR@95%TPR ↓ / Detection Error ↓ / AUROC ↑" in md
    assert "| dataset | rows | MSP | TS | MLV | IP TS MLV |" in md
    assert "| T40 | misclassification (id/test) |" in md and "ip_ts_mlv: skipped (" in md
    code, stdout, _ = run(capsys, "protocol", "facets-table", f"T40={a}", "--method", "msp")
    assert code == 0 and "misclassification" in stdout and " / " in stdout


def test_run_spec_keeps_the_user_spec(tmp_path, user_spec):
    """The per-run copy of a user spec keeps its sources (absolute), classes, class_map and
    balance settings: a run never trains or extracts another benchmark than the user's."""
    from featstore.specs.benchmark import load_spec
    from featstore.workflows.experiments.config import Experiment, MethodRow
    from featstore.workflows.experiments.runner import run_spec

    text = user_spec.read_text()
    user_spec.write_text('classes = ["astronaut", "chelsea", "coffee"]\n'
                         'class_map = { coffee = "coffee" }\nbalance = true\nbalance_seed = 3\n'
                         + text)
    exp = Experiment(name="x", arch=None, seeds=[0], rows=[MethodRow("MSP", "ce", "msp")],
                     spec=str(user_spec))
    spec, comment, _ = run_spec(exp, {"seed": 0}, tmp_path, None)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "spec.toml").write_text(spec.to_toml(comment))
    a, b = load_spec(user_spec), load_spec(tmp_path / "run" / "spec.toml")
    assert b == spec == a    # the object handed to training and extraction, and its copy
    assert (b.classes, b.class_map, b.balance, b.balance_seed) == (
        a.classes, a.class_map, True, 3)
    assert [(s.name, s.usage, s.source) for s in b.splits] == [
        (s.name, s.usage, s.source) for s in a.splits]


def test_osr_runs_times_divisions_and_all_skipped_exits_nonzero(tmp_path, capsys):
    """`runs = 2` x 2 division seeds on the digits (1 epoch, tiny CNN): 4 runs per ratio, run r
    of division s trains with seed s + 1000 r (two runs of a division share its classes and
    differ in training), and the aggregate is the mean ± population std (NumPy, ddof 0) over
    all 4. Then a file whose every row is skipped at scoring exits 1 naming the reason, with
    results.json written."""
    body = ('arch = "tests.helpers.tiny_models:TinyCNN"\nseeds = [0, 1]\nruns = 2\n'
            'device = "cpu"\n[data]\n'
            'osr = { data = "digits", ratios = ["7/3"], image_size = 8, '
            'fractions = { train = 0.1, val = 0.05, test = 0.05 } }\n'
            '[train]\npreset = "remote-sensing"\nepochs = 1\nbatch_size = 32\n'
            '[tune]\nrule = "none"\n')
    exp = tmp_path / "runs.toml"
    exp.write_text(body + '[[method]]\nscorer = "msp"\n')
    code, stdout, err = run(capsys, "run", str(exp), "--out", str(tmp_path / "o"), "--json",
                            "--layout", "paper")
    assert code == 0, err
    res = json.loads(stdout)
    got = [(r["seed"], r["run"], r["train_seed"]) for r in res["runs"]]
    assert got == [(0, 0, 0), (0, 1, 1000), (1, 0, 1), (1, 1, 1001)]
    by = {(r["seed"], r["run"]): r for r in res["runs"]}
    assert by[0, 0]["closed"] == by[0, 1]["closed"] and by[1, 0]["closed"] == by[1, 1]["closed"]
    assert by[0, 0]["model_sha256"] != by[0, 1]["model_sha256"]
    agg = res["aggregate"]["7/3"]["msp"]
    assert agg["n"] == 4 and agg["train_seeds"] == [0, 1000, 1, 1001]
    vals = np.array([r["groups"]["osr"]["auroc"] for r in res["runs"]])
    assert agg["groups"]["osr"]["auroc"]["mean"] == pytest.approx(vals.mean(), abs=1e-12)
    assert agg["groups"]["osr"]["auroc"]["std"] == pytest.approx(vals.std(), abs=1e-12)
    cell = f"{vals.mean():.2f} ± {vals.std():.2f}"     # --layout paper: rows digits x ratio
    cell = f"{cell} (!)" if agg["flags"] else f"**{cell}**"   # flagged: never marked
    assert f"| digits | 7/3 | {cell} |" in (tmp_path / "o" / "results.paper.md").read_text()
    recipe = json.loads((tmp_path / "o" / "runs" / "r7-3" / "seed1-run1" / "models" / "ce"
                         / "train.json").read_text())["recipe"]
    assert recipe["train"]["preset"] == "remote-sensing" and recipe["train"]["seed"] == 1001
    assert "2 training runs x 2 class divisions (4 runs)" in (
        tmp_path / "o" / "results.md").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(body.replace("runs = 2\n", "").replace("seeds = [0, 1]", "seeds = [0]")
                   + '[[method]]\nscorer = "ip_ts_mlv"\n'
                   'params = { temperature = 10.0, epsilon = 0.0014 }\n'
                   'extract = { odin_grid = "1000:0.0014" }\n')
    code, _, err = run(capsys, "run", str(bad), "--out", str(tmp_path / "b"))
    assert code == 1 and "every run was skipped (1 of 1; first: ip_ts_mlv: " in err, err
    assert (tmp_path / "b" / "results.json").is_file()
