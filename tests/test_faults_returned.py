"""Fault injection, faults that came back (issue 48): NaN rows behind a consistent manifest,
untrusted text in every Markdown / HTML writer, one-class stores, all-NaN scores, grid values
outside a scorer's range, matplotlib's cache directory under an unusable HOME. Real HDF5
stores edited with h5py (the manifest's sha256 made to agree, so only the value checks can
catch the fault), real runs of `featstore run`, real subprocesses. References: the rows where
NaN was planted (chosen by hand), the exact escaped text (written by hand), and by hand: a
softmax over one logit is 1 on every row, so every softmax score of a one-class store is one
constant."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from featstore import ArrayStore, Store
from featstore.errors import InputError
from featstore.store.textsafe import html_text, markup_text
from featstore.store.values import NonFiniteError
from featstore.workflows.experiments import load_experiment, run_experiment
from featstore.workflows.experiments.paper_layout import paper_markdown
from featstore.workflows.protocols.facets import facets_table, markdown_table
from scorers import get_scorer
from scorers.registry import REGISTRY
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)
EVIL = "M<script>alert(1)</script>\n| forged | row |"


def _store(path: Path, extras: bool = False) -> Path:
    arrays = structured_arrays(**SMALL)
    if extras:  # a confidence extra on every split (confbranch reads it)
        for split in arrays["splits"].values():
            n = split["features"].shape[0]
            split["extras"] = {"confidence": np.linspace(0.1, 0.9, n, dtype=np.float32)}
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return path


def _plant_nan(store: Path, split: str, key: str, rows: list[int]) -> None:
    """NaN at `rows` of dataset `key` of a split file, then the manifest's sha256 and size made
    to agree (its non-finite record still says finite): a consistent store whose values only a
    read-time check can catch."""
    path = store / "splits" / f"{split.replace('/', '__')}.h5"
    with h5py.File(path, "r+") as fh:
        values = fh[key][()]
        values[rows] = np.nan
        fh[key][...] = values
    manifest = json.loads((store / "store.json").read_text())
    entry = manifest["splits"][split]
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    entry["size_bytes"] = path.stat().st_size
    (store / "store.json").write_text(json.dumps(manifest))
    (store / ".featstore.stat").unlink(missing_ok=True)


# ------------------------------------------------------------- item 1: NaN behind the record


def test_nan_rows_behind_a_consistent_manifest_fail_knn_eval_naming_split_and_rows(
        tmp_path, capsys):
    """Issue 48 item 1: knn scored a split whose features hold NaN rows (manifest consistent)
    and eval exited 0 with a table. Now exit 1 naming the split, the field and rows 2, 5,
    with --allow-nonfinite too (the file is not what its record says)."""
    store = _store(tmp_path / "s")
    _plant_nan(store, "ood/far/faint", "features", [2, 5])
    assert json.loads((store / "store.json").read_text())["splits"]["ood/far/faint"][
        "nonfinite"] == {}
    for extra in ([], ["--allow-nonfinite"]):
        code, out, err = run_cli(capsys, "eval", store, "--method", "knn", "--no-cache",
                               "--boot", "2", *extra)
        line = err.strip().splitlines()[-1]
        assert code == 1 and out == "", err
        assert line.startswith("error: ") and "unexpected" not in line
        assert "split 'ood/far/faint': rows 2, 5 of features" in line
        assert "record of non-finite rows" in line


@pytest.mark.parametrize("key,field,method", [("logits", "logits", "msp"),
                                              ("extra/confidence", "extra:confidence",
                                               "confbranch")])
def test_every_row_reader_checks_logits_and_extras_too(tmp_path, key, field, method):
    """The check is in the readers every scorer uses (`Split.read` / `iter_chunks` and
    `read_into`, hence `map_rows`), for logits and extras as for features."""
    store = _store(tmp_path / "s", extras=True)
    _plant_nan(store, "id/test", key, [7])
    st = Store.open(store)
    want = f"split 'id/test': rows 7 of {field}"
    with pytest.raises(NonFiniteError, match=want):
        st.split("id/test").read(field)
    with pytest.raises(NonFiniteError, match=want):
        list(st.split("id/test").iter_chunks(field, chunk_rows=4))
    scorer = get_scorer(method).fit(st)
    scorer.check_finite = False   # past the record's check, as eval's walk is
    with pytest.raises(NonFiniteError, match=want):
        scorer.score(st.split("id/test"))
    assert np.isfinite(scorer.score(st.split("id/val"))).all()   # the other splits score


def test_an_array_store_changed_after_creation_is_caught_where_read():
    arrays = structured_arrays(**SMALL)
    st = ArrayStore(arrays["head"], splits=arrays["splits"])
    split = st.split("id/test")
    np.asarray(split.features)[4, 0] = np.inf   # the caller's array, changed afterwards
    with pytest.raises(NonFiniteError, match=r"split 'id/test': rows 4 of features"):
        split.read("features")
    scorer = get_scorer("react").fit(ArrayStore(arrays["head"], splits={
        "id/train": arrays["splits"]["id/train"]}))
    scorer.check_finite = False
    with pytest.raises(NonFiniteError, match=r"rows 4 of features"):
        scorer.score(split)


# ------------------------------------------------------------- item 2: vim on NaN train rows


def test_vim_names_the_nan_rows_of_id_train_not_a_rank_problem(tmp_path, capsys):
    """Issue 48 item 2: `eval --method vim` on a store whose id/train holds NaN features said
    "no value of dim is valid ... span 0 directions" (or LinAlgError)."""
    store = _store(tmp_path / "s")
    _plant_nan(store, "id/train", "features", [3, 17])
    code, _, err = run_cli(capsys, "eval", store, "--method", "vim", "--no-cache")
    line = err.strip().splitlines()[-1]
    assert code == 1 and "split 'id/train': rows 3, 17 of features" in line, err
    assert "dim" not in line and "span" not in line and "unexpected" not in line


# ------------------------------------------------------------- item 3: every writer escapes


def _flagged_store(path: Path) -> Path:
    """A 4-class store whose logits always pick class 0: ID accuracy = chance, so every run
    over it carries the sanity flag `... near chance ... [transform] ...`."""
    rng = np.random.default_rng(0)
    c, d = 4, 6
    logits = np.zeros((40, c), np.float32)
    logits[:, 0] = 1.0
    splits = {name: {"features": rng.normal(size=(40, d)).astype(np.float32),
                     "logits": logits + rng.normal(0, 0.01, size=(40, c)).astype(np.float32),
                     **({"labels": np.arange(40) % c} if name.startswith("id") else {})}
              for name in ("id/train", "id/test", "ood/far/x")}
    Store.from_arrays(path, head=(rng.normal(size=(c, d)).astype(np.float32),
                                  np.zeros(c, np.float32)), splits=splits).close()
    return path


def _unsafe_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines()
            if "<script>" in ln or ln.lstrip().startswith("| forged")]


def test_every_markdown_and_html_writer_escapes_user_text(tmp_path):
    """Issue 48 item 3: results.md of `featstore run` held a method name's `<script>` line and
    forged table rows (its flagged-methods list). Every writer, the same hostile name: the
    runner's results.md, the paper layout, the FACETS table; HTML through html_text."""
    _flagged_store(tmp_path / "s0")
    exp = tmp_path / "exp.toml"
    exp.write_text('name = "ex<b>"\n[data]\nstores = ["s0"]\n'
                   f'[[method]]\nname = {json.dumps(EVIL)}\nscorer = "msp"\n'
                   '[[method]]\nname = "E|x"\nscorer = "mls"\n')
    result = run_experiment(load_experiment(exp), tmp_path / "out")
    assert result["aggregate"]["stores"][EVIL]["flags"]   # the flagged list is written
    md = (tmp_path / "out" / "results.md").read_text()
    assert _unsafe_lines(md) == [], md
    assert "- stores M&lt;script&gt;alert(1)&lt;/script&gt; \\| forged \\| row \\|: " in md
    assert "the \\[transform\\] and the labels" in md and "E\\|x" in md
    paper = paper_markdown(result, title=EVIL)
    assert _unsafe_lines(paper) == [] and "# M&lt;script&gt;" in paper
    table = facets_table([(EVIL.replace("\n", " "), Store.open(tmp_path / "s0"))],
                         ["msp"], tune=False)
    facets = markdown_table(table)
    assert _unsafe_lines(facets) == [] and "| M&lt;script&gt;" in facets
    assert html_text('<img onerror="x">\x1b') == "&lt;img onerror=&quot;x&quot;&gt;\\x1b"


# ------------------------------------------------------------- item 4: one class, all NaN


def _one_class_store(path: Path) -> Path:
    rng = np.random.default_rng(1)
    splits = {}
    for name, n in (("id/train", 40), ("id/val", 20), ("id/test", 40), ("ood/far/x", 30)):
        entry = {"features": np.abs(rng.normal(size=(n, 6))).astype(np.float32)}
        if name.startswith("id"):
            entry["labels"] = np.zeros(n, np.int64)
        splits[name] = entry
    head = (rng.normal(size=(1, 6)).astype(np.float32), np.zeros(1, np.float32))
    Store.from_arrays(path, head=head, splits=splits).close()
    return path


def test_one_class_store_skips_the_two_class_scorers_with_the_reason(tmp_path, capsys):
    """Issue 48 item 4: `eval --all` on a one-class store died with `unexpected ValueError:
    the max-softmax log-odds needs at least 2 classes`. By hand: softmax over one logit is 1,
    so msp, entropy, odin, ... are one constant; temp_scaling and fdbd are undefined."""
    store = _one_class_store(tmp_path / "s")
    code, _, err = run_cli(capsys, "eval", store, "--all", "--no-cache", "--boot", "2",
                           "--out", tmp_path / "r.json")
    assert code == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    two = sorted(n for n, c in REGISTRY.items() if c.min_classes == 2)
    assert {"msp", "temp_scaling", "fdbd", "entropy", "odin", "rmds"} <= set(two)
    for name in two:
        assert "needs at least 2 classes (the store has 1" in result["skipped"][name], name
    assert {"knn", "energy", "mds"} <= set(result["methods"])
    code, _, err = run_cli(capsys, "eval", store, "--method", "temp_scaling", "--no-cache")
    assert code == 1 and "unexpected" not in err and "at least 2 classes" in err, err


def test_all_nan_scores_under_allow_nonfinite_are_one_clear_error(tmp_path, capsys):
    """Issue 48 item 4: `--allow-nonfinite` on a split whose scores are all NaN printed
    `error: unexpected ValueError: split 'id/test': 40 non-finite scores`."""
    arrays = structured_arrays(**{**SMALL, "n_test": 40})
    arrays["splits"]["id/test"]["features"][:] = np.nan
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    code, _, err = run_cli(capsys, "eval", tmp_path / "s", "--method", "mls", "--no-cache",
                           "--allow-nonfinite")
    line = err.strip().splitlines()[-1]
    assert code == 1 and "unexpected" not in line, err
    assert line.startswith("error: split 'id/test': 40 non-finite scores (NaN/inf) of 40")


# ------------------------------------------------------------- item 5: grid values


def test_every_grid_value_is_checked_by_the_scorers_own_checks_at_validation(tmp_path):
    """Issue 48 item 5: K = 0 in `[method.grid]` must be refused when the experiment is read,
    with the valid range, for every scorer with an integer count parameter."""
    _store(tmp_path / "s")
    for scorer, key in (("knn", "K"), ("nnguide", "K"), ("oodl", "k")):
        if key not in REGISTRY[scorer].defaults:
            continue
        exp = tmp_path / f"{scorer}.toml"
        exp.write_text(f'name = "e"\n[data]\nstores = ["s"]\n[[method]]\nname = "R"\n'
                       f'scorer = "{scorer}"\n[method.grid]\n{key} = [5, 0]\n')
        with pytest.raises(InputError, match=rf"grid {key} = 0: .*must be an integer >= 1"):
            load_experiment(exp)


# ------------------------------------------------------------- item 6: FAISS


def test_faiss_that_cannot_load_names_the_cpu_build_to_install():
    """Issue 48 item 6 (the real `ulimit -v` run: tests/test_faults_limits.py): the message
    names the command that puts faiss-cpu in place of the GPU wheel, which is the `faiss`
    module as well (the two cannot sit side by side)."""
    from scorers.knn_index import _faiss_distributions, faiss_install_hint

    hint = faiss_install_hint(["faiss-gpu"])
    assert "`pip uninstall -y faiss-gpu && pip install faiss-cpu`" in hint
    assert 'README "CPU-only install"' in hint and "raise the limit" in hint
    assert faiss_install_hint([]).startswith("install the CPU build (`pip install faiss-cpu`")
    assert any(n.startswith("faiss") for n in _faiss_distributions())   # FAISS is installed


# ------------------------------------------------------------- item 7: matplotlib


def test_matplotlib_gets_a_private_dir_when_only_its_cache_dir_is_unusable(tmp_path,
                                                                          monkeypatch, caplog):
    """Issue 48 item 7: with $XDG_CONFIG_HOME writable and HOME unusable, matplotlib could not
    make its cache directory (~/.cache/matplotlib) and printed two warnings under `report -q`:
    only the config directory was checked. Reference: matplotlib's own directory rule
    (`matplotlib._get_config_or_cache_dir`) falls back to a temporary directory, with a
    warning, in the same environment."""
    import matplotlib

    from featstore.workflows.report import plots

    (tmp_path / "config").mkdir()
    monkeypatch.setenv("HOME", "/dev/null")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    plots._private_config_dir_if_needed()
    assert Path(os.environ["MPLCONFIGDIR"]).name.startswith("featstore-mpl-")
    monkeypatch.delenv("MPLCONFIGDIR")
    assert "/dev/null" not in matplotlib._get_config_or_cache_dir(matplotlib._get_xdg_cache_dir)
    assert "temporary cache directory" in caplog.text   # what -q could not silence
    monkeypatch.delenv("MPLCONFIGDIR")   # set by matplotlib's fallback
    monkeypatch.setenv("HOME", str(tmp_path))   # both usable: matplotlib's own directories
    plots._private_config_dir_if_needed()
    assert "MPLCONFIGDIR" not in os.environ


def test_markup_text_keeps_brackets_and_escapes_controls():
    """By hand: rich would take `[transform]` for a tag; escaped it prints as written."""
    assert markup_text("the [transform] and \x1b[2J") == "the \\[transform] and \\x1b[2J"
