"""Benchmark: featstore against pytorch-ood 0.4 on whole data, at 1 thread and at 2 threads.

Run ``python -m benchmarks.bench_peer_threads [--full] [--only msp,vim,...] [--threads 1,2]
[--rows N]``; prints Markdown, progress on stderr. Every peer row (`benchmarks.peers`) scores
every row of every scored split (id/test + 4 OOD splits): no row subset, no extrapolation (the
Mahalanobis / RMD peers cost O(C D^2) per row: at the quick sizes ~20-60 min each on 1 core).

Per thread count t, every measurement is a fresh child interpreter
(`benchmarks.bench_scorers`' featstore and peer children) with FEATSTORE_THREADS,
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set to t (torch reads
OMP_NUM_THREADS at start). Ratio = pytorch-ood CPU s (torch.load from its own cache +
construction + fit + score; ViM's constructor computes pinv(W)) / featstore CPU s (fit +
score from the store), as in bench_quick's section 3. At 1
thread CPU s ~ wall s, and the ratio moves little with the machine's load; at 2 threads both
sides' thread pools wait for busy cores, so it moves with the load (record it beside).

Summary per t: the geometric mean over all rows, without the rows where the peer is
pathological (`PATHOLOGICAL`: Mahalanobis and RMD compute a (rows, D) x (D, D) product per
class, O(C D^2) per row, where featstore whitens once), and the median.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import bench_scorers as bs
from benchmarks.machine import cpu_model, load_average, mem_total_gib
from benchmarks.peers import PEERS

PATHOLOGICAL = ("mds", "rmds")
THREAD_VARS = ("FEATSTORE_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")


def set_threads(count: int) -> None:
    """Every thread pool of the children to `count` (they inherit the environment)."""
    for var in THREAD_VARS:
        os.environ[var] = str(count)


def measure(tmp: Path, store: str, warm: str, cache: Path, names: list[str],
            threads: int) -> dict[str, dict[str, Any]]:
    """{scorer: {"fs": featstore result, "peer": pytorch-ood result, "load": ...}} at t."""
    set_threads(threads)
    runner = bs.Runner(tmp)
    out = {}
    for name in names:
        fs = runner.run({"role": "featstore", "scorer": name, "store": store,
                         "warm_store": warm, "rows": None}, f"featstore {name} @{threads}")
        peer = runner.run({"role": "peer", "scorer": name, "store": store,
                           "torch_cache": str(cache), "rows": None},
                          f"pytorch-ood {name} @{threads}")
        out[name] = {"fs": fs, "peer": peer, "load": load_average()}
    return out


def ratio(row: dict[str, Any]) -> float | None:
    fs, peer = row["fs"], row["peer"]
    if "error" in fs or "error" in peer:
        return None
    f_cpu = fs["fit_cpu_s"] + fs["score_cpu_s"]
    p_cpu = peer["load_cpu_s"] + peer["fit_cpu_s"] + peer["score_cpu_s"]
    return p_cpu / f_cpu


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summary(results: dict[int, dict[str, dict[str, Any]]]) -> list[str]:
    lines = []
    for t, rows in results.items():
        ratios = {n: r for n, row in rows.items() if (r := ratio(row)) is not None}
        kept = [r for n, r in ratios.items() if n not in PATHOLOGICAL]
        median = statistics.median(ratios.values()) if ratios else math.nan
        lines.append(
            f"- {t} thread(s): geometric mean {geomean(list(ratios.values())):.2f}x over "
            f"{len(ratios)} rows; without {', '.join(PATHOLOGICAL)} {geomean(kept):.2f}x over "
            f"{len(kept)}; median {median:.2f}x")
    return lines


def table(results: dict[int, dict[str, dict[str, Any]]], names: list[str]) -> list[str]:
    counts = list(results)
    head = ["scorer", "pytorch-ood detector"]
    for t in counts:
        head += [f"featstore CPU s @{t}", f"pytorch-ood CPU s @{t}", f"ratio @{t}"]
    head.append("load (1-min) per t")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (3 * len(counts)) + "---|"]
    for name in names:
        cells = [name, PEERS[name].label]
        for t in counts:
            row = results[t][name]
            r = ratio(row)
            if r is None:
                err = row["fs"].get("error") or row["peer"].get("error")
                cells += ["failed", str(err)[:60], ""]
                continue
            fs, peer = row["fs"], row["peer"]
            cells += [f"{fs['fit_cpu_s'] + fs['score_cpu_s']:.3f}",
                      f"{peer['load_cpu_s'] + peer['fit_cpu_s'] + peer['score_cpu_s']:.3f}",
                      f"{r:.2f}x" + (" (pathological peer)" if name in PATHOLOGICAL else "")]
        cells.append("; ".join(results[t][name]["load"].split()[0] for t in counts))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="bench_scorers' full sizes")
    ap.add_argument("--rows", type=int, default=0,
                    help="id/train rows of a smaller store (smoke test; other splits scaled)")
    ap.add_argument("--only", default="", help="comma-separated scorer names (default: all)")
    ap.add_argument("--threads", default="1,2", help="thread counts to measure")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if bs._version("pytorch-ood") == "not installed":
        print("pytorch-ood is not installed (the `bench` extra)")
        return 1
    sizes = bs.FULL if args.full else bs.QUICK
    if args.rows:
        sizes = bs.Sizes(train=args.rows, val=max(100, args.rows // 10),
                         test=max(200, args.rows // 2), ood=max(100, args.rows // 10))
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    names = [n for n in PEERS if not only or n in only]
    counts = [int(t) for t in args.threads.split(",")]
    saved = {v: os.environ.get(v) for v in THREAD_VARS}
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-peers-", dir="/tmp"))
    try:
        from benchmarks import peer_cache
        from featstore import Store

        store = str(tmp / "store")
        gen = bs.Runner(tmp).run({"role": "generate", "sizes": vars(sizes), "seed": args.seed,
                                  "stores": {"float32": store}}, "generate + store")
        if "error" in gen:
            print(f"data generation failed: {gen['error']}")
            return 1
        warm = str(tmp / "warm_store")
        bs.write_warm_store(warm, args.seed)
        peer_cache.write_cache(Store.open(store), tmp / "torch")
        peer_cache.warm_page_cache([Path(store), tmp / "torch"])
        print("\n".join([
            "## pytorch-ood 0.4 ratios on whole data, 1 vs 2 threads", "",
            f"- machine: {cpu_model()}, {os.cpu_count()} CPUs, {mem_total_gib()}; load at "
            f"the start {load_average()}",
            f"- sizes: {vars(sizes)}, D = {bs.DIM}, C = {bs.NUM_CLASSES}; every scored row "
            "timed (no extrapolation)", ""]), flush=True)
        results = {t: measure(tmp, store, warm, tmp / "torch", names, t) for t in counts}
        print("\n".join([*table(results, names), "", *summary(results),
                         f"- load average at the end: {load_average()}"]))
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
