"""Sanity checks of what a store holds (issue 29, item 3): ID accuracy, chance, and a class
permutation that fits far better (featstore.store.sanity), in `info`, the summary and the
experiment tables. References: hand-counted confusion matrices and a brute force over every
permutation of the classes (itertools), independent of the Hungarian solver."""

from __future__ import annotations

import itertools
import json

import numpy as np

from featstore import Store
from featstore.store.sanity import check_confusion, id_checks
from featstore.workflows.experiments.aggregate import aggregate_runs
from featstore.workflows.experiments.render import markdown_report, table_rows
from scorers.metrics import OOD_METRIC_NAMES
from tests.helpers.cli import run_cli as run


def brute_force_permuted(m: np.ndarray) -> float:
    c = m.shape[0]
    return 100.0 * max(sum(m[i, p[i]] for i in range(c))
                       for p in itertools.permutations(range(c))) / m.sum()


def test_check_confusion_by_hand():
    # labels 0,0,1,1,2,2 predicted as 1,1,2,2,0,0: accuracy 0, a relabelling gives 100
    m = np.array([[0, 2, 0], [0, 0, 2], [2, 0, 0]])
    got = check_confusion(m, ["a", "b", "c"])
    assert got["accuracy"] == 0.0 and got["chance"] == 100.0 / 3 and got["permuted"] == 100.0
    assert "`classes` or `class_map`" in got["warning"] and "label a -> output b" in got["warning"]
    # a good model: no warning
    good = np.array([[9, 1, 0], [0, 8, 2], [1, 0, 9]])
    got = check_confusion(good)
    assert got["accuracy"] == 26 / 30 * 100 and got["warning"] is None
    # near chance, no better permutation (every prediction is class 0)
    flat = np.array([[4, 0, 0], [3, 0, 0], [3, 0, 0]])
    got = check_confusion(flat)
    assert got["accuracy"] == 40.0 and got["chance"] == 40.0 and "near chance" in got["warning"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = rng.integers(0, 6, size=(4, 4))
        assert check_confusion(m)["permuted"] == brute_force_permuted(m)


def permuted_store(path, rng: np.random.Generator) -> Store:
    """A 4-class store whose logits put each class's mass on the next class's output."""
    n, c = 80, 4
    labels = np.repeat(np.arange(c), n // c)
    logits = rng.normal(size=(n, c)).astype(np.float32)
    logits[np.arange(n), (labels + 1) % c] += 6.0
    logits[:5] = rng.normal(size=(5, c))  # a few rows at random
    feats = rng.normal(size=(n, 8)).astype(np.float32)
    return Store.from_arrays(path, head=None, splits={
        "id/test": {"features": feats, "logits": logits, "labels": labels},
        "id/train": {"features": feats, "logits": logits, "labels": labels}},
        classes=["ant", "bee", "cat", "dog"], provenance={"name": "mine"})


def test_info_warns_on_a_class_permutation(tmp_path, capsys):
    st = permuted_store(tmp_path / "st", np.random.default_rng(1))
    split = st.split("id/test")
    pred = np.asarray(split.logits).argmax(1)
    labels = np.asarray(split.labels)
    m = np.zeros((4, 4), int)
    for t, p in zip(labels, pred, strict=True):
        m[t, p] += 1
    check = id_checks(st)["id/test"]
    assert check["accuracy"] == 100.0 * np.mean(pred == labels)
    assert check["permuted"] == brute_force_permuted(m) >= 90.0
    code, stdout, err = run(capsys, "info", str(tmp_path / "st"))
    assert code == 0, err
    assert "ID accuracy" in stdout and "WARNING" in stdout and "class_map" in stdout
    assert "no head (W, b)" in stdout
    code, stdout, _ = run(capsys, "info", str(tmp_path / "st"), "--json")
    doc = json.loads(stdout)
    assert doc["id_checks"]["id/test"]["permuted"] == check["permuted"]
    assert doc["layers"]["has_head"] is False


def _run(method: str, seed: int, auroc: float, warnings: list[str]) -> dict:
    return {"split": "spec", "method": method, "seed": seed, "status": "ok", "train": "ce",
            "groups": {"far": {m: auroc for m in OOD_METRIC_NAMES}}, "id_acc": 20.0, "train_s": 1.0,
            "extract_s": 1.0, "score_s": 1.0, "id_warnings": warnings}


def test_flagged_runs_are_never_best():
    flag = "id/test: ID accuracy 20.00% is near chance (20.00%, the largest class): ..."
    runs = [_run("msp", 0, 90.0, [flag]), _run("knn", 0, 70.0, [])]
    agg = aggregate_runs(runs)
    assert agg["spec"]["msp"]["flags"] == [flag] and agg["spec"]["knn"]["flags"] == []
    result = {"aggregate": agg, "skipped": [], "arch": "a", "wall_s": 1.0,
              "experiment": {"name": "x", "seeds": [0], "train": {}, "tune_rule": "none",
                             "select_by": "auroc"}}
    methods, rows = table_rows(result, "spec")
    auroc = next(r for r in rows if r[0] == "AUROC")
    cells = dict(zip(methods, auroc[2:], strict=True))
    assert cells["msp"] == ("90.00 ± 0.00 (!)", False) and cells["knn"] == ("70.00 ± 0.00", True)
    assert "## Flagged methods" in markdown_report(result) and flag in markdown_report(result)


def test_report_shows_the_id_accuracy_checks(tmp_path):
    """The HTML report (and its Markdown twin) carries the ID accuracy line and the
    permutation warning of `featstore.store.sanity`; the accuracy is recomputed here with NumPy."""
    from featstore.workflows.report import write_report

    rng = np.random.default_rng(2)
    base = permuted_store(tmp_path / "base", rng)
    test = base.split("id/test")
    splits = {name: {"features": base.split(name).features, "logits": base.split(name).logits,
                     "labels": base.split(name).labels} for name in ("id/test", "id/train")}
    splits["ood/far/x"] = {"features": rng.normal(size=(30, 8)).astype(np.float32),
                           "logits": rng.normal(size=(30, 4)).astype(np.float32)}
    st = Store.from_arrays(tmp_path / "st", head=None, splits=splits,
                           classes=["ant", "bee", "cat", "dog"])
    acc = 100.0 * np.mean(np.asarray(test.logits).argmax(1) == np.asarray(test.labels))
    html_path, md_path = write_report(st.path, tmp_path / "r.html", methods=["msp"], ci=None)
    line = f"ID accuracy on id/test: {acc:.2f}% of 80 rows (chance 25.00%)"
    for text in (html_path.read_text(), md_path.read_text()):
        assert line in text
        assert "WARNING: id/test: ID accuracy" in text and "class_map" in text
