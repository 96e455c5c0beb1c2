"""The library functions behind the commands (issue 18 item 5: the CLI parses, calls one of
these and prints), tested without the CLI, on real files and small real stores.

References, per test: the manifest and `os.stat` (store summaries); NumPy's own mean / std /
min / max and np.load (score summaries, .npz / .npy files); hand-written expected values
(grid checks, tiers, similarity.tsv text, OSR training defaults, level means of a hand-made
grid); WordNet path / LCH / Wu-Palmer through test_wordnet's hand formula."""

from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from featstore import Store
from featstore.errors import InputError, UsageError
from featstore.store.fileio import atomic_save_npy, atomic_save_npz, atomic_write_output
from featstore.store.summary import human_bytes, store_summary, verified_summary
from tests.helpers.stores import structured_arrays

SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("command_library")
    arrays = structured_arrays(**SMALL)
    Store.from_arrays(root / "s", head=arrays["head"], splits=arrays["splits"])
    return Store.open(root / "s")


# --------------------------------------------------------------------------- store summaries
def test_human_bytes_by_hand():
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 5 * 1024**2, 3 * 1024**4,
                                     2048 * 1024**4)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 TiB", "2048.0 TiB"]


def test_store_summary_is_the_manifest_plus_file_sizes(small_store):
    summary = store_summary(small_store)
    manifest = json.loads((small_store.path / "store.json").read_text())
    assert summary["path"] == str(small_store.path)
    assert summary["feature_dim"] == 8 and summary["num_classes"] == 3
    assert [s["name"] for s in summary["splits"]] == list(manifest["splits"])
    for s in summary["splits"]:
        entry = manifest["splits"][s["name"]]
        assert s["size_bytes"] == os.stat(small_store.path / entry["file"]).st_size > 0
        assert (s["role"], s["usage"], s["num_rows"], s["complete"]) == (
            entry["role"], entry.get("usage"), entry["num_rows"], True)
    rows = {s["name"]: s["num_rows"] for s in summary["splits"]}
    assert rows["id/train"] == 60 and rows["id/test"] == 30 and rows["ood/near/blend_val"] == 10
    assert "verify" not in summary
    assert verified_summary(small_store, verify=True)["verify"] == {"ok": True, "problems": []}


# --------------------------------------------------------------------------- atomic outputs
def test_atomic_write_output_replaces_whole_and_keeps_mode(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old contents that are longer than the new ones\n")
    atomic_write_output(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary left


def test_atomic_write_output_failure_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text("the previous result\n")

    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:  # the write reached the temporary, the fsync fails
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left") as exc:
        atomic_write_output(path, "a new result that never lands\n")
    assert exc.value.filename == str(path) and exc.value.errno == 28
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_text() == "the previous result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    with pytest.raises(FileNotFoundError) as exc:
        atomic_write_output(tmp_path / "missing" / "r.json", "x")
    assert exc.value.filename == str(tmp_path / "missing" / "r.json")


def test_atomic_npz_npy_append_suffix_like_numpy(tmp_path):
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    written = atomic_save_npz(tmp_path / "scores", {"x": a, "y": a[0]})
    assert written == tmp_path / "scores.npz"  # as np.savez names it
    with np.load(written) as z:
        assert sorted(z.files) == ["x", "y"] and np.array_equal(z["x"], a)
    written = atomic_save_npy(tmp_path / "W", a)
    assert written == tmp_path / "W.npy" and np.array_equal(np.load(written), a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy", "scores.npz"]


def test_eval_out_is_written_atomically(tmp_path, capsys, small_store, monkeypatch):
    """`featstore eval --out`: the file is the JSON the command prints; when the write fails,
    a previous results file is left whole."""
    from tests.helpers.cli import run_cli

    out = tmp_path / "r.json"
    code, stdout, err = run_cli(capsys, "eval", small_store.path, "--method", "msp", "--ci",
                                "0", "--out", out, "--json")
    assert code == 0, err
    assert json.loads(out.read_text())["methods"]["msp"]["groups"] == json.loads(stdout)[
        "methods"]["msp"]["groups"]
    out.write_text("previous\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "full")))
    code, _, err = run_cli(capsys, "eval", small_store.path, "--method", "msp", "--ci", "0",
                           "--no-cache", "--out", out)
    assert code == 1 and "full" in err and str(out) in err
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# --------------------------------------------------------------------------- score
def test_score_store_summary_and_saved_scores(tmp_path, small_store):
    from scorers import get_scorer
    from scorers.score_run import score_stats, score_store

    result = score_store(small_store, "energy", {"temperature": 2.0}, ["id/test", "ood/far/faint"],
                         use_cache=False, save=tmp_path / "e.npz")
    reference = get_scorer("energy", temperature=2.0).fit(small_store)
    for name in ("id/test", "ood/far/faint"):
        s = reference.score(small_store.split(name))
        assert result["splits"][name] == {"n": s.size, "mean": s.mean(), "std": s.std(),
                                          "min": s.min(), "max": s.max()}
    assert result["params_used"] == {"temperature": 2.0} and result["adjusted"] == []
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == ["id__test", "ood__far__faint"]
        np.testing.assert_array_equal(z["id__test"], reference.score(small_store.split("id/test")))
    assert score_stats(np.array([1.0, 2.0, 6.0])) == {"n": 3, "mean": 3.0,
                                                       "std": math.sqrt(14 / 3), "min": 1.0,
                                                       "max": 6.0}


# --------------------------------------------------------------------------- sweep grid check
def test_check_grid_messages():
    from scorers.sweep import check_grid

    check_grid("knn", {}, {"K": [1, 5]})
    with pytest.raises(UsageError, match=r"^--grid 'Q': scorer 'knn': unknown grid parameter "
                                         r"'Q' \(valid: K, bank_fraction, index, "
                                         r"recall_target, seed\)$"):
        check_grid("knn", {}, {"Q": [1]})
    with pytest.raises(UsageError, match=r"^--grid K=0: "):
        check_grid("knn", {}, {"K": [5, 0]})
    with pytest.raises(UsageError, match=r"^grid dim=-3: "):
        check_grid("vim", {}, {"dim": [-3]}, what="grid")


def test_read_results(tmp_path):
    from scorers.compare import read_results

    good = tmp_path / "a.json"
    good.write_text(json.dumps({"methods": {}, "ood_splits": []}))
    assert read_results([good, good]) == [{"methods": {}, "ood_splits": []}] * 2
    (tmp_path / "b.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="b.json' has no 'methods'/'ood_splits'"):
        read_results([good, tmp_path / "b.json"])
    with pytest.raises(InputError, match="c.json' is not a results JSON"):
        read_results([tmp_path / "c.json"])


# --------------------------------------------------------------------------- protocols
def test_shift_grid_payload_by_hand():
    from featstore.workflows.protocols.shift import ShiftGrid
    from featstore.workflows.protocols.shift_run import degrees_summary, grid_payload

    nan = float("nan")
    values = np.array([[50.0, 60.0], [nan, 80.0]])  # rows covariate, columns semantic
    grid = ShiftGrid(levels=2, counts=np.array([[10, 10], [3, 12]]), values={"auroc": values})
    p = grid_payload({"method": "msp", "source": "splits", "splits": ["a"], "grid": grid,
                      "edges": None}, "auroc")
    assert p["values"]["auroc"] == [[50.0, 60.0], [None, 80.0]]
    assert p["level_means"] == {"semantic": [50.0, 70.0], "covariate": [55.0, 80.0]}
    assert p["outside"] == 0 and p["levels"] == 2 and p["counts"] == [[10, 10], [3, 12]]
    deg = {"ood/x": np.array([[0.1, 0.5], [0.3, 0.7]])}
    assert degrees_summary(deg) == {"ood/x": {"rows": 2, "semantic_mean": pytest.approx(0.2),
                                              "covariate_mean": pytest.approx(0.6)}}


def test_shift_grids_option_errors(small_store):
    from featstore.workflows.protocols.shift_run import shift_grids

    with pytest.raises(UsageError, match="--metric 'acc': expected one of auroc"):
        shift_grids(small_store, ["msp"], "acc")
    with pytest.raises(UsageError, match="--min-count 0: must be >= 1"):
        shift_grids(small_store, ["msp"], min_count=0)


def test_laid_files_round_trip(tmp_path):
    from featstore.workflows.protocols.shift import LaidConfig
    from featstore.workflows.protocols.shift_run import fit_laid_files

    rng = np.random.default_rng(0)
    for name in ("st", "ss", "cs"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(16, 6)).astype(np.float32))
    res = fit_laid_files(tmp_path / "st.npy", tmp_path / "ss.npy", tmp_path / "cs.npy",
                         tmp_path / "out" / "W.npy", LaidConfig(steps=5))
    w = np.load(tmp_path / "out" / "W.npy")
    assert res["shape"] == list(w.shape) == [6, 6]
    assert res["orthogonality_error"] == pytest.approx(float(np.linalg.norm(w.T @ w - np.eye(6))))
    with pytest.raises(InputError, match="--standard .*file not found"):
        fit_laid_files(tmp_path / "nope.npy", tmp_path / "ss.npy", tmp_path / "cs.npy",
                       tmp_path / "W2.npy", LaidConfig(steps=1))


def test_similarity_tsv_text_by_hand():
    from featstore.workflows.protocols.wordnet import CandidateScore
    from featstore.workflows.protocols.wordnet_run import similarity_tsv

    s = CandidateScore("cat", "cat.n.01", 0.5381, "dog", "dog.n.01", 0.2, 0.5575, 0.857142857)
    assert similarity_tsv([s]) == (
        "class\tsynset\tsim\tpath\tlch_norm\twup\tnearest_id_class\tnearest_synset\n"
        "cat\tcat.n.01\t0.538100\t0.200000\t0.557500\t0.857143\tdog\tdog.n.01\n")


def test_wordnet_assignment_writes_similarity_tsv(tmp_path):
    from featstore.workflows.protocols.wordnet_run import wordnet_assignment
    from tests.helpers.references import hand_sim

    (tmp_path / "id.txt").write_text("bedroom.n.01\ndog.n.01\n")
    (tmp_path / "c.txt").write_text("bathroom.n.01\ncat.n.01\n")
    res = wordnet_assignment(str(tmp_path / "id.txt"), str(tmp_path / "c.txt"),
                             thresholds=[0.40, 0.50], out=tmp_path / "wn")
    assert res["assignments"] == {"T40": {"bathroom.n.01": "id", "cat.n.01": "ood"},
                                  "T50": {"bathroom.n.01": "id", "cat.n.01": "id"}}
    rows = [line.split("\t") for line in
            (tmp_path / "wn" / "similarity.tsv").read_text().splitlines()[1:]]
    assert [r[0] for r in rows] == ["bathroom.n.01", "cat.n.01"]
    assert float(rows[0][2]) == pytest.approx(hand_sim(2, 8 / 9), abs=1e-6)
    assert float(rows[1][2]) == pytest.approx(hand_sim(4, 6 / 7), abs=1e-6)
    assert rows[1][6] == "dog.n.01"
    assert (tmp_path / "wn" / "T40" / "assignment.txt").read_text() == (
        "bathroom.n.01 id\ncat.n.01 ood\n")
    with pytest.raises(UsageError, match="--base-spec needs --images"):
        wordnet_assignment("a", "b", base_spec=tmp_path / "x.toml")


def test_tier_assignment(tmp_path):
    from featstore.workflows.protocols.wordnet_run import tier_assignment

    (tmp_path / "t.txt").write_text("beach 0\nboathouse 1\nhall 2\nsky 3\n")
    res = tier_assignment(tmp_path / "t.txt", out=tmp_path / "o")
    assert res["assignments"]["T1"] == {"beach": "id", "boathouse": "id", "hall": "ood",
                                        "sky": "ood"}
    assert res["assignments"]["T2"]["hall"] == "id" and res["assignments"]["T2"]["sky"] == "ood"
    assert (tmp_path / "o" / "T2" / "assignment.txt").read_text() == (
        "beach id\nboathouse id\nhall id\nsky ood\n")


def test_osr_train_settings():
    from featstore.workflows.experiments.osr_run import DIGITS_TRAIN, osr_train_settings

    assert osr_train_settings(True) == DIGITS_TRAIN == {
        "epochs": 6, "batch_size": 32, "lr": 0.05, "augment": "crop", "nesterov": True,
        "schedule": "cosine"}
    assert osr_train_settings(False) == {"preset": "remote-sensing", "batch_size": 128,
                                         "augment": "flip+crop"}
    assert osr_train_settings(True, epochs=2, lr=0.1)["epochs"] == 2
    assert osr_train_settings(False, preset="openood")["preset"] == "openood"
    with pytest.raises(UsageError):
        osr_train_settings(True, augment="sideways")


def test_facets_markdown_written_atomically(tmp_path):
    from featstore.workflows.protocols.facets import markdown_table, write_markdown_table

    table = {"methods": ["msp"], "rows": [], "skipped": {}}
    path = write_markdown_table(tmp_path / "deep" / "f.md", table)
    assert path.read_text(encoding="utf-8") == markdown_table(table)


# --------------------------------------------------------------------------- demo, gbench
def test_build_gbench_command_checks_before_writing(tmp_path):
    from featstore.workflows.demo.run import build_gbench_command

    with pytest.raises(UsageError, match="--backbone 'big': expected one of"):
        build_gbench_command(tmp_path / "g", backbone="big")
    with pytest.raises(InputError, match="--weights .*: file not found"):
        build_gbench_command(tmp_path / "g", weights=tmp_path / "none.pt")
    assert not (tmp_path / "g").exists()


def test_run_demo_command_checks_options_first(tmp_path):
    from featstore.workflows.demo.run import run_demo_command

    with pytest.raises(UsageError, match="backbone"):
        run_demo_command(tmp_path / "d", backbone="huge")
    with pytest.raises(UsageError, match="scale"):
        run_demo_command(tmp_path / "d", scale=0.0)
    assert not (tmp_path / "d").exists()
