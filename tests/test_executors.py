"""`featstore run` on real engines: a local Ray cluster (`ray.init(num_cpus=2)`) and a real
single-node Slurm cluster (tests/helpers/slurm.py: munged + slurmctld + slurmd on localhost,
submitted to through submitit). The reference is the same experiment run here in process,
one unit after the other (the local executor): every executor's results.json must equal it
bit for bit once the wall-clock times and the output paths are left out (`_comparable`).
A unit killed mid-run (its Ray worker SIGKILLed) is redone by Ray, and units whose Slurm jobs
are requeued mid-run (Slurm's `scontrol requeue`, submitit's USR2) are redone in the
restarted jobs; the aggregate is unchanged. Tiny: OSR 7/3 on digits at 8x8, a tiny CNN,
1 epoch, 1 seed, 2 training methods (2 units).

Every test runs under a user's defaults: no $FEATSTORE_THREADS (removed for the module if
the caller's shell set one), torch, Ray and Slurm at their own thread counts, the experiment
file without `threads`. The plan gives every unit its count (1 by default,
`unitthreads.plan_threads`), which is what makes the executors' bits equal."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from featstore.workflows.experiments import load_experiment, run_experiment, unitstate
from featstore.workflows.experiments.executors import RayExecutor
from featstore.workflows.experiments.unitstate import read_state, status
from tests.helpers.cli import run_cli as run
from tests.helpers.slurm import SlurmCluster, why_unavailable

TESTS = Path(__file__).parent
EXPERIMENT = (
    'name = "cluster tiny"\narch = "tests.helpers.tiny_models:TinyCNN"\nseeds = [0]\n'
    'device = "cpu"\n'
    '[data]\nosr = { data = "digits", ratios = ["7/3"], image_size = 8, '
    'fractions = { train = 0.1, val = 0.05, test = 0.05 } }\n'
    '[train]\nepochs = 1\nbatch_size = 32\n'
    '[[method]]\nname = "MSP"\nscorer = "msp"\n'
    '[[method]]\nname = "KNN"\nscorer = "knn"\ngrid = { K = [1, 5] }\n'
    '[[method]]\nname = "LogitNorm"\ntrain = "logitnorm"\nscorer = "msp"\n')
UNITS = ["r7-3-seed0-ce", "r7-3-seed0-logitnorm"]


def _comparable(value):
    """The result without what differs by design between two runs of the same experiment:
    wall-clock seconds (keys ending in _s / seconds) and the output directory's paths."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()
                if not (k.endswith("_s") or k.endswith("seconds") or k in ("out", "store"))}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("exp")
    (d / "exp.toml").write_text(EXPERIMENT)
    return d / "exp.toml"


@pytest.fixture(scope="module", autouse=True)
def user_defaults():
    """A user's defaults: no $FEATSTORE_THREADS in the environment of the module's tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("FEATSTORE_THREADS", raising=False)
        yield


@pytest.fixture(scope="module")
def local_result(experiment, tmp_path_factory) -> dict:
    """The reference: the experiment in this process, unit after unit, at its default
    settings: every unit on the plan's count, 1 (each unit's log says so), recorded in
    results.json; this process's torch count is as it was after."""
    before = torch.get_num_threads()
    res = run_experiment(load_experiment(experiment), tmp_path_factory.mktemp("local"))
    assert torch.get_num_threads() == before
    assert res["threads"] == 1 and res["experiment"]["threads"] is None
    assert len(res["runs"]) == 3 and not res["skipped"], res["skipped"]
    logs = sorted((Path(res["out"]) / "logs").glob("*.log"))
    assert len(logs) == 1          # in process: one unit for both training methods
    assert "computing on 1 threads (the plan's)" in logs[0].read_text()
    return res


@pytest.fixture(scope="module")
def worker_env():
    """Workers (Ray's, Slurm's jobs) import the worktree and tests/helpers/tiny_models."""
    old = os.environ.get("PYTHONPATH")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS.parent)] + ([old] if old else [])))
        yield


@pytest.fixture(scope="module")
def ray_cluster(worker_env):
    ray = pytest.importorskip("ray", reason="the optional extra featstore[ray]")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def slurm(worker_env, tmp_path_factory):
    why = why_unavailable()
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("submitit", reason="the optional extra featstore[slurm]")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    old = {k: os.environ.get(k) for k in cluster.env}
    os.environ.update(cluster.env)
    yield cluster
    cluster.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _check_done(out: Path, executor: str) -> None:
    st = status(out)
    assert st["executor"] == executor
    assert [u["id"] for u in st["units"]] == UNITS
    assert st["counts"]["done"] == 2 and sum(st["counts"].values()) == 2


def _interrupt_when_running(drive, out: Path, interrupts: dict) -> dict:
    """Run `drive` in a thread; once unit `uid`'s state file says running, call
    `interrupts[uid](state)` once, in a thread of its own (the units run at once); wait for
    `drive` to end; {uid: the state interrupted}."""
    thread = threading.Thread(target=drive)
    thread.start()
    victims: dict = {}
    helpers = []
    end = time.monotonic() + 300
    while len(victims) < len(interrupts) and time.monotonic() < end and thread.is_alive():
        for uid, interrupt in interrupts.items():
            st = read_state(out, uid) if uid not in victims and (out / "units").is_dir() \
                else None
            if st and st["state"] == "running":
                victims[uid] = st
                helpers.append(threading.Thread(target=interrupt, args=(st,)))
                helpers[-1].start()
        time.sleep(0.05)
    for helper in helpers:
        helper.join(300)
    thread.join(600)
    assert sorted(victims) == sorted(interrupts), f"units never seen running: {victims}"
    return victims


def _slurm(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True,
                          timeout=60).stdout


def _start_now(job: str, timeout: float = 120) -> None:
    """Once the requeued `job` is pending again, let it start now (Slurm holds a requeued job
    back for about two minutes: reason BeginTime)."""
    end, state = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        state = _slurm("squeue", "-h", "-r", "-j", job, "-o", "%T").strip()
        if state == "PENDING":
            _slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job} was not requeued (squeue: {state!r})")


def _requeue(st: dict) -> None:
    """Slurm's own requeue (what preemption with PreemptMode=REQUEUE does): SIGTERM to the
    job, SIGKILL after KillWait, the job queued again under the same id."""
    _slurm("scontrol", "requeue", st["job"])
    _start_now(st["job"])


def _usr2(st: dict) -> None:
    """submitit's time-out / preemption signal (sbatch --signal=USR2@90; submitit's own
    `SlurmJob._interrupt` sends it): submitit checkpoints the job and requeues it itself."""
    _slurm("scancel", "--signal", "USR2", st["job"])
    _start_now(st["job"])


def _same_stores(got: Path, ref: Path) -> None:
    """Every store of run `got` verifies (no half-written file), holds the complete splits
    of run `ref`'s same store and their arrays bit for bit."""
    from featstore import Store

    stores = sorted(p.parent.relative_to(got) for p in got.glob("runs/**/store/store.json"))
    assert len(stores) == 2
    for rel in stores:
        with Store.open(got / rel) as st, Store.open(ref / rel) as want:
            assert st.verify() == []
            assert st.splits() == want.splits()
            for name in want.splits():
                for field in ("features", "logits", "labels"):
                    assert np.array_equal(np.asarray(getattr(st.split(name), field)),
                                          np.asarray(getattr(want.split(name), field)))


def test_slurm_equals_local_and_requeued_units_redone(slurm, experiment, local_result,
                                                      tmp_path, capsys):
    """`featstore run --executor slurm` (the run file's [executor] table: 1 CPU and 10
    minutes per unit, an array job) on the localhost cluster, each unit's job requeued while
    its unit runs: the LogitNorm unit's by Slurm (`scontrol requeue`: SIGTERM, as on
    preemption), the CE unit's by submitit (USR2, its time-out / preemption signal:
    checkpoint, then requeue). Each job restarts under the same id (SLURM_RESTART_COUNT 1) in
    a new process, the unit's state file keeps the interrupted start in `attempts`, and the
    unit redoes what its files do not hold. results.json = the local one (2 units done, 3
    rows: none lost or doubled), every store verifies and holds the local run's arrays,
    `--status` names the jobs."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(experiment.read_text().replace(
        '[train]', '[executor]\ncpus = 1\ntime = 10\npoll_s = 0.2\n[train]'))
    out = tmp_path / "slurm_out"
    box: dict = {}

    def drive():
        box["cli"] = run(capsys, "run", str(exp_file), "--out", str(out), "--executor",
                         "slurm", "--json")

    victims = _interrupt_when_running(drive, out, {"r7-3-seed0-ce": _usr2,
                                                   "r7-3-seed0-logitnorm": _requeue})
    code, stdout, err = box["cli"]
    assert code == 0, err + "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    for uid, victim in victims.items():
        after = read_state(out, uid)
        assert after["state"] == "done" and after["pid"] != victim["pid"]
        assert after["job"] == victim["job"] and after["restarts"] == 1
        assert after["attempt"] == 2 and [a["pid"] for a in after["attempts"]] == \
            [victim["pid"]]
        assert after["attempts"][0]["interrupted"] is not None
        assert "interrupted (" in unitstate.log_path(out, uid).read_text()
    assert read_state(out, "r7-3-seed0-logitnorm")["attempts"][0]["reason"] == "SIGTERM"
    assert _comparable(json.loads(stdout)) == _comparable(local_result) | {
        "experiment": _comparable(local_result["experiment"]) | {"path": str(exp_file)}}
    _check_done(out, "slurm")
    _same_stores(out, Path(local_result["out"]))
    jobs = [u["job"] for u in status(out)["units"]]
    assert len({j.split("_")[0] for j in jobs}) == 1 and len(set(jobs)) == 2   # one array
    assert all(read_state(out, u)["pid"] != os.getpid() for u in UNITS)
    code, stdout, _ = run(capsys, "run", "--status", str(out))
    assert code == 0 and stdout.count("done") >= 2 and jobs[0] in stdout


def test_slurm_cancelled_unit_reported_then_rerun(slurm, experiment, local_result, tmp_path,
                                                  capsys):
    """`scancel` of the LogitNorm unit's job while it runs (Slurm sends SIGTERM and does not
    requeue): the unit stops, its state `interrupted` (SIGTERM); the run exits 1 naming it
    with its log, the CE unit finished, no results.json; `--status` shows it interrupted.
    The same command again reads the CE unit back (same pid) and reruns only the cancelled
    one: results.json = the local one."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(experiment.read_text().replace(
        '[train]', '[executor]\ncpus = 1\ntime = 10\npoll_s = 0.2\n[train]'))
    out = tmp_path / "slurm_out"
    args = ["run", str(exp_file), "--out", str(out), "--executor", "slurm", "--json"]
    box: dict = {}

    def drive():
        box["cli"] = run(capsys, *args)

    _interrupt_when_running(drive, out, {"r7-3-seed0-logitnorm": lambda st: _slurm(
        "scancel", st["job"])})
    code, _, err = box["cli"]
    assert code == 1, err
    assert "1 of 2 units failed" in err and "r7-3-seed0-logitnorm: interrupted (SIGTERM)" \
        in err.replace("\n", " ")
    assert not (out / "results.json").exists()
    st = {u["id"]: u for u in status(out)["units"]}
    assert st["r7-3-seed0-logitnorm"]["state"] == "interrupted"
    assert st["r7-3-seed0-ce"]["state"] == "done"
    ce_pid = st["r7-3-seed0-ce"]["pid"]
    code, stdout, err = run(capsys, *args)
    assert code == 0, err
    assert _comparable(json.loads(stdout)) == _comparable(local_result) | {
        "experiment": _comparable(local_result["experiment"]) | {"path": str(exp_file)}}
    assert read_state(out, "r7-3-seed0-ce")["pid"] == ce_pid          # read back
    _check_done(out, "slurm")
    _same_stores(out, Path(local_result["out"]))


UNIT_JOB = """
import sys, time
from featstore.workflows.experiments.executors import Tracked
from featstore.workflows.experiments.slurm_unit import UnitJob

def body(unit, log):
    log("unit body starts")
    time.sleep(120)
    return {"answer": 42}

out = sys.argv[1]
print(UnitJob()(Tracked(body, out), {"id": "u1", "key": "k1", "label": "u1"}, out))
"""


def _answer_body(unit: dict, log) -> dict:
    """The restarted job's body: UNIT_JOB's without the sleep."""
    log("unit body starts")
    return {"answer": 42}


def _failing_body(unit: dict, log) -> dict:
    raise RuntimeError("this body must not run again")


def test_unit_job_sigterm_then_restart(tmp_path, caplog):
    """A Slurm job's body (`slurm_unit.UnitJob`, called as submitit calls it, without Slurm):
    SIGTERM (what Slurm sends a job it requeues or preempts) stops the unit at once, its
    state `interrupted` with reason SIGTERM; the restarted job runs it again (attempt 2, the
    first start kept in `attempts` with its pid) to done; a job started after that reads the
    unit back without running its body (which would fail). The first job is an interpreter
    of its own (killed by the signal); the restarted and the late one are called here, as
    submitit calls them (no further interpreter start-ups)."""
    pytest.importorskip("submitit", reason="the optional extra featstore[slurm]")
    from featstore.store import interrupts
    from featstore.workflows.experiments.executors import Tracked
    from featstore.workflows.experiments.slurm_unit import UnitJob

    unit = {"id": "u1", "key": "k1", "label": "u1"}
    script = tmp_path / "job.py"
    script.write_text(UNIT_JOB)
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while (read_state(out, "u1") or {}).get("state") != "running":
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.05)
    first = read_state(out, "u1")
    assert first["pid"] == proc.pid and first["attempt"] == 1 and first["attempts"] == []
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) != 0                     # stopped long before its 120 s sleep
    stopped = read_state(out, "u1")
    assert stopped["state"] == "interrupted" and stopped["reason"] == "SIGTERM"
    try:                                          # UnitJob installs the SIGTERM handler
        again = UnitJob()(Tracked(_answer_body, str(out)), unit, str(out))
    finally:
        interrupts.uninstall()
    assert again == {"answer": 42}
    done = read_state(out, "u1")
    assert done["state"] == "done" and done["records"] == {"answer": 42}
    assert done["attempt"] == 2 and done["pid"] != proc.pid
    assert [(a["pid"], a["reason"]) for a in done["attempts"]] == [(proc.pid, "SIGTERM")]
    log = unitstate.log_path(out, "u1").read_text()
    assert log.count("unit body starts") == 2 and "interrupted (SIGTERM)" in log
    # the late job: its body would raise, so returning the records means it read them back
    # without running it
    caplog.set_level(logging.INFO, logger="featstore.workflows.experiments.slurm_unit")
    late = UnitJob()(Tracked(_failing_body, str(out)), unit, str(out))
    assert late == {"answer": 42} and "read back, not rerun" in caplog.text
    assert read_state(out, "u1") == done
    st = status_of_one(out)
    assert st["state"] == "done" and st["attempt"] == 2


def test_deferred_signal_is_recorded_not_raised():
    """`interrupts.deferred()` (around a unit's interrupted-state write): a SIGTERM sent to
    this process inside the block is recorded (`interrupted()`, `received()` = "SIGTERM")
    and raises nothing; the same signal outside it raises KeyboardInterrupt."""
    from featstore.store import interrupts

    interrupts.install(sigterm=True)
    try:
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):              # the handler runs at the next bytecodes
                time.sleep(0.01)
        assert interrupts.interrupted() and interrupts.received() == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                time.sleep(0.01)
    finally:
        interrupts.uninstall()
        interrupts.install()                  # clears the record
        interrupts.uninstall()
    assert not interrupts.interrupted() and interrupts.received() is None


def status_of_one(out: Path) -> dict:
    """`run --status`'s entry of the one unit of `test_unit_job_sigterm_then_restart`."""
    unitstate.write_plan(out, "slurm", [{"id": "u1", "key": "k1", "label": "u1"}])
    return status(out)["units"][0]


def test_executor_bad_input(experiment, tmp_path, capsys):
    """An unknown `--executor` is exit 2 naming the valid ones; an unknown key and a wrong
    type in the file's [executor] are exit 1 (the file is at fault, issue 43) naming the
    file and the valid ones; --status on a directory that is no run's is exit 1 naming the
    file it needs."""
    code, _, err = run(capsys, "run", str(experiment), "--out", str(tmp_path / "o"),
                       "--executor", "kubernetes")
    assert code == 2 and "'kubernetes' (valid: local, slurm, ray)" in err
    bad = tmp_path / "bad.toml"
    bad.write_text(experiment.read_text() + '[executor]\nkind = "slurm"\npartiton = "gpu"\n')
    code, _, err = run(capsys, "run", str(bad), "--out", str(tmp_path / "o"))
    assert code == 1 and "unknown slurm executor key 'partiton'" in err and "partition" in err
    bad.write_text(experiment.read_text() + '[executor]\nkind = "ray"\ncpus = "two"\n')
    code, _, err = run(capsys, "run", str(bad), "--out", str(tmp_path / "o"))
    assert code == 1 and "cpus = 'two', expected an integer" in err
    code, _, err = run(capsys, "run", "--status", str(tmp_path))
    assert code == 1 and "no plan.json" in err
    assert not (tmp_path / "o").exists()



# ------------------------------------------------- the other workflows on the same executors
def test_local_pool_equals_sequential(experiment, local_result, tmp_path, capsys):
    """`featstore run --workers 2`: the units (one per training method) in a pool of 2
    spawned processes, each on the plan's thread count: results.json = the sequential
    run's; the units ran outside this process."""
    out = tmp_path / "pool"
    code, stdout, err = run(capsys, "run", str(experiment), "--out", str(out), "--workers",
                            "2", "--json")
    assert code == 0, err
    assert _comparable(json.loads(stdout)) == _comparable(local_result)
    _check_done(out, "local")
    assert all(read_state(out, u)["pid"] != os.getpid() for u in UNITS)
    code, _, err = run(capsys, "run", str(experiment), "--out", str(out), "--workers", "0")
    assert code == 2 and "--workers 0: expected an integer >= 1" in err
    code, _, err = run(capsys, "run", str(experiment), "--out", str(out), "--executor", "ray",
                       "--workers", "2")
    assert code == 2 and "--workers applies to the local executor only" in err


# ------------------------------------------------------------------- gscore gbench (units)
GBENCH_TINY = {"epochs": 1, "only": ["ood/near/digit6", "ood/noise/gaussian"],
               "patch_count": 8, "noise_count": 8}


def _gbench_comparable(summary: dict) -> dict:
    """A built store's summary without its paths and wall time, and without the digest of
    the checkpoint's bytes (torch.save's pickle memoizes strings by identity, which differs
    between a worker process and this one; the weights' numbers are compared through the
    store's head in `_same_store_arrays`), as JSON (what `gscore gbench --json` prints; a
    unit's result comes back through its JSON state file)."""
    summary = json.loads(json.dumps(summary))
    model = {k: v for k, v in summary["model"].items() if k not in ("weights", "sha256")}
    return {**{k: v for k, v in summary.items() if k not in ("path", "seconds")},
            "model": model}


def _same_store_arrays(got: str | Path, ref: str | Path) -> None:
    """Store `got` verifies and holds store `ref`'s head and every split's arrays, bit for
    bit (the reference: the same build in this process)."""
    from featstore import Store

    with Store.open(got) as st, Store.open(ref) as want:
        assert st.verify() == []
        assert st.splits() == want.splits()
        for a, b in zip(st.head, want.head, strict=True):
            assert np.array_equal(a, b)
        for name in want.splits():
            for field in ("features", "logits", "labels"):
                assert np.array_equal(np.asarray(getattr(st.split(name), field)),
                                      np.asarray(getattr(want.split(name), field)))


@pytest.fixture(scope="module")
def gbench_serial(tmp_path_factory) -> dict:
    """The reference: the tiny mini-Gbench (2 OOD splits, 1 training epoch) of the w8 and
    scratch backbones built by the local executor, one unit after the other in this process
    (`gbench_units.gbench_builds`, as `gscore gbench --executor local`), {backbone:
    summary}; this process's torch count is left as it was."""
    from featstore.workflows.demo.gbench_units import gbench_builds
    from featstore.workflows.experiments.executors import make_executor

    out = tmp_path_factory.mktemp("gbench_serial")
    before = torch.get_num_threads()
    got = gbench_builds(make_executor("local", {}), out, ["w8", "scratch"],
                        log=lambda _m: None, **GBENCH_TINY)
    assert torch.get_num_threads() == before
    for b in ("w8", "scratch"):
        assert "computing on 1 threads" in unitstate.log_path(out, f"gbench-build-{b}") \
            .read_text()
    return dict(zip(("w8", "scratch"), got, strict=True))


def test_demo_threads_follow_featstore_threads(monkeypatch):
    """The demo's and mini-Gbench's torch threads (`pipeline.demo_threads`): $FEATSTORE_THREADS
    when set, else os.cpu_count(); a bad value is a UsageError naming the variable."""
    from featstore.errors import UsageError
    from featstore.workflows.demo.pipeline import demo_threads

    monkeypatch.setenv("FEATSTORE_THREADS", "3")
    assert demo_threads() == 3
    monkeypatch.delenv("FEATSTORE_THREADS")
    assert demo_threads() == max(1, os.cpu_count() or 1)
    monkeypatch.setenv("FEATSTORE_THREADS", "zero")
    with pytest.raises(UsageError, match="FEATSTORE_THREADS"):
        demo_threads()


def test_gbench_builds_in_a_pool_equal_serial(gbench_serial, tmp_path):
    """`gbench_units.gbench_builds` on the local pool (2 workers): the w8 and scratch builds
    are one unit each, in spawned processes; each store's summary and arrays equal the
    builds of the local executor in this process; a backbone named twice, --weights for
    two backbones and an unknown backbone are UsageErrors naming them, before anything
    runs."""
    from featstore.errors import UsageError
    from featstore.workflows.demo.gbench_units import gbench_builds
    from featstore.workflows.experiments.executors import make_executor

    pool = make_executor("local", {"workers": 2})
    got = gbench_builds(pool, tmp_path / "g", ["w8", "scratch"], log=lambda _m: None,
                        **GBENCH_TINY)
    assert [s["path"] for s in got] == [str(tmp_path / "g" / f"store_{b}")
                                        for b in ("w8", "scratch")]
    for b, summary in zip(("w8", "scratch"), got, strict=True):
        assert _gbench_comparable(summary) == _gbench_comparable(gbench_serial[b])
        _same_store_arrays(summary["path"], gbench_serial[b]["path"])
    st = status(tmp_path / "g")
    assert st["executor"] == "local" and st["counts"]["done"] == 2
    assert [u["id"] for u in st["units"]] == ["gbench-build-w8", "gbench-build-scratch"]
    assert os.getpid() not in {u["pid"] for u in st["units"]}
    for bad, message in ((["w8", "w8"], "a backbone is named twice"),
                         (["w8", "huge"], "--backbone 'huge': expected one of")):
        with pytest.raises(UsageError, match=message):
            gbench_builds(pool, tmp_path / "bad", bad)
    with pytest.raises(UsageError, match="--weights applies to one --backbone; got 2"):
        gbench_builds(pool, tmp_path / "bad", ["w8", "w32"], weights=tmp_path / "m.pt")
    assert not (tmp_path / "bad").exists()


def test_gbench_on_slurm_equals_serial(slurm, gbench_serial, tmp_path, capsys):
    """Real Slurm: the w8 mini-Gbench build as a Slurm job (`gbench_builds`, 1 CPU, 10
    minutes) = the in-process build (summary and arrays); `gscore gbench STORES --executor
    slurm --work DIR` (the Gbench protocol on two stores as one job) prints the in-process
    run's JSON, and the unit ran in its job."""
    from featstore.workflows.demo.gbench_units import gbench_builds
    from featstore.workflows.experiments.executors import SlurmExecutor
    from tests.helpers.stores import graded_store

    got = gbench_builds(SlurmExecutor(cpus=1, time=10, poll_s=0.2), tmp_path / "g", ["w8"],
                        log=lambda _m: None, **GBENCH_TINY)
    assert _gbench_comparable(got[0]) == _gbench_comparable(gbench_serial["w8"])
    _same_store_arrays(got[0]["path"], gbench_serial["w8"]["path"])
    job = status(tmp_path / "g")["units"][0]
    assert job["state"] == "done" and job["job"] and job["pid"] != os.getpid()

    a = graded_store(tmp_path / "a", seed=0, n_ood=4, rows=60)
    b = graded_store(tmp_path / "b", seed=1, n_ood=6, rows=60)
    args = ["gscore", "gbench", a.path, b.path, "--json", "--methods", "msp", "--repeats",
            "1", "--exclude", "ood/g2/*"]
    code, serial, err = run(capsys, *args)
    assert code == 0, err
    cfg = tmp_path / "slurm.toml"
    cfg.write_text('[executor]\nkind = "slurm"\ncpus = 1\ntime = 10\npoll_s = 0.2\n')
    work = tmp_path / "work"
    code, stdout, err = run(capsys, *args, "--executor-config", cfg, "--work", work)
    assert code == 0, err + "".join(p.read_text() for p in (work / "logs").glob("*.log"))
    assert _comparable(json.loads(stdout)) == _comparable(json.loads(serial))
    st = status(work)
    assert st["executor"] == "slurm" and st["counts"]["done"] == 1
    assert st["units"][0]["job"] and st["units"][0]["pid"] != os.getpid()


def test_gbench_executor_bad_input(tmp_path, capsys):
    """`gscore gbench`'s executor options: a backbone named twice, --weights for two
    backbones, an unknown executor, --workers with Ray and STORES on Slurm without --work
    are exit 2 naming the option, before anything is written."""
    from tests.helpers.stores import graded_store

    out = tmp_path / "g"
    cases = [(["--backbone", "w8,w8"], "a backbone is named twice"),
             (["--backbone", "w8", "--backbone", "w32", "--weights", tmp_path / "m.pt"],
              "--weights applies to one --backbone; got 2"),
             (["--backbone", "w8", "--executor", "kubernetes"],
              "'kubernetes' (valid: local, slurm, ray)"),
             (["--executor", "ray", "--workers", "2"], "--workers applies to the local")]
    for extra, message in cases:
        code, _, err = run(capsys, "gscore", "gbench", "--out", out, *extra)
        assert code == 2 and message in err, (extra, err)
    a = graded_store(tmp_path / "a", seed=0, n_ood=4, rows=60)
    code, _, err = run(capsys, "gscore", "gbench", a.path, "--executor", "slurm")
    assert code == 2 and "--executor slurm needs --work DIR" in err
    assert not out.exists()


# ------------------------------------------- on Ray (last: its cluster idles at ~10 % of a core
# until the module ends, so it starts only for these tests)
def test_ray_equals_local_and_killed_unit_redone(ray_cluster, experiment, local_result,
                                                 tmp_path, capsys):
    """2 Ray tasks (one per split x seed x training method); the worker running the
    LogitNorm unit is SIGKILLed while the unit runs (its state file says running, its pid the
    worker's); Ray re-runs the task (max_retries), the unit redoes what its files do not hold.
    results.json (the other unit uninterrupted, this one redone) = the local one; `run
    --status` lists the 2 units done; a rerun reads every unit back (no task)."""
    out = tmp_path / "ray"
    box: dict = {}

    def drive():
        try:
            box["res"] = run_experiment(load_experiment(experiment), out,
                                        executor=RayExecutor(poll_s=0.1, retries=2))
        except BaseException as exc:   # noqa: BLE001 (re-raised in the test thread)
            box["exc"] = exc

    victim = _interrupt_when_running(drive, out, {"r7-3-seed0-logitnorm": lambda st: os.kill(
        st["pid"], signal.SIGKILL)})["r7-3-seed0-logitnorm"]
    if "exc" in box:
        raise box["exc"]
    after = read_state(out, "r7-3-seed0-logitnorm")
    assert after["state"] == "done" and after["pid"] != victim["pid"]
    res = box["res"]
    assert _comparable(res) == _comparable(local_result)
    assert _comparable(json.loads((out / "results.json").read_text())) == \
        _comparable(local_result)
    _check_done(out, "ray")
    pids = {u: read_state(out, u)["pid"] for u in UNITS}
    assert os.getpid() not in pids.values()          # the units ran in Ray's workers
    capsys.readouterr()                               # what Ray printed while the unit died
    code, stdout, err = run(capsys, "run", "--status", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["counts"]["done"] == 2, stdout
    again = run_experiment(load_experiment(experiment), out, executor=RayExecutor(poll_s=0.1))
    assert _comparable(again) == _comparable(local_result)
    assert {u: read_state(out, u)["pid"] for u in UNITS} == pids     # read back, not rerun


def test_protocol_osr_on_ray_equals_local(ray_cluster, tmp_path, capsys):
    """`protocol osr --executor-config` (kind = ray: 2 units, the MSP and LogitNorm models of
    one division at 8x8, each a task on the Ray workers already started) prints the results
    of the in-process run (both on 1 torch thread). The OSR preset trains with random-shift
    crops, Nesterov and a cosine schedule: the same bits in another process, both on the
    plan's count. (The local process pool is `test_local_pool_equals_sequential`'s.)"""
    args = ["protocol", "osr", "--data", "digits", "--ratios", "7/3", "--seeds", "1",
            "--methods", "MSP,LogitNorm", "--arch", "tests.helpers.tiny_models:TinyCNN",
            "--epochs", "1",
            "--batch-size", "64", "--image-size", "8", "--device", "cpu", "--no-tune", "--json"]
    code, stdout, err = run(capsys, *args, "--out", str(tmp_path / "local"))
    assert code == 0, err
    local = json.loads(stdout)
    cfg = tmp_path / "ray.toml"
    cfg.write_text('[executor]\nkind = "ray"\npoll_s = 0.1\n')
    code, stdout, err = run(capsys, *args, "--out", str(tmp_path / "ray"),
                            "--executor-config", str(cfg))
    assert code == 0, err
    got = json.loads(stdout)
    assert len(got["runs"]) == 2 and all(r["status"] == "ok" for r in got["runs"])
    # model_sha256 digests the checkpoint's bytes: its tensors and fields are equal, but the
    # pickle inside torch.save memoizes by object identity (shared strings), which differs
    # between a worker process and this one; every number is compared
    for r in got["runs"] + local["runs"]:
        r.pop("model_sha256")
    assert _comparable(got) == _comparable(local)
    st = status(tmp_path / "ray")
    assert st["executor"] == "ray" and st["counts"]["done"] == 2
    assert os.getpid() not in {u["pid"] for u in st["units"]}


def _shift_store(path: Path) -> Path:
    """A store with id/test and one OOD split whose rows carry (sem, cov) shift degrees."""
    from featstore import Store

    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(3, 5)).astype(np.float32), np.zeros(3, dtype=np.float32)
    sem = np.r_[np.zeros(40), np.ones(40)] + rng.uniform(0, 0.4, 80)
    cov = np.tile(np.r_[np.zeros(20), np.ones(20)], 2) + rng.uniform(0, 0.4, 80)
    splits = {"id/train": {"features": rng.normal(size=(50, 5)).astype(np.float32) * 2,
                           "labels": rng.integers(0, 3, 50)},
              "id/test": {"features": rng.normal(size=(60, 5)).astype(np.float32) * 2,
                          "labels": rng.integers(0, 3, 60)},
              "ood/shift/x": {"features": rng.normal(size=(80, 5)).astype(np.float32),
                              "extras": {"sem_shift": sem, "cov_shift": cov}}}
    Store.from_arrays(path, head=(w, b), splits=splits)
    return path


def test_shift_grid_on_ray_equals_local(ray_cluster, tmp_path, capsys):
    """`protocol shift-grid --executor ray --work DIR`: one Ray task per scorer; the JSON
    printed is the in-process run's, text for text; `run --status DIR` lists the units."""
    store = _shift_store(tmp_path / "s")
    args = ["protocol", "shift-grid", str(store), "--method", "msp", "--method", "mls",
            "--levels", "2", "--no-cache", "--json"]
    code, local, err = run(capsys, *args)
    assert code == 0, err
    code, got, err = run(capsys, *args, "--executor", "ray", "--work", str(tmp_path / "w"))
    assert code == 0, err
    assert got == local and len(json.loads(got)["results"]) == 2
    st = status(tmp_path / "w")
    assert st["executor"] == "ray" and [u["id"] for u in st["units"]] == ["shift-msp",
                                                                          "shift-mls"]
    assert st["counts"]["done"] == 2
    code, _, err = run(capsys, *args, "--executor", "slurm")
    assert code == 2 and "--executor slurm needs --work DIR" in err


def test_facets_table_on_ray_equals_local(ray_cluster, tmp_path, capsys):
    """`protocol facets-table --executor ray`: one Ray task per store; JSON and the Markdown
    file equal the in-process run's; a rerun reads both units back (same pids)."""
    from featstore import Store
    from tests.helpers.stores import structured_arrays

    paths = []
    for seed in (0, 1):
        arrays = structured_arrays(seed=seed, n_train=60, n_val=20, n_test=40, n_ood=30)
        Store.from_arrays(tmp_path / f"s{seed}", head=arrays["head"], splits=arrays["splits"])
        paths.append(f"D{seed}={tmp_path / f's{seed}'}")
    args = ["protocol", "facets-table", *paths, "--method", "msp", "--method", "mls",
            "--no-cache", "--json"]
    code, local, err = run(capsys, *args, "--out", str(tmp_path / "local.md"))
    assert code == 0, err
    work = tmp_path / "w"
    code, got, err = run(capsys, *args, "--out", str(tmp_path / "ray.md"), "--executor", "ray",
                         "--work", str(work))
    assert code == 0, err
    assert json.loads(got) == json.loads(local) | {"report": str(tmp_path / "ray.md")}
    assert (tmp_path / "ray.md").read_text() == (tmp_path / "local.md").read_text()
    pids = {u["id"]: u["pid"] for u in status(work)["units"]}
    assert len(pids) == 2 and os.getpid() not in pids.values()
    code, again, _ = run(capsys, *args, "--out", str(tmp_path / "ray.md"), "--executor", "ray",
                         "--work", str(work))
    assert code == 0 and again == got
    assert {u["id"]: u["pid"] for u in status(work)["units"]} == pids


def test_units_compute_on_the_plans_count_whatever_their_process(ray_cluster, tmp_path,
                                                                monkeypatch):
    """The plan's count wins over the unit's environment: planned with $FEATSTORE_THREADS=3,
    a unit on a Ray task of num_cpus 1 (whose process Ray starts with OMP_NUM_THREADS=1)
    computes with torch on 3 threads and $FEATSTORE_THREADS=3; planned without it (a
    user's default) a unit in this process computes on 1, and this process's count and
    environment are as they were after."""
    from featstore.workflows.experiments.executors import RayExecutor, make_executor
    from featstore.workflows.experiments.unitthreads import plan_threads
    from featstore.workflows.experiments.workflows import run_units
    from tests.helpers.units import threads_seen

    assert plan_threads() == 1 and plan_threads(4) == 4
    monkeypatch.setenv("FEATSTORE_THREADS", "3")
    assert plan_threads() == 3 and plan_threads(2) == 2
    before = torch.get_num_threads()
    unit = [{"id": "t", "key": "k", "label": "threads"}]
    (ray,) = run_units(RayExecutor(poll_s=0.1), tmp_path / "ray", "t", unit, threads_seen,
                       lambda _m: None)
    assert ray["pid"] != os.getpid() and ray["omp"] == "1"
    assert (ray["torch"], ray["env"]) == (3, "3")
    monkeypatch.delenv("FEATSTORE_THREADS")
    here = run_units(make_executor("local", {}), tmp_path / "here", "t", unit, threads_seen,
                     lambda _m: None)[0]
    assert (here["torch"], here["env"], here["pid"]) == (1, "1", os.getpid())
    assert torch.get_num_threads() == before and "FEATSTORE_THREADS" not in os.environ
