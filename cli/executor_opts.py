"""The executor options of the multi-unit commands other than `featstore run` (`protocol
osr`, `protocol facets-table`, `protocol shift-grid`, `gscore gbench`): `--executor
local|slurm|ray`, `--executor-config FILE` (a TOML file whose `[executor]` table holds the
engine's settings, as in a run file), `--workers N` (the local pool) and, for the store
workflows, `--work DIR` (the units' shared directory: their states, logs and plan.json)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

ExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", help="Where the units run: local | slurm | ray (default: --executor-config's "
    "kind, else local, in this process).")]
ExecutorConfigOpt = Annotated[Path | None, typer.Option(
    "--executor-config", help="TOML file whose [executor] table sets the engine (Slurm "
    "partition, time, gpus, cpus, ...; Ray address, resources, retries), as in a run file.")]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", help="Local executor: run the units in a pool of N processes.")]
WorkOpt = Annotated[Path | None, typer.Option(
    "--work", help="With --executor/--workers: the units' directory (states, logs, "
    "plan.json; `featstore run --status DIR`), reached by every worker. Default with the "
    "local executor: a temporary directory.")]


def make_cli_executor(kind: str | None, config: Path | None, workers: int | None,
                      what: str) -> Any:
    """The executor the options ask for, or None when none is asked (the command runs in
    process as it always did). A bad kind, key or value is a UsageError naming it."""
    from featstore.errors import UsageError
    from featstore.workflows.experiments.executors import executor_options, make_executor

    if kind is None and config is None and workers is None:
        return None
    options = executor_options(config) if config is not None else {}
    where = f"--executor-config {str(config)!r} [executor]" if config else what
    try:
        return make_executor(kind, options, where, workers=workers)
    except UsageError as exc:
        if type(exc) is UsageError:  # the command line's: name the command
            raise UsageError(f"{what}: {exc}") from None
        raise


@contextmanager
def work_dir(executor: Any, work: Path | None, what: str) -> Iterator[Path]:
    """`work`, else (local executor) a temporary directory removed after; Slurm and Ray
    need a directory every worker reaches, so `--work` is required for them."""
    from featstore.errors import UsageError

    if work is not None:
        yield work
        return
    if executor.name != "local":
        raise UsageError(f"{what}: --executor {executor.name} needs --work DIR, a directory "
                         "every worker reaches (a shared filesystem)")
    with tempfile.TemporaryDirectory(prefix="featstore-units-") as tmp:
        yield Path(tmp)
