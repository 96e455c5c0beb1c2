"""The thread policy (`scorers.threads`, DESIGN §5 "Threads").

References: the policy's formula computed by hand (`cores_free`, `threads_for`); threadpoolctl's
own report of the BLAS and OpenMP libraries' thread counts (`threadpool_info`), read inside a
real scorer's fit and score; the same scorer run with every thread count pinned to 1
(FEATSTORE_THREADS=1) for the 1-vs-2-thread agreement, on a D = 384 store (large enough that
OpenBLAS and FAISS really split their work over two threads).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from featstore import Store
from featstore.errors import UsageError
from scorers import get_scorer
from scorers.methods.vim import ViM
from scorers.threads import (
    PARALLEL_MIN_FLOPS,
    THREADS_ENV,
    affinity_cores,
    cores_free,
    fit_work,
    free_cores,
    limit_threads,
    set_user_threads,
    threads_for,
    user_threads,
)
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

#: scores under 1 and 2 threads agree within this, relative to max |score| on the split
#: pair: the float64 paths (ViM's eigh, MDS/RMDS whitening) measured <= 3.3e-9, the float32
#: FAISS search (KNN) <= 8.8e-7 (D = 512, 3000 train rows)
THREAD_RTOL = 1e-5
SCORED = ("id/test", "ood/far/faint")


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Store:
    arrays = structured_arrays(seed=1, num_classes=8, dim=384, n_train=2000, n_val=40,
                               n_test=300, n_ood=200)
    path = tmp_path_factory.mktemp("threads") / "store"
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


def test_cores_free_by_hand():
    """cores - max(load1 - own, running others), rounded half up, within [1, cores]."""
    assert cores_free(2, 0.1, 0.0, 0) == 2          # idle: 1.9 -> 2
    assert cores_free(2, 0.6, 0.0, 0) == 1          # 1.4 -> 1
    assert cores_free(2, 1.5, 0.0, 0) == 2 - 1      # 0.5 -> 1 (halves round up)
    assert cores_free(2, 1.1, 1.0, 0) == 2          # the load is this process's own
    assert cores_free(2, 0.0, 0.0, 1) == 1          # another runnable thread right now
    assert cores_free(2, 11.0, 0.0, 9) == 1         # never below 1
    assert cores_free(16, 3.2, 0.2, 2) == 13        # 16 - 3.0
    assert cores_free(4, -1.0, 0.0, 0) == 4         # never above the affinity


def test_user_count_and_size_threshold(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert user_threads() is None
    assert threads_for(PARALLEL_MIN_FLOPS / 2) == 1
    # the default reads no load: the same count whatever the machine is doing (the bits of a
    # factorization depend on it); FEATSTORE_THREADS=auto follows the free cores
    assert threads_for(PARALLEL_MIN_FLOPS * 10) == affinity_cores()
    assert 1 <= free_cores() <= affinity_cores()
    monkeypatch.setenv(THREADS_ENV, "auto")
    assert user_threads() is None and threads_for(PARALLEL_MIN_FLOPS / 2) == 1
    monkeypatch.setattr("scorers.threads.free_cores", lambda: 1)
    assert threads_for(PARALLEL_MIN_FLOPS * 10) == 1
    monkeypatch.setenv(THREADS_ENV, "3")
    assert threads_for(1.0) == 3 and threads_for(1e15) == 3
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(UsageError, match=THREADS_ENV):
            threads_for(1.0)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(UsageError, match="--threads"):
            set_user_threads(bad)
    set_user_threads(2)
    assert os.environ[THREADS_ENV] == "2"


def test_fit_work_by_hand(wide):
    """rows * w^2 + 9 w^3 per fit split: 2000 * 384^2 + 9 * 384^3 for a features scorer."""
    assert fit_work(wide, ["id/train"], ["features"]) == 2000 * 384 ** 2 + 9 * 384 ** 3
    assert fit_work(wide, ["id/train"], ["logits"]) == 2000 * 8 ** 2 + 9 * 8 ** 3


class RecordingViM(ViM):
    """ViM that records threadpoolctl's report of every BLAS / OpenMP library at the start
    of its fit and of its score."""

    seen: list[tuple[str, set[int]]] = []

    def _fit(self, store):
        RecordingViM.seen.append(("fit", _counts()))
        super()._fit(store)

    def _score(self, split):
        RecordingViM.seen.append(("score", _counts()))
        return super()._score(split)


def _counts() -> set[int]:
    return {lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] in ("blas", "openmp")}


@pytest.mark.parametrize("count", [1, 2])
def test_policy_limits_every_library_inside_fit_and_score(wide, monkeypatch, count):
    """With FEATSTORE_THREADS=n every BLAS and OpenMP library runs n threads inside fit and
    score (whatever the limit outside); without it, a fit below PARALLEL_MIN_FLOPS runs 1."""
    import faiss  # noqa: F401  (its OpenBLAS and OpenMP are among the libraries checked)

    monkeypatch.setenv(THREADS_ENV, str(count))
    RecordingViM.seen = []
    scorer = RecordingViM(dim=64).fit(wide)
    scorer.score(wide.split("id/test"))
    assert RecordingViM.seen == [("fit", {count}), ("score", {count})], [
        (lib["filepath"], lib["num_threads"]) for lib in threadpool_info()]


def test_small_fit_runs_one_thread_by_default(shared_store, monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert fit_work(shared_store, ["id/train"], ["features"]) < PARALLEL_MIN_FLOPS
    RecordingViM.seen = []
    RecordingViM(dim=8).fit(shared_store)
    assert RecordingViM.seen == [("fit", {1})]


def _scores(store: Store, name: str, params: dict) -> np.ndarray:
    scorer = get_scorer(name, **params).fit(store)
    return np.concatenate([scorer.score(store.split(s)) for s in SCORED])


@pytest.mark.parametrize("name,params", [("vim", {"dim": 128}), ("rmds", {}),
                                         ("knn", {"K": 10})])
def test_one_and_two_threads_agree(wide, monkeypatch, name, params):
    """Same thread count: the same bits. 1 vs 2 threads: within THREAD_RTOL of max |score|."""
    monkeypatch.setenv(THREADS_ENV, "1")
    one = _scores(wide, name, params)
    monkeypatch.setenv(THREADS_ENV, "2")
    two, again = _scores(wide, name, params), _scores(wide, name, params)
    assert np.array_equal(two, again), name
    scale = float(np.max(np.abs(one)))
    np.testing.assert_allclose(two, one, rtol=0, atol=THREAD_RTOL * scale, err_msg=name)


def test_cli_threads_option(shared_store, capsys, monkeypatch):
    """`--threads 0` is a usage error naming the option; `--threads 1` sets the count."""
    monkeypatch.setenv(THREADS_ENV, "4")  # restored after the test
    code, _, err = run_cli(capsys, "score", shared_store.path, "--method", "msp",
                           "--threads", "0", "--no-cache")
    assert code == 2 and "--threads" in err
    code, _, err = run_cli(capsys, "score", shared_store.path, "--method", "msp",
                           "--threads", "1", "--no-cache", "--json")
    assert code == 0, err
    assert os.environ[THREADS_ENV] == "1"


def test_a_block_held_by_another_thread_does_not_skip_this_threads_limit(monkeypatch):
    """limit_threads' "already in a block of this count" shortcut is per thread: while a
    background thread sits inside limit_threads(1), this thread's limit_threads(1) still sets
    every BLAS / OpenMP library to 1 (reference: threadpoolctl's own report), and the
    libraries are back at their counts after both blocks."""
    import threading

    import faiss  # noqa: F401  (its OpenBLAS and OpenMP are among the libraries checked)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2):  # every library at 2 outside the blocks
        entered, release = threading.Event(), threading.Event()

        def hold() -> None:
            with limit_threads(1):
                entered.set()
                release.wait(30)

        worker = threading.Thread(target=hold)
        worker.start()
        try:
            assert entered.wait(30)
            with threadpool_limits(2):  # as if the other thread's block were not there
                with limit_threads(1):
                    inside = _counts()
        finally:
            release.set()
            worker.join(30)
        assert inside == {1}
        assert _counts() == {2}


LATE_IMPORT = r"""
import json
from threadpoolctl import threadpool_info
import faiss
from scorers.threads import blas_controller, limit_threads
blas_controller()               # made after FAISS, before torch and scikit-learn are imported
import sklearn.cluster, torch   # each brings its own OpenMP runtime (libgomp)
from threadpoolctl import threadpool_limits
with threadpool_limits(2):
    with limit_threads(1):
        inside = sorted((lib["filepath"], lib["num_threads"]) for lib in threadpool_info()
                        if lib["user_api"] in ("blas", "openmp"))
print(json.dumps(inside))
"""


def test_libraries_imported_after_the_controller_are_limited():
    """A fresh interpreter imports FAISS, makes the controller, then imports scikit-learn and
    torch (their libgomp copies load then): limit_threads(1) still holds every BLAS and
    OpenMP library at 1 (reference: threadpoolctl's own report, which rediscovers them)."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", THREADS_ENV)}
    proc = subprocess.run([sys.executable, "-c", LATE_IMPORT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    inside = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(inside) >= 3, inside
    assert {count for _, count in inside} == {1}, inside
