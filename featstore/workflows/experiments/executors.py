"""Executors of `featstore run`: where an experiment's units run (`--executor`, or the run
file's `[executor]` table; the command line's kind wins).

    [executor]
    kind = "slurm"            # local (default; workers = N: a pool of N processes) | slurm | ray
    partition = "gpu"         # slurm: partition, time (minutes), gpus / cpus / mem_gb per
    time = 240                #   unit, array = true (one array job; false: one job per unit,
    gpus = 1                  #   named featstore:<experiment>:<unit>), parallel (array
    cpus = 8                  #   tasks at once), account, qos, setup (shell lines run
    mem_gb = 32               #   before the unit, e.g. module load), poll_s
    # kind = "ray": address ("auto": a running cluster; unset: the initialized one, or a
    #   new local one), gpus, cpus, memory_gb per unit, retries (re-runs after a lost
    #   worker, default 3), poll_s, connect_s (seconds an address may take to answer,
    #   default 10: a wrong address is an error naming it, never a wait forever)

The unit (`runner.plan_units`) is one data split x seed x training method (local, one process:
x every training method, today's order); every unit writes into the shared `--out` directory
(`unitstate`: its state, its log, its models, stores and run records, each file atomic) and
the driver aggregates when all are done, reading each unit's records from its state file, so
`results.json` is the same whatever ran the units. A unit that finished earlier with the same
key is read back, not resubmitted. A unit killed mid-way (lost Ray worker: Ray re-runs it up
to `retries` times; a Slurm job requeued, preempted or timed out: restarted under the same id,
`slurm_unit`) redoes only what its files do not hold; the driver waits for a job while it is
in the queue, an interrupted unit's included. A unit that fails for its own reason is
reported with its log; the others go on, and the run then stops with exit 1 naming every
failed unit (rerun to retry them: finished units are kept), never a `results.json` of a
subset.

Every executor also runs other workflows' units (`run_calls(out, units, call, log, title)`:
`featstore.workflows.experiments.workflows`: FACETS table, shift grid;
`featstore.workflows.demo.gbench_units`: Gbench builds and evaluations): `call(unit,
log=...)` is a picklable callable (`Tracked`: a module-level body with the unit's state and
log in `out`) returning the unit's JSON result; the same read-back, failure and waiting rules.
The local pool (`workers` > 1) runs units in spawned processes. Wherever a unit runs (the
driver, a pool process, a Slurm job, a Ray task) it computes on the thread count its plan
gives it (`unit["threads"]`, set by `runner.run_tracked`: `unitthreads`), never on the count
its process would get by default, so every executor's results are the local run's, bit for
bit.
"""

from __future__ import annotations

import functools
import importlib
import math
import multiprocessing
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featstore.errors import FeatstoreError, InputError, UsageError
from featstore.specs.toml import get, read_toml
from featstore.workflows.experiments import unitstate
from featstore.workflows.experiments.config import Experiment
from featstore.workflows.experiments.runner import Log, _slug, run_tracked, run_unit_tracked

KINDS = ("local", "slurm", "ray")
KEYS = {"local": ("kind", "workers"),
        "slurm": ("kind", "partition", "time", "gpus", "cpus", "mem_gb", "array", "parallel",
                  "account", "qos", "setup", "poll_s"),
        "ray": ("kind", "address", "gpus", "cpus", "memory_gb", "retries", "poll_s",
                "connect_s")}
Outcome = dict[str, list[dict[str, Any]]]


class UnitsFailed(FeatstoreError):
    """Some units failed (each named with its error and log); the others finished."""


def executor_options(path: str | Path) -> dict[str, Any]:
    """The `[executor]` table of an experiment file ({} when it has none)."""
    doc = read_toml(Path(path), "experiment")
    return dict(get(doc.data, "executor", "table", doc.where, {}))


#: the optional extra that brings each engine's package: the install command an error names
EXTRAS = {"slurm": ("submitit", "pip install 'featstore[slurm]'"),
          "ray": ("ray", "pip install 'featstore[ray]'")}


def require_engine(kind: str) -> None:
    """FeatstoreError with the install command when `kind`'s package (submitit, Ray) does not
    import; nothing for the local executor."""
    if kind not in EXTRAS:
        return
    module, install = EXTRAS[kind]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise FeatstoreError(f"--executor {kind} needs the package {module!r}, which is not "
                             f"installed ({exc}): {install}") from None


def make_executor(kind: str | None, options: dict[str, Any], where: str = "[executor]",
                  train_progress: Callable[[str], Any] | None = None,
                  workers: int | None = None) -> Any:
    """The executor of `kind` (the command line's `--executor`; else `options["kind"]`, the
    file's; else local) with `options` (the file's `[executor]` table, `where` names it) and
    `workers` (the command line's `--workers`) checked. A bad command-line value is a
    UsageError naming the option (exit 2); a bad kind, key or value of the file an
    InputError naming the file (exit 1); a kind whose package is missing says how to
    install it (`require_engine`)."""
    if kind is not None and kind not in KINDS:
        raise UsageError(f"--executor {kind!r} (valid: {', '.join(KINDS)})")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise UsageError(f"--workers {workers!r}: expected an integer >= 1")
    file_kind = options.get("kind")
    if file_kind is not None and file_kind not in KINDS:
        raise InputError(f"{where}: kind = {file_kind!r} (valid: {', '.join(KINDS)})")
    kind = kind or file_kind or "local"
    if workers is not None and kind != "local":
        raise UsageError(f"--workers applies to the local executor only (the executor is "
                         f"{kind})")
    options = {k: v for k, v in options.items() if k != "kind"}
    unknown = sorted(set(options) - set(KEYS[kind]))
    if unknown:
        raise InputError(f"{where}: unknown {kind} executor key {unknown[0]!r} (valid: "
                         f"{', '.join(k for k in KEYS[kind] if k != 'kind')})")
    for key in ("time", "gpus", "cpus", "parallel", "retries", "workers"):
        value = options.get(key)
        least = 1 if key == "workers" else 0
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < least):
            raise InputError(f"{where}: {key} = {value!r}, expected an integer >= {least}")
    for key in ("poll_s", "connect_s", "mem_gb", "memory_gb"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                  or not math.isfinite(value) or value <= 0):
            raise InputError(f"{where}: {key} = {value!r}, expected a number > 0")
    kinds: tuple[tuple[str, type, str], ...] = (
        ("partition", str, "text"), ("account", str, "text"), ("qos", str, "text"),
        ("address", str, "text"), ("array", bool, "true or false"),
        ("setup", list, "a list of text lines"))
    for key, ok, expected in kinds:
        given: Any = options.get(key)
        if given is not None and (not isinstance(given, ok) or (
                isinstance(given, list) and not all(isinstance(x, str) for x in given))):
            raise InputError(f"{where}: {key} = {given!r}, expected {expected}")
    if workers is not None:
        options["workers"] = workers
    require_engine(kind)
    if kind == "local":
        return LocalExecutor(train_progress, workers=options.get("workers") or 1)
    return SlurmExecutor(**options) if kind == "slurm" else RayExecutor(**options)


def _failure_line(failed: dict[str, str], total: int) -> str:
    parts = "; ".join(f"{uid}: {why}" for uid, why in failed.items())
    return (f"{len(failed)} of {total} units failed (the others finished; rerun the same "
            f"command to retry them): {parts}")


def _read_back(out: Path, units: list[dict[str, Any]], log: Log) -> tuple[Outcome, list]:
    """Units finished earlier with the same key (read back) and those still to run (their
    old state removed, so a stale one is never taken for the new run's)."""
    done: Outcome = {}
    todo = []
    for u in units:
        records = unitstate.done_records(out, u["id"], u["key"])
        if records is not None:
            done[u["id"]] = records
            log(f"{u['label']}: finished earlier, read back")
        else:
            unitstate.state_path(out, u["id"]).unlink(missing_ok=True)
            todo.append(u)
    return done, todo


def _why(out: Path, uid: str, fallback: str) -> str:
    st = unitstate.read_state(out, uid) or {}
    return f"{st.get('error') or fallback} (log: {unitstate.log_path(out, uid)})"


@dataclass(frozen=True)
class Tracked:
    """A unit's call for `run_calls`: `body(unit, log)` (a module-level function returning
    the unit's JSON result) with the unit's state in `OUT/units/<id>.json` (running, then
    done with the result as its records, or failed with the error line) and its log in
    `OUT/logs/<id>.log`."""

    body: Callable[[dict[str, Any], Log], Any]
    out: str

    def __call__(self, unit: dict[str, Any], log: Log | None = None) -> Any:
        return run_tracked(Path(self.out), unit, self.body, log)


def _invoke(call: Callable[..., Any], unit: dict[str, Any]) -> Any:
    """A unit's call in a worker (Ray task, pool process)."""
    return call(unit)


class LocalExecutor:
    """Every unit here: one after the other, in order (`workers` = 1), or in a pool of
    `workers` spawned processes; a failing unit is reported and the others go on."""

    name = "local"

    def __init__(self, train_progress: Callable[[str], Any] | None = None,
                 workers: int = 1) -> None:
        self.train_progress = train_progress
        self.workers = max(1, int(workers))
        self.per_method = self.workers > 1

    def run(self, exp: Experiment, out: Path, arch: str, units: list[dict[str, Any]],
            log: Log) -> Outcome:
        if self.workers > 1:
            return self.run_calls(out, units, functools.partial(
                run_unit_tracked, exp, out, arch), log, exp.name)
        results: Outcome = {}
        failed: dict[str, str] = {}
        for u in units:
            try:
                results[u["id"]] = run_unit_tracked(exp, out, arch, u, log=log,
                                                    train_progress=self.train_progress)
            except Exception:
                failed[u["id"]] = _why(out, u["id"], "failed")
                log(f"{u['label']}: failed: {failed[u['id']]}")
        if failed:
            raise UnitsFailed(_failure_line(failed, len(units)))
        return results

    def run_calls(self, out: Path, units: list[dict[str, Any]], call: Callable[..., Any],
                  log: Log, title: str = "") -> dict[str, Any]:
        """Each unit's `call(unit)`, in order or in the pool; {unit id: its result}."""
        results, todo = _read_back(out, units, log)
        failed: dict[str, str] = {}
        if self.workers == 1 or len(todo) <= 1:
            for u in todo:
                try:
                    results[u["id"]] = call(u, log=log)
                except Exception:
                    failed[u["id"]] = _why(out, u["id"], "failed")
        else:
            with ProcessPoolExecutor(min(self.workers, len(todo)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {u["id"]: pool.submit(_invoke, call, u) for u in todo}
                for uid, fut in futures.items():
                    try:
                        results[uid] = fut.result()
                        log(f"{uid}: done")
                    except Exception as exc:   # the unit's own error, or its process lost
                        failed[uid] = _why(out, uid, f"{type(exc).__name__}: {exc}")
        for uid, why in failed.items():
            log(f"{uid}: failed: {why}")
        if failed:
            raise UnitsFailed(_failure_line(failed, len(units)))
        return results


class _UnitCallExecutor:
    """An executor that runs every unit of `featstore run` through the subclass's `run_calls`
    (one job or task per unit): Slurm and Ray."""

    run_calls: Callable[..., Outcome]

    def run(self, exp: Experiment, out: Path, arch: str, units: list[dict[str, Any]],
            log: Log) -> Outcome:
        return self.run_calls(out, units, functools.partial(run_unit_tracked, exp, out, arch),
                              log, exp.name)


class SlurmExecutor(_UnitCallExecutor):
    """One Slurm job (an array task by default) per unit through submitit; the driver
    waits for them (`squeue`), reads each unit's state and aggregates."""

    name = "slurm"
    per_method = True

    def __init__(self, partition: str | None = None, time: int = 60, gpus: int = 0,
                 cpus: int = 1, mem_gb: float | None = None, array: bool = True,
                 parallel: int | None = None, account: str | None = None,
                 qos: str | None = None, setup: list[str] | None = None,
                 poll_s: float = 10.0) -> None:
        self.params: dict[str, Any] = {
            "slurm_partition": partition, "timeout_min": time, "gpus_per_node": gpus or None,
            "cpus_per_task": cpus, "mem_gb": mem_gb, "slurm_array_parallelism": parallel,
            "slurm_account": account, "slurm_qos": qos, "slurm_setup": setup}
        self.array, self.poll_s = bool(array), float(poll_s)

    def _submit(self, out: Path, call: Callable[..., Any], title: str,
                todo: list[dict[str, Any]]) -> dict[str, Any]:
        import submitit  # lazy: the optional extra featstore[slurm]

        from featstore.workflows.experiments.slurm_unit import UnitJob  # lazy: imports submitit

        ex = submitit.AutoExecutor(folder=out / "slurm" / "%j", cluster="slurm")
        name = f"featstore:{_slug(title)}"
        ex.update_parameters(name=name, **{k: v for k, v in self.params.items()
                                           if v is not None})
        if self.array:
            n = len(todo)
            jobs = ex.map_array(UnitJob(), [call] * n, todo, [str(out)] * n)
            return {u["id"]: j for u, j in zip(todo, jobs, strict=True)}
        by_id: dict[str, Any] = {}
        for u in todo:
            ex.update_parameters(name=f"{name}:{u['id']}")
            by_id[u["id"]] = ex.submit(UnitJob(), call, u, str(out))
        return by_id

    def run_calls(self, out: Path, units: list[dict[str, Any]], call: Callable[..., Any],
                  log: Log, title: str = "") -> dict[str, Any]:
        """Each unit's `call(unit)` in its Slurm job; {unit id: its result}."""
        results, todo = _read_back(out, units, log)
        if not todo:
            return results
        try:
            jobs = self._submit(out, call, title, todo)
        except (OSError, RuntimeError) as exc:   # sbatch missing or refusing
            raise FeatstoreError(f"slurm executor: submitting failed: {exc}") from None
        unitstate.write_plan(out, self.name, units, {k: j.job_id for k, j in jobs.items()})
        log(f"submitted {len(todo)} units to Slurm (jobs "
            f"{', '.join(j.job_id for j in jobs.values())})")
        failed = _wait_slurm(out, jobs, self.poll_s, log)
        _collect(out, units, list(jobs), failed, results)
        if failed:
            raise UnitsFailed(_failure_line(failed, len(units)))
        return results


def _key(units: list[dict[str, Any]], uid: str) -> str:
    return next(u["key"] for u in units if u["id"] == uid)


def _collect(out: Path, units: list[dict[str, Any]], uids: list[str], failed: dict[str, str],
             results: Outcome) -> None:
    """Into `results`, the records of each unit in `uids` not in `failed`; one whose state
    does not say done with its key (no records to read back) goes into `failed`."""
    for uid in uids:
        if uid in failed:
            continue
        records = unitstate.done_records(out, uid, _key(units, uid))
        if records is None:
            failed[uid] = _why(out, uid, "its job ended without a done state holding its result")
        else:
            results[uid] = records


def _queued() -> set[str] | None:
    """Job ids in the Slurm queue (array tasks as JOB_TASK), None when squeue fails."""
    try:
        text = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True,
                              text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line.strip() for line in text.splitlines() if line.strip()}


def _wait_slurm(out: Path, jobs: dict[str, Any], poll_s: float, log: Log) -> dict[str, str]:
    """Wait until every job's unit is done or failed, or its job left the queue without
    finishing it (lost: cancelled, killed, out of time with no requeue left)."""
    pending, failed = dict(jobs), {}
    gone: dict[str, int] = {}
    while pending:
        queued = _queued()
        for uid, job in list(pending.items()):
            st = unitstate.read_state(out, uid) or {}
            if st.get("state") == "done":
                log(f"{uid}: done (job {job.job_id})")
            elif st.get("state") == "failed":
                failed[uid] = _why(out, uid, "failed")
            elif queued is not None and job.job_id not in queued:
                gone[uid] = gone.get(uid, 0) + 1
                if gone[uid] < 3:          # its last state write may still be landing
                    continue
                failed[uid] = (
                    f"interrupted ({st.get('reason')}) and its job {job.job_id} left the queue "
                    f"(cancelled, or not requeued); log: {job.paths.stderr}"
                    if st.get("state") == "interrupted" else
                    f"job {job.job_id} left the queue without finishing the unit (cancelled, "
                    f"killed or out of time; log: {job.paths.stderr})")
            else:
                gone.pop(uid, None)
                continue
            pending.pop(uid)
            if uid in failed:
                log(f"{uid}: failed: {failed[uid]}")
        if pending:
            time.sleep(poll_s)
    return failed


#: seconds `reach_ray` waits for a Ray cluster's address to answer (`connect_s`)
RAY_CONNECT_S = 10.0


def reach_ray(address: str | None, timeout_s: float) -> None:
    """FeatstoreError naming `address` when nothing answers a TCP connection there within
    `timeout_s` (ray.init itself retries such an address forever). `address` as Ray takes
    it: `host:port` or `ray://host:port`; "auto", "local" and None (Ray finds or starts the
    cluster itself, and fails fast when it cannot) are not probed."""
    if address is None or address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"ray executor: address {address!r}: expected host:port, "
                         "ray://host:port or \"auto\"")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise FeatstoreError(f"ray executor: no Ray cluster answers at address {address!r} "
                             f"within {timeout_s:g} s ({exc.strerror or exc}); start it (`ray "
                             "start --head`) or fix [executor] address") from None


class RayExecutor(_UnitCallExecutor):
    """One Ray task per unit (`num_cpus` / `num_gpus` / `memory` per task, `max_retries`
    re-runs after a lost worker); the driver waits for them and aggregates."""

    name = "ray"
    per_method = True

    def __init__(self, address: str | None = None, gpus: float = 0, cpus: float = 1,
                 memory_gb: float | None = None, retries: int = 3, poll_s: float = 5.0,
                 connect_s: float = RAY_CONNECT_S) -> None:
        self.address, self.retries, self.poll_s = address, int(retries), float(poll_s)
        self.connect_s = float(connect_s)
        self.resources: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
        if memory_gb:
            self.resources["memory"] = int(memory_gb * 2**30)

    def run_calls(self, out: Path, units: list[dict[str, Any]], call: Callable[..., Any],
                  log: Log, title: str = "") -> dict[str, Any]:
        """Each unit's `call(unit)` in its Ray task; {unit id: its result}."""
        import ray  # lazy: the optional extra featstore[ray]

        results, todo = _read_back(out, units, log)
        if not todo:
            return results
        started = False
        if not ray.is_initialized():
            reach_ray(self.address, self.connect_s)
            ray.init(address=self.address, log_to_driver=False)
            started = True
        try:
            task = ray.remote(_invoke)
            refs = {}
            for u in todo:
                refs[task.options(name=f"featstore:{u['id']}", max_retries=self.retries,
                                  retry_exceptions=False, **self.resources)
                     .remote(call, u)] = u["id"]
            unitstate.write_plan(out, self.name, units,
                                 {uid: ref.task_id().hex() for ref, uid in refs.items()})
            log(f"submitted {len(refs)} units to Ray")
            failed = self._wait(ray, out, refs, log)
        finally:
            if started:
                ray.shutdown()
        _collect(out, units, list(refs.values()), failed, results)
        if failed:
            raise UnitsFailed(_failure_line(failed, len(units)))
        return results

    def _wait(self, ray: Any, out: Path, refs: dict[Any, str], log: Log) -> dict[str, str]:
        pending, failed = list(refs), {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=self.poll_s)
            for ref in ready:
                uid = refs[ref]
                try:
                    ray.get(ref)
                    log(f"{uid}: done")
                except ray.exceptions.RayTaskError:
                    failed[uid] = _why(out, uid, "failed")
                except ray.exceptions.RayError as exc:   # worker lost past its retries
                    failed[uid] = _why(out, uid, f"{type(exc).__name__} after "
                                                 f"{self.retries} retries")
                if uid in failed:
                    log(f"{uid}: failed: {failed[uid]}")
        return failed
