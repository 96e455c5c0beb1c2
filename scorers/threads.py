"""The thread policy of every fit and score: how many threads BLAS/LAPACK (NumPy's, SciPy's and
FAISS's OpenBLAS) and OpenMP (FAISS's searches) may use, decided in this one place.

As implemented, for a call of about `flops` floating-point operations:

    threads_for(flops) = n                       if the user set n ($FEATSTORE_THREADS=n,
                                                 `--threads N` on the scoring commands)
                       = 1                       if flops < PARALLEL_MIN_FLOPS
                       = free_cores()            if $FEATSTORE_THREADS=auto
                       = A                       otherwise

    free_cores() = max(1, min(A, round(A - others)))
    others       = max(load1 - own_load, running - 1)

where A is the number of CPUs this process may run on (`os.sched_getaffinity`), load1 the
one-minute load average (`os.getloadavg`), own_load this process's share of it (its CPU-seconds
per second since it started, times 1 - exp(-age / 60 s), the weight the kernel's one-minute
average has given it so far), and running the number of runnable threads right now
(/proc/loadavg), the caller's own thread excluded.

The default never reads the machine's load: a LAPACK factorization's bits depend on the BLAS
thread count (numpy eigh of a 1280 x 1280 covariance: eigenvectors 7e-13 apart with 1 and 2
threads), and the same inputs must give the same scores bit for bit on one machine. Following
the load is the user's choice (`FEATSTORE_THREADS=auto`): faster on a busy machine, the same
bits only between runs that got the same count.

Why: OpenBLAS threads spin-wait for each other. On a machine whose cores are busy with other
work a 2-thread factorization waits for a core at every synchronization, and takes many times longer
than one thread (benchmarks/results/threads.md), so a second thread is
used only when a core is free for it, and only for work large enough to repay waking it
(`PARALLEL_MIN_FLOPS`; benchmarks/bench_threads.py measures where two threads start to pay
on an idle machine).

Where it applies: `Scorer.fit` and `Scorer.score` / `score_grid` run under
`blas_threads(work)` with the work estimated from the store (`fit_work`, `score_work`); the
row-block pool of `scorers.rowmap` runs `worker_threads()` workers with BLAS at one thread each.

Determinism: the thread count does not change what is computed, but a LAPACK factorization
or a FAISS search may round differently with another thread count; scores are the same bits
for the same thread count (the default's count depends on the CPUs and the problem's size
only), and agree within 1e-5 of max |score| between 1 and 2 threads (measured: ~3e-9 for the
float64 factorizations, ~9e-7 for KNN's float32 search; tests/scorers/test_threads.py).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

THREADS_ENV = "FEATSTORE_THREADS"
#: $FEATSTORE_THREADS=auto: large calls take the cores the machine's load leaves free
AUTO = "auto"
#: below this many flops a BLAS/LAPACK call runs on one thread (an n x n eigh is ~9 n^3
#: flops: n = 512 is 1.2e9; a (rows x D) Gram is rows * D^2: 4096 x 512 is 1.1e9)
PARALLEL_MIN_FLOPS = 1e9
#: the time constant of the kernel's one-minute load average (seconds)
LOAD_WINDOW_S = 60.0

_START = time.monotonic()


def user_threads() -> int | None:
    """The thread count the user set: $FEATSTORE_THREADS (>= 1), or None. A value that is not
    a positive integer is a UsageError naming the variable."""
    env = os.environ.get(THREADS_ENV)
    if not env or env == AUTO:
        return None
    try:
        value = int(env)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"${THREADS_ENV}={env!r}: expected a positive integer or {AUTO!r}")
    return value


def set_user_threads(count: int | None) -> None:
    """Set (or with None, keep) the user's thread count for this process and its children
    (`--threads N`: exported as $FEATSTORE_THREADS). UsageError unless count >= 1."""
    if count is None:
        return
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UsageError(f"--threads {count!r}: expected a positive integer")
    os.environ[THREADS_ENV] = str(count)


def affinity_cores() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_threads() -> int:
    """Workers of the row-block pool: the user's count, else the CPUs this process may use
    (the workers block on futures rather than spin, so a busy core costs them little)."""
    return user_threads() or affinity_cores()


def _running_others() -> int:
    """Runnable threads on the machine now, the caller excluded (0 where unknown)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - 1)


def _own_load() -> float:
    """This process's contribution to the one-minute load average, estimated from its
    CPU-seconds per second since import, weighted by how much of it the average has seen."""
    age = max(1e-3, time.monotonic() - _START)
    times = os.times()
    rate = (times.user + times.system) / age
    return rate * (1.0 - math.exp(-age / LOAD_WINDOW_S))


def cores_free(cores: int, load1: float, own_load: float, running_others: int) -> int:
    """max(1, min(cores, round(cores - others))), others = max(load1 - own_load,
    running_others): the cores left to this process (halves round up)."""
    others = max(load1 - own_load, float(running_others))
    return max(1, min(cores, int(math.floor(cores - others + 0.5))))


def free_cores() -> int:
    """Cores free for this process's threads now (module docstring), >= 1."""
    cores = affinity_cores()
    try:
        load1 = os.getloadavg()[0]
    except OSError:  # no load average: trust the affinity
        return cores
    return cores_free(cores, load1, _own_load(), _running_others())


def threads_for(flops: float) -> int:
    """Threads for a BLAS/LAPACK call (or a fit / score) of about `flops` operations."""
    user = user_threads()
    if user is not None:
        return user
    if flops < PARALLEL_MIN_FLOPS:
        return 1
    return free_cores() if os.environ.get(THREADS_ENV) == AUTO else affinity_cores()


_CONTROLLER: Any = None
# modules that bring BLAS / OpenMP libraries of their own when first imported: FAISS's
# OpenBLAS and OpenMP, torch's libgomp, scikit-learn's libgomp, Numba's OpenMP threading layer
LIBRARY_PACKAGES = ("faiss", "torch", "sklearn", "numba.np.ufunc.omppool")
_CONTROLLER_SAW: tuple[bool, ...] = ()


def _packages_loaded() -> tuple[bool, ...]:
    return tuple(name in sys.modules for name in LIBRARY_PACKAGES)


def _controller_stale() -> bool:
    """One of LIBRARY_PACKAGES was imported after the controller was made (its libraries are
    not in it yet)."""
    return _packages_loaded() != _CONTROLLER_SAW


def blas_controller() -> Any:
    """One `threadpoolctl.ThreadpoolController` over the loaded BLAS and OpenMP libraries
    (NumPy's, SciPy's, and those of FAISS, torch and scikit-learn once they are imported: it
    is made again the first time it is asked for after one of LIBRARY_PACKAGES is imported).
    `threadpool_limits` rediscovers the libraries on every call (it reads /proc/self/maps,
    which dominated sweeps over small stores); the controller discovers them once per set of
    imported LIBRARY_PACKAGES."""
    global _CONTROLLER, _CONTROLLER_SAW
    if _CONTROLLER is None or _controller_stale():
        import scipy.linalg  # noqa: F401  (loads SciPy's BLAS before the inspection)
        from threadpoolctl import ThreadpoolController  # lazy: on first use (above)

        _CONTROLLER = ThreadpoolController()
        _CONTROLLER_SAW = _packages_loaded()
    return _CONTROLLER


_LOCAL = threading.local()  # .blocks: this thread's enclosing limit_threads counts


def _blocks() -> list[int]:
    """The counts of this thread's enclosing limit_threads blocks (innermost last). Per
    thread: a block another thread holds (a scorer run in a background thread) says nothing
    about the limits this thread's code runs under."""
    blocks = getattr(_LOCAL, "blocks", None)
    if blocks is None:
        blocks = _LOCAL.blocks = []
    return blocks


@contextmanager
def limit_threads(count: int) -> Iterator[int]:
    """BLAS and OpenMP limited to `count` threads inside (restored after); yields count. Inside
    a block of this thread with the same count (a score inside score_grid) nothing is set
    again (a limit queries and sets every library), unless one of LIBRARY_PACKAGES was
    imported since (a KNN fit imports FAISS inside its block): then its libraries are limited
    too."""
    count = int(count)
    blocks = _blocks()
    if blocks and blocks[-1] == count and not _controller_stale():
        yield count
        return
    with blas_controller().limit(limits=count):
        blocks.append(count)
        try:
            yield count
        finally:
            blocks.pop()


@contextmanager
def blas_threads(flops: float) -> Iterator[int]:
    """BLAS and OpenMP limited to `threads_for(flops)` inside; yields that count."""
    with limit_threads(threads_for(flops)) as count:
        yield count


#: extra groups whose arrays are (N, w) matrices a scorer multiplies like the features
#: (`--feature-layers` pools, AdaSCALE's perturbed features): their width counts
_MATRIX_EXTRAS = ("extra:layer_features", "extra:adascale_features")


def _field_width(split: SplitLike, field: str) -> int:
    if field not in _MATRIX_EXTRAS:
        return int(split.dims.get(field, 1))
    group = field.removeprefix("extra:")
    names = [n for n in split.extra_names() if n.startswith(group + "/")]
    return max([1, *(int(split.extra(n).shape[1]) for n in names)])


def _width(split: SplitLike, fields: Sequence[str]) -> int:
    """The widest matrix a scorer multiplies on `split`: the largest of its `fields`' widths
    (D for features, C for logits, the widest layer view of `_MATRIX_EXTRAS`; 1 when it reads
    none of them)."""
    return max([1, *(_field_width(split, f) for f in fields)])


def fit_work(store: StoreLike, fit_splits: Sequence[str], fields: Sequence[str]) -> float:
    """A fit's work: a Gram product over its fit rows plus a factorization of the width,
    sum over fit splits of rows * w^2 + 9 w^3 flops (w: `_width`)."""
    work = 0.0
    for name in fit_splits:
        if store.has_split(name):
            split = store.split(name)
            w = _width(split, fields)
            work += float(split.num_rows) * w * w + 9.0 * float(w) ** 3
    return work


def score_work(split: SplitLike, fields: Sequence[str]) -> float:
    """A score's work outside the row-block pool (neighbour searches, whole-split products):
    rows * w^2 flops."""
    w = _width(split, fields)
    return float(split.num_rows) * w * w
