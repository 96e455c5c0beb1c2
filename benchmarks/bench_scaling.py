"""Benchmark: how featstore scorers scale with the number of rows N and the feature dimension D
(issue 8), side by side with pytorch-ood 0.4 (and scikit-learn's NearestNeighbors for KNN),
plus exact vs approximate KNN.

Run ``python -m benchmarks.bench_scaling [--rows 10000,100000,1000000] [--dims 512,2048]
[--scorers msp,energy,vim,knn,mds,react,ash | all] [--peers] [--out-dir benchmarks/plots]
[--timeout 1800] [--peer-timeout 600] [--mem-budget-gb G] [--knn-rows 2500]
[--knn-indexes exact,ivf_flat,hnsw] [--classes 1000] [--seed 0] [--extract none|quick|full]``
(``--peers`` needs the ``bench`` extra: ``pip install -e '.[dev,bench]'``).

Data, per (N, D): the generative model of ``benchmarks.bench_scorers`` with D and C as
parameters (C = ``--classes``, default 1000): post-ReLU features = ReLU(shared offset + class
centre + noise with a decaying per-dimension scale 1 / sqrt(1 + r / (D / 16))), class centres
N(0, (0.05 sqrt(2048 / D))^2) per entry (both as there at D = 2048; the centre spread grows
at smaller D so that class separation, ID accuracy and the neighbour structure approximate
KNN relies on stay alike across D), the nearest-class-mean head scaled by 2, logits =
features @ W.T + b.
Splits: id/train N rows (the fit split), id/val N/10 (fit split of the logit calibrators; the
approximate KNN indexes' recall queries), id/test N/10 and ood/near/novel N/10 (unseen class
centres). Timed scoring covers id/test + ood/near/novel = N/5 rows: the scored rows grow with
N (as evaluation sets grow with the training set) so that both fit and score cost show in the
curves; a fixed query count would hide the score side. The store is written in float32 part
by part with ``featstore.store.writer.SplitWriter`` (generation memory stays bounded at any N) into
a temporary directory under /tmp, deleted once that (N, D) is done. Disk: about
(N + 3 N/10) (D + C) 4 bytes for the store, plus its largest split again while the parts are
assembled (~28 GB at N = 1M, D = 2048).

Measurement: the children of ``benchmarks.bench_scorers`` (``_child_featstore``,
``_child_peer``, ``_child_sklearn_knn``: see its docstring; they read D and C from that
module's ``DIM`` / ``NUM_CLASSES``, which each child of this benchmark sets to the store's
before calling them), each in a fresh interpreter: fit once, score once; peak MB = VmHWM
(reset via /proc/self/clear_refs) - VmRSS before fit; wall and CPU (user + system, all threads)
seconds. pytorch-ood's inputs are loaded into RAM before its clock starts, so "peer job MB" =
its peak + the float32 inputs its job holds (fit split + all scored rows); memory ratio =
featstore peak / peer job MB; speed-up = peer (fit + score) / featstore (fit + score).
Subsets (score time extrapolated linearly to the N/5 rows, marked ``~``): KNN, every
implementation and index, queries the first ``--knn-rows`` rows of each scored split (exact
search is O(queries x N x D)); pytorch-ood's Mahalanobis, RMD, DICE and GradNorm score the
first ``bench_scorers.PEER_ROWS`` rows. ViM's principal dimension is pytorch-ood's rule
(1000 if D >= 2048 else D // 2) on both sides.

Budgets: a child running longer than ``--timeout`` (featstore; ``--peer-timeout`` for
pytorch-ood and scikit-learn) is killed and recorded as ``skipped: >T s``; a job whose time,
extrapolated in N from the same job at the previous N (linearly; IVF indexes as N^1.5, their
k-means having ~4 sqrt(N) centroids), exceeds its budget, or which
timed out at a smaller N, is not started (``skipped: >T s (predicted ...)``); a job whose
estimated resident memory (inputs, bank and index copies; see ``_mem_estimate``) exceeds
``--mem-budget-gb`` (default 80% of MemAvailable at start) is not started either.

Output: Markdown on stdout (date, command, machine, a table per D, exact vs approximate KNN
per D, growth exponents), PNG plots in ``--out-dir`` (per D: fit + score wall time vs N and
peak memory vs N, log-log, featstore solid, peers dashed); progress on stderr. All ratios come
from this one run. ``--extract quick|full`` adds extraction images/s, one timed run per
``benchmarks.bench_extract`` configuration of its featstore side after one warm-up
(``benchmarks.bench_extract`` itself, which ``make bench`` also runs, compares with a bare
torch loop over repeats).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bench_scorers as bs
from benchmarks import peers
from benchmarks.machine import cpu_model, load_average, mem_total_gib

DEFAULT_ROWS = "10000,100000,1000000"
DEFAULT_DIMS = "512,2048"
DEFAULT_SCORERS = "msp,energy,vim,knn,mds,react,ash"
DEFAULT_INDEXES = "exact,ivf_flat,hnsw"
EVAL_FRACTION = 10  # id/val, id/test and ood/near/novel hold N // EVAL_FRACTION rows each
OOD_SPLIT = bs.AUROC_OOD  # "ood/near/novel"
PART_BYTES = 128 << 20  # features + logits per SplitWriter part while generating
FIXED_MB = 256.0  # interpreter, libraries and read buffers in the memory estimates
HIGH_LOAD = bs.HIGH_LOAD
# Growth exponent k of a job's wall time (t ~ N^k) used to predict it at the next N: 1 (linear)
# except IVF, whose k-means has nlist ~ 4 sqrt(N) centroids (N^1.5).
GROWTH = {("knn", "featstore", "ivf_flat"): 1.5, ("knn", "featstore", "ivf_pq"): 1.5}


# --------------------------------------------------------------------------- data
def eval_rows(n: int) -> int:
    return max(1, n // EVAL_FRACTION)


def disk_need_bytes(n: int, dim: int, classes: int) -> int:
    """Peak disk of one store while it is written: every split, plus id/train's part files
    until they are assembled (features, logits, labels, ids of ~16 bytes per row)."""
    row = (dim + classes) * 4 + 8 + 16
    return (2 * n + 3 * eval_rows(n)) * row


vim_dim = peers.vim_dim  # pytorch-ood's ViM principal dimension (used on both sides)


def centre_sd(dim: int) -> np.float32:
    """Per-entry s.d. of the class centres: 0.05 at D = 2048 (bench_scorers), scaled by
    sqrt(2048 / D) so that centre distances, hence ID accuracy, stay alike across D."""
    return np.float32(0.05 * math.sqrt(2048 / dim))


def _head(rng: np.random.Generator, dim: int, classes: int) -> dict[str, np.ndarray]:
    """Offset, per-dimension noise scale, class centres and the nearest-class-mean head (W, b)
    on the analytic means of ReLU(N(m, s^2)) (bench_scorers.generate with D and C as
    arguments)."""

    offset = (rng.standard_normal(dim, dtype=np.float32) * 0.3 + 0.2).astype(np.float32)
    decay = max(dim / 16.0, 1.0)
    scale = rng.permutation(1.0 / np.sqrt(1.0 + np.arange(dim) / decay)).astype(np.float32)
    centres = rng.standard_normal((classes, dim), dtype=np.float32) * centre_sd(dim)
    weight, bias = bs.ncm_head(offset, scale, centres)
    return {"offset": offset, "scale": scale, "centres": centres, "weight": weight, "bias": bias}


def _child_generate(spec: dict[str, Any]) -> dict[str, Any]:
    """Write the store of one (N, D) part by part; return timings and data statistics."""
    from featstore import Store
    from featstore.store.store import default_usage
    from featstore.store.writer import SplitWriter

    n, dim, classes, seed = spec["rows"], spec["dim"], spec["classes"], spec["seed"]
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    h = _head(rng, dim, classes)
    weight, bias = h["weight"], h["bias"]
    store = Store.create(spec["store"], head=(weight, bias),
                         provenance={"name": "synthetic-bench-scaling", "seed": seed,
                                     "rows": n, "dim": dim, "classes": classes})
    part_rows = max(1024, PART_BYTES // (4 * (dim + classes)))
    novel = rng.standard_normal((classes, dim), dtype=np.float32) * centre_sd(dim)
    stats: dict[str, Any] = {}
    m = eval_rows(n)
    for name, rows in (("id/train", n), ("id/val", m), ("id/test", m), (OOD_SPLIT, m)):
        if name.startswith("id/"):
            labels = rng.permutation(np.arange(rows) % classes).astype(np.int64)
            centres = h["centres"]
            pick = labels
        else:
            labels = np.full(rows, -1, dtype=np.int64)
            centres = novel
            pick = rng.integers(0, classes, rows)
        writer = SplitWriter(store, name, part_rows=part_rows, dtype="float32",
                             usage=default_usage(name),
                             source={"builtin": "bench_scaling", "seed": seed, "rows": rows},
                             fingerprint={"bench_scaling": name, "seed": seed, "dim": dim,
                                          "classes": classes}, num_rows=rows)
        correct = zeros = 0
        for lo in range(0, rows, part_rows):
            hi = min(lo + part_rows, rows)
            x = rng.standard_normal((hi - lo, dim), dtype=np.float32)
            x *= h["scale"]
            x += h["offset"]
            x += centres[pick[lo:hi]]
            np.maximum(x, 0.0, out=x)
            logits = x @ weight.T + bias
            correct += int((logits.argmax(axis=1) == labels[lo:hi]).sum())
            zeros += int(np.count_nonzero(x == 0))
            writer.append(first_row=lo, source_rows=hi - lo, features=x, logits=logits,
                          labels=labels[lo:hi], ids=np.arange(lo, hi))
        writer.finish()
        if name == "id/test":
            stats["id_acc"] = correct / rows
        if name == "id/train":
            stats["train_zero_frac"] = zeros / (rows * dim)
    store.close()
    size = sum(p.stat().st_size for p in Path(spec["store"]).rglob("*") if p.is_file())
    return {**stats, "generate_s": time.perf_counter() - t0, "bytes": size}


def _child_extract(spec: dict[str, Any]) -> dict[str, Any]:
    """images/s of featstore.extraction.extract on benchmarks.bench_extract's configurations: one
    warm-up, then one timed run of its featstore side per configuration."""
    import torch

    from benchmarks import bench_extract as bx

    torch.set_num_threads(bx.THREADS)
    configs = bx.make_configs(spec["quick"])
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_scaling_extract_", dir="/tmp") as wdir:
        for cfg in configs:
            bx.prepare(cfg, Path(wdir))
        with bx.cached_sources(configs):
            for cfg in configs:
                bx.run_featstore(cfg, 0, 128)
                seconds, cpu, rows = bx.run_featstore(cfg, 0, 128)
                out.append({"name": cfg.name, "describe": cfg.describe, "rows": rows,
                            "seconds": seconds, "cpu_s": cpu})
    return {"configs": out}


def _child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    role = spec["role"]
    if role in ("generate", "extract"):
        res = (_child_generate if role == "generate" else _child_extract)(spec)
        Path(spec["out"]).write_text(json.dumps(res, default=str))
        return 0
    # bench_scorers' children read D and C from these module constants (at call time)
    bs.DIM, bs.NUM_CLASSES = int(spec["dim"]), int(spec["classes"])
    return bs._child(spec_path)


# --------------------------------------------------------------------------- parent
class Runner:
    """Fresh-interpreter children (``--child SPEC``) with a wall-time limit each."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.count = 0

    def run(self, spec: dict[str, Any], what: str, timeout: float | None) -> dict[str, Any]:
        self.count += 1
        out = self.workdir / f"res{self.count:03d}.json"
        spec = {**spec, "out": str(out)}
        spec_path = self.workdir / f"spec{self.count:03d}.json"
        spec_path.write_text(json.dumps(spec))
        bs._progress(f"  {what} ...")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_scaling", "--child", str(spec_path)],
                capture_output=True, text=True, timeout=timeout,
                cwd=Path(__file__).resolve().parent.parent)
        except subprocess.TimeoutExpired:
            bs._progress(f"  {what}: killed after {timeout:.0f} s")
            return {"skipped": f">{timeout:.0f} s", "skip_kind": "time", "timed_out": True}
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            if proc.returncode in (-9, 137):
                last = "killed (SIGKILL: out of memory?)"
            bs._progress(f"  {what}: FAILED ({last})")
            if proc.stderr:
                bs._progress(proc.stderr[-3000:])
            return {"error": last[:200]}
        res = json.loads(out.read_text())
        res["scores"] = {}
        for key in (bs.AUROC_ID, bs.AUROC_OOD):
            p = out.with_name(out.stem + "." + key.replace("/", "_") + ".npy")
            if p.exists():
                res["scores"][key] = np.load(p)
        res["wall_s"] = wall
        if "fit_s" in res:
            bs._progress(f"  {what}: fit {res['fit_s']:.2f} s, score {res['score_s']:.2f} s, "
                         f"peak {res['peak_mb']:.0f} MB (child wall {wall:.0f} s)")
        return res


def _mem_estimate(impl: str, scorer: str, index: str, n: int, dim: int, classes: int,
                  rows: int | None) -> float:
    """MiB a job holds at its peak, estimated: featstore streams its inputs (a KNN bank and
    the FAISS index's copy of it are resident; IVF's k-means sample on top); pytorch-ood holds
    its float32 inputs plus a working copy of its fit split; sklearn the bank, its normalized
    copy and the queries."""
    mib = 2.0 ** 20
    m = eval_rows(n)
    bank = n * dim * 4 / mib
    if impl == "featstore":
        if scorer == "knn":
            return FIXED_MB + bank * {"exact": 2.0, "ivf_flat": 3.0, "ivf_pq": 3.0,
                                      "hnsw": 2.2}.get(index, 3.0)
        return FIXED_MB + (3 * dim * dim + 2 * classes * dim) * 8 / mib
    if impl == "sklearn":
        return FIXED_MB + 2 * bank + 2 * min(m, rows or m) * dim * 4 / mib
    job = peer_inputs_mb(scorer, n, dim, classes)
    fit_on = peers.PEERS[scorer].fit_on
    work = bank if fit_on == "train" else m * classes * 4 / mib if fit_on == "val" else 0.0
    return FIXED_MB + job + work


def peer_inputs_mb(scorer: str, n: int, dim: int, classes: int) -> float:
    """MiB of float32 inputs the peer's whole job holds (all scored rows, even where only a
    subset was timed, plus its fit split)."""
    kind, fit_on = peers.PEERS[scorer].kind, peers.PEERS[scorer].fit_on
    m = eval_rows(n)
    total = 2 * m * {"features": dim, "logits": classes}[kind] * 4
    if fit_on == "train":
        total += n * (dim * 4 + 8)
    elif fit_on == "val":
        total += m * (classes * 4 + 8)
    return total / 2**20


def sklearn_inputs_mb(n: int, dim: int) -> float:
    return (n + 2 * eval_rows(n)) * dim * 4 / 2**20


class Plan:
    """Decides whether a job runs (time and memory budgets) and remembers past wall times."""

    def __init__(self, timeout: float, peer_timeout: float, mem_budget_mb: float):
        self.timeout = timeout
        self.peer_timeout = peer_timeout
        self.mem_budget_mb = mem_budget_mb
        self.history: dict[tuple[Any, ...], tuple[int, float, bool]] = {}

    def budget(self, impl: str) -> float:
        return self.timeout if impl == "featstore" else self.peer_timeout

    def check(self, key: tuple[Any, ...], impl: str, n: int,
              mem_mb: float) -> dict[str, Any] | None:
        limit = self.budget(impl)
        past = self.history.get(key)
        if past is not None:
            n0, wall0, timed_out = past
            if timed_out:
                return {"skipped": f">{limit:.0f} s (timed out at N={n0:,})",
                        "skip_kind": "time"}
            predicted = wall0 * (n / n0) ** GROWTH.get(key, 1.0)
            if predicted > limit:
                return {"skipped": f">{limit:.0f} s (predicted ~{predicted:.0f} s from "
                                   f"N={n0:,})", "skip_kind": "time"}
        if mem_mb > self.mem_budget_mb:
            return {"skipped": f"needs ~{mem_mb / 1024:.1f} GiB > budget "
                               f"{self.mem_budget_mb / 1024:.1f} GiB", "skip_kind": "memory"}
        return None

    def record(self, key: tuple[Any, ...], n: int, res: dict[str, Any]) -> None:
        if res.get("timed_out"):
            self.history[key] = (n, self.budget(key[1]), True)
        elif "wall_s" in res:
            self.history[key] = (n, float(res["wall_s"]), False)


def _mem_available_mb() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 8192.0


# --------------------------------------------------------------------------- figures
def _figures(res: dict[str, Any], total_rows: int) -> dict[str, Any] | None:
    """fit, score (extrapolated to all scored rows), total, CPU seconds and peak MB."""
    if "fit_s" not in res:
        return None
    score, score_cpu, approx = bs._scaled(res, total_rows)
    return {"fit": res["fit_s"], "score": score, "total": res["fit_s"] + score,
            "cpu": res["fit_cpu_s"] + score_cpu, "peak": max(res["peak_mb"], 0.0),
            "approx": approx, "load": res.get("load", 0.0)}


def _status(res: dict[str, Any]) -> str:
    if "skipped" in res:
        return f"skipped: {res['skipped']}"
    if "error" in res:
        return f"failed: {res['error']}"
    return ""


def _auroc_pair(a: dict[str, Any], b: dict[str, Any]) -> str:
    sa, sb = a.get("scores", {}), b.get("scores", {})
    if len(sa) < 2 or len(sb) < 2:
        return ""
    n_id = min(sa[bs.AUROC_ID].size, sb[bs.AUROC_ID].size)
    n_ood = min(sa[bs.AUROC_OOD].size, sb[bs.AUROC_OOD].size)
    fa = bs._auroc(sa[bs.AUROC_ID][:n_id], sa[bs.AUROC_OOD][:n_ood])
    fb = bs._auroc(sb[bs.AUROC_ID][:n_id], sb[bs.AUROC_OOD][:n_ood])
    flag = "" if abs(fa - fb) <= bs.AUROC_TOL else " DIFFER"
    return f"AUROC {fa:.2f} / {fb:.2f}{flag}"


def _cells(f: dict[str, Any] | None, res: dict[str, Any], extra_mb: float = 0.0) -> list[str]:
    """fit, score, total, CPU seconds and MB (peak + `extra_mb`), or the status and blanks."""
    if f is None:
        return [_status(res)] + [""] * 4
    return [bs._fmt(f["fit"]), bs._fmt(f["score"], approx=f["approx"]),
            bs._fmt(f["total"], approx=f["approx"]), bs._fmt(f["cpu"], approx=f["approx"]),
            bs._fmt(f["peak"] + extra_mb, 0)]


def _ratios(fs: dict[str, Any] | None, peer: dict[str, Any] | None,
            peer_job: float) -> list[str]:
    if fs is None or peer is None:
        return ["—"] * 3
    approx = fs["approx"] or peer["approx"]
    speed = peer["total"] / fs["total"] if fs["total"] > 0 else float("inf")
    speed_cpu = peer["cpu"] / fs["cpu"] if fs["cpu"] > 0 else float("inf")
    mem = fs["peak"] / peer_job if peer_job > 0 else float("inf")
    return [bs._fmt(speed, 1, approx) + "x", bs._fmt(speed_cpu, 1, approx) + "x",
            bs._fmt(mem, 2)]


def _subset_note(res: dict[str, Any], total_rows: int, who: str) -> str:
    rows = int(res.get("scored_rows", total_rows))
    prefix = f"{who} " if who else ""
    return f"{prefix}scored {rows:,} of {total_rows:,} rows" if rows < total_rows else ""


def _busy(*results: dict[str, Any]) -> str:
    loads = [r.get("load", 0.0) for r in results if "load" in r]
    return f"busy (load {max(loads):.1f})" if loads and max(loads) > HIGH_LOAD else ""


def _recall(res: dict[str, Any]) -> str:
    d = res.get("diagnostics", {})
    if "recall_at_k" not in d:
        return "—"
    return f"{d['recall_at_k']:.3f} (K={d['recall_k']}, {d['recall_queries']} {d['recall_split']})"


# --------------------------------------------------------------------------- main
def _parse_list(text: str, kind: type = str) -> list[Any]:
    return [kind(s.strip()) for s in text.split(",") if s.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="id/train sizes N (comma-separated)")
    ap.add_argument("--dims", default=DEFAULT_DIMS, help="feature dimensions D")
    ap.add_argument("--scorers", default=DEFAULT_SCORERS,
                    help="comma-separated featstore scorers, or 'all' (every applicable one)")
    ap.add_argument("--peers", action="store_true",
                    help="also time pytorch-ood (and sklearn NearestNeighbors for knn)")
    ap.add_argument("--out-dir", default="benchmarks/plots", help="where the PNGs go")
    ap.add_argument("--classes", type=int, default=bs.NUM_CLASSES, help="C")
    ap.add_argument("--knn-rows", type=int, default=bs.KNN_ROWS,
                    help="rows of each scored split queried by KNN (0 = all; time extrapolated)")
    ap.add_argument("--knn-indexes", default=DEFAULT_INDEXES,
                    help="featstore knn indexes (exact, ivf_flat, ivf_pq, hnsw)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="wall-second budget of one featstore child")
    ap.add_argument("--peer-timeout", type=float, default=600.0,
                    help="wall-second budget of one pytorch-ood / sklearn child")
    ap.add_argument("--mem-budget-gb", type=float, default=None,
                    help="skip jobs estimated above this (default: 80%% of MemAvailable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extract", choices=("none", "quick", "full"), default="none",
                    help="also report featstore extraction images/s (bench_extract configs)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child)

    t_start = time.perf_counter()
    rows_list = sorted(set(_parse_list(args.rows, int)))
    dims = _parse_list(args.dims, int)
    indexes = _parse_list(args.knn_indexes)
    if not rows_list or min(rows_list) < 10 or not dims or min(dims) < 2 or args.classes < 2:
        ap.error("need --rows >= 10, --dims >= 2 and --classes >= 2")
    if bad := set(indexes) - {"exact", "ivf_flat", "ivf_pq", "hnsw"}:
        ap.error(f"unknown --knn-indexes: {', '.join(sorted(bad))}")
    only = None if args.scorers.strip() == "all" else set(_parse_list(args.scorers))
    names, skipped = bs._applicable(only)
    if only is not None and (unknown := only - set(names) - {s.split("`")[1] for s in skipped}):
        ap.error(f"unknown scorer(s): {', '.join(sorted(unknown))}")
    budget_mb = (args.mem_budget_gb * 1024 if args.mem_budget_gb
                 else 0.8 * _mem_available_mb())
    plan = Plan(args.timeout, args.peer_timeout, budget_mb)
    out_dir = Path(args.out_dir)
    load_before = load_average()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still delete the stores
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-scaling-", dir="/tmp"))
    records: list[dict[str, Any]] = []
    stores: dict[tuple[int, int], dict[str, Any]] = {}
    extract: dict[str, Any] | None = None
    try:
        runner = Runner(tmp)
        # every featstore child fits and scores its scorer once on this tiny store before
        # its clock starts, so Numba compilation or cache loading is never timed
        warm_store = str(tmp / "warm_store")
        bs.write_warm_store(warm_store, args.seed)
        for dim in dims:
            plan.history.clear()
            for n in rows_list:
                m = eval_rows(n)
                store = str(tmp / f"store_N{n}_D{dim}")
                need, free = disk_need_bytes(n, dim, args.classes), shutil.disk_usage(tmp).free
                if need > free:
                    stores[(dim, n)] = {"error": f"needs ~{need / 1e9:.0f} GB free in /tmp, "
                                                 f"{free / 1e9:.0f} GB free"}
                    bs._progress(f"[D={dim} N={n:,}] skipped: {stores[(dim, n)]['error']}")
                    continue
                bs._progress(f"[D={dim} N={n:,}] generating the store under {tmp}")
                gen = runner.run({"role": "generate", "rows": n, "dim": dim,
                                  "classes": args.classes, "seed": args.seed, "store": store},
                                 "generate + SplitWriter", None)
                stores[(dim, n)] = gen
                if "error" in gen:
                    shutil.rmtree(store, ignore_errors=True)
                    continue
                base = {"store": store, "dim": dim, "classes": args.classes,
                        "warm_store": warm_store}

                def job(impl: str, scorer: str, index: str, spec: dict[str, Any],
                        what: str, dim: int = dim, n: int = n,
                        base: dict[str, Any] = base) -> dict[str, Any]:
                    rows = spec.get("rows")
                    key = (scorer, impl, index)
                    mem = _mem_estimate(impl, scorer, index, n, dim, args.classes, rows)
                    res = plan.check(key, impl, n, mem)
                    if res is None:
                        res = runner.run({**base, **spec}, what, plan.budget(impl))
                        plan.record(key, n, res)
                    else:
                        bs._progress(f"  {what}: skipped: {res['skipped']}")
                    records.append({"dim": dim, "n": n, "classes": args.classes,
                                    "scorer": scorer, "impl": impl, "index": index,
                                    "res": res})
                    return res

                for name in names:
                    bs._progress(f"[D={dim} N={n:,}] {name}")
                    knn_rows = min(m, args.knn_rows) if name == "knn" and args.knn_rows else m
                    params = {"dim": vim_dim(dim)} if name == "vim" else {}
                    if name != "knn" or "exact" in indexes:
                        job("featstore", name, "exact",
                            {"role": "featstore", "scorer": name, "rows": knn_rows,
                             "params": params}, "featstore")
                    if args.peers and name in peers.PEERS:
                        peer_rows = min(m, bs.PEER_ROWS.get(name, m), knn_rows)
                        job("pytorch-ood", name, "exact",
                            {"role": "peer", "scorer": name, "rows": peer_rows},
                            f"pytorch-ood {peers.PEERS[name].label}")
                    if name != "knn":
                        continue
                    for index in indexes:
                        if index != "exact":
                            job("featstore", name, index,
                                {"role": "featstore", "scorer": name, "rows": knn_rows,
                                 "params": {"index": index}}, f"featstore index={index}")
                    if args.peers:
                        job("sklearn", name, "exact", {"role": "sklearn_knn", "rows": knn_rows},
                            "sklearn NearestNeighbors")
                shutil.rmtree(store, ignore_errors=True)
        if args.extract != "none":
            bs._progress(f"extraction ({args.extract} configs of bench_extract)")
            extract = runner.run({"role": "extract", "quick": args.extract == "quick"},
                                 "featstore.extraction.extract", None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    plots = _plot(records, dims, out_dir, plan, args.classes)
    _report(args, argv, names, skipped, rows_list, dims, indexes, stores, records, plots,
            plan, load_before, extract, t_start)
    return 0


# --------------------------------------------------------------------------- Markdown
def _report(args: argparse.Namespace, argv: list[str] | None, names: list[str],
            skipped: list[str], rows_list: list[int], dims: list[int], indexes: list[str],
            stores: dict[tuple[int, int], dict[str, Any]], records: list[dict[str, Any]],
            plots: list[Path], plan: Plan, load_before: str, extract: dict[str, Any] | None,
            t_start: float) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cmd = ("python -m benchmarks.bench_scaling " + " ".join(argv)).rstrip()
    faiss_v = bs._version("faiss-gpu", "faiss-cpu", "faiss")
    print("### Scaling: featstore scorers over N and D vs pytorch-ood 0.4 (issue 8)")
    print()
    print(f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}")
    print(f"- command: `{cmd}`")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
          f"{platform.platform()}; load average (1/5/15 min) before {load_before}, after "
          f"{load_average()}")
    print(f"- software: Python {platform.python_version()}, featstore "
          f"{bs._version('featstore')}, pytorch-ood {bs._version('pytorch-ood', 'pytorch_ood')}"
          f", torch {bs._version('torch')}, faiss {faiss_v}, NumPy {bs._version('numpy')}, "
          f"scikit-learn {bs._version('scikit-learn')}, h5py {bs._version('h5py')}")
    print(f"- data (seed {args.seed}): bench_scorers' synthetic post-ReLU features with "
          f"C = {args.classes}; per N: id/train N (fit), id/val, id/test and {OOD_SPLIT} "
          f"N/{EVAL_FRACTION} each; timed scoring = id/test + {OOD_SPLIT} = N/5 rows; "
          f"float32 stores in /tmp, written part by part, deleted after each (N, D)")
    for (dim, n), gen in stores.items():
        if "error" in gen:
            print(f"- store N={n:,}, D={dim}: generation failed: {gen['error']}")
        else:
            print(f"- store N={n:,}, D={dim}: {gen['bytes'] / 2**20:,.0f} MiB, generated and "
                  f"written in {gen['generate_s']:.1f} s; ID top-1 on id/test "
                  f"{100 * gen['id_acc']:.1f}%, {100 * gen['train_zero_frac']:.0f}% zeros")
    peers = "pytorch-ood (and sklearn for knn)" if args.peers else "none (no --peers)"
    print(f"- scorers: {', '.join(names)}; peers: {peers}; knn indexes: {', '.join(indexes)}")
    print("- timed: one fit + one score per (N, D, implementation) in a fresh child process "
          "(bench_scorers' children); total = fit + score wall s; CPU s = user + system, all "
          "threads; speed-up = peer total / featstore total (wall, and CPU); peak MB = VmHWM - "
          "VmRSS before fit; peer job MB = peer peak + the float32 inputs its job holds; "
          "memory ratio = featstore peak / peer job MB; `~` = score time extrapolated "
          f"linearly from a row subset (knn: first {args.knn_rows:,} rows of each scored "
          f"split, all implementations; pytorch-ood {', '.join(sorted(bs.PEER_ROWS))}: first "
          f"{', '.join(str(v) for _, v in sorted(bs.PEER_ROWS.items()))} rows); AUROC "
          f"(id/test vs {OOD_SPLIT}, featstore / peer) on the rows both scored")
    print(f"- budgets: featstore child {plan.timeout:.0f} s, peer child "
          f"{plan.peer_timeout:.0f} s (killed and recorded `skipped: >T s`; not started when "
          f"the time at the previous N, scaled linearly in N (IVF: N^1.5), exceeds it), "
          f"estimated memory "
          f"{plan.mem_budget_mb / 1024:.1f} GiB")
    if skipped:
        print(f"- not applicable: {'; '.join(skipped)}")
    if plots:
        print(f"- plots: {', '.join(f'`{p}`' for p in plots)}")
    if extract is not None:
        if "configs" in extract:
            parts = [f"`{c['name']}` ({c['describe']}) {c['rows'] / c['seconds']:,.0f} images/s"
                     f" ({c['rows']:,} images in {c['seconds']:.2f} s, {c['cpu_s']:.2f} CPU s)"
                     for c in extract["configs"]]
            print("- extraction (`featstore.extraction.extract`, CPU, batch 128, "
                  f"one timed run after a "
                  f"warm-up, bench_extract's {args.extract} configs): {'; '.join(parts)}")
        else:
            print(f"- extraction: {_status(extract)}")

    for dim in dims:
        recs = [r for r in records if r["dim"] == dim]
        if not recs:
            continue
        _table(dim, args.classes, recs, names, rows_list, args.peers)
        if "knn" in names:
            _knn_table(dim, args.classes, recs, rows_list, indexes, args.peers)
        _growth(dim, recs)
    print()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"Total wall time of this run (generation, all children): "
          f"{(time.perf_counter() - t_start) / 60:.1f} min; CPU time of all children "
          f"(imports, generation and peer input loading included): "
          f"{(ru.ru_utime + ru.ru_stime) / 60:.1f} min.")
    sys.stdout.flush()


def _find(recs: list[dict[str, Any]], n: int, scorer: str, impl: str,
          index: str = "exact") -> dict[str, Any] | None:
    for r in recs:
        if (r["n"], r["scorer"], r["impl"], r["index"]) == (n, scorer, impl, index):
            return r["res"]
    return None


def _table(dim: int, classes: int, recs: list[dict[str, Any]], names: list[str],
           rows_list: list[int], peers: bool) -> None:
    print()
    print(f"#### D = {dim}")
    print()
    print("| scorer | N | featstore fit s | score s | total s | CPU s | peak MB | peer fit s | "
          "score s | total s | CPU s | peer job MB | speed-up | speed-up (CPU) | "
          "memory ratio | notes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in names:
        for n in rows_list:
            fs = _find(recs, n, name, "featstore")
            if fs is None:
                continue
            total_rows = 2 * eval_rows(n)
            f = _figures(fs, total_rows)
            notes = [_subset_note(fs, total_rows, "featstore")]
            peer = _find(recs, n, name, "pytorch-ood") if peers else None
            pf, peer_cells, job = None, ["—"] * 5, 0.0
            if peer is None:
                if peers:
                    notes.append("no pytorch-ood counterpart")
            else:
                pf = _figures(peer, total_rows)
                inputs = peer_inputs_mb(name, n, dim, classes)
                peer_cells = _cells(pf, peer, inputs)
                job = pf["peak"] + inputs if pf else 0.0
                label = peers.label(name, dim)
                notes += [f"pytorch-ood `{label}`", _subset_note(peer, total_rows, "peer"),
                          _auroc_pair(fs, peer)]
            notes.append(_busy(fs, *(p for p in (peer,) if p)))
            cells = [name, f"{n:,}", *_cells(f, fs), *peer_cells, *_ratios(f, pf, job),
                     "; ".join(x for x in notes if x)]
            print("| " + " | ".join(cells) + " |")


def _knn_table(dim: int, classes: int, recs: list[dict[str, Any]], rows_list: list[int],
               indexes: list[str], peers: bool) -> None:
    print()
    print(f"#### D = {dim}: exact vs approximate KNN (K = 50, bank = all of id/train)")
    print()
    print("| N | implementation | fit s | score s | total s | CPU s | peak MB | recall@K | "
          "speed-up vs featstore exact | speed-up vs sklearn | notes |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for n in rows_list:
        total_rows = 2 * eval_rows(n)
        exact = _find(recs, n, "knn", "featstore", "exact")
        sk = _find(recs, n, "knn", "sklearn") if peers else None
        ef = _figures(exact, total_rows) if exact else None
        sf = _figures(sk, total_rows) if sk else None
        rows: list[tuple[str, dict[str, Any] | None]] = [
            (f"featstore index={i}", _find(recs, n, "knn", "featstore", i)) for i in indexes]
        if peers:
            rows.append(("sklearn NearestNeighbors (brute)", sk))
            rows.append(("pytorch-ood KNN", _find(recs, n, "knn", "pytorch-ood")))
        for label, res in rows:
            if res is None:
                continue
            f = _figures(res, total_rows)
            if f is None:
                cells = [_status(res)] + [""] * 7
            else:
                mine = label.startswith("featstore")
                vs_exact = (bs._fmt(ef["total"] / f["total"], 1, f["approx"]) + "x"
                            if ef and f["total"] > 0 and mine and res is not exact else "—")
                vs_sk = (bs._fmt(sf["total"] / f["total"], 1, f["approx"]) + "x"
                         if sf and f["total"] > 0 and mine else "—")
                extra = (sklearn_inputs_mb(n, dim) if label.startswith("sklearn") else
                         peer_inputs_mb("knn", n, dim, classes)
                         if label.startswith("pytorch") else 0.0)
                cells = [bs._fmt(f["fit"]), bs._fmt(f["score"], approx=f["approx"]),
                         bs._fmt(f["total"], approx=f["approx"]),
                         bs._fmt(f["cpu"], approx=f["approx"]),
                         bs._fmt(f["peak"] + extra, 0) + (" (job)" if extra else ""),
                         _recall(res), vs_exact, vs_sk]
            notes = [_subset_note(res, total_rows, "") if f else "",
                     _auroc_pair(exact, res) if exact and res is not exact and f else "",
                     _index_options(res), _busy(res)]
            print("| " + " | ".join([f"{n:,}", label, *cells,
                                     "; ".join(x for x in notes if x)]) + " |")


def _index_options(res: dict[str, Any]) -> str:
    params = res.get("diagnostics", {})
    keep = {k: v for k, v in params.items() if k in ("bank_size",)}
    return ", ".join(f"{k} {v:,}" for k, v in keep.items())


def _slope(points: list[tuple[float, float]]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    return float(np.polyfit(xs, ys, 1)[0])


def _series(recs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(line label, implementation) -> records in N order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(recs, key=lambda r: r["n"]):
        featstore_knn = r["impl"] == "featstore" and r["scorer"] == "knn"
        label = f"{r['scorer']} [{r['index']}]" if featstore_knn else r["scorer"]
        out.setdefault((label, r["impl"]), []).append(r)
    return out


def _values(r: dict[str, Any], what: str) -> float | None:
    f = _figures(r["res"], 2 * eval_rows(r["n"]))
    if f is None:
        return None
    if what == "time":
        return f["total"]
    extra = 0.0
    if r["impl"] == "pytorch-ood":
        extra = peer_inputs_mb(r["scorer"], r["n"], r["dim"], r["classes"])
    elif r["impl"] == "sklearn":
        extra = sklearn_inputs_mb(r["n"], r["dim"])
    return f["peak"] + extra


def _growth(dim: int, recs: list[dict[str, Any]]) -> None:
    print()
    print(f"#### D = {dim}: growth with N (least-squares slope k of log y vs log N over the "
          "measured N; y ~ N^k)")
    print()
    print("| series | implementation | points | time (fit + score) k | memory (peak / job MB) "
          "k |")
    print("|---|---|---:|---:|---:|")
    for (label, impl), rs in _series(recs).items():
        t = [(r["n"], v) for r in rs if (v := _values(r, "time")) is not None]
        mem = [(r["n"], v) for r in rs if (v := _values(r, "memory")) is not None]
        kt, km = _slope(t), _slope(mem)
        print(f"| {label} | {impl} | {len(t)} | {'—' if kt is None else f'{kt:.2f}'} | "
              f"{'—' if km is None else f'{km:.2f}'} |")


# --------------------------------------------------------------------------- plots
STYLES = {"featstore": ("-", "o"), "pytorch-ood": ("--", "s"), "sklearn": ("-.", "D")}


def _plot(records: list[dict[str, Any]], dims: list[int], out_dir: Path, plan: Plan,
          classes: int) -> list[Path]:
    if not records:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for dim in dims:
        recs = [r for r in records if r["dim"] == dim]
        if not recs:
            continue
        series = _series(recs)
        # one colour per line family; featstore's exact knn shares it with the knn peers
        keys = list(dict.fromkeys(label.removesuffix(" [exact]") for label, _ in series))
        cmap = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20")
        colors = {key: cmap(i % cmap.N) for i, key in enumerate(keys)}
        for what in ("time", "memory"):
            fig, ax = plt.subplots(figsize=(10, 6))
            any_skip = False
            for (label, impl), rs in series.items():
                ls, marker = STYLES[impl]
                pts = [(r["n"], v) for r in rs if (v := _values(r, what)) is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=ls,
                            marker=marker, color=colors[label.removesuffix(" [exact]")],
                            markersize=5, linewidth=1.6,
                            label=f"{label} ({impl})")
                kind = "time" if what == "time" else "memory"
                for r in rs:
                    if r["res"].get("skip_kind") == kind:
                        y = (plan.budget(impl) if kind == "time" else plan.mem_budget_mb)
                        ax.plot([r["n"]], [y], marker="^",
                                color=colors[label.removesuffix(" [exact]")],
                                markerfacecolor="none", markersize=9, linestyle="none")
                        any_skip = True
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("N (id/train rows; scored rows = N/5)")
            if what == "time":
                ax.set_ylabel("fit + score wall seconds (log)")
                title = f"D = {dim}, C = {classes}: fit + score time vs N"
            else:
                ax.set_ylabel("peak MB (featstore) / job MB (peers: peak + inputs) (log)")
                title = f"D = {dim}, C = {classes}: peak memory vs N"
            ax.set_title(f"{title}  (featstore solid, peers dashed; "
                         f"{_dt.date.today().isoformat()})", fontsize=10)
            handles, names_ = ax.get_legend_handles_labels()
            if any_skip:
                handles.append(Line2D([], [], marker="^", color="grey", markerfacecolor="none",
                                      linestyle="none"))
                names_.append("skipped (at the budget)")
            ax.legend(handles, names_, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
            fig.tight_layout()
            path = out_dir / f"scaling_{what}_D{dim}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            paths.append(path)
    return paths


if __name__ == "__main__":
    raise SystemExit(main())
