"""Protocols (featstore.workflows.protocols): OSR splits, OOD groups, shift-level grids, LAID,
image-list conversion.

References: the remote-sensing benchmark's Table 3 class counts; numpy's own permutation and
mean/std; sklearn's roc_auc_score on scores recomputed from the stored logits (softmax by
scipy); IS-OOD's analyze_metrics.py `cal_sensitivity` transcribed and scipy's pearsonr; a
brute-force numpy nearest-neighbour search; the known rotation of synthetic LAID data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.special import softmax
from scipy.stats import pearsonr
from skimage import data as skdata
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import UsageError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.specs.benchmark import load_spec
from featstore.workflows.protocols import osr, shift
from featstore.workflows.protocols.lists import lists_to_spec
from tests.helpers.cli import run_cli as run

OPTS = ExtractOptions(device="cpu", batch_size=16, num_workers=0, part_batches=2)


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


def msp(logits: np.ndarray) -> np.ndarray:
    return softmax(np.asarray(logits, dtype=np.float64), axis=1).max(axis=1)


def auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    y = np.r_[np.ones(len(id_scores)), np.zeros(len(ood_scores))]
    return 100.0 * roc_auc_score(y, np.r_[id_scores, ood_scores])


def save_crops(folder: Path, image: np.ndarray, count: int, offset: int = 0) -> list[str]:
    """`count` real 48x48 crops of a scikit-image photo as PNG files; returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    names = []
    for k in range(count):
        y, x = 7 * (k + offset) % (image.shape[0] - 48), 11 * (k + offset) % (image.shape[1] - 48)
        Image.fromarray(image[y:y + 48, x:x + 48]).save(folder / f"{k:03d}.png")
        names.append(f"{k:03d}.png")
    return names


# ------------------------------------------------------------------------------ OSR
@pytest.mark.parametrize("n, counts", [(21, (15, 13, 11)), (30, (21, 18, 15)), (10, (7, 6, 5))])
def test_closed_counts_match_the_papers_table3(n, counts):
    """UCM (21), AID (30), EuroSAT (10) at 7/3, 6/4, 5/5: Table 3's closed-class counts."""
    assert tuple(osr.closed_count(n, r) for r in ((7, 3), (6, 4), (5, 5))) == counts


def test_class_splits_are_seeded_disjoint_and_complete():
    splits = osr.class_splits(10, (6, 4), range(5))
    assert splits == osr.class_splits(10, (6, 4), range(5))
    for sp in splits:
        perm = np.random.default_rng(sp.seed).permutation(10)
        assert sp.closed == tuple(sorted(perm[:6].tolist()))
        assert set(sp.closed).isdisjoint(sp.open) and set(sp.closed) | set(sp.open) == set(
            range(10))
    assert len({sp.closed for sp in splits}) == 5


def test_ratio_parsing_and_errors():
    assert osr.parse_ratios("7/3, 6/4,5/5") == [(7, 3), (6, 4), (5, 5)]
    for bad in ("7-3", "0/3", "", "a/b"):
        with pytest.raises(UsageError, match="--ratios"):
            osr.parse_ratios(bad)
    with pytest.raises(UsageError, match="at least 2 classes"):
        osr.closed_count(1, (7, 3))


def test_aggregate_is_mean_and_population_std():
    from featstore.workflows.experiments.aggregate import mean_std

    vals = [91.0, 85.5, 88.25, float("nan"), None]
    agg = mean_std(vals)
    assert agg["n"] == 3
    assert agg["mean"] == pytest.approx(np.mean(vals[:3]))
    assert agg["std"] == pytest.approx(np.std(vals[:3], ddof=0))
    assert mean_std([None]) == {"mean": None, "std": None, "n": 0}


def test_file_data_split_lists(tmp_path):
    """ImageFolder data: closed classes re-indexed in the id lists, open ones only in ood."""
    root = tmp_path / "imgs"
    for i, img in enumerate((skdata.astronaut(), skdata.coffee(), skdata.chelsea(),
                             skdata.rocket())):
        save_crops(root / f"c{i}", img, 8)
    data = osr.load_data(str(root))
    assert data.classes == ["c0", "c1", "c2", "c3"]
    split = osr.ClassSplit((2, 2), 0, (1, 3), (0, 2))
    spec = osr.split_spec(data, split, tmp_path / "d", None, val_open="paper")
    spec_file = tmp_path / "d" / "spec.toml"
    spec_file.write_text(spec.to_toml(osr.split_comment(data, split, "paper")))
    assert load_spec(spec_file) == spec
    assert [s.name for s in spec.splits] == ["id/train", "id/val", "id/test",
                                             "ood/osr/open_val", "ood/osr/open"]
    assert spec.classes == ["c1", "c3"]
    lines = {p: (tmp_path / "d" / "lists" / f"{p}.txt").read_text().split("\n")[:-1]
             for p in ("train", "val", "test", "open_val", "open_test")}
    for p in ("train", "val", "test"):
        assert {ln.split()[0].split("/")[0] for ln in lines[p]} == {"c1", "c3"}
        assert all(ln.split()[1] == ("0" if ln.startswith("c1/") else "1") for ln in lines[p])
    assert {ln.split()[0].split("/")[0] for ln in lines["open_test"]} == {"c0", "c2"}
    # 8 per class: train 0.6 -> 5, val 0.15 -> 1, test 0.25 -> 2 (round of cumulative cuts)
    assert (len(lines["train"]), len(lines["val"]), len(lines["test"])) == (10, 2, 4)


def test_osr_validation_holds_out_open_classes_by_default(tmp_path):
    """Default val_open = "heldout": ood/osr/open_val and ood/osr/open hold disjoint open
    classes (h = round(o / 3) held out, drawn by default_rng([seed, 1]), as the docstring
    says), so tuning never sees a tested class; "paper" tunes on the tested classes' val
    images; a division with one open class is refused under "heldout"."""
    root = tmp_path / "imgs"
    imgs = (skdata.astronaut(), skdata.coffee(), skdata.chelsea(), skdata.rocket(),
            skdata.brick(), skdata.camera())
    for i, img in enumerate(imgs):
        save_crops(root / f"c{i}", img if img.ndim == 3 else np.stack([img] * 3, -1), 8)
    data = osr.load_data(str(root))
    split = osr.ClassSplit((3, 3), 4, (0, 2, 5), (1, 3, 4))
    held = sorted(int(c) for c in np.random.default_rng([4, 1]).choice([1, 3, 4], 1,
                                                                          replace=False))
    val_cls, test_cls = osr.open_val_test(split)
    assert list(val_cls) == held and set(test_cls) == {1, 3, 4} - set(held)
    osr.split_spec(data, split, tmp_path / "h", None)
    listed = {p: {ln.split()[0].split("/")[0] for ln in
                  (tmp_path / "h" / "lists" / f"{p}.txt").read_text().split("\n")[:-1]}
              for p in ("open_val", "open_test")}
    assert listed["open_val"] == {f"c{c}" for c in held}
    assert listed["open_test"] == {f"c{c}" for c in test_cls}
    assert not listed["open_val"] & listed["open_test"]
    assert osr.open_val_test(split, "paper") == ((1, 3, 4), (1, 3, 4))
    digits = osr.split_spec(osr.load_data("digits"), osr.class_splits(10, (7, 3), [0])[0],
                            tmp_path / "g", None)
    val_d, test_d = osr.open_val_test(osr.class_splits(10, (7, 3), [0])[0])
    sources = {sp.name: sp.source for sp in digits.splits}
    assert sources["ood/osr/open_val"]["classes"] == list(val_d)
    assert sources["ood/osr/open"]["classes"] == list(test_d)
    assert not set(val_d) & set(test_d) and len(val_d) == 1 and len(test_d) == 2
    with pytest.raises(UsageError, match='one open class.*val_open = "paper"'):
        osr.open_val_test(osr.class_splits(10, (9, 1), [0])[0])


def test_osr_one_open_class_fails_before_training(tmp_path):
    from featstore.workflows.experiments import run_experiment
    from featstore.workflows.experiments.presets import osr_experiment, ten_method_rows

    exp = osr_experiment("digits", [(9, 1)], 1, ten_method_rows()[:1], {"epochs": 1})
    with pytest.raises(UsageError, match="one open class"):
        run_experiment(exp, tmp_path / "o")
    assert not (tmp_path / "o" / "runs").exists()


def test_osr_digits_end_to_end(tmp_path, capsys):
    """2 seeds of 7/3 on the demo digits (a tiny CNN, 1 epoch), MSP, KNN and ConfBranch (a
    training-time method: trained per division): every split's MSP AUROC equals sklearn's on
    the stored logits, the training seed is the division's, KNN is tuned on open_val, the
    summary is the mean and population std of the runs, and the table lists every method."""
    out = tmp_path / "osr"
    code, stdout, err = run(capsys, "protocol", "osr", "--data", "digits", "--ratios", "7/3",
                            "--seeds", "2", "--epochs", "1", "--methods", "msp,knn,confbranch",
                            "--arch", "tests.helpers.tiny_models:TinyCNN",
                            "--device", "cpu", "--out", str(out), "--json")
    assert code == 0, err
    result = json.loads(stdout)
    assert [r["name"] for r in result["experiment"]["rows"]] == ["MSP", "KNN", "ConfBranch"]
    runs = {(r["seed"], r["method"]): r for r in result["runs"]}
    assert len(runs) == 6 and all(r["status"] == "ok" for r in runs.values())
    aurocs = []
    for seed in (0, 1):
        sp = runs[(seed, "MSP")]
        assert len(sp["closed"]) == 7 and set(sp["closed"]).isdisjoint(sp["open"])
        st = Store.open(sp["store"])
        ref = auroc(msp(st.split("id/test").logits), msp(st.split("ood/osr/open").logits))
        assert sp["groups"]["osr"]["auroc"] == pytest.approx(ref, abs=1e-9)
        labels = np.asarray(st.split("id/test").labels)
        acc = 100.0 * np.mean(np.asarray(st.split("id/test").logits).argmax(1) == labels)
        assert sp["id_acc"] == pytest.approx(acc)
        assert st.classes == sp["closed"]
        assert st.provenance.get("training_method", "ce") == "ce"
        conf = Store.open(runs[(seed, "ConfBranch")]["store"])
        assert conf.provenance["training_method"] == "confbranch"
        assert runs[(seed, "KNN")]["tuned"] and "K" in runs[(seed, "KNN")]["chosen"]
        ckpt = torch.load(Path(sp["store"]).parent / "model.pt", weights_only=True)
        assert ckpt["config"]["seed"] == seed
        aurocs.append(ref)
    assert runs[(0, "MSP")]["closed"] != runs[(1, "MSP")]["closed"]
    summary = result["aggregate"]["7/3"]["MSP"]["groups"]["osr"]["auroc"]
    assert summary["mean"] == pytest.approx(np.mean(aurocs))
    assert summary["std"] == pytest.approx(np.std(aurocs))
    assert json.loads((out / "results.json").read_text())["aggregate"] == result["aggregate"]
    code, stdout, err = run(capsys, "protocol", "osr", "--data", "digits", "--ratios", "7/3",
                            "--seeds", "2", "--epochs", "1", "--methods", "msp,knn,confbranch",
                            "--arch", "tests.helpers.tiny_models:TinyCNN", "--device", "cpu",
                            "--out", str(out), "--layout", "paper", "--val-open",
                            "heldout")  # the same experiment (the paper's is val_open paper)
    assert code == 0, err   # read back; the paper's layout: family headers, a row per ratio
    assert "Training-Time" in stdout and "ConfBranch" in stdout and "7/3" in stdout
    paper = (out / "results.paper.md").read_text()
    mean, std = summary["mean"], summary["std"]
    assert f"| digits | 7/3 | **{mean:.2f} ± {std:.2f}**" in paper or (
        f"| digits | 7/3 | {mean:.2f} ± {std:.2f} (!)" in paper)


def test_osr_runs_on_the_command_line(tmp_path, capsys):
    """`protocol osr --runs 2 --seeds 1` on the digits (tiny CNN at 8 px, 1 epoch, MSP; one
    division keeps it cheap, and unequal counts catch the two options swapped): results.json
    holds runs x divisions = 2 x 1 runs of 7/3, run r of division s trained with seed
    s + 1000 r (the --runs help, `runner`), so the two runs share the division's classes and
    differ in training seed and model; each run's checkpoint holds its training seed; the
    aggregate is NumPy's mean and population std over the 2 AUROCs. (2 x 2 divisions through
    an experiment file: tests/test_experiments.py.)"""
    out = tmp_path / "osr"
    code, _, err = run(capsys, "protocol", "osr", "--data", "digits", "--ratios", "7/3",
                       "--seeds", "1", "--runs", "2", "--epochs", "1", "--methods", "msp",
                       "--image-size", "8", "--batch-size", "128",
                       "--arch", "tests.helpers.tiny_models:TinyCNN", "--device", "cpu",
                       "--out", str(out), "--quiet")
    assert code == 0, err
    result = json.loads((out / "results.json").read_text())
    assert result["experiment"]["runs"] == 2 and result["experiment"]["seeds"] == [0]
    runs = result["runs"]
    assert [(r["seed"], r["run"], r["train_seed"]) for r in runs] == [(0, 0, 0), (0, 1, 1000)]
    assert all(r["status"] == "ok" and r["method"] == "MSP" for r in runs)
    assert runs[0]["closed"] == runs[1]["closed"] and len(runs[0]["closed"]) == 7
    assert runs[0]["model_sha256"] != runs[1]["model_sha256"]
    for r in runs:
        ckpt = torch.load(Path(r["store"]).parent / "model.pt", weights_only=True)
        assert ckpt["config"]["seed"] == r["train_seed"]
    agg = result["aggregate"]["7/3"]["MSP"]
    assert agg["n"] == 2 and agg["train_seeds"] == [0, 1000]
    vals = np.array([r["groups"]["osr"]["auroc"] for r in runs])
    assert agg["groups"]["osr"]["auroc"]["mean"] == pytest.approx(vals.mean(), abs=1e-12)
    assert agg["groups"]["osr"]["auroc"]["std"] == pytest.approx(vals.std(), abs=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--data", "digits", "--ratios", "7-3"], "--ratios: '7-3'"),
    (["--data", "/no/such/data"], "--data '/no/such/data'"),
    (["--data", "digits", "--methods", "msp,nosuch"], "unknown scorer 'nosuch'"),
    (["--data", "digits", "--epochs", "0"], "--epochs 0: must be >= 1"),
    (["--data", "digits", "--runs", "0"], "--runs 0: must be >= 1"),
    (["--data", "digits", "--runs", "2", "--seeds", "1001"], "--seeds 1001 with --runs 2: at "
                                                              "most 1000 divisions"),
    (["--data", "digits", "--layout", "paper2"], "--layout 'paper2': expected one of"),
])
def test_osr_bad_inputs(tmp_path, capsys, args, message):
    code, _, err = run(capsys, "protocol", "osr", *args, "--out", str(tmp_path / "o"),
                       "--quiet")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ groups
def test_simi_near_far_group_means_by_hand(tmp_path, capsys):
    """ood/simi/*, ood/near/*, ood/far/*: each group's AUROC is the unweighted mean of its
    splits' sklearn AUROCs of MSP."""
    rng = np.random.default_rng(1)
    c, d = 4, 6
    w = rng.normal(size=(c, d)).astype(np.float32)
    b = np.zeros(c, dtype=np.float32)

    def feats(n, scale):
        return (rng.normal(size=(n, d)) * scale).astype(np.float32)

    splits = {"id/train": {"features": feats(80, 2.0), "labels": rng.integers(0, c, 80)},
              "id/test": {"features": feats(60, 2.0), "labels": rng.integers(0, c, 60)},
              "ood/simi/s1": {"features": feats(40, 1.6)},
              "ood/simi/s2": {"features": feats(50, 1.4)},
              "ood/near/n1": {"features": feats(45, 1.0)},
              "ood/far/f1": {"features": feats(30, 0.5)},
              "ood/far/f2": {"features": feats(35, 0.3)}}
    Store.from_arrays(tmp_path / "s", head=(w, b), splits=splits)
    code, stdout, err = run(capsys, "eval", str(tmp_path / "s"), "--method", "msp", "--json")
    assert code == 0, err
    groups = json.loads(stdout)["methods"]["msp"]["groups"]
    assert list(groups) == ["simi", "near", "far"]
    id_s = msp(splits["id/test"]["features"] @ w.T + b)
    per = {n: auroc(id_s, msp(splits[n]["features"] @ w.T + b)) for n in splits if "ood" in n}
    assert groups["simi"]["auroc"] == pytest.approx((per["ood/simi/s1"] + per["ood/simi/s2"]) / 2)
    assert groups["near"]["auroc"] == pytest.approx(per["ood/near/n1"])
    assert groups["far"]["auroc"] == pytest.approx((per["ood/far/f1"] + per["ood/far/f2"]) / 2)


# ------------------------------------------------------------------------------ shift grids
def test_bin_levels_equal_and_quantile():
    v = np.array([0.0, 0.1, 0.25, 0.5, 0.74, 0.75, 1.0])
    lv, edges = shift.bin_levels(v, 4, "equal")
    np.testing.assert_allclose(edges, [0, 0.25, 0.5, 0.75, 1.0])
    assert lv.tolist() == [0, 0, 1, 2, 2, 3, 3]  # [start, end), the last interval closed
    q = np.arange(100.0)
    lq, _ = shift.bin_levels(q, 4, "quantile")
    assert np.bincount(lq).tolist() == [25, 25, 25, 25]
    with pytest.raises(UsageError, match="--binning 'x'"):
        shift.bin_levels(v, 4, "x")
    with pytest.raises(UsageError, match="non-finite"):
        shift.bin_levels(np.array([0.0, np.nan]), 2)


def _is_ood_sensitivity(mean_array: np.ndarray) -> tuple[float, float]:
    """IS-OOD analyze_metrics.py `cal_sensitivity`, transcribed (returns corr, |sens|)."""
    i_list = np.array([i + 1 for i in range(mean_array.size)], dtype=np.float64)
    corr_p, _ = pearsonr(mean_array - mean_array.mean(), i_list - i_list.mean())
    m, i = mean_array - mean_array.mean(), i_list - i_list.mean()
    return float(corr_p), float(abs((m * i).sum() / (i * i).sum()))


def test_grid_cells_level_means_and_sensitivity():
    rng = np.random.default_rng(0)
    id_scores = rng.normal(1.0, 1.0, 300)
    cells = {}
    for c in range(3):
        for s in range(3):
            n = 4 if (c, s) == (2, 0) else 30 + 5 * s
            cells[(c, s)] = rng.normal(1.0 - 0.6 * s + 0.2 * c, 1.0, n)
    grid = shift.evaluate_cells(id_scores, cells, 3, min_count=10)
    assert np.isnan(grid.values["auroc"][2, 0]) and grid.counts[2, 0] == 4
    for (c, s), sc in cells.items():
        if len(sc) >= 10:
            assert grid.values["auroc"][c, s] == pytest.approx(auroc(id_scores, sc))
    a = grid.values["auroc"]
    sem_means = np.array([np.nanmean(a[:, s]) for s in range(3)])
    cov_means = np.array([np.nanmean(a[c, :]) for c in range(3)])
    np.testing.assert_allclose(grid.level_means("auroc", "semantic"), sem_means)
    np.testing.assert_allclose(grid.level_means("auroc", "covariate"), cov_means)
    sens = grid.sensitivity("auroc")
    for axis, means in (("semantic", sem_means), ("covariate", cov_means)):
        corr, slope = _is_ood_sensitivity(means)
        assert sens[axis]["correlation"] == pytest.approx(corr)
        assert sens[axis]["sensitivity"] == pytest.approx(slope)


def test_nearest_cosine_distance_equals_brute_force():
    rng = np.random.default_rng(2)
    bank, q = rng.normal(size=(200, 12)), rng.normal(size=(50, 12))
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        bank / np.linalg.norm(bank, axis=1, keepdims=True)).T
    for k in (1, 10):
        ref = 1.0 - np.sort(cos, axis=1)[:, ::-1][:, k - 1]
        np.testing.assert_allclose(shift.nearest_cosine_distance(bank, q, k), ref, atol=1e-5)
    with pytest.raises(UsageError, match="--k 0"):
        shift.nearest_cosine_distance(bank, q, 0)


def test_grid_from_row_degrees_in_split_extras(tmp_path, capsys):
    """extra/sem_shift and extra/cov_shift rows binned into 2 x 2 cells; cell AUROC by hand."""
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(3, 5)).astype(np.float32), np.zeros(3, dtype=np.float32)
    ood = rng.normal(size=(80, 5)).astype(np.float32)
    sem = np.r_[np.zeros(40), np.ones(40)] + rng.uniform(0, 0.4, 80)
    cov = np.tile(np.r_[np.zeros(20), np.ones(20)], 2) + rng.uniform(0, 0.4, 80)
    splits = {"id/test": {"features": rng.normal(size=(60, 5)).astype(np.float32) * 2,
                          "labels": rng.integers(0, 3, 60)},
              "ood/shift/x": {"features": ood, "extras": {"sem_shift": sem, "cov_shift": cov}}}
    Store.from_arrays(tmp_path / "s", head=(w, b), splits=splits)
    code, stdout, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "s"), "--method",
                            "msp", "--levels", "2", "--json")
    assert code == 0, err
    res = json.loads(stdout)["results"][0]
    assert res["source"] == "degrees" and res["counts"] == [[20, 20], [20, 20]]
    id_s = msp(splits["id/test"]["features"] @ w.T)
    ood_s = msp(ood @ w.T)
    s_lv, c_lv = (sem >= sem.min() + (sem.max() - sem.min()) / 2), (
        cov >= cov.min() + (cov.max() - cov.min()) / 2)
    for c in (0, 1):
        for s in (0, 1):
            mask = (c_lv == c) & (s_lv == s)
            assert res["values"]["auroc"][c][s] == pytest.approx(auroc(id_s, ood_s[mask]))
    # hand-set edges (IS-OOD's fixed intervals): sem [0, 0.7) [0.7, 1.2], cov [0, 0.2)
    # [0.2, 1.2]; degrees above the last edge belong to no cell and are counted as outside
    code, stdout, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "s"), "--method",
                            "msp", "--levels-edges", "0,0.7,1.2;0,0.2,1.2", "--min-count", "1",
                            "--json")
    assert code == 0, err
    res = json.loads(stdout)["results"][0]
    inside = (cov <= 1.2) & (sem <= 1.2)
    assert res["outside"] == int((~inside).sum()) > 0
    assert res["edges"] == {"semantic": [0, 0.7, 1.2], "covariate": [0, 0.2, 1.2]}
    for c, (lo, hi) in enumerate(((0.0, 0.2), (0.2, 1.2))):
        for s_, (slo, shi) in enumerate(((0.0, 0.7), (0.7, 1.2))):
            mask = inside & (cov >= lo) & ((cov < hi) if c == 0 else (cov <= hi)) \
                & (sem >= slo) & ((sem < shi) if s_ == 0 else (sem <= shi))
            assert res["counts"][c][s_] == int(mask.sum()) > 0
            assert res["values"]["auroc"][c][s_] == pytest.approx(auroc(id_s, ood_s[mask]))
    for bad, message in (("0,1", "at least 3"), ("0,0.5,1;0,0.2,0.5,1", "same number of edges"),
                         ("0,a,1", "not a list of numbers"), ("0,0.5,0.4", "increasing")):
        code, _, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "s"), "--method",
                           "msp", "--levels-edges", bad)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_degrees_file_rows_match_by_image_id(tmp_path, capsys):
    """Degrees computed on a reference store whose OOD rows are in another order than the
    scored store's: `shift-grid --degrees` matches them by image id, so the grid equals the
    one from the degrees stored (aligned by hand) as the scored store's own extras; a store
    image missing from the file, and a file without ids, are errors."""
    rng = np.random.default_rng(4)
    w, b = rng.normal(size=(3, 8)).astype(np.float32), np.zeros(3, dtype=np.float32)
    ids = np.array([f"img{i:03d}.png" for i in range(60)])
    ood = rng.normal(size=(60, 8)).astype(np.float32)
    ref_feats = (rng.normal(size=(60, 8)) + 3.0 * (np.arange(60) >= 30)[:, None]).astype(
        np.float32)
    idt = {"features": rng.normal(size=(50, 8)).astype(np.float32) * 2,
           "labels": rng.integers(0, 3, 50)}
    perm = rng.permutation(60)
    Store.from_arrays(tmp_path / "ref", head=(w, b), splits={
        "id/train": {"features": rng.normal(size=(40, 8)).astype(np.float32),
                     "labels": rng.integers(0, 3, 40)},
        "id/test": idt, "ood/far/x": {"features": ref_feats[perm], "ids": ids[perm]}})
    Store.from_arrays(tmp_path / "cls", head=(w, b), splits={
        "id/test": idt, "ood/far/x": {"features": ood, "ids": ids}})
    code, _, err = run(capsys, "protocol", "shift-degrees", str(tmp_path / "ref"), "--sem-dims",
                       "0:4", "--cov-dims", "4:8", "--k", "1", "--out", str(tmp_path / "d.npz"))
    assert code == 0, err
    with np.load(tmp_path / "d.npz") as z:
        deg_ref = z["ood__far__x"]
        assert list(z["ood__far__x__ids"]) == list(ids[perm])
    aligned = np.empty_like(deg_ref)
    aligned[perm] = deg_ref                      # row perm[k] of the scored store = ref row k
    Store.from_arrays(tmp_path / "own", head=(w, b), splits={
        "id/test": idt, "ood/far/x": {"features": ood, "ids": ids, "extras": {
            "sem_shift": aligned[:, 0], "cov_shift": aligned[:, 1]}}})
    args = ["--method", "msp", "--levels", "2", "--min-count", "1", "--json"]
    code, by_file, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "cls"),
                             "--degrees", str(tmp_path / "d.npz"), *args)
    assert code == 0, err
    code, by_hand, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "own"), *args)
    assert code == 0, err
    assert json.loads(by_file)["results"] == json.loads(by_hand)["results"]
    np.savez(tmp_path / "old.npz", ood__far__x=deg_ref)
    code, _, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "cls"), "--degrees",
                       str(tmp_path / "old.npz"), *args)
    assert code == 2 and "has no image ids" in err
    np.savez(tmp_path / "part.npz", ood__far__x=deg_ref[:59], ood__far__x__ids=ids[perm][:59])
    code, _, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "cls"), "--degrees",
                       str(tmp_path / "part.npz"), *args)
    assert code == 2 and "1 of its 60 images have no degree" in err


def test_shift_degrees_default_k_is_the_is_ood_release_10():
    """shift_degrees' default is the 10th nearest ID row (brute-force cosine distances)."""
    rng = np.random.default_rng(5)
    id_f, ood_f = rng.normal(size=(40, 6)), rng.normal(size=(7, 6))
    sem = slice(0, 3)
    cos = (ood_f[:, sem] / np.linalg.norm(ood_f[:, sem], axis=1, keepdims=True)) @ (
        id_f[:, sem] / np.linalg.norm(id_f[:, sem], axis=1, keepdims=True)).T
    ref = 1.0 - np.sort(cos, axis=1)[:, ::-1][:, 9]
    got = shift.shift_degrees(id_f, ood_f, sem_dims=sem, cov_dims=slice(3, 6))
    assert shift.DEFAULT_K == 10
    np.testing.assert_allclose(got[:, 0], ref, atol=1e-5)


def test_laid_recovers_the_semantic_subspace():
    """Synthetic aligned features f = [s, c] R^T: W's first half spans R's first half."""
    rng = np.random.default_rng(0)
    dim, h, n = 8, 4, 1500
    rot, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    sem_pool, cov_pool = rng.normal(size=(100, h)), rng.normal(size=(40, h))
    i1, i2, j1, j2 = (rng.integers(0, m, n) for m in (100, 100, 40, 40))

    def emb(s, c):
        return np.concatenate([s, c], axis=1) @ rot.T

    st, ss, cs = emb(sem_pool[i1], cov_pool[j1]), emb(sem_pool[i2], cov_pool[j1]), emb(
        sem_pool[i1], cov_pool[j2])
    w = shift.fit_laid(st, ss, cs, shift.LaidConfig(margin=1.0, steps=400, lr=0.02))
    p_true = rot[:, :h] @ rot[:, :h].T
    p_w = w[:, :h] @ np.linalg.pinv(w[:, :h])
    p_id = np.eye(dim)[:, :h] @ np.eye(dim)[:, :h].T
    assert np.linalg.norm(p_w - p_true) < 0.25 < np.linalg.norm(p_id - p_true)
    assert np.linalg.norm(w.T @ w - np.eye(dim)) < 0.2
    # image features with the same alignment: LAID semantic degrees follow the true ones
    id_f = emb(sem_pool[:50], cov_pool[rng.integers(0, 40, 50)])
    ood_f = emb(rng.normal(size=(60, h)), cov_pool[rng.integers(0, 40, 60)])
    got = shift.shift_degrees(id_f, ood_f, laid=w)
    ref = shift.shift_degrees(id_f, ood_f, laid=rot)
    assert pearsonr(got[:, 0], ref[:, 0])[0] > 0.95
    with pytest.raises(UsageError, match="even"):
        shift.fit_laid(st[:, :7], ss[:, :7], cs[:, :7])


# ------------------------------------------------------------------------------ lists2spec
def test_lists2spec_openood_isood_and_facets_rules(tmp_path):
    """OpenOOD names (ID by directory, near/far by table or enclosing dir, csid, val), IS-OOD
    cells (train + val lists of a cell merged) and FACETS lines (split by OODness)."""
    images = tmp_path / "images"
    cats = {"id_a": skdata.astronaut(), "id_b": skdata.coffee(), "o1": skdata.brick(),
            "o2": skdata.grass(), "o3": skdata.gravel(), "o4": skdata.camera()}
    names = {k: save_crops(images / k, v, 6) for k, v in cats.items()}
    base = tmp_path / "benchmark_imglist"
    lists = base / "cifar10"
    iso = base / "isood" / "imagenet21k"

    def write(path, lines):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")

    write(lists / "train_cifar10.txt", [f"id_a/{n} 0" for n in names["id_a"][:4]]
          + [f"id_b/{n} 1" for n in names["id_b"][:4]])
    write(lists / "test_cifar10.txt", [f"id_a/{n} 0" for n in names["id_a"][4:]]
          + [f"id_b/{n} 1" for n in names["id_b"][4:]])
    write(lists / "test_mnist.txt", [f"o1/{n} 0" for n in names["o1"]])
    write(lists / "val_tin.txt", [f"o2/{n} 0" for n in names["o2"][:3]])
    write(lists / "near" / "test_mine.txt", [f"o2/{n} 0" for n in names["o2"][3:]])
    write(lists / "test_imagenet_r.txt", [f"id_a/{n} 0" for n in names["id_a"]])
    write(iso / "train" / "cov_0_sem_1.txt", [f"./o3/{n}" for n in names["o3"][:3]])
    write(iso / "val" / "cov_0_sem_1.txt", [f"./o3/{n}" for n in names["o3"][3:]])
    write(iso / "train" / "cov_1_sem_0.txt", [f"./o4/{n}" for n in names["o4"]])
    result = lists_to_spec(base, images, tmp_path / "spec.toml")
    got = {s["name"]: (s["usage"], s["rows"]) for s in result["splits"]}
    assert got == {"id/test": ("test", 4), "id/train": ("train", 8),
                   "ood/near/mine": ("test", 3), "csid/imagenet_r": ("test", 6),
                   "ood/far/mnist": ("test", 6), "ood/near/tin_val": ("val", 3),
                   "ood/shift/cov0_sem1/isood": ("test", 6),
                   "ood/shift/cov1_sem0/isood": ("test", 6)}
    spec = load_spec(tmp_path / "spec.toml")
    assert {s.name for s in spec.splits} == set(got)
    merged = next(s for s in spec.splits if s.name == "ood/shift/cov0_sem1/isood")
    assert Path(merged.source["imagelist"]).read_text().split() == [
        f"./o3/{n}" for n in names["o3"]]

    facets = tmp_path / "facets"
    write(facets / "test.txt", [f"0 places 1 id_b/{n}" for n in names["id_b"][:2]]
          + [f"1 sun397 5 o1/{n}" for n in names["o1"][:3]] + [f"1 imagenet 7 o2/{names['o2'][0]}"])
    # class indices of "places" are the model's own only when declared so
    with pytest.raises(UsageError, match=r"test.txt' line 1: ID class '1' of source 'places' "
                                         r"cannot be mapped.*--own-index-source places"):
        lists_to_spec(facets, images, tmp_path / "f.toml")
    result = lists_to_spec(facets, images, tmp_path / "f.toml", own_index_sources=("places",))
    got = {s["name"]: (s["usage"], s["rows"]) for s in result["splits"]}
    assert got == {"id/test": ("test", 2), "ood/facets/sun397": ("test", 3),
                   "ood/facets/imagenet": ("test", 1)}
    fspec = load_spec(tmp_path / "f.toml")
    id_list = Path(next(s for s in fspec.splits if s.name == "id/test").source["imagelist"])
    assert id_list.read_text().split("\n")[:2] == [f"id_b/{n} 1" for n in names["id_b"][:2]]
    # by name or wnid through the model's class list (indices of that list, not the source's)
    model_classes = ["n01440764 tench", "/c/coffee_shop", "bedroom"]
    write(facets / "test.txt", [f"0 sun397 coffee_shop id_b/{names['id_b'][0]}",
                                f"0 imagenet n01440764 id_b/{names['id_b'][1]}",
                                f"0 places bedroom id_b/{names['id_b'][2]}",
                                f"1 imagenet 7 o2/{names['o2'][0]}"])
    lists_to_spec(facets, images, tmp_path / "g.toml", classes=model_classes)
    gspec = load_spec(tmp_path / "g.toml")
    assert gspec.classes == model_classes
    id_list = Path(next(s for s in gspec.splits if s.name == "id/test").source["imagelist"])
    assert [ln.split()[1] for ln in id_list.read_text().splitlines()] == ["1", "0", "2"]
    write(facets / "test.txt", [f"0 places 3 id_b/{names['id_b'][0]}",
                                f"0 sun397 kitchen id_b/{names['id_b'][1]}"])
    with pytest.raises(UsageError, match=r"line 1: ID class '3' of source 'places' is not in the "
                                         r"model's class list \(3 classes"):
        lists_to_spec(facets, images, tmp_path / "h.toml", classes=model_classes)
    with pytest.raises(UsageError, match="line 1: class index 3 does not fit the 3 classes"):
        lists_to_spec(facets, images, tmp_path / "h.toml", classes=model_classes,
                      own_index_sources=("places",))
    write(facets / "test.txt", [f"0 sun397 kitchen id_b/{names['id_b'][1]}"])
    with pytest.raises(UsageError, match="line 1: ID class 'kitchen' of source 'sun397' is not"):
        lists_to_spec(facets, images, tmp_path / "h.toml", classes=model_classes)
    write(lists / "facets_test.txt", ["0 places 0 id_a/000.png"])
    with pytest.raises(UsageError, match="both map to split 'id/test'"):
        lists_to_spec(base, images, tmp_path / "x.toml", own_index_sources=("places",))


def test_lists2spec_cli_and_grid(tmp_path, capsys):
    """OpenOOD + IS-OOD lists through the CLI, extraction and `protocol shift-grid`."""
    images = tmp_path / "images"
    cats = {"id_a": skdata.astronaut(), "id_b": skdata.coffee(), "o3": skdata.brick(),
            "o4": skdata.gravel()}
    names = {k: save_crops(images / k, v, 6) for k, v in cats.items()}
    root = tmp_path / "lists"
    (root / "cifar10").mkdir(parents=True)
    (root / "cifar10" / "train_cifar10.txt").write_text(
        "".join(f"id_a/{n} 0\nid_b/{n} 1\n" for n in names["id_a"][:3]))
    (root / "cifar10" / "test_cifar10.txt").write_text(
        "".join(f"id_a/{n} 0\n" for n in names["id_a"][3:])
        + "".join(f"id_b/{n} 1\n" for n in names["id_b"][3:]))
    for sub, cell, cat, part in (("train", "cov_0_sem_1", "o3", slice(0, 3)),
                                 ("val", "cov_0_sem_1", "o3", slice(3, 6)),
                                 ("train", "cov_1_sem_0", "o4", slice(0, 6))):
        d = root / "SynIS" / sub
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{cell}.txt").write_text("".join(f"./{cat}/{n}\n" for n in names[cat][part]))
    spec = tmp_path / "spec.toml"
    code, stdout, err = run(capsys, "protocol", "lists2spec", str(root), "--root", str(images),
                            "--out", str(spec), "--json")
    assert code == 0, err
    rows = {s["name"]: s["rows"] for s in json.loads(stdout)["splits"]}
    assert rows == {"id/test": 6, "id/train": 6, "ood/shift/cov0_sem1/SynIS": 6,
                    "ood/shift/cov1_sem0/SynIS": 6}
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    cell = st.split("ood/shift/cov0_sem1/SynIS")
    assert list(cell.ids) == [f"./o3/{n}" for n in names["o3"]]
    assert (np.asarray(cell.labels) == -1).all()
    code, stdout, err = run(capsys, "protocol", "shift-grid", str(tmp_path / "store"),
                            "--method", "msp", "--min-count", "5", "--json")
    assert code == 0, err
    res = json.loads(stdout)["results"][0]
    assert res["source"] == "splits" and res["levels"] == 8
    id_s = msp(st.split("id/test").logits)
    a = res["values"]["auroc"]
    assert a[0][1] == pytest.approx(auroc(id_s, msp(cell.logits)))
    assert a[1][0] == pytest.approx(auroc(id_s, msp(st.split("ood/shift/cov1_sem0/SynIS").logits)))
    assert a[0][0] is None and res["counts"][2][2] == 0
    code, stdout, _ = run(capsys, "protocol", "shift-grid", str(tmp_path / "store"), "--method",
                          "msp", "--min-count", "5")
    assert code == 0 and "N/A" in stdout and "semantic corr" in stdout


@pytest.mark.parametrize("args, message", [
    (["/no/such/dir", "--root", "/tmp", "--out", "x.toml"], "is not a directory"),
    (["{empty}", "--root", "/no/such/root", "--out", "x.toml"], "--root '/no/such/root'"),
])
def test_lists2spec_bad_inputs(tmp_path, capsys, args, message):
    args = [a.replace("{empty}", str(tmp_path)) for a in args]
    code, _, err = run(capsys, "protocol", "lists2spec", *args)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1


def test_shift_grid_without_cells_is_an_error(structured_store, capsys):
    code, _, err = run(capsys, "protocol", "shift-grid", str(structured_store.path), "--method",
                       "msp")
    assert code == 2 and "has no shift cells" in err


def test_osr_paper_layout_tests_every_open_class(tmp_path):
    """RS §2.6.1 evaluates "on the entire test set" (issue 46.2): under `protocol osr --layout
    paper` the default val_open is "paper" and ood/osr/open holds EVERY open class of the
    division (digits 7/3 seed 0: all three); featstore's "heldout" stays the default without
    the paper's layout, and a value the user gives is kept."""
    assert osr.resolve_val_open(None, "paper") == "paper"
    assert osr.resolve_val_open(None, "default") == "heldout"
    assert osr.resolve_val_open("heldout", "paper") == "heldout"
    division = osr.class_splits(10, (7, 3), [0])[0]
    spec = osr.split_spec(osr.load_data("digits"), division, tmp_path / "p", None,
                          val_open=osr.resolve_val_open(None, "paper"))
    sources = {sp.name: sp.source for sp in spec.splits}
    assert sources["ood/osr/open"]["classes"] == list(division.open)
    assert len(division.open) == 3
