"""The body of a Slurm job of `featstore run --executor slurm`: one unit
(`runner.run_unit_tracked`). A submitit `Checkpointable`: on preemption or time-out submitit
requeues the same call, and the unit redoes only what its files in `--out` do not hold (a
trained model is kept, an extraction resumes, a finished row is read back). The unit's torch
runs on the CPUs the job was given (`SLURM_CPUS_PER_TASK` threads, as Ray's `num_cpus` sets
OMP_NUM_THREADS), so its numbers are those of a local run with as many threads. Imported only
by the Slurm executor and in the job (submitit is the optional extra featstore[slurm])."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import submitit
import torch

from .config import Experiment
from .runner import run_unit_tracked


class UnitJob(submitit.helpers.Checkpointable):
    """Run one unit; `checkpoint` (inherited) resubmits the same arguments."""

    def __call__(self, exp: Experiment, out: str, arch: str,
                 unit: dict[str, Any]) -> list[dict[str, Any]]:
        cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
        if cpus.isdigit() and int(cpus) > 0:
            torch.set_num_threads(int(cpus))
        return run_unit_tracked(exp, Path(out), arch, unit, log=print)
