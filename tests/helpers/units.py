"""Unit bodies the executor tests run where the executor puts them (module-level, so a pool
process, a Slurm job or a Ray worker imports them by name)."""

from __future__ import annotations

import os
from typing import Any


def threads_seen(unit: dict[str, Any], log: Any) -> dict[str, Any]:
    """What the unit computes on: torch's thread count, $FEATSTORE_THREADS, and the
    OMP_NUM_THREADS its process was started with (Ray sets it to a task's num_cpus)."""
    import torch

    log("threads_seen")
    return {"torch": torch.get_num_threads(), "env": os.environ.get("FEATSTORE_THREADS"),
            "omp": os.environ.get("OMP_NUM_THREADS"), "pid": os.getpid()}
