"""Benchmark: the thread policy under load and the KNN bank's memory (`scorers.threads`,
`scorers.knn_bank`).

Run ``python -m benchmarks.bench_threads SECTION [options]``; prints Markdown, progress on
stderr. Sections:

- ``eval --store PATH [--repeats R] [--hogs H] [--eval-args "..."]``: wall seconds of
  ``featstore eval PATH --all --no-cache`` with the default threads, with
  ``OPENBLAS_NUM_THREADS=1`` and with ``FEATSTORE_THREADS=1``, idle and with H CPU-bound
  processes running (``python -c 'while True: pass'``, started 5 s before and killed after;
  default H = 1, "a second job"); median of R runs each (default 3). The goal: default <=
  1.2x the ``OPENBLAS_NUM_THREADS=1`` time, idle and loaded. Without ``--store``, a small
  synthetic store (`benchmarks.bench_scorers`' generator, ``--rows``) is made first.
- ``factor [--sizes 256,512,1024,2048]``: seconds of a float64 n x n eigh and of a (4n x n)
  Gram product (A^T A) with BLAS limited to 1 and to 2 threads, idle and with H hogs: where
  two threads start to pay (`scorers.threads.PARALLEL_MIN_FLOPS`).
- ``knn-memory [--rows 200000] [--dim 2048]``: the resident-set high-water mark growth of a
  KNN fit (exact index) over an N x D float32 id/train, in a fresh child (VmHWM reset through
  /proc/self/clear_refs), against the bank's bytes; goal <= 1.2x.

Every figure records the 1-minute load average before and after (a shared machine inflates
wall times; compare figures taken together only).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks.machine import cpu_model, load_average, mem_total_gib

ROOT = Path(__file__).resolve().parent.parent
GOAL_EVAL = 1.2
GOAL_BANK = 1.2
HOG = "while True: pass"
HOG_WARMUP_S = 5.0

THREAD_ENVS = {
    "default": {},
    "OPENBLAS_NUM_THREADS=1": {"OPENBLAS_NUM_THREADS": "1"},
    "FEATSTORE_THREADS=1": {"FEATSTORE_THREADS": "1"},
}


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment without inherited thread settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "FEATSTORE_THREADS")}
    return {**env, **extra}


@contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` CPU-bound child processes running inside (killed, by their own pid, after)."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]
    try:
        if procs:
            time.sleep(HOG_WARMUP_S)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def header(what: str) -> list[str]:
    return [f"## {what}", "", f"- machine: {cpu_model()}, {os.cpu_count()} CPUs "
            f"(affinity {len(os.sched_getaffinity(0))}), {mem_total_gib()}",
            f"- load average at the start: {load_average()}", ""]


# --------------------------------------------------------------------------- eval
def synthetic_store(tmp: Path, rows: int) -> Path:
    """A small bench_scorers store (D = 2048, C = 1000) with `rows` id/train rows."""
    from benchmarks import bench_scorers as bs

    sizes = bs.Sizes(train=rows, val=max(100, rows // 10), test=max(200, rows // 2),
                     ood=max(100, rows // 10))
    path = tmp / "store"
    res = bs.Runner(tmp).run({"role": "generate", "sizes": vars(sizes), "seed": 0,
                              "stores": {"float32": str(path)}}, "generate")
    if "error" in res:
        raise SystemExit(f"store generation failed: {res['error']}")
    return path


def time_eval(store: Path, env: dict[str, str], extra_args: list[str]) -> float:
    cmd = [sys.executable, "-m", "featstore", "eval", str(store), "--all", "--no-cache",
           "--quiet", *extra_args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=clean_env(env), cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return wall


def eval_section(args: argparse.Namespace) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-threads-"))
    try:
        store = Path(args.store) if args.store else synthetic_store(tmp, args.rows)
        extra = shlex.split(args.eval_args)
        time_eval(store, {}, extra)  # warm: page cache, Numba cache
        lines = header(f"`featstore eval STORE --all --no-cache {args.eval_args}`".replace(
            "  ", " ")) + [f"- store: {store}; median of {args.repeats} runs", "",
                           "| load | threads | wall s (runs) | / OPENBLAS_NUM_THREADS=1 | "
                           f"goal <= {GOAL_EVAL}x |", "|---|---|---:|---:|---|"]
        for label, count in (("no added job", 0), (f"+{args.hogs} CPU-bound job(s)", args.hogs)):
            times: dict[str, list[float]] = {k: [] for k in THREAD_ENVS}
            with hogs(count):
                load = load_average()
                for _ in range(args.repeats):  # interleaved: drift hits every setting alike
                    for key, env in THREAD_ENVS.items():
                        progress(f"  eval {label} {key}")
                        times[key].append(time_eval(store, env, extra))
            ref = statistics.median(times["OPENBLAS_NUM_THREADS=1"])
            for key, runs in times.items():
                med = statistics.median(runs)
                ok = "met" if med <= GOAL_EVAL * ref else "**not met**"
                lines.append(f"| {label} (load {load}) | {key} | {med:.2f} "
                             f"({', '.join(f'{t:.1f}' for t in runs)}) | {med / ref:.2f}x | "
                             f"{ok if key == 'default' else ''} |")
        return [*lines, "", f"- load average at the end: {load_average()}"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- factor
FACTOR_CHILD = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_limits

def best(fn, runs=3):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)

sizes = [int(s) for s in sys.argv[1].split(",")]
rng = np.random.default_rng(0)
out = []
for n in sizes:
    a = rng.standard_normal((4 * n, n))
    c = a.T @ a
    for t in (1, 2):
        with threadpool_limits(t, user_api="blas"):
            out.append({"n": n, "threads": t, "eigh_s": best(lambda: np.linalg.eigh(c)),
                        "gram_s": best(lambda: a.T @ a)})
print(json.dumps(out))
"""


def factor_section(args: argparse.Namespace) -> list[str]:
    lines = header("BLAS/LAPACK: 1 vs 2 threads") + [
        "Best of 3, seconds. eigh: float64 n x n (numpy.linalg.eigh, ~9 n^3 flops); Gram: "
        "A^T A of a float64 (4n x n) A (4 n^3 flops).", "",
        "| load | n | eigh 1 thread | eigh 2 threads | Gram 1 thread | Gram 2 threads |",
        "|---|---:|---:|---:|---:|---:|"]
    for label, count in (("no added job", 0), (f"+{args.hogs} CPU-bound job(s)", args.hogs)):
        with hogs(count):
            load = load_average()
            proc = subprocess.run([sys.executable, "-c", FACTOR_CHILD, args.sizes],
                                  env=clean_env({}), capture_output=True, text=True, check=True)
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        for n in sorted({r["n"] for r in res}):
            one, two = (next(r for r in res if r["n"] == n and r["threads"] == t)
                        for t in (1, 2))
            lines.append(f"| {label} (load {load}) | {n} | {one['eigh_s']:.3f} | "
                         f"{two['eigh_s']:.3f} | {one['gram_s']:.3f} | {two['gram_s']:.3f} |")
    return [*lines, "", f"- load average at the end: {load_average()}"]


# --------------------------------------------------------------------------- knn memory
KNN_CHILD = r"""
import gc, json, sys
from featstore import Store
from scorers import get_scorer
def kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
import faiss, scipy.linalg
store = Store.open(sys.argv[1])
get_scorer("knn", K=5, bank_fraction=0.001).fit(store)  # warm-up: Numba, FAISS
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = kb("VmRSS")
scorer = get_scorer("knn", K=50).fit(store)
print(json.dumps({"growth": kb("VmHWM") - base, "rows": scorer.bank_size, "base": base}))
"""


def write_bank_store(path: Path, rows: int, dim: int, chunk: int = 16384) -> None:
    """A store whose id/train is `rows` x `dim` float32 (|N(0,1)|), written in chunks."""
    from featstore import Store

    rng = np.random.default_rng(0)
    classes = 10
    weight = rng.standard_normal((classes, dim), dtype=np.float32)
    bias = np.zeros(classes, dtype=np.float32)
    x = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        x[start:stop] = np.abs(rng.standard_normal((stop - start, dim), dtype=np.float32))
    y = rng.integers(0, classes, rows)
    small = x[:1000]
    splits = {"id/train": {"features": x, "logits": x @ weight.T, "labels": y},
              "id/val": {"features": small, "logits": small @ weight.T, "labels": y[:1000]}}
    Store.from_arrays(path, head=(weight, bias), splits=splits)


def knn_memory_section(args: argparse.Namespace) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-bank-", dir=args.tmp))
    try:
        path = tmp / "store"
        progress(f"  writing a {args.rows} x {args.dim} store in {tmp}")
        write_bank_store(path, args.rows, args.dim)
        progress("  knn fit in a child")
        proc = subprocess.run([sys.executable, "-c", KNN_CHILD, str(path)],
                              env=clean_env({}), cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"knn child failed: {proc.stderr[-800:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        bank = res["rows"] * args.dim * 4
        ratio = res["growth"] / bank
        return header("KNN fit peak memory (exact index)") + [
            f"- id/train {args.rows} x {args.dim} float32: bank {bank / 2**20:.0f} MiB; "
            f"VmHWM growth of the fit {res['growth'] / 2**20:.0f} MiB above the process's "
            f"baseline ({res['base'] / 2**20:.0f} MiB): {ratio:.3f}x the bank (goal <= "
            f"{GOAL_BANK}x: {'met' if ratio <= GOAL_BANK else '**not met**'})",
            f"- load average at the end: {load_average()}"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=("eval", "factor", "knn-memory"))
    ap.add_argument("--store", help="eval: the store (default: a synthetic one, --rows)")
    ap.add_argument("--rows", type=int, default=0,
                    help="eval: synthetic id/train rows (default 2000); knn-memory: bank rows "
                         "(default 200000)")
    ap.add_argument("--dim", type=int, default=2048, help="knn-memory: D")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=1, help="CPU-bound jobs in the loaded runs")
    ap.add_argument("--eval-args", default="", help="eval: further `featstore eval` options")
    ap.add_argument("--sizes", default="256,512,1024,2048", help="factor: n values")
    ap.add_argument("--tmp", default=None, help="knn-memory: where to write the store")
    args = ap.parse_args(argv)
    if args.section == "eval":
        args.rows = args.rows or 2000
        lines = eval_section(args)
    elif args.section == "factor":
        lines = factor_section(args)
    else:
        args.rows = args.rows or 200_000
        lines = knn_memory_section(args)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
