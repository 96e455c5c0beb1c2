"""`featstore protocol ten-methods` (the remote-sensing ten-method OOD benchmark over the
user's own simi / near / far specs) and `featstore table` (the paper's layout read back),
end to end at the tiniest size: a 3-class ImageFolder of scikit-image crops (the `user_spec`
fixture's data), TinyCNN, 1 epoch, MSP and KNN (one `ce` model per run), two datasets and
two runs. Reference: each cell of the written paper table is recomputed here from the
per-run numbers of results.json (NumPy mean and population std, formatted by hand)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers.cli import run_cli as run

ARCH = "tests.helpers.tiny_models:TinyCNN"
SPLITS = (("id/train", "train", "train"), ("id/val", "val", "val"), ("id/test", "test", "test"),
          ("ood/tune/rocket_val", "val", "ood_val"), ("ood/simi/brick", "test", "ood_test"),
          ("ood/far/rocket", "test", "ood_val"))


def _spec(user_spec, name, splits=SPLITS):
    """A spec over the user_spec fixture's folders with the groups simi and far."""
    head = user_spec.read_text().split("\n[[split]]")[0]
    path = user_spec.parent / name
    path.write_text(head + "".join(
        f'\n[[split]]\nname = "{n}"\nusage = "{u}"\nsource = {{ imagefolder = "data/{d}" }}\n'
        for n, u, d in splits))
    return path


def _cell(stat, flagged):
    text = f"{stat['mean']:.2f} ± {stat['std']:.2f}" + (" (!)" if flagged else "")
    return text if flagged else f"**{text}**"   # two columns: both in the top three


def test_ten_methods_one_liner_and_paper_table(tmp_path, user_spec, capsys):
    spec = _spec(user_spec, "groups.toml")
    out = tmp_path / "rs"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code, stdout, err = run(capsys, "protocol", "ten-methods", "--spec", f"A={spec}",
                                "--spec", f"B={spec}", "--runs", "2", "--methods", "msp,knn",
                                "--arch", ARCH, "--epochs", "1", "--batch-size", "8",
                                "--device", "cpu", "--out", out, "--json")
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    result = json.loads(stdout)
    assert list(result["datasets"]) == ["A", "B"]
    assert json.loads((out / "datasets.json").read_text()) == {
        "datasets": {"A": "A/results.json", "B": "B/results.json"}}
    table = (out / "results.paper.md").read_text()
    lines = table.splitlines()
    head = lines.index("## AUROC (a group's value: the mean over its OOD splits) (higher is "
                       "better): mean ± std over each row's runs; the row's top three in bold "
                       "(ties share a place)")
    assert lines[head + 2:head + 5] == ["| dataset | group | Post Hoc |  |", "|---|---|---:|---:|",
                                        "| | | **MSP** | **KNN** |"]
    rows = lines[head + 5:head + 9]
    assert [r.split(" | ")[:2] for r in rows] == [["| A", "simi"], ["| A", "far"],
                                                  ["| B", "simi"], ["| B", "far"]]
    for label in ("A", "B"):
        res = json.loads((out / label / "results.json").read_text())
        assert res["experiment"]["seeds"] == [0, 1] and res["experiment"]["spec"] == str(spec)
        assert [r["name"] for r in res["experiment"]["rows"]] == ["MSP", "KNN"]
        assert all(r["status"] == "ok" for r in res["runs"]) and len(res["runs"]) == 4
        for group in ("simi", "far"):
            cells = []
            for method in ("MSP", "KNN"):
                vals = np.array([r["groups"][group]["auroc"] for r in res["runs"]
                                 if r["method"] == method])
                agg = res["aggregate"]["spec"][method]
                assert agg["groups"][group]["auroc"]["std"] == pytest.approx(vals.std(),
                                                                             abs=1e-12)
                cells.append(_cell({"mean": vals.mean(), "std": vals.std()}, bool(agg["flags"])))
            assert f"| {label} | {group} | {cells[0]} | {cells[1]} |" in lines
        assert f"| {label} | simi+far |" in table          # the time table's row
        assert f"| {label} | ID |" in table                # the ID-ACC table's row
    # the written experiment file is the same run: `featstore run` reads every run back
    code, stdout, err = run(capsys, "run", out / "A" / "experiment.toml", "--out", out / "A",
                            "--json")
    assert code == 0, err
    again = json.loads(stdout)
    assert again["aggregate"] == result["datasets"]["A"]["aggregate"]
    assert again["runs"] == result["datasets"]["A"]["runs"]
    # the same tables read back from the results, nothing recomputed
    code, stdout, err = run(capsys, "table", out, "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert table == "# Ten OOD methods (Wang et al. 2024 layout)\n\n" + doc["markdown"]
    assert [t["metric"] for t in doc["tables"]] == ["auroc", "fpr95", "fpr95_ood", "aupr_in",
                                                    "aupr_out", "id_acc", "method_s"]
    code, stdout, err = run(capsys, "table", f"X={out / 'A'}", "--layout", "paper")
    assert code == 0 and "Post Hoc" in stdout and "X" in stdout, err


@pytest.mark.parametrize("args, code, message", [
    (["--layout", "wide"], 2, "--layout 'wide': expected one of default, paper"),
    (["--methods", "all"], 1, "OE, MCD train on auxiliary outliers: give --aux DIR"),
    (["--methods", "msp", "--runs", "0"], 2, "--runs 0: must be >= 1"),
    (["--methods", "msp,nope"], 2, "unknown scorer 'nope'"),
])
def test_ten_methods_bad_options(tmp_path, user_spec, capsys, args, code, message):
    spec = _spec(user_spec, "groups.toml")
    got, _, err = run(capsys, "protocol", "ten-methods", "--spec", spec, "--out",
                      tmp_path / "o", *args)
    assert got == code and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "groups").exists()     # nothing trained or written


def test_ten_methods_bad_specs_and_tables(tmp_path, user_spec, capsys):
    """A spec without OOD test groups, without an OOD val split to tune on, a label used
    twice, a results file that is not an experiment's: one-line errors before any work."""
    no_ood = _spec(user_spec, "no_ood.toml", SPLITS[:4])
    no_val = _spec(user_spec, "no_val.toml", SPLITS[:3] + SPLITS[4:])
    ok = _spec(user_spec, "ok.toml")
    cases = [
        (["--spec", f"U={no_ood}"], 1, "--spec U=", "no OOD test split: name them "
                                                    "ood/<group>/<name>"),
        (["--spec", str(no_val)], 1, "--spec no_val=", "KNN is tuned on val"),
        (["--spec", f"A={ok}", "--spec", f"A={ok}"], 2, "--spec", "label 'A' is used twice"),
        (["--spec", f"A={tmp_path / 'none.toml'}"], 1, "--spec", "file not found"),
    ]
    for args, code, where, message in cases:
        got, _, err = run(capsys, "protocol", "ten-methods", *args, "--methods", "msp,knn",
                          "--out", tmp_path / "o")
        assert got == code and where in err and message in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    (tmp_path / "eval.json").write_text(json.dumps({"methods": {}}))
    got, _, err = run(capsys, "table", tmp_path / "eval.json")
    assert got == 1 and "not the results of `featstore run`" in err
    got, _, err = run(capsys, "table", tmp_path / "eval.json", "--layout", "x")
    assert got == 2 and "--layout 'x'" in err



def test_knn_tunes_over_the_papers_five_values_clamped_to_the_bank(user_spec):
    """RS §2.5 tunes over "the five most common values" (issue 46.3): under the paper's rule
    (tune_rule "paper", the ten-methods and OSR presets) KNN's K grid is 50, 100, 200, 500,
    1000 as it is, clamped only above the bank and never duplicated: a 300-row bank sweeps
    K = 50, 100, 200, 300 (by hand; 500 and 1000 both clamp to 300, scored once), where the
    fitted rule scales by 300 / 50,000 to 1, 1, 1, 3, 6 -> 1, 3, 6. The presets use it."""
    from featstore.specs.experiment import MethodRow
    from featstore.store.arraystore import ArrayStore
    from featstore.workflows.experiments.runner import score_row
    from featstore.workflows.experiments.ten_methods_run import ten_methods_experiments
    from scorers.sweep import sweep

    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 8)).astype(np.float32)

    def part(n, scale, usage, labels=True):
        d = {"features": (rng.normal(size=(n, 8)) * scale).astype(np.float32),
             "usage": usage}
        return {**d, "labels": rng.integers(0, 3, n)} if labels else d

    st = ArrayStore(head=(w, np.zeros(3, np.float32)), splits={
        "id/train": part(300, 1.0, "train"), "id/val": part(40, 1.0, "val"),
        "id/test": part(40, 1.0, "test"), "ood/far/v": part(30, 3.0, "val", False),
        "ood/far/t": part(30, 3.0, "test", False)})
    paper = sweep(st, "knn", grid_rule="paper")
    assert [s["setting"]["K"] for s in paper["settings"]] == [50, 100, 200, 300]
    fitted = sweep(st, "knn")
    assert [s["setting"]["K"] for s in fitted["settings"]] == [1, 3, 6]
    row = MethodRow(name="KNN", train="ce", scorer="knn")
    assert score_row(st, row, "paper", "auroc")["chosen"]["K"] in (50, 100, 200, 300)
    exps = ten_methods_experiments({"U": _spec(user_spec, "g.toml")}, [row], {"epochs": 1})
    assert exps["U"].tune_rule == "paper"
