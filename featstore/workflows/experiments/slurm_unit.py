"""The body of a Slurm job of an executor's unit (`featstore run --executor slurm`, and the
other workflows'): one unit's call (`runner.run_unit_tracked` bound to its experiment, or
`executors.Tracked`). A submitit `Checkpointable`: on preemption or time-out submitit
requeues the same call, and the unit redoes only what its files in `--out` do not hold (a
trained model is kept, an extraction resumes, a finished row is read back). The unit's torch
runs on the CPUs the job was given (`SLURM_CPUS_PER_TASK` threads, as Ray's `num_cpus` sets
OMP_NUM_THREADS), so its numbers are those of a local run with as many threads. Imported only
by the Slurm executor and in the job (submitit is the optional extra featstore[slurm])."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import submitit
import torch

logger = logging.getLogger(__name__)


class UnitJob(submitit.helpers.Checkpointable):
    """Run one unit; `checkpoint` (inherited) resubmits the same arguments."""

    def __call__(self, call: Callable[..., Any], unit: dict[str, Any]) -> Any:
        cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
        if cpus.isdigit() and int(cpus) > 0:
            torch.set_num_threads(int(cpus))
        # the job is its own process: the unit's log lines go to the job's output file
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
        return call(unit, log=logger.info)
