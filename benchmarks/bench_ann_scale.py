"""Benchmark (#37): what recall@50 >= 0.95 costs with each approximate index, at 100k and
1M x 2048, against exact search.

Run ``python -m benchmarks.bench_ann_scale --rows 100000 [--kinds exact,ivf_flat,ivf_pq,hnsw]
[--queries 2000] [--K 50] [--workdir DIR] [--seed 0]``; prints Markdown, progress on stderr.

Data: benchmarks.bench_ann's `clustered` generator (D = 2048, one class per 100 rows, the
demo store's between-class share 0.4 of a decaying spectrum, ReLU), L2-normalized as `knn`
normalizes its bank, written once to a raw float32 file under --workdir (8 GiB at 1M) with
256 calibration rows and `--queries` held-out query rows drawn from the same classes.

Each kind runs in a fresh child interpreter, which reads the bank from the file in 4,096-row
chunks (a `scorers.knn_bank.BankStream`: the index holds the only copy) and measures:

- build: `scorers.knn_index.KnnIndex(kind, recall_target=0.95, recall_k=K)` with every
  other option at its default (IVF nlist = 4 sqrt(N), k-means on 64 rows per list; IVF-PQ
  pq_m = D / 8, 8 bits, exact re-ranking of 10 K candidates; HNSW M = 32, efConstruction
  200, built on one thread for determinism), including the calibration of the search width
  on the 256 calibration rows; wall and CPU seconds (getrusage, all threads);
- search: the held-out queries at k = K with the calibrated width, wall and CPU seconds;
  recall@K against the exact kind's ids on the same queries (the exact kind runs first);
- memory: VmHWM growth of the child over its baseline (after imports and a warm-up build),
  reset through /proc/self/clear_refs, against the bank's bytes (rows x D x 4).

The cost of an evaluation of Q queries is build + Q x (search CPU s per query); the table
gives it at Q = 90,000 (the scored rows of the ImageNet-shaped benchmark, bench_ann) and its
ratio to exact search's (fill + Q x its per-query time). Exact search is FAISS's IndexFlatL2
(sgemm), featstore's `index=exact`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_ann import DIM, clustered_features, clustered_model, cpu_s, progress

CALIBRATION = 256
CHUNK_ROWS = 4096
EVAL_QUERIES = 90_000
RECALL_TARGET = 0.95


# --------------------------------------------------------------------------- data
def data_paths(workdir: Path, rows: int, queries: int, seed: int) -> dict[str, Path]:
    stem = f"{rows}x{DIM}_s{seed}"
    return {"bank": workdir / f"bank_{stem}.f32", "cal": workdir / f"cal_{stem}.npy",
            "queries": workdir / f"queries_{stem}_q{queries}.npy"}


def write_data(paths: dict[str, Path], rows: int, queries: int, seed: int) -> None:
    """The bank (raw float32, L2-normalized rows) and the query sets, unless written."""
    from scorers.knn_index import l2_normalize

    if all(p.exists() for p in paths.values()):
        return
    rng = np.random.default_rng(seed)
    centres, offset, noise_sd = clustered_model(rng, rows)
    progress(f"writing a {rows} x {DIM} bank to {paths['bank']}")
    tmp = paths["bank"].with_suffix(".part")
    with open(tmp, "wb") as f:
        for lo in range(0, rows, 65_536):
            n = min(65_536, rows - lo)
            f.write(l2_normalize(clustered_features(rng, n, centres, offset, noise_sd)).tobytes())
    os.replace(tmp, paths["bank"])
    np.save(paths["cal"], l2_normalize(clustered_features(rng, CALIBRATION, centres, offset,
                                                          noise_sd)))
    np.save(paths["queries"], l2_normalize(clustered_features(rng, queries, centres, offset,
                                                              noise_sd)))


def file_stream(path: Path, rows: int) -> Any:
    """The bank file as a BankStream of CHUNK_ROWS-row float32 reads (fresh buffers)."""
    from scorers.knn_bank import BankStream

    def chunks():
        for lo in range(0, rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - lo)
            yield np.fromfile(path, dtype=np.float32, count=n * DIM,
                              offset=lo * DIM * 4).reshape(n, DIM)

    return BankStream(rows, DIM, chunks)


# --------------------------------------------------------------------------- child
def status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def parse_kind(spec: str) -> tuple[str, dict[str, int]]:
    """`kind[+option=int...]`, e.g. `ivf_pq+pq_m=64+rerank_factor=20`."""
    kind, *opts = spec.split("+")
    return kind, {key: int(value) for key, value in (o.split("=") for o in opts)}


def child(spec: str, paths: dict[str, Path], rows: int, k: int, out_ids: Path) -> dict:
    """Build, calibrate and search one index kind; the figures as a dict (module docstring)."""
    from scorers.knn_index import KnnIndex

    kind, options = parse_kind(spec)

    cal = np.load(paths["cal"])
    queries = np.load(paths["queries"])
    warm = np.random.default_rng(0).random((2000, DIM), dtype=np.float32)
    KnnIndex(warm, kind=kind, recall_queries=warm[:64], recall_k=5,
             recall_target=None if kind == "exact" else RECALL_TARGET,
             **{key: v for key, v in options.items() if not key.startswith("pq_")})
    del warm
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_bytes("VmRSS")
    wall, cpu = time.perf_counter(), cpu_s()
    if kind == "exact":
        index = KnnIndex(file_stream(paths["bank"], rows), kind=kind)
    else:
        index = KnnIndex(file_stream(paths["bank"], rows), kind=kind, recall_queries=cal,
                         recall_k=k, recall_target=RECALL_TARGET, **options)
    build_wall, build_cpu = time.perf_counter() - wall, cpu_s() - cpu
    wall, cpu = time.perf_counter(), cpu_s()
    _, ids = index.search(queries, k)
    search_wall, search_cpu = time.perf_counter() - wall, cpu_s() - cpu
    np.save(out_ids, ids)
    return {"kind": spec, "options": {key: v for key, v in index.options.items()
                                      if key != "seed"},
            "calibration_recall": index.recall, "build_s": build_wall, "build_cpu_s": build_cpu,
            "search_s": search_wall, "search_cpu_s": search_cpu, "queries": len(queries),
            "peak_growth": status_bytes("VmHWM") - base, "bank_bytes": rows * DIM * 4}


# --------------------------------------------------------------------------- parent
def run_kind(kind: str, args: argparse.Namespace, workdir: Path) -> dict:
    ids_path = workdir / f"ids_{kind}_{args.rows}_s{args.seed}.npy"
    cmd = [sys.executable, "-m", "benchmarks.bench_ann_scale", "--child", kind,
           "--rows", str(args.rows), "--queries", str(args.queries), "--K", str(args.K),
           "--seed", str(args.seed), "--workdir", str(workdir)]
    progress(f"{kind}: building and searching (child process)")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["ids"] = ids_path
    progress(f"{kind}: build {result['build_s']:.1f} s, search {result['search_s']:.1f} s")
    return result


def eval_cost(r: dict, q: int) -> float:
    return r["build_cpu_s"] + q * r["search_cpu_s"] / r["queries"]


def table(results: list[dict], k: int) -> str:
    from scorers.knn_recall import recall_at_k

    exact = next((r for r in results if r["kind"] == "exact"), None)
    truth = np.load(exact["ids"]) if exact else None
    lines = [f"| index (options) | build + calibration CPU s (wall) | width | recall@{k} "
             f"calibration | recall@{k} held-out | search CPU ms / query | cost of "
             f"{EVAL_QUERIES:,} queries, CPU s | vs exact | peak growth / bank |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        opts = r["options"]
        width = opts.get("nprobe", opts.get("ef_search", "-"))
        shown = ", ".join(f"{key} {v}" for key, v in opts.items()
                          if key not in ("nprobe", "ef_search", "recall_target", "recall_k"))
        held = recall_at_k(np.load(r["ids"]), truth) if truth is not None else float("nan")
        cost = eval_cost(r, EVAL_QUERIES)
        ratio = eval_cost(exact, EVAL_QUERIES) / cost if exact else float("nan")
        cal = r["calibration_recall"]
        lines.append(
            f"| {r['kind']} ({shown or 'flat'}) | {r['build_cpu_s']:.1f} ({r['build_s']:.1f}) "
            f"| {width} | {'-' if cal is None else f'{cal:.3f}'} | {held:.3f} | "
            f"{1000 * r['search_cpu_s'] / r['queries']:.2f} | {cost:,.0f} | {ratio:.2f}x | "
            f"{r['peak_growth'] / 2**20:,.0f} MiB / {r['bank_bytes'] / 2**20:,.0f} MiB = "
            f"{r['peak_growth'] / r['bank_bytes']:.2f}x |")
    return "\n".join(lines)


def header(args: argparse.Namespace) -> str:
    import faiss

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load = os.getloadavg()
    return (f"- command: `python -m benchmarks.bench_ann_scale --rows {args.rows} --kinds "
            f"{args.kinds} --queries {args.queries} --K {args.K}`\n"
            f"- {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, faiss {faiss.__version__}; load at the start "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--K", type=int, default=50)
    ap.add_argument("--kinds", default="exact,ivf_flat,ivf_pq,hnsw")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default="benchmarks/out/ann_scale")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths = data_paths(workdir, args.rows, args.queries, args.seed)
    if args.child:
        ids = workdir / f"ids_{args.child}_{args.rows}_s{args.seed}.npy"
        print(json.dumps(child(args.child, paths, args.rows, args.K, ids)))
        return
    kinds = [k for k in args.kinds.split(",") if k]
    if "exact" in kinds:  # the exact ids are the recall's reference: first
        kinds = ["exact"] + [k for k in kinds if k != "exact"]
    head = header(args)
    write_data(paths, args.rows, args.queries, args.seed)
    results = [run_kind(kind, args, workdir) for kind in kinds]
    load = os.getloadavg()
    print(head)
    print(f"- bank {args.rows:,} x {DIM} (L2-normalized, clustered), {args.queries:,} held-out "
          f"queries, {CALIBRATION} calibration rows, K = {args.K}, recall_target "
          f"{RECALL_TARGET}; load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print(table(results, args.K))


if __name__ == "__main__":
    main()
