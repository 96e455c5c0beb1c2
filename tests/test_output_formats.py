"""Results in the formats people open directly (issue 47): `--out x.csv` / `x.jsonl` on eval,
sweep and compare, `score --save x.csv` / `x.jsonl`, `table --out x.csv`, `to_frame()`. The
reference for every number is the same command's JSON document (`--out x.json`, whose numbers
the metric tests hold to sklearn) or the .npz of the same scores, read with Python's own `csv`
and `json` modules; a suffix the command cannot write is refused before any work."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from featstore import Store
from scorers.results import EvaluationResult
from tests.helpers.cli import run_cli_captured
from tests.helpers.stores import class_direction_store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """3 classes, a head that reads their directions, OOD rows near no class (val and test)."""
    path = tmp_path_factory.mktemp("formats") / "store"
    class_direction_store(path, {"id/train": 90, "id/val": 30, "id/test": 40,
                                 "ood/far/noise_val": 30, "ood/far/noise": 40})
    return path


def ok(*args) -> None:
    run = run_cli_captured(*args, "-q")
    assert run.code == 0, run.err


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_eval_csv_and_jsonl_hold_the_json_numbers(store, tmp_path):
    args = ("eval", store, "--method", "msp", "--method", "knn", "--boot", "50")
    for name in ("e.json", "e.csv", "e.jsonl"):
        ok(*args, "--out", tmp_path / name)
    doc = json.loads((tmp_path / "e.json").read_text())
    table = read_csv(tmp_path / "e.csv")
    lines = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    levels = ["id", "split", "group"] * 2
    assert [r["level"] for r in table] == [r["level"] for r in lines] == levels
    for r, j in zip(table, lines, strict=True):
        m = doc["methods"][r["method"]]
        if r["level"] == "id":
            assert float(r["id_acc"]) == j["id_acc"] == doc["id_acc"]
            assert [float(r["aurc_lo"]), float(r["aurc_hi"])] == m["aurc_ci"]
            continue
        want = m["splits" if r["level"] == "split" else "groups"][r["name"]]
        for metric in ("auroc", "fpr95", "aupr_in", "aupr_out"):
            assert float(r[metric]) == j[metric] == want[metric]  # repr round-trips exactly
            assert [float(r[f"{metric}_lo"]), float(r[f"{metric}_hi"])] == want[f"{metric}_ci"]
    assert json.loads(table[3]["params"]) == doc["methods"]["knn"]["params"]


def test_sweep_and_compare_rows(store, tmp_path):
    ok("sweep", store, "--method", "knn", "--grid", "K=1,5,10", "--out", tmp_path / "s.json")
    ok("sweep", store, "--method", "knn", "--grid", "K=1,5,10", "--out", tmp_path / "s.csv")
    doc, rows = json.loads((tmp_path / "s.json").read_text()), read_csv(tmp_path / "s.csv")
    assert [json.loads(r["setting"]) for r in rows] == [{"K": 1}, {"K": 5}, {"K": 10}]
    assert [r["chosen"] == "True" for r in rows] == [
        s["setting"] == doc["chosen"]["setting"] for s in doc["settings"]]
    assert [float(r["val_auroc"]) for r in rows] == [s["val"]["mean"]["auroc"]
                                                     for s in doc["settings"]]
    args = ("compare", store, "--method", "msp", "--method", "knn", "--boot", "50")
    ok(*args, "--out", tmp_path / "c.json")
    ok(*args, "--out", tmp_path / "c.jsonl")
    doc = json.loads((tmp_path / "c.json").read_text())
    lines = [json.loads(ln) for ln in (tmp_path / "c.jsonl").read_text().splitlines()]
    (delong,) = [ln for ln in lines if ln["test"] == "delong"]
    assert delong["p"] == doc["splits"]["ood/far/noise"]["delong_auroc"][0]["p"]
    boot = [ln for ln in lines if ln["test"] == "bootstrap" and ln["level"] == "group"]
    assert {ln["metric"] for ln in boot} == set(doc["groups"]["far"]["bootstrap"])


def test_score_save_rows_equal_the_npz(store, tmp_path):
    base = ("score", store, "--method", "energy", "--split", "id/test", "--split",
            "ood/far/noise")
    for name in ("s.npz", "s.csv", "s.jsonl"):
        ok(*base, "--save", tmp_path / name)
    npz = np.load(tmp_path / "s.npz")
    rows = read_csv(tmp_path / "s.csv")
    lines = [json.loads(ln) for ln in (tmp_path / "s.jsonl").read_text().splitlines()]
    with Store.open(store) as st:
        want_ids = [str(i) for s in ("id/test", "ood/far/noise")
                    for i in np.asarray(st.split(s).ids)]
        want_labels = np.concatenate([np.asarray(st.split(s).labels)
                                      for s in ("id/test", "ood/far/noise")])
    want = np.concatenate([npz["id__test"], npz["ood__far__noise"]])
    assert [float(r["score"]) for r in rows] == [ln["score"] for ln in lines] == want.tolist()
    assert [r["id"] for r in rows] == want_ids and [int(r["label"]) for r in rows] == \
        want_labels.tolist()
    assert [(r["split"], int(r["row"])) for r in rows[39:41]] == [("id/test", 39),
                                                                  ("ood/far/noise", 0)]


def test_table_csv_holds_the_aggregate(store, tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(f'name = "fmt"\n[data]\nstores = ["{store}"]\n'
                   '[[method]]\nname = "MSP"\nscorer = "msp"\n')
    ok("run", exp, "--out", tmp_path / "run")
    ok("table", f"D={tmp_path / 'run'}", "--out", tmp_path / "t.csv")
    agg = json.loads((tmp_path / "run" / "results.json").read_text())["aggregate"]
    rows = read_csv(tmp_path / "t.csv")
    (unit,) = agg
    assert [(r["dataset"], r["unit"], r["method"], r["level"], r["name"]) for r in rows] == [
        ("D", unit, "MSP", "id", ""), ("D", unit, "MSP", "group", "far")]
    far = agg[unit]["MSP"]["groups"]["far"]
    assert float(rows[1]["auroc_mean"]) == far["auroc"]["mean"]
    assert int(rows[1]["auroc_n"]) == far["auroc"]["n"] == 1
    assert float(rows[0]["id_acc_mean"]) == agg[unit]["MSP"]["id_acc"]["mean"]


@pytest.mark.parametrize("args", [("eval", "--method", "msp", "--out", "x.parquet"),
                                  ("sweep", "--method", "knn", "--out", "x.txt"),
                                  ("score", "--method", "msp", "--save", "x.json")])
def test_a_suffix_that_cannot_be_written_is_refused_first(store, tmp_path, args):
    cmd, *rest = args
    rest[-1] = tmp_path / rest[-1]
    run = run_cli_captured(cmd, store, *rest)
    assert run.code == 2 and "unknown file type" in run.err and "Traceback" not in run.err
    assert not list(tmp_path.iterdir())


def test_to_frame_has_one_row_per_record(store):
    from scorers.evaluate import evaluate

    with Store.open(store) as st:
        result = evaluate(st, ["msp", "energy"], use_cache=False)
    assert isinstance(result, EvaluationResult)
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 6
    energy = frame[(frame.method == "energy") & (frame.level == "split")]
    assert energy.auroc.tolist() == [result["methods"]["energy"]["splits"]["ood/far/noise"]
                                     ["auroc"]]
