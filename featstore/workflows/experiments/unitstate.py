"""The on-disk state of an experiment's units, shared by every executor (local, Slurm, Ray).

A unit is one (data split, seed, training methods) piece of an experiment: it trains and
extracts its models and scores the rows that use them (`runner.run_unit`). Everything lives
in the experiment's `--out` directory, which every worker reaches (a shared filesystem):

    OUT/plan.json            the executor and every unit: id, label, methods, rows, key,
                             and the job id an engine gave it (Slurm job / Ray task)
    OUT/units/<id>.json      the unit's state: running (host, pid, start time, Slurm job
                             and restart count), interrupted (a signal stopped it: Slurm
                             requeue, preemption, time-out or cancel, Ctrl-C), done (its
                             run records), failed (a one-line error); written atomically.
                             A unit started again after an interruption (a requeued job, a
                             re-run Ray task) keeps the earlier starts in `attempts` (host,
                             pid, job, restarts, started, interrupted) and counts `attempt`
    OUT/logs/<id>.log        what the unit logged (its training, extraction and scoring)

A unit's state is written only by the process running it; the driver reads them, so a
unit's result reaches the aggregation through the filesystem whatever the engine.
`status(OUT)` is what `featstore run --status OUT` prints: each unit's state, where
"running" on this host with its process gone reads "stale" (a killed run: rerun to resume).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from featstore.errors import InputError
from featstore.store.fileio import atomic_write_output

PLAN_FILE = "plan.json"
STATES = ("pending", "running", "interrupted", "stale", "done", "failed")
_ATTEMPT_KEYS = ("host", "pid", "job", "restarts", "started", "interrupted", "reason")


def state_path(out: Path, uid: str) -> Path:
    return Path(out) / "units" / f"{uid}.json"


def log_path(out: Path, uid: str) -> Path:
    return Path(out) / "logs" / f"{uid}.log"


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_output(path, json.dumps(obj, indent=2) + "\n")


def read_state(out: Path, uid: str) -> dict[str, Any] | None:
    """The unit's state record, or None when it never started, or its file is unreadable or
    not a state record (`state_problem`): a unit that never finished writing, or a file
    someone else wrote there, reads as not started (and the unit runs again)."""
    try:
        st = json.loads(state_path(out, uid).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, a directory, junk, too deep
        return None
    return None if state_problem(st) else st


#: field -> the types a state record's field may hold (besides null)
_STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "unit": (str,), "key": (str,), "host": (str,), "pid": (int,), "job": (str,),
    "started": (int, float), "finished": (int, float), "interrupted": (int, float),
    "attempt": (int,), "restarts": (int, str), "error": (str,), "reason": (str,),
    "attempts": (list,)}


def state_problem(st: Any) -> str | None:
    """What makes `st` no state record this module writes, or None: not a table, a `state`
    outside STATES, a field of another type (`_STATE_FIELDS`), a pid that is not a
    positive process id, `attempts` that are not tables."""
    if not isinstance(st, dict) or st.get("state", "pending") not in STATES:
        return "not a state record"
    for key, kinds in _STATE_FIELDS.items():
        value = st.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            return f"{key} = {value!r}"
    pid = st.get("pid")
    if pid is not None and not 0 < pid < 2**22:
        return f"pid = {pid!r}"
    if not all(isinstance(a, dict) for a in st.get("attempts") or []):
        return "attempts are not tables"
    return None


def slurm_job() -> str | None:
    """The Slurm job this process runs in (an array task as JOB_TASK), None outside Slurm."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def mark_running(out: Path, uid: str, key: str) -> None:
    """running here; an earlier start of the same unit that never finished (running or
    interrupted, same key) is kept in `attempts`."""
    old = read_state(out, uid) or {}
    same = old.get("key") == key
    attempts = list(old.get("attempts") or []) if same else []
    if same and old.get("state") in ("running", "interrupted"):
        attempts.append({k: old.get(k) for k in _ATTEMPT_KEYS})
    restarts = os.environ.get("SLURM_RESTART_COUNT", "")
    _write(state_path(out, uid), {
        "unit": uid, "key": key, "state": "running", "host": socket.gethostname(),
        "pid": os.getpid(), "job": slurm_job(),
        "restarts": int(restarts) if restarts.isdigit() else None,
        "attempt": len(attempts) + 1, "attempts": attempts, "started": time.time(),
        "log": str(log_path(out, uid))})


def mark_interrupted(out: Path, uid: str, key: str, reason: str) -> None:
    """interrupted (a signal stopped the unit; a requeued job or a rerun starts it again)."""
    old = read_state(out, uid) or {}
    _write(state_path(out, uid), {**old, "unit": uid, "key": key, "state": "interrupted",
                                  "interrupted": time.time(), "reason": reason})


def mark_finished(out: Path, uid: str, key: str, *, records: list[dict[str, Any]] | None = None,
                  error: str | None = None) -> None:
    """done (with the unit's run records) or failed (with the error line)."""
    old = read_state(out, uid) or {}
    _write(state_path(out, uid), {
        **old, "unit": uid, "key": key, "state": "failed" if error is not None else "done",
        "finished": time.time(), "error": error, "records": records,
        "log": str(log_path(out, uid))})


def done_records(out: Path, uid: str, key: str) -> list[dict[str, Any]] | None:
    """The unit's records when it finished with this key (same experiment, same unit)."""
    st = read_state(out, uid)
    if st and st.get("state") == "done" and st.get("key") == key:
        return st.get("records")
    return None


def write_plan(out: Path, executor: str, units: list[dict[str, Any]],
               jobs: dict[str, str] | None = None) -> None:
    _write(Path(out) / PLAN_FILE, {
        "executor": executor, "written": time.time(),
        "units": [{"id": u["id"], "label": u["label"], "methods": u.get("methods"),
                   "rows": u.get("rows"), "key": u["key"], "job": (jobs or {}).get(u["id"])}
                  for u in units]})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _state_of(st: dict[str, Any] | None) -> str:
    if st is None:
        return "pending"
    state = st.get("state", "pending")
    if state == "running" and st.get("host") == socket.gethostname() \
            and isinstance(st.get("pid"), int) and not _alive(st["pid"]):
        return "stale"
    return state


def plan_problem(plan: Any) -> str | None:
    """What makes `plan` no plan `write_plan` writes, or None: not a table, `units` not a
    list of tables with a unit id (a safe file name: `units/<id>.json` stays in its folder),
    a text label and key, a text job or null; `executor` not text."""
    if not isinstance(plan, dict) or not isinstance(plan.get("units"), list):
        return "expected a table with a list 'units'"
    if not isinstance(plan.get("executor"), str):
        return f"executor = {plan.get('executor')!r}: expected text"
    for u in plan["units"]:
        if not isinstance(u, dict):
            return f"unit {u!r}: expected a table"
        uid = u.get("id")
        if not (isinstance(uid, str) and uid and uid == Path(uid).name
                and uid not in (".", "..") and "\0" not in uid):
            return f"unit id {uid!r}: expected a file name"
        for key in ("label", "key"):
            if not isinstance(u.get(key), str):
                return f"unit {uid!r}: {key} = {u.get(key)!r}: expected text"
        if u.get("job") is not None and not isinstance(u["job"], str):
            return f"unit {uid!r}: job = {u['job']!r}: expected text"
    return None


def status(out: str | Path) -> dict[str, Any]:
    """{out, executor, counts: {state: n}, units: [{id, label, state, job, host, pid,
    seconds, attempt, error, reason, log}]} from OUT/plan.json and OUT/units/ (see the
    module docstring)."""
    out = Path(out)
    plan_file = out / PLAN_FILE
    if not plan_file.is_file():
        raise InputError(f"--status {str(out)!r}: no {PLAN_FILE} (not an experiment output "
                         "directory, or its run has not started)")
    try:
        plan = json.loads(plan_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"--status {str(plan_file)!r}: not a readable JSON file "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None
    problem = plan_problem(plan)
    if problem:
        raise InputError(f"--status {str(plan_file)!r}: {problem} (not a plan featstore "
                         "run writes)")
    units, counts = [], dict.fromkeys(STATES, 0)
    now = time.time()
    for u in plan["units"]:
        st = read_state(out, u["id"])
        if st is not None and st.get("key") != u.get("key"):
            st = None                     # a state of an earlier, different experiment
        state = _state_of(st)
        counts[state] += 1
        st = st or {}
        started = st.get("started")
        end = st.get("finished") or st.get("interrupted") or now
        seconds = None if started is None else end - started
        units.append({"id": u["id"], "label": u["label"], "state": state, "job": u.get("job"),
                      "host": st.get("host"), "pid": st.get("pid"), "seconds": seconds,
                      "attempt": st.get("attempt"), "error": st.get("error"),
                      "reason": st.get("reason"), "log": str(log_path(out, u["id"]))})
    return {"out": str(out), "executor": plan.get("executor"), "counts": counts,
            "units": units}
