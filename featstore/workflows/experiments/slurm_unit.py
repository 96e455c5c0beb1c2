"""The body of a Slurm job of an executor's unit (`featstore run --executor slurm`, and the
other workflows'): one unit's call (`runner.run_unit_tracked` bound to its experiment, or
`executors.Tracked`). Imported only by the Slurm executor and in the job (submitit is the
optional extra featstore[slurm]).

Requeue and preemption. Slurm stops a job it requeues (`scontrol requeue`, preemption with
PreemptMode=REQUEUE) or cancels with SIGTERM, then SIGKILL after KillWait; submitit itself
ignores SIGTERM, so the job installs `featstore.store.interrupts` for it: the unit stops there as
on a Ctrl-C (its state `interrupted`, every store write it had under way left as an
interrupted write is: resumable, never complete) instead of running on into the SIGKILL, or
finishing while its job is already requeued. On a time-out (or a preemption signalled with
submitit's USR2) submitit's own handler checkpoints `UnitJob` (`Checkpointable`: the same
arguments), requeues the job and exits; the unit's state reads interrupted the same way.
The restarted job runs the same call: the unit redoes only what its files in `--out` do not
hold (a trained model is kept, an extraction resumes, a finished row is read back), and
`mark_running` keeps the earlier start in the state's `attempts` (with `restarts`, Slurm's
SLURM_RESTART_COUNT). A job restarted after its unit finished (a requeue that came late)
reads the unit's records back and runs nothing: the unit is never run twice over a result
the driver may already be aggregating.

The unit computes on its plan's thread count (`unit["threads"]`, `unitthreads`), not on the
CPUs the job was given: its numbers are those of a local run."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from featstore.store import interrupts
from featstore.workflows.experiments import unitstate

logger = logging.getLogger(__name__)


class UnitJob(submitit.helpers.Checkpointable):
    """Run one unit whose state lives in `out`; `checkpoint` (inherited) resubmits the same
    arguments."""

    def __call__(self, call: Callable[..., Any], unit: dict[str, Any], out: str) -> Any:
        # the job is its own process: the unit's log lines go to the job's output file
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
        records = unitstate.done_records(Path(out), unit["id"], unit["key"])
        if records is not None:
            logger.info(f"{unit['id']}: finished before this job restarted; read back, not rerun")
            return records
        interrupts.install(sigterm=True)
        return call(unit, log=logger.info)
