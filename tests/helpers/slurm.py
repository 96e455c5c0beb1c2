"""A real single-node Slurm cluster on localhost for the executor tests: a private munged
(its own key and socket), slurmctld and slurmd (proctrack/linuxproc, task/none, no cgroups,
no accounting) on free ports, from a slurm.conf written to a temporary directory; stopped
(each daemon by its own pid) after. Needs root and Debian's slurm-wlm + munge (`make test`
installs them when root); `why_unavailable()` says what is missing."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def why_unavailable() -> str | None:
    """None when a cluster can be started here, else the reason."""
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd needs root"
    missing = [b for b in (*DAEMONS, "sbatch", "squeue") if shutil.which(b) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(d: Path, node: str) -> str:
    cpus = os.cpu_count() or 1
    return "\n".join([
        "ClusterName=featstoretest", f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={d}/munge.sock",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool", f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd.pid", f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd.log", f"PlugStackConfig={d}/plugstack.conf",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU", "SchedulerType=sched/backfill", "ReturnToService=2",
        "MpiDefault=none", "SwitchType=switch/none", "MinJobAge=2",
        # schedule pending jobs (a requeued job released with StartTime=now) within a
        # second instead of Slurm's periodic passes (60 s main, 30 s backfill)
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP", ""])


class SlurmCluster:
    """Start with `start()`, stop with `stop()`; `env` holds SLURM_CONF for the clients."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}

    def start(self, timeout: float = 60) -> None:
        d = self.dir
        for sub in ("state", "spool"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        (d / "munge.key").write_bytes(os.urandom(1024))
        (d / "munge.key").chmod(0o400)
        (d / "plugstack.conf").write_text("")
        node = socket.gethostname().split(".")[0]
        conf = d / "slurm.conf"
        conf.write_text(_config(d, node))
        self.env = {"SLURM_CONF": str(conf)}
        env = {**os.environ, **self.env}
        self._spawn(["munged", "-F", "-f", f"--socket={d}/munge.sock",
                     f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid",
                     f"--seed-file={d}/munged.seed", f"--log-file={d}/munged.log"], env)
        self._wait(lambda: (d / "munge.sock").exists(), timeout, "munged")
        self._spawn(["slurmctld", "-D", "-f", str(conf)], env)
        time.sleep(1)
        self._spawn(["slurmd", "-D", "-f", str(conf), "-N", node], env)
        self._wait(lambda: "idle" in subprocess.run(
            ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout,
            timeout, "slurmd (node idle)")

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> None:
        log = open(self.dir / f"{cmd[0]}.out", "w")  # noqa: SIM115 (kept open by the daemon)
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def _wait(self, ready, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.5)
        logs = {p.name: p.read_text()[-2000:] for p in self.dir.glob("*.out")}
        logs.update({p.name: p.read_text()[-2000:] for p in self.dir.glob("*.log")})
        self.stop()
        raise RuntimeError(f"slurm test cluster: {what} did not come up: {logs}")

    def drain(self, timeout: float = 60) -> None:
        """Wait for the queue to empty (a unit's job outlives its done state by its exit),
        then cancel what is left, so no job step outlives the daemons."""
        env = {**os.environ, **self.env}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            queue = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                                   text=True)
            if queue.returncode != 0 or not queue.stdout.strip():
                return
            time.sleep(0.5)
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        time.sleep(3)

    def stop(self) -> None:
        if self.procs and all(p.poll() is None for p in self.procs):
            self.drain()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
