"""`featstore run` on real engines: a local Ray cluster (`ray.init(num_cpus=2)`) and a real
single-node Slurm cluster (tests/helpers/slurm.py: munged + slurmctld + slurmd on localhost,
submitted to through submitit). The reference is the same experiment run here in process,
one unit after the other (the local executor): every executor's results.json must equal it
bit for bit once the wall-clock times and the output paths are left out (`_comparable`).
A unit killed mid-run (its Ray worker SIGKILLed) is redone by Ray and the aggregate is
unchanged. Tiny: OSR 7/3 on digits at 8x8, a tiny CNN, 1 epoch, 1 seed, 2 training methods
(2 units)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from featstore.workflows.experiments import load_experiment, run_experiment
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


@pytest.fixture(scope="module")
def local_result(experiment, tmp_path_factory) -> dict:
    """The reference: the experiment in this process, unit after unit, on 1 thread as each
    Ray task (num_cpus = 1) and Slurm job (cpus = 1) below: torch's training sums in another
    order on another thread count (weights 1e-8 apart), so the same bits need the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = run_experiment(load_experiment(experiment), tmp_path_factory.mktemp("local"))
    finally:
        torch.set_num_threads(threads)
    assert len(res["runs"]) == 3 and not res["skipped"], res["skipped"]
    return res


@pytest.fixture(scope="module")
def worker_env():
    """Workers (Ray's, Slurm's jobs) import the worktree and tests/helpers/tiny_models."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent)] + ([old] if old else []))
    yield
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


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
                                        executor=RayExecutor(poll_s=0.5, retries=2))
        except BaseException as exc:   # noqa: BLE001 (re-raised in the test thread)
            box["exc"] = exc

    victim = _interrupt_when_running(drive, out, "r7-3-seed0-logitnorm",
                                     lambda st: os.kill(st["pid"], signal.SIGKILL))
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
    again = run_experiment(load_experiment(experiment), out, executor=RayExecutor(poll_s=0.5))
    assert _comparable(again) == _comparable(local_result)
    assert {u: read_state(out, u)["pid"] for u in UNITS} == pids     # read back, not rerun


def _interrupt_when_running(drive, out: Path, uid: str, interrupt) -> dict:
    """Run `drive` in a thread; once unit `uid`'s state file says running, call
    `interrupt(state)` once; wait for `drive` to end; the state interrupted."""
    thread = threading.Thread(target=drive)
    thread.start()
    victim, end = None, time.monotonic() + 300
    while victim is None and time.monotonic() < end and thread.is_alive():
        st = read_state(out, uid) if (out / "units").is_dir() else None
        if st and st["state"] == "running":
            victim = st
            interrupt(st)
        time.sleep(0.05)
    thread.join(600)
    assert victim is not None, "the unit never ran"
    return victim


def test_slurm_equals_local(slurm, experiment, local_result, tmp_path, capsys):
    """`featstore run --executor slurm` (the run file's [executor] table: 1 CPU and 10
    minutes per unit, an array job) on the localhost cluster: results.json = the local one,
    each unit ran in its own Slurm job, `--status` names the jobs."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(experiment.read_text().replace(
        '[train]', '[executor]\ncpus = 1\ntime = 10\npoll_s = 1\n[train]'))
    out = tmp_path / "slurm_out"
    code, stdout, err = run(capsys, "run", str(exp_file), "--out", str(out), "--executor",
                            "slurm", "--json")
    assert code == 0, err + "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert _comparable(json.loads(stdout)) == _comparable(local_result) | {
        "experiment": _comparable(local_result["experiment"]) | {"path": str(exp_file)}}
    _check_done(out, "slurm")
    jobs = [u["job"] for u in status(out)["units"]]
    assert len({j.split("_")[0] for j in jobs}) == 1 and len(set(jobs)) == 2   # one array
    assert all(read_state(out, u)["pid"] != os.getpid() for u in UNITS)
    code, stdout, _ = run(capsys, "run", "--status", str(out))
    assert code == 0 and stdout.count("done") >= 2 and jobs[0] in stdout


def test_executor_bad_input(experiment, tmp_path, capsys):
    """Unknown kind / key and a wrong type are exit 2 naming the valid ones; --status on a
    directory that is no run's is exit 1 naming the file it needs."""
    code, _, err = run(capsys, "run", str(experiment), "--out", str(tmp_path / "o"),
                       "--executor", "kubernetes")
    assert code == 2 and "'kubernetes' (valid: local, slurm, ray)" in err
    bad = tmp_path / "bad.toml"
    bad.write_text(experiment.read_text() + '[executor]\nkind = "slurm"\npartiton = "gpu"\n')
    code, _, err = run(capsys, "run", str(bad), "--out", str(tmp_path / "o"))
    assert code == 2 and "unknown slurm executor key 'partiton'" in err and "partition" in err
    bad.write_text(experiment.read_text() + '[executor]\nkind = "ray"\ncpus = "two"\n')
    code, _, err = run(capsys, "run", str(bad), "--out", str(tmp_path / "o"))
    assert code == 2 and "cpus = 'two', expected an integer" in err
    code, _, err = run(capsys, "run", "--status", str(tmp_path))
    assert code == 1 and "no plan.json" in err
    assert not (tmp_path / "o").exists()



# ------------------------------------------------- the other workflows on the same executors
def test_local_pool_equals_sequential(experiment, local_result, tmp_path, capsys):
    """`featstore run --workers 2`: the units (one per training method) in a pool of 2
    spawned processes with the driver's torch thread count (1 here, as the reference):
    results.json = the sequential run's; the units ran outside this process."""
    out = tmp_path / "pool"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code, stdout, err = run(capsys, "run", str(experiment), "--out", str(out), "--workers",
                                "2", "--json")
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    assert _comparable(json.loads(stdout)) == _comparable(local_result)
    _check_done(out, "local")
    assert all(read_state(out, u)["pid"] != os.getpid() for u in UNITS)
    code, _, err = run(capsys, "run", str(experiment), "--out", str(out), "--workers", "0")
    assert code == 2 and "workers = 0, expected an integer >= 1" in err
    code, _, err = run(capsys, "run", str(experiment), "--out", str(out), "--executor", "ray",
                       "--workers", "2")
    assert code == 2 and "unknown ray executor key 'workers'" in err


def test_protocol_osr_on_ray_equals_local(ray_cluster, tmp_path, capsys):
    """`protocol osr --executor-config` (kind = ray: 2 units, the MSP and LogitNorm models of
    one division at 8x8, each a task on the Ray workers already started) prints the results
    of the in-process run (both on 1 torch thread). The OSR preset trains with random-shift
    crops, Nesterov and a cosine schedule: the same bits in another process. (The local
    process pool is `test_local_pool_equals_sequential`'s.)"""
    args = ["protocol", "osr", "--data", "digits", "--ratios", "7/3", "--seeds", "1",
            "--methods", "MSP,LogitNorm", "--arch", "tests.helpers.tiny_models:TinyCNN",
            "--epochs", "1",
            "--batch-size", "64", "--image-size", "8", "--device", "cpu", "--no-tune", "--json"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code, stdout, err = run(capsys, *args, "--out", str(tmp_path / "local"))
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    local = json.loads(stdout)
    cfg = tmp_path / "ray.toml"
    cfg.write_text('[executor]\nkind = "ray"\npoll_s = 0.5\n')
    torch.set_num_threads(1)
    try:
        code, stdout, err = run(capsys, *args, "--out", str(tmp_path / "ray"),
                                "--executor-config", str(cfg))
    finally:
        torch.set_num_threads(threads)
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
