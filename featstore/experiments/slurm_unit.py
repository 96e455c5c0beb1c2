"""The body of a Slurm job of `featstore run --executor slurm`: one unit
(`runner.run_unit_tracked`). A submitit `Checkpointable`: on preemption or time-out submitit
requeues the same call, and the unit redoes only what its files in `--out` do not hold (a
trained model is kept, an extraction resumes, a finished row is read back). Imported only by
the Slurm executor and in the job (submitit is the optional extra featstore[slurm])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import submitit

from .config import Experiment
from .runner import run_unit_tracked


class UnitJob(submitit.helpers.Checkpointable):
    """Run one unit; `checkpoint` (inherited) resubmits the same arguments."""

    def __call__(self, exp: Experiment, out: str, arch: str,
                 unit: dict[str, Any]) -> list[dict[str, Any]]:
        return run_unit_tracked(exp, Path(out), arch, unit, log=print)
