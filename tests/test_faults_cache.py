"""Fault injection, score-cache and resource-limit class (issue 36): a scores.h5 damaged by a
write that hit `ulimit -f`, one whose method entry is a dataset instead of a group, a NaN in a
cached entry. Real processes under a real RLIMIT_FSIZE, real HDF5 files; reference: the scores
of the same store computed with the cache off (`--no-cache`), which the cached path must equal
exactly."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

from featstore import Store
from scorers.cache import SCORES_FILE, ScoreCache
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
METHODS = ("msp", "energy", "mls")


def _store(path: Path) -> Path:
    arrays = structured_arrays(num_classes=3, dim=8, n_train=40, n_val=20, n_test=30, n_ood=30)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return path


def _eval(capsys, store: Path, *extra: str) -> dict:
    args = ["eval", store, "--json", "--boot", "20"]
    for m in METHODS:
        args += ["--method", m]
    code, out, err = run_cli(capsys, *args, *extra)
    assert code == 0 and "unexpected" not in err, err
    return json.loads(out)


def _aurocs(result: dict) -> dict:
    return {m: {s: v["auroc"] for s, v in r["splits"].items()}
            for m, r in result["methods"].items()}


def _limited_eval(store: Path, limit: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent),
               OMP_NUM_THREADS="1")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    args = [sys.executable, "-m", "featstore", "eval", str(store), "--boot", "20"]
    for m in METHODS:
        args += ["--method", m]
    return subprocess.run(args, env=env, preexec_fn=cap, capture_output=True, text=True,
                          timeout=300)


def test_file_size_limit_while_caching_is_a_warning_not_a_crash(tmp_path, capsys):
    """Issue 36 item 3: `ulimit -f 20; featstore eval --method msp --method energy --method
    mls` segfaulted (rc 139) writing scores.h5, and every later eval failed with `unexpected
    KeyError` until scores.h5 was deleted by hand."""
    store = _store(tmp_path / "s")
    reference = _eval(capsys, store, "--no-cache")
    done = _limited_eval(store, 20 * 1024)
    assert done.returncode == 0, done.stderr
    assert "score cache" in done.stderr and "file-size limit" in done.stderr
    assert "unexpected" not in done.stderr
    assert not (store / SCORES_FILE).exists() or (store / SCORES_FILE).stat().st_size <= 20480
    assert _aurocs(_eval(capsys, store)) == _aurocs(reference)   # later evals work


def test_damaged_scores_h5_is_a_miss_and_is_rebuilt(tmp_path, capsys):
    """A scores.h5 cut short or overwritten with junk (what a failed write leaves) is a cache
    miss: eval scores again, equals --no-cache, and rewrites a readable cache."""
    store = _store(tmp_path / "s")
    reference = _eval(capsys, store, "--no-cache")
    _eval(capsys, store)
    data = (store / SCORES_FILE).read_bytes()
    for damaged in (data[: len(data) // 2], b"\x89HDF\r\n\x1a\n" + b"\0" * 600, b"junk"):
        (store / SCORES_FILE).write_bytes(damaged)
        assert _aurocs(_eval(capsys, store)) == _aurocs(reference)
        with h5py.File(store / SCORES_FILE, "r") as fh:
            assert sorted(fh) == sorted(METHODS)


def test_method_entry_that_is_a_dataset_is_replaced(tmp_path, capsys):
    """Issue 36 item 14: a scores.h5 whose /msp is a dataset, not a group, gave `unexpected
    AttributeError`."""
    store = _store(tmp_path / "s")
    reference = _eval(capsys, store, "--no-cache")
    with h5py.File(store / SCORES_FILE, "w") as fh:
        fh["msp"] = np.zeros(3)
    assert _aurocs(_eval(capsys, store)) == _aurocs(reference)
    with h5py.File(store / SCORES_FILE, "r") as fh:
        assert isinstance(fh["msp"], h5py.Group)


def test_nan_in_a_cached_entry_is_recomputed(tmp_path, capsys):
    """Issue 36 item 14: a NaN in a cached entry was used instead of recomputed."""
    store = _store(tmp_path / "s")
    _eval(capsys, store)
    st = Store.open(store)
    split = st.split("id/test")
    with h5py.File(store / SCORES_FILE, "r") as fh:
        (key,) = list(fh["msp"])
        params = json.loads(fh[f"msp/{key}/id__test"].attrs["params"])   # the cache's key
        good = fh[f"msp/{key}/id__test"][()]
    cache = ScoreCache(st)
    assert np.array_equal(cache.get("msp", params, split), good)
    assert np.isfinite(good).all()
    with h5py.File(store / SCORES_FILE, "a") as fh:
        fh[f"msp/{key}/id__test"][3] = np.nan
    assert cache.get("msp", params, split) is None
    code, out, err = run_cli(capsys, "score", store, "--method", "msp", "--split", "id/test",
                             "--json")
    assert code == 0, err
    assert np.array_equal(cache.get("msp", params, split), good)   # rewritten with the real ones
