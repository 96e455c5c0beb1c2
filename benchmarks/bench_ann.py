"""Benchmark (#19): approximate KNN (IVF / HNSW, recall-calibrated) against scikit-learn's
brute-force NearestNeighbors at 100k x 2048.

Run ``python -m benchmarks.bench_ann [--rows 100000] [--queries 90000] [--sk-queries 5000]
[--indexes ivf_flat] [--data clustered|bench_scorers] [--K 50] [--seed 0]``; prints Markdown,
progress on stderr. Defaults: the 100k x 2048 case of issue 19 (about 6-8 minutes on 2 idle
cores; see benchmarks/results/knn-ann.md).

Sides (one process, CPU seconds = user + system of all threads via getrusage, wall beside):

- featstore: the `knn` scorer (K = 50, `index` = ivf_flat / hnsw, default `recall_target`
  0.95, so the search width is calibrated at fit on 256 id/val rows) fit on id/train and
  scoring id/test, from a float32 store (page cache warm: the store is read once before).
  Fit = read + L2-normalize the bank + build (IVF: k-means on <= 64 rows per list + adding
  the bank; HNSW: single-threaded graph build) + calibration. Score = read + normalize +
  search of every query.
- scikit-learn: NearestNeighbors(n_neighbors=K, algorithm="brute", n_jobs=-1) fit on the
  same float32 bank + kneighbors of the queries, both L2-normalized inside the timed region
  (as benchmarks.bench_scorers does). Brute force costs the same per query whatever the
  query count (fit only stores the bank), so it runs on the first `--sk-queries` queries and
  its time is extrapolated linearly to all of them (marked ~). Its ids are the exact
  neighbours against which the recall@K of featstore's index (searched on the same queries
  with the calibrated width) is measured.

Query count: 90,000 by default, the scored rows of the ImageNet-shaped benchmark
(benchmarks.bench_scorers FULL: id/test 50,000 + 4 OOD splits x 10,000; OpenOOD's ImageNet-1k
evaluation scores a similar ~95k): the bank is built once per evaluation and every test and
OOD row is one query.

Data (`--data`, numpy PCG64 seeded with `--seed`; D = 2048, one class per 100 bank rows: 1000
classes at 100k, as a 100k bank drawn from ImageNet-1k's training set has; smaller `--rows`
keep that density):

- `clustered` (default): pre-activation x = offset + centre_c + noise, then ReLU, where the
  per-dimension variance follows a decaying spectrum lambda_r = (1 + r)^-1 (normalized to mean 1,
  randomly permuted over dimensions), a class centre carries a share `between` = 0.4 of it
  (centre_c ~ N(0, 0.4 lambda)) and the within-class noise the rest (N(0, 0.6 lambda)); offset
  N(0.2, 0.3^2) per dimension as in bench_scorers. 0.4 is the between-class share of the
  variance of real penultimate features measured on this repository's demo store
  (EfficientNet-Lite0 ImageNet features of digits 0-5, 650 id/train rows, L2-normalized:
  between-class / total = 0.40; top principal directions 21%, 16%, 7%, ... of the variance).
  Real features are class-clustered with a decaying spectrum; isotropic data is the worst case
  for IVF (no cells to find).
- `bench_scorers`: benchmarks.bench_scorers' generator (the store of bench_quick / bench
  scorers): class centres N(0, 0.05^2) against unit-scale noise, i.e. between-class share
  ~1.4% of the variance, close to that worst case.

Roofline (printed with the figures): brute force is 2 Q N D flops of sgemm (the GEMM floor);
IVF costs 2 D (n_train nlist iters + N nlist) to build (k-means + assignment), plus per
query 2 D nlist (coarse search) and 2 D x (rows in the probed lists, counted by FAISS's
indexIVF_stats.ndis) for the scan, which FAISS runs as one-vector distance loops (memory
bound: every probed row's 8 KiB is read once per query) rather than GEMM. With T_fit the
fit time and t_q, t_bf the per-query times, speed-up(Q) = Q t_bf / (T_fit + Q t_q): it grows
with Q toward t_bf / t_q, and reaches 10x from Q* = 10 T_fit / (t_bf - 10 t_q) on (never if
t_bf <= 10 t_q).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DIM = 2048
ROWS_PER_CLASS = 100
BETWEEN = 0.4
CALIBRATION_ROWS = 256
KMEANS_ITERS = 10  # FAISS ClusteringParameters.niter default


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Clock:
    """Wall and CPU seconds since the last mark."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), cpu_s()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), cpu_s()
        out = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return out


# --------------------------------------------------------------------------- data
def clustered_features(rng: np.random.Generator, n: int, centres: np.ndarray,
                       offset: np.ndarray, noise_sd: np.ndarray,
                       block: int = 16384) -> np.ndarray:
    """ReLU(offset + centre_(label) + noise_sd * N(0, 1)) float32, labels uniform over the
    centres' classes, built in row blocks."""
    out = np.empty((n, centres.shape[1]), dtype=np.float32)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        part = rng.standard_normal((hi - lo, centres.shape[1]), dtype=np.float32)
        part *= noise_sd
        part += offset
        part += centres[rng.integers(0, len(centres), hi - lo)]
        np.maximum(part, 0.0, out=part)
        out[lo:hi] = part
    return out


def clustered_model(rng: np.random.Generator, rows: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class centres, offset, noise sd) of the `clustered` data for a bank of `rows` rows
    (module docstring), drawn from `rng`."""
    lam = 1.0 / (1.0 + np.arange(DIM))
    lam = rng.permutation(lam / lam.mean())
    offset = (rng.standard_normal(DIM) * 0.3 + 0.2).astype(np.float32)
    classes = max(10, rows // ROWS_PER_CLASS)
    centres = (rng.standard_normal((classes, DIM)) * np.sqrt(BETWEEN * lam)).astype(np.float32)
    noise_sd = np.sqrt((1.0 - BETWEEN) * lam).astype(np.float32)
    return centres, offset, noise_sd


def generate(kind: str, rows: int, queries: int, seed: int) -> dict[str, np.ndarray]:
    """id/train (the bank), id/val (calibration rows) and id/test (the queries) features."""
    val = CALIBRATION_ROWS
    if kind == "bench_scorers":
        from benchmarks import bench_scorers as bs

        data = bs.generate(bs.Sizes(train=rows, val=val, test=queries, ood=1), seed)
        return {s: data["splits"][s]["features"] for s in ("id/train", "id/val", "id/test")}
    rng = np.random.default_rng(seed)
    centres, offset, noise_sd = clustered_model(rng, rows)
    return {s: clustered_features(rng, n, centres, offset, noise_sd)
            for s, n in (("id/train", rows), ("id/val", val), ("id/test", queries))}


def write_store(path: Path, feats: dict[str, np.ndarray], seed: int) -> None:
    """A float32 store of the three splits; the head (10 classes, random) is unused by knn."""
    from featstore import Store

    rng = np.random.default_rng(seed + 1)
    head = (rng.standard_normal((10, DIM)).astype(np.float32) * np.float32(0.01),
            np.zeros(10, dtype=np.float32))
    Store.from_arrays(path, head=head, splits={s: {"features": x} for s, x in feats.items()},
                      provenance={"name": "bench_ann", "seed": seed})


def normalize(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


# --------------------------------------------------------------------------- sides
def warm_up(index: str) -> None:
    """Import faiss/sklearn and run the scorer once on a tiny store (lazy imports done)."""
    from sklearn.neighbors import NearestNeighbors

    from featstore import Store
    from scorers import get_scorer

    rng = np.random.default_rng(0)
    tiny = {s: rng.random((n, 16), dtype=np.float32)
            for s, n in (("id/train", 2000), ("id/val", 64), ("id/test", 64))}
    with tempfile.TemporaryDirectory() as tmp:
        Store.from_arrays(Path(tmp) / "s", head=(np.ones((2, 16), np.float32),
                                                 np.zeros(2, np.float32)),
                          splits={s: {"features": x} for s, x in tiny.items()})
        st = Store.open(Path(tmp) / "s")
        get_scorer("knn", K=5, index=index).fit(st).score(st.split("id/test"))
    NearestNeighbors(n_neighbors=5, algorithm="brute").fit(tiny["id/train"]).kneighbors(
        tiny["id/test"])


def featstore_side(store_path: Path, index: str, k: int, sk_queries: np.ndarray
                   ) -> dict[str, Any]:
    """knn fit + score of id/test (timed), then ids of the first queries for the recall."""
    import faiss

    from featstore import Store
    from scorers import get_scorer
    from scorers.knn_index import l2_normalize

    warm_up(index)
    store = Store.open(store_path)
    scorer = get_scorer("knn", K=k, index=index)
    clock = Clock()
    scorer.fit(store)
    fit_wall, fit_cpu = clock.lap()
    ivf_stats, hnsw_stats = faiss.cvar.indexIVF_stats, faiss.cvar.hnsw_stats
    ivf_stats.reset()
    hnsw_stats.reset()
    clock.lap()
    scores = scorer.score(store.split("id/test"))
    score_wall, score_cpu = clock.lap()
    ndis = int(ivf_stats.ndis if index != "hnsw" else hnsw_stats.ndis)
    ids = scorer.index.search(l2_normalize(sk_queries), k)[1]
    return {"fit_s": fit_wall, "fit_cpu_s": fit_cpu, "score_s": score_wall,
            "score_cpu_s": score_cpu, "ndis": ndis, "ids": ids,
            "finite": bool(np.isfinite(scores).all()),
            "diagnostics": scorer.diagnostics}


def sklearn_side(bank: np.ndarray, queries: np.ndarray, k: int) -> dict[str, Any]:
    """NearestNeighbors(brute) fit + kneighbors on the queries, normalization inside."""
    from sklearn.neighbors import NearestNeighbors

    clock = Clock()
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=-1).fit(normalize(bank))
    fit_wall, fit_cpu = clock.lap()
    ids = nn.kneighbors(normalize(queries), return_distance=False)
    score_wall, score_cpu = clock.lap()
    return {"fit_s": fit_wall, "fit_cpu_s": fit_cpu, "score_s": score_wall,
            "score_cpu_s": score_cpu, "ids": ids}


# --------------------------------------------------------------------------- report
def roofline(rows: int, queries: int, opts: dict[str, Any], ndis: int) -> dict[str, float]:
    """Flop counts (2 D per distance) of brute force and of the IVF build and search."""
    d2 = 2.0 * DIM
    out = {"brute": d2 * queries * rows}
    if "nlist" in opts:
        nlist = opts["nlist"]
        n_train = min(rows, opts["train_points_per_list"] * nlist)
        out["build"] = d2 * (n_train * nlist * KMEANS_ITERS + rows * nlist)
        out["coarse"] = d2 * queries * nlist
    out["scan"] = d2 * ndis
    return out


def q_for(goal: float, t_fit: float, t_q: float, t_bf: float) -> float | None:
    """Query count from which Q t_bf / (t_fit + Q t_q) >= goal (None: never)."""
    if t_bf <= goal * t_q:
        return None
    return goal * t_fit / (t_bf - goal * t_q)


def report_rows(fs: dict[str, Any], sk: dict[str, Any], queries: int, sk_n: int,
                rows: int) -> tuple[list[str], dict[str, Any]]:
    """One table row and the derived figures for one index."""
    from scorers.knn_index import recall_at_k

    scale = queries / sk_n
    sk_cpu = sk["fit_cpu_s"] + sk["score_cpu_s"] * scale
    sk_wall = sk["fit_s"] + sk["score_s"] * scale
    fs_cpu = fs["fit_cpu_s"] + fs["score_cpu_s"]
    fs_wall = fs["fit_s"] + fs["score_s"]
    recall = recall_at_k(fs["ids"], sk["ids"])
    diag = fs["diagnostics"]
    opts = diag.get("index_options", {})
    width = opts.get("nprobe", opts.get("ef_search"))
    t_bf, t_q = sk["score_cpu_s"] / sk_n, fs["score_cpu_s"] / queries
    q10 = q_for(10.0, fs["fit_cpu_s"], t_q, t_bf)
    speed = sk_cpu / fs_cpu
    met = recall >= 0.95 and speed >= 10.0
    row = [diag["index"], f"{width} / {opts.get('nlist', '—')}",
           f"{diag['recall_at_k']:.3f}", f"{recall:.3f}",
           f"{fs['fit_cpu_s']:.1f} ({fs['fit_s']:.1f})",
           f"{fs['score_cpu_s']:.1f} ({fs['score_s']:.1f})", f"{fs_cpu:.1f} ({fs_wall:.1f})",
           f"~{sk_cpu:.1f} ({sk_wall:.1f})", f"~{speed:.2f}x", f"{t_bf / t_q:.1f}x",
           "—" if q10 is None else f"{q10:,.0f}", "met" if met else "**not met**"]
    flops = roofline(rows, queries, opts, fs["ndis"])
    return row, {"flops": flops, "speed": speed, "recall": recall, "q10": q10,
                 "asymptote": t_bf / t_q, "opts": opts}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(args: argparse.Namespace, load: str, gen_s: float) -> list[str]:
    from benchmarks.machine import cpu_model, mem_total_gib

    return ["## #19 approximate KNN: recall-calibrated IVF / HNSW vs scikit-learn brute force",
            "",
            f"- date: {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC; commit {git_commit()}",
            f"- command: `python -m benchmarks.bench_ann {' '.join(sys.argv[1:])}`".rstrip(),
            f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
            f"{mem_total_gib()}; {platform.platform()}; load average at start "
            f"{load}",
            f"- data: `{args.data}`, bank {args.rows:,} x {DIM}, {args.queries:,} queries "
            f"(id/test), {CALIBRATION_ROWS} id/val calibration rows, K = {args.K}; "
            f"generated + written in {gen_s:.1f} s; sklearn timed on the first "
            f"{min(args.sk_queries, args.queries):,} queries, extrapolated (~)"]


def table(rows: list[list[str]]) -> list[str]:
    cols = ["index", "width / nlist", "recall (calib.)", "recall (sklearn ids)",
            "featstore fit CPU s (wall)", "featstore score CPU s (wall)",
            "featstore fit+score CPU s (wall)",
            "sklearn fit+kneighbors CPU s (wall)", "speed-up (CPU)", "per-query asymptote",
            "Q for 10x", "goal"]
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
            *("| " + " | ".join(r) + " |" for r in rows)]


def roofline_lines(index: str, info: dict[str, Any], fs: dict[str, Any],
                   sk: dict[str, Any], sk_n: int) -> list[str]:
    f = info["flops"]
    g = 1e9
    lines = [f"- {index} roofline: brute force 2 Q N D = {f['brute'] / g:,.0f} GFlop of sgemm "
             f"for all {info['queries']:,} queries"]
    parts = []
    if "build" in f:
        opts = info["opts"]
        n_train = min(info["rows"], opts["train_points_per_list"] * opts["nlist"])
        parts.append(f"build (k-means {KMEANS_ITERS} iterations on {n_train:,} rows to "
                     f"{opts['nlist']:,} centroids + assignment) {f['build'] / g:,.0f} GFlop; "
                     f"fit {fs['fit_cpu_s']:.1f} CPU s")
        parts.append(f"coarse search {f['coarse'] / g:,.0f} GFlop")
    parts.append(f"scan {f['scan'] / g:,.0f} GFlop ({fs['ndis']:,} distances, "
                 f"{fs['ndis'] / max(1, info['queries']):,.0f} per query = "
                 f"{fs['ndis'] / max(1, info['queries']) / info['rows']:.1%} of the bank) in "
                 f"{fs['score_cpu_s']:.1f} CPU s")
    total = sum(v for k, v in f.items() if k != "brute")
    parts.append(f"flop ratio brute / (build + search) = {f['brute'] / max(total, 1):.1f}x")
    lines.append("  featstore: " + "; ".join(parts))
    q10 = info["q10"]
    lines.append(f"  speed-up at {info['queries']:,} queries ~{info['speed']:.2f}x; per query "
                 f"{info['asymptote']:.1f}x (the limit as Q grows, the build amortized); 10x "
                 + ("is never reached (per-query speed-up below 10x)" if q10 is None else
                    f"from ~{q10:,.0f} queries on"))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="bank rows (id/train)")
    ap.add_argument("--queries", type=int, default=90_000, help="scored queries (id/test)")
    ap.add_argument("--sk-queries", type=int, default=5000,
                    help="queries sklearn brute force runs on (time extrapolated)")
    ap.add_argument("--indexes", default="ivf_flat", help="comma-separated: ivf_flat,hnsw")
    ap.add_argument("--data", choices=("clustered", "bench_scorers"), default="clustered")
    ap.add_argument("--K", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    bad = [(n, v) for n, v in (("--rows", args.rows), ("--queries", args.queries),
                               ("--sk-queries", args.sk_queries), ("--K", args.K)) if v < 1]
    if bad:
        ap.error(f"{bad[0][0]}={bad[0][1]} must be >= 1")
    if args.K > args.rows:
        ap.error(f"--K={args.K} must be <= --rows={args.rows}")
    indexes = [s.strip() for s in args.indexes.split(",") if s.strip()]
    unknown = [s for s in indexes if s not in ("ivf_flat", "hnsw")]
    if unknown or not indexes:
        ap.error(f"--indexes: {unknown or indexes!r} must be ivf_flat and/or hnsw")
    for line in run(args, indexes):
        print(line, flush=True)
    return 0


def run(args: argparse.Namespace, indexes: list[str]) -> list[str]:
    """Generate, write, time both sides; the Markdown lines of the report."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-ann-", dir="/tmp"))
    try:
        progress(f"generating {args.data} data: {args.rows} x {DIM} bank, {args.queries} queries")
        t0 = time.perf_counter()
        feats = generate(args.data, args.rows, args.queries, args.seed)
        write_store(tmp / "store", feats, args.seed)
        gen_s = time.perf_counter() - t0
        bank, sk_q = feats["id/train"], feats["id/test"][:args.sk_queries]
        del feats
        from benchmarks.peer_cache import warm_page_cache

        warm_page_cache([tmp / "store"])
        lines = header(args, load, gen_s)
        progress(f"sklearn brute force on {len(sk_q)} queries")
        sk = sklearn_side(bank, sk_q, args.K)
        rows, notes = [], []
        for index in indexes:
            progress(f"featstore knn index={index}: fit + score")
            fs = featstore_side(tmp / "store", index, args.K, sk_q)
            row, info = report_rows(fs, sk, args.queries, len(sk_q), args.rows)
            info.update(rows=args.rows, queries=args.queries)
            rows.append(row)
            notes += roofline_lines(index, info, fs, sk, len(sk_q))
        info_sk = 2.0 * DIM * len(sk_q) * args.rows / 1e9 / sk["score_cpu_s"]
        lines += ["", *table(rows), "",
                  f"- sklearn: kneighbors of {len(sk_q):,} queries {sk['score_cpu_s']:.1f} CPU s "
                  f"({sk['score_s']:.1f} wall) = {info_sk:.1f} GFlop per CPU s of the "
                  f"2 Q N D brute-force GEMM; fit {sk['fit_cpu_s']:.2f} CPU s",
                  *notes,
                  f"- load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
        return lines
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


QUICK_ARGS = ("--rows", "20000", "--queries", "5000", "--sk-queries", "1000")


def quick_section(timeout_s: int = 900) -> list[str]:
    """The reduced case for `make bench-quick` (section 5b): this module run in a child
    interpreter with QUICK_ARGS (about 1-2 minutes on 2 cores); its Markdown lines, the title
    made a subsection."""
    cmd = [sys.executable, "-m", "benchmarks.bench_ann", *QUICK_ARGS]
    title = "### 5b. Recall-calibrated IVF at 20k x 2048, clustered data (benchmarks.bench_ann)"
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              cwd=Path(__file__).resolve().parent.parent)
    except subprocess.TimeoutExpired:
        return [title, "", f"bench_ann did not finish in {timeout_s} s"]
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [title, "", f"bench_ann failed (exit {done.returncode}): {tail}"]
    lines = done.stdout.splitlines()
    return [title, *lines[1:]] if lines and lines[0].startswith("## ") else [title, *lines]


if __name__ == "__main__":
    sys.exit(main())
