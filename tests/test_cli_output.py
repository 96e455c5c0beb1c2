"""The CLI's output modes (issue 9), run in-process through `cli.app.main`:

- `--json`: stdout is exactly one JSON document holding the command's result (the numbers
  equal the library's computed directly: scorers.metrics on the scorer's own scores, the
  written files' contents) and nothing else;
- `--quiet`: a successful command prints nothing at all, on stdout or stderr;
- `--json` / `--quiet` also work before the command (`featstore --json info STORE`);
- shell completion: `featstore --show-completion bash` prints the bash script and
  `--install-completion bash` installs it.

Heavy pipelines (the demo's training, the mini-Gbench extraction) are replaced by small stores
through monkeypatch; what the command does with their result (evaluation, report, JSON) is
real."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from featstore import Store
from scorers import get_scorer
from scorers.metrics import ood_metrics
from tests.helpers.cli import run_cli as run
from tests.helpers.demo import DEMO_TEST_SCALE
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))


def run_json(capsys, *args) -> dict:
    """Run with --json: exit 0 and stdout exactly one JSON document."""
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    doc = json.loads(out)  # raises on anything but one document
    assert out.strip().startswith(("{", "[")) and out.endswith("\n")
    return doc


def run_quiet(capsys, *args) -> None:
    """Run with --quiet: exit 0 and nothing at all on stdout or stderr."""
    code, out, err = run(capsys, *args, "--quiet")
    assert code == 0, err
    assert out == "" and err == "", (out, err)


def small_store(path: Path, **extra_splits) -> Store:
    arrays = structured_arrays(**SMALL)
    arrays["splits"].update(extra_splits)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"], overwrite=True)
    return Store.open(path)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return small_store(tmp_path_factory.mktemp("cli_out") / "store")


def msp_metrics(st: Store, ood: str) -> dict:
    s = get_scorer("msp").fit(st)
    return ood_metrics(s.score(st.split("id/test")), s.score(st.split(ood)))


# --------------------------------------------------------------------------- store commands
def test_info(capsys, store):
    doc = run_json(capsys, "info", store.path, "--verify")
    assert doc["path"] == str(store.path) and doc["verify"]["ok"] is True
    assert {s["name"]: s["num_rows"] for s in doc["splits"]}["id/test"] == SMALL["n_test"]
    assert doc["feature_dim"] == SMALL["dim"] and doc["num_classes"] == SMALL["num_classes"]
    run_quiet(capsys, "info", store.path)
    # the global position of the options
    code, out, err = run(capsys, "--json", "info", store.path)
    assert code == 0 and json.loads(out)["path"] == str(store.path) and err == ""
    code, out, err = run(capsys, "--quiet", "info", store.path)
    assert code == 0 and out == "" and err == ""


def test_import(capsys, tmp_path):
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 4)).astype(np.float32), np.zeros(3, np.float32)
    f = rng.normal(size=(12, 4)).astype(np.float32)
    np.savez(tmp_path / "a.npz", **{"head/weight": w, "head/bias": b, "id/test/features": f,
                                    "id/test/labels": np.arange(12) % 3})
    doc = run_json(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s")
    assert doc["path"] == str(tmp_path / "s")
    assert [(s["name"], s["num_rows"]) for s in doc["splits"]] == [("id/test", 12)]
    run_quiet(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s2")
    assert Store.open(tmp_path / "s2").split("id/test").num_rows == 12


SPEC = """
[transform]
resize = 16
crop = 16
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]

[[split]]
name = "id/test"
source = { builtin = "noise", kind = "uniform", count = 6 }

[[split]]
name = "ood/far/noise"
source = { builtin = "noise", kind = "gaussian", count = 4 }
"""


def test_extract(capsys, tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    args = ["extract", "--model", "tests.helpers.tiny_models:tiny_cnn",
            "--spec", tmp_path / "spec.toml", "--device", "cpu", "--workers", "0"]
    doc = run_json(capsys, *args, "--out", tmp_path / "s")
    assert doc["path"] == str(tmp_path / "s") and doc["seconds"] > 0
    assert {s["name"]: s["num_rows"] for s in doc["splits"]} == {"id/test": 6,
                                                                 "ood/far/noise": 4}
    st = Store.open(tmp_path / "s")
    assert [s["dims"] for s in doc["splits"]] == [st.split(n).dims for n in st.splits()]
    run_quiet(capsys, *args, "--out", tmp_path / "s2")
    assert Store.open(tmp_path / "s2").splits() == st.splits()


def test_train(capsys, tmp_path):
    from tests.helpers.images import make_rgb_tree, write_tree_spec
    from tests.helpers.tiny_models import ARCH

    spec = write_tree_spec(tmp_path / "spec.toml", make_rgb_tree(tmp_path / "images", per_class=2))
    args = ["train", "--arch", ARCH, "--spec", spec, "--epochs", "1", "--batch-size", "3",
            "--device", "cpu", "--num-classes", "3"]
    doc = run_json(capsys, *args, "--out", tmp_path / "a.pt")
    assert doc["checkpoint"] == str(tmp_path / "a.pt") and (tmp_path / "a.pt").is_file()
    assert doc["method"] == "ce" and doc["num_classes"] == 3 and doc["epochs"] == 1
    from featstore.training.trainer import load_checkpoint

    loss, acc = load_checkpoint(tmp_path / "a.pt")["history"][-1]
    assert doc["final_loss"] == pytest.approx(loss) and doc["final_train_acc"] == acc
    run_quiet(capsys, *args, "--out", tmp_path / "b.pt")
    assert (tmp_path / "b.pt").is_file()


def test_demo_evaluates_and_reports(demo_json_run):
    """`demo --json` on the real demo (the session's run, conftest `demo_json_run`, which
    trained the model and extracted the store): stdout is one JSON document; the evaluation
    in it is the library's (msp AUROC from scorers.metrics), the report files exist. (`--quiet`
    is checked on the quick commands: a demo run costs ~25 s.)"""
    import featstore.workflows.demo.pipeline as pipeline

    demo_dir, run = demo_json_run
    assert run.code == 0, run.err
    doc = json.loads(run.out)  # raises on anything but one document
    assert run.out.strip().startswith("{") and run.out.endswith("\n")
    assert doc["out"] == str(demo_dir) and doc["scale"] == DEMO_TEST_SCALE
    st = Store.open(demo_dir / "store")
    split = next(n for n in doc["evaluation"]["methods"]["msp"]["splits"] if n.startswith("ood/"))
    msp = doc["evaluation"]["methods"]["msp"]["splits"][split]
    assert msp["auroc"] == pytest.approx(msp_metrics(st, split)["auroc"])
    assert doc["id_test_accuracy"] == pytest.approx(pipeline.id_test_accuracy(st))
    assert Path(doc["report"]["html"]).is_file() and Path(doc["report"]["markdown"]).is_file()
    assert doc["store"]["path"] == str(st.path)


# --------------------------------------------------------------------------- scoring
def test_score(capsys, store):
    doc = run_json(capsys, "score", store.path, "--method", "knn", "--param", "K=3",
                   "--split", "id/test", "--split", "ood/far/faint", "--no-cache")
    s = get_scorer("knn", K=3).fit(store)
    for name in ("id/test", "ood/far/faint"):
        ref = s.score(store.split(name))
        got = doc["splits"][name]
        assert got["n"] == ref.size and got["mean"] == pytest.approx(ref.mean())
        assert got["min"] == pytest.approx(ref.min()) and got["max"] == pytest.approx(ref.max())
    assert doc["method"] == "knn" and doc["params"] == {"K": 3}
    run_quiet(capsys, "score", store.path, "--method", "knn", "--param", "K=3")


def test_eval_auroc_equals_the_metrics(capsys, store, tmp_path):
    doc = run_json(capsys, "eval", store.path, "--method", "msp", "--method", "energy",
                   "--out", tmp_path / "r.json", "--no-cache")
    assert set(doc["methods"]) == {"msp", "energy"}
    for ood in ("ood/near/blend", "ood/far/faint"):
        ref = msp_metrics(store, ood)
        got = doc["methods"]["msp"]["splits"][ood]
        for metric in ("auroc", "fpr95", "aupr_in", "aupr_out"):
            assert got[metric] == pytest.approx(ref[metric]), metric
    assert doc["ood_splits"] == ["ood/near/blend", "ood/far/faint"]  # val splits never enter
    assert json.loads((tmp_path / "r.json").read_text())["methods"]["msp"]["splits"] == \
        doc["methods"]["msp"]["splits"]
    run_quiet(capsys, "eval", store.path, "--method", "msp")


def test_eval_tune(capsys, store):
    doc = run_json(capsys, "eval", store.path, "--tune", "--method", "knn")
    assert doc["tuned"] is True and doc["select_by"] == "auroc"
    assert set(doc["methods"]["knn"]["chosen"]) == {"K"}
    run_quiet(capsys, "eval", store.path, "--tune", "--method", "knn")


def test_sweep(capsys, store):
    doc = run_json(capsys, "sweep", store.path, "--method", "knn", "--grid", "K=1,3,5",
                   "--select-by", "fpr95")
    assert [s["setting"] for s in doc["settings"]] == [{"K": 1}, {"K": 3}, {"K": 5}]
    chosen = doc["chosen"]["index"]
    vals = [s["val"]["mean"]["fpr95"] for s in doc["settings"]]
    assert vals[chosen] == min(vals)
    run_quiet(capsys, "sweep", store.path, "--method", "knn", "--grid", "K=1,3")


def test_report(capsys, store, tmp_path):
    doc = run_json(capsys, "report", store.path, "--method", "msp", "--out", tmp_path / "r.html")
    assert doc == {"source": str(store.path), "html": str(tmp_path / "r.html"),
                   "markdown": str(tmp_path / "r.md")}
    assert "msp" in (tmp_path / "r.html").read_text()
    run_quiet(capsys, "report", store.path, "--method", "msp", "--out", tmp_path / "q.html")
    assert (tmp_path / "q.html").is_file()


# --------------------------------------------------------------------------- gscore
def test_gscore_fit_predict_evaluate(capsys, store, tmp_path):
    model = tmp_path / "g.json"
    doc = run_json(capsys, "gscore", "fit", store.path, "--method", "msp", "--target", "auroc",
                   "--out", model, "--sets-per-split", "3")
    assert doc["out"] == str(model) and doc["model"] == json.loads(model.read_text())
    run_quiet(capsys, "gscore", "fit", store.path, "--out", tmp_path / "q.json",
              "--sets-per-split", "3")
    doc = run_json(capsys, "gscore", "predict", model, store.path, "--split", "id/test",
                   "--split", "ood/far/faint", "--truth")
    assert doc["n"] == SMALL["n_test"] + SMALL["n_ood"] and doc["target"] == "auroc"
    assert doc["truth"] == pytest.approx(msp_metrics(store, "ood/far/faint")["auroc"])
    assert isinstance(doc["predicted"], float)
    run_quiet(capsys, "gscore", "predict", model, store.path, "--split", "id/test")
    doc = run_json(capsys, "gscore", "evaluate", store.path, "--repeats", "1",
                   "--sets-per-split", "2", "--model", "kmeans-l2", "--no-baselines")
    assert doc["config"]["methods"] == ["msp"] and "kmeans-l2" in doc["models"]
    assert set(doc["table"]["msp"]) == {"fpr95", "auroc"}
    run_quiet(capsys, "gscore", "evaluate", store.path, "--repeats", "1", "--sets-per-split",
              "2", "--model", "kmeans-l2", "--no-baselines")


def test_gscore_evaluate_step_progress(store):
    from scorers.gscore import evaluate_gscore

    steps: list[tuple[int, int]] = []
    evaluate_gscore([store], ["msp", "energy"], ["kmeans-l2"], ["auroc"], repeats=2,
                    sets_per_split=2, baselines=False, sizes=[10],
                    step_progress=lambda d, t: steps.append((d, t)))
    # the bar covers the real work: scoring 2 detectors on 1 store, then 2 repeats x 2
    # settings x 2 detectors of the protocol
    assert steps == [(i, 10) for i in range(11)]


def test_protocol_tiers_and_wordnet(capsys, tmp_path):
    (tmp_path / "t.txt").write_text("beach 0\nsky 3\n")
    doc = run_json(capsys, "protocol", "tiers", "--tiers", tmp_path / "t.txt")
    assert doc["assignments"]["T1"] == {"beach": "id", "sky": "ood"}
    run_quiet(capsys, "protocol", "tiers", "--tiers", tmp_path / "t.txt")
    (tmp_path / "c.txt").write_text("dog.n.01\n")
    (tmp_path / "d.txt").write_text("dog.n.01\ncat.n.01\n")
    args = ["protocol", "wordnet", "--id-classes", tmp_path / "c.txt", "--candidates",
            tmp_path / "d.txt", "--threshold", "0.5"]
    doc = run_json(capsys, *args)
    from featstore.workflows.protocols import wordnet as wnp

    wn = wnp.load_wordnet()
    ref = wnp.score_candidates(wnp.resolve_classes(["dog.n.01", "cat.n.01"], None, False, wn),
                               wnp.resolve_classes(["dog.n.01"], None, False, wn))
    assert {s["name"]: s["sim"] for s in doc["scores"]} == pytest.approx(
        {r.name: r.sim for r in ref})
    assert doc["assignments"]["T50"] == wnp.assign_threshold(ref, 0.5, "distance")
    run_quiet(capsys, *args)


def test_protocol_shift_grid_and_degrees(capsys, tmp_path, store):
    rng = np.random.default_rng(1)
    cells = {f"ood/shift/cov{c}_sem{s}/syn": {"features": np.abs(rng.normal(
        c + s, 1.0, size=(12, SMALL["dim"]))).astype(np.float32)} for c in (0, 1) for s in (0, 1)}
    st = small_store(tmp_path / "shift", **cells)
    doc = run_json(capsys, "protocol", "shift-grid", st.path, "--method", "msp", "--levels", "2",
                   "--min-count", "5")
    assert doc["metric"] == "auroc" and doc["results"][0]["method"] == "msp"
    grid = doc["results"][0]["values"]["auroc"]
    assert grid[1][0] == pytest.approx(msp_metrics(st, "ood/shift/cov1_sem0/syn")["auroc"])
    run_quiet(capsys, "protocol", "shift-grid", st.path, "--method", "msp", "--min-count", "5")
    args = ["protocol", "shift-degrees", store.path, "--sem-dims", "0:4", "--cov-dims", "4:8"]
    doc = run_json(capsys, *args, "--out", tmp_path / "d.npz")
    with np.load(tmp_path / "d.npz") as z:
        deg = z["ood__far__faint"]
    assert doc["out"] == str(tmp_path / "d.npz")
    assert doc["splits"]["ood/far/faint"]["rows"] == len(deg)
    assert doc["splits"]["ood/far/faint"]["semantic_mean"] == pytest.approx(deg[:, 0].mean())
    run_quiet(capsys, *args, "--out", tmp_path / "e.npz")


def test_protocol_laid_fit(capsys, tmp_path):
    rng = np.random.default_rng(0)
    for name in ("st", "ss", "cs"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(16, 4)).astype(np.float32))
    args = ["protocol", "laid-fit", "--standard", tmp_path / "st.npy", "--semantic-shift",
            tmp_path / "ss.npy", "--covariate-shift", tmp_path / "cs.npy", "--steps", "5"]
    doc = run_json(capsys, *args, "--out", tmp_path / "w.npy")
    w = np.load(tmp_path / "w.npy")
    assert doc["shape"] == [4, 4] and doc["out"] == str(tmp_path / "w.npy")
    assert doc["orthogonality_error"] == pytest.approx(float(np.linalg.norm(w.T @ w - np.eye(4))))
    run_quiet(capsys, *args, "--out", tmp_path / "v.npy")


def test_protocol_lists2spec(capsys, tmp_path):
    lists = tmp_path / "lists" / "cifar10"
    lists.mkdir(parents=True)
    (lists / "train_cifar10.txt").write_text("a/0.png 0\nb/0.png 1\n")
    (lists / "test_cifar10.txt").write_text("a/1.png 0\n")
    doc = run_json(capsys, "protocol", "lists2spec", tmp_path / "lists", "--root", tmp_path,
                   "--out", tmp_path / "s.toml")
    assert {s["name"]: s["rows"] for s in doc["splits"]} == {"id/train": 2, "id/test": 1}
    assert (tmp_path / "s.toml").is_file()
    run_quiet(capsys, "protocol", "lists2spec", tmp_path / "lists", "--root", tmp_path,
              "--out", tmp_path / "t.toml")


# --------------------------------------------------------------------------- every command
def _commands() -> list[tuple[str, ...]]:
    """Every (sub)command of the app, from typer's own click tree."""
    import typer.main

    from cli.app import app

    found = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, (*path, name))
        else:
            found.append(path)

    walk(typer.main.get_command(app), ())
    return found


def test_every_command_has_json_and_quiet():
    commands = _commands()
    assert len(commands) >= 20 and ("protocol", "lists2spec") in commands
    import typer.main

    from cli.app import app

    root = typer.main.get_command(app)
    for path in commands:
        cmd = root
        for name in path:
            cmd = cmd.commands[name]
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"--json", "--quiet"} <= opts, path


def test_a_library_print_does_not_reach_stdout_under_json(capsys, store, monkeypatch):
    import scorers.score_run

    real = scorers.score_run.score_with_defaults

    def chatty(*args, **kwargs):
        print("chatter from a library")
        return real(*args, **kwargs)

    monkeypatch.setattr(scorers.score_run, "score_with_defaults", chatty)
    code, out, err = run(capsys, "score", store.path, "--method", "msp", "--json")
    assert code == 0 and json.loads(out)["method"] == "msp"
    assert "chatter" in err
    code, out, err = run(capsys, "score", store.path, "--method", "msp", "--quiet")
    assert code == 0 and out == "" and err == ""


# --------------------------------------------------------------------------- completion
def test_completion_console_script(tmp_path):
    """Shell completion through the installed console script, started from bash as a user
    would: typer detects the shell from the parent process (shellingham), so each command runs
    under `bash -c` (under `make test` the parent is sh, which typer does not support; the shell
    name after --show-completion is not an option value in typer 0.29 and is not passed)."""
    exe = str(Path(sys.executable).with_name("featstore"))
    env = {**os.environ, "SHELL": "/bin/bash", "HOME": str(tmp_path)}

    def from_bash(command: str, **extra_env: str) -> subprocess.CompletedProcess:
        # `; exit $?` keeps bash alive as the parent (a lone command would be exec'd by bash)
        return subprocess.run(["bash", "-c", f"{shlex.quote(exe)} {command}; exit $?"],
                              capture_output=True, text=True, env={**env, **extra_env},
                              timeout=120)

    proc = from_bash("--show-completion")
    assert proc.returncode == 0, proc.stderr
    assert "complete -o default -F _featstore_completion featstore" in proc.stdout
    assert "_featstore_completion" in proc.stdout and "complete " in proc.stdout
    # the script's protocol: completing `featstore gsc` offers `gscore`
    proc = from_bash("", _FEATSTORE_COMPLETE="complete_bash", COMP_WORDS="featstore gsc",
                     COMP_CWORD="1")
    assert proc.returncode == 0 and proc.stdout.split() == ["gscore"]
    proc = from_bash("--install-completion")
    assert proc.returncode == 0, proc.stderr
    installed = list(tmp_path.rglob("featstore*"))
    assert installed and "_featstore_completion" in installed[0].read_text()


def test_approximate_knn_recall_is_reported(capsys, tmp_path):
    """`score` and `eval` with an approximate KNN index report recall@K against exact search
    (issue 8): the JSON figure equals the fitted scorer's own measurement (same seed, same
    queries), and the human output prints it."""
    st = small_store(tmp_path / "s")
    want = get_scorer("knn", K=5, index="hnsw").fit(st).diagnostics
    doc = run_json(capsys, "score", st.path, "--method", "knn", "--param", "K=5",
                   "--param", "index=hnsw", "--no-cache")
    assert doc["diagnostics"]["recall_at_k"] == pytest.approx(want["recall_at_k"])
    assert doc["diagnostics"]["recall_k"] == 5 and doc["diagnostics"]["recall_split"] == "id/val"
    code, out, _ = run(capsys, "score", st.path, "--method", "knn", "--param", "K=5",
                       "--param", "index=hnsw", "--no-cache")
    assert code == 0 and f"recall@5 {want['recall_at_k']:.3f}" in out
    doc = run_json(capsys, "eval", st.path, "--method", "knn", "--param", "knn.K=5",
                   "--param", "knn.index=hnsw", "--no-cache")
    assert doc["methods"]["knn"]["diagnostics"]["recall_at_k"] == pytest.approx(
        want["recall_at_k"])
