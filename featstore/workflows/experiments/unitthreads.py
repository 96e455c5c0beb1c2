"""The thread count every unit of an executor computes on: fixed by the plan, recorded with
the unit (its key) and in `featstore run`'s results.json (`threads`), whatever runs the unit.

Why: torch's training and extraction sums and a LAPACK factorization round differently on
another thread count (a two-seed experiment trained other weights under Ray, whose tasks get
OMP_NUM_THREADS = num_cpus, than in a local process on torch's default), and the thread
count a process gets by default depends on where it runs (Ray's environment, a Slurm job's
CPUs, a pool process's defaults). So the driver chooses the count once, when it plans the
units, and every unit sets it before it computes:

    plan_threads(requested) = requested        `featstore run --threads N`, else the
                                               experiment file's `threads = N`
                            = n                $FEATSTORE_THREADS = n (a number)
                            = 1                otherwise (DEFAULT_UNIT_THREADS)

One by default: the count then depends on nothing about the machine, so results.json is the
same on a laptop, in a pool, in a Slurm job and in a Ray task; it is what a Slurm or Ray unit
gets by default (`cpus = 1`), and units in parallel (`--workers N`, Ray, Slurm arrays) never
oversubscribe the cores. For faster units give each unit the CPUs and the count together
(`threads = 8` with `[executor] cpus = 8`): the count, not the CPUs, decides the bits.

Inside a unit (`unit_threads`): $FEATSTORE_THREADS = count, which `scorers.threads` reads for
every fit and score (BLAS, FAISS, the row pool) and `pipeline.demo_threads` for the
mini-Gbench's torch, and torch.set_num_threads(count); both restored after, so a unit run in
the driver (`--executor local`, `featstore run` without an executor) leaves it as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from featstore.errors import UsageError
from scorers.threads import THREADS_ENV, user_threads

#: every unit's thread count when neither the run nor $FEATSTORE_THREADS sets one
DEFAULT_UNIT_THREADS = 1


def plan_threads(requested: int | None = None) -> int:
    """The units' thread count (module docstring); UsageError for a count below 1."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise UsageError(f"threads {requested!r}: expected an integer >= 1")
        return requested
    return user_threads() or DEFAULT_UNIT_THREADS


@contextmanager
def unit_threads(count: int | None) -> Iterator[int | None]:
    """Compute on `count` threads inside: $FEATSTORE_THREADS and torch's count (torch
    imported here if it is not yet); yields torch's count inside. None: as it is (a unit
    planned without a count), yields None."""
    if count is None:
        yield None
        return
    import torch  # lazy: the store workflows plan units with this module, without torch

    env = os.environ.get(THREADS_ENV)
    before = torch.get_num_threads()
    os.environ[THREADS_ENV] = str(int(count))
    torch.set_num_threads(int(count))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = env
