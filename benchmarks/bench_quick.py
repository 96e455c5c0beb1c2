"""Benchmark: every goal row of issue 19 in one run, side by side (`make bench-quick`).

Run ``python -m benchmarks.bench_quick [--full] [--only msp,vim,...] [--repeats R]
[--no-peers] [--seed 0] [--sweep-only]``. Prints Markdown; progress goes to stderr. Default:
reduced N
(bench_scorers' --quick sizes: D = 2048, C = 1000, id/train 10,000, id/val 1,000, id/test
5,000, 4 OOD splits x 1,000; about 5-8 minutes on 2 idle cores); ``--full``: bench_scorers'
full sizes (id/train 100,000 x 2048; `make bench` runs it).

One ImageNet-shaped float32 store (bench_scorers' generator) and, for pytorch-ood, its own
on-disk cache of the same arrays as ``torch.save`` files (`benchmarks.peer_cache`); both are
read once before timing (warm page cache for both sides). Rows:

1. logit-only scorers (msp, mls, energy, odin, gen, entropy, kl_matching, temp_scaling): the
   score pass over the scored splits (id/test + 4 OOD) against the floor "one h5py read of
   each split's logits + one NumPy float32 pass of the core op" (`benchmarks.floors`);
   goal <= 2x. Fit (temp_scaling, kl_matching on id/val) is outside both.
2. GEMM-bound fits (vim, residual, mds, rmds, fdbd, nci, she, nnguide, react, knn exact):
   construct + fit + score against the floor "the store reads + the same products in float32
   sgemm on the arrays in RAM"; goal <= 1.3x. The float64 D x D factorizations the fit also
   needs (decision 2 keeps them in float64) are timed separately, and the ratio against
   floor + factorizations is shown beside.
3. pytorch-ood 0.4 (the `bench` extra) from its own cache: torch.load of exactly the tensors
   it needs + fit + score, against featstore's fit + score from the store (both cold
   processes' first run); and in RAM (fit + score on tensors already loaded), with peak
   memory: featstore's peak above the opened store vs the peer job's peak above the empty
   process (its loaded inputs included). Goal: every scorer >= 1.0x, geometric mean >= 3x,
   lower peak memory. Mahalanobis / RMD / DICE / GradNorm peers score row subsets and their
   score time is extrapolated (bench_scorers' PEER_ROWS; marked ~).
4. sweeps (every scorer with a default grid; bench_sweep's synthetic store): construct + fit +
   ``score_grid`` over the whole default grid against construct + fit + score of one setting
   (the scorer's default where it is in the grid, else the grid's first), CPU seconds with one
   BLAS thread and one scoring worker; goal <= 1.5x. The settings are those `featstore sweep`
   scores (`scorers.sweep.plan_settings`: defaults the store makes invalid clamped, noted);
   beside, the grid floor of `benchmarks.sweep_floors` (the one setting + the work no other
   setting can share, measured bare) and the verdict. ``--sweep-only`` runs this section alone.
5. approximate KNN (ivf_flat, hnsw) against scikit-learn's brute force NearestNeighbors
   (K = 50, the same queries), with recall@K against exact search (the scorer's
   diagnostics, 256 id/val queries, search width calibrated to recall 0.95); goal: recall
   >= 0.95 and >= 10x. 5b: `benchmarks.bench_ann`'s reduced case (20k x 2048 clustered
   bank, 5k queries; the 100k case is `python -m benchmarks.bench_ann`).

Measurements 1-3 and 5 (featstore) run in one fresh child interpreter (featstore side and
floors alternated, `--repeats` runs each, the fastest CPU time kept; peak memory from the first
run, RSS high-water mark reset per scorer after `malloc_trim`); pytorch-ood in a second child
(one scorer after the other, each loading its tensors afresh); sklearn in a third. Ratios are
in CPU seconds (user + system, all threads: steadier than wall time on a shared machine), wall
seconds beside; the 1-min load average is recorded.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bench_scorers as bs
from benchmarks import floors, sweep_floors
from benchmarks.machine import cpu_model, mem_total_gib
from benchmarks.peers import PEERS

LOGIT_ROWS = tuple(floors.LOGIT_CORE)
GEMM_ROWS = tuple(floors.GEMM_FLOORS)
APPROX_INDEXES = ("ivf_flat", "hnsw")
GOALS = {"logit": 2.0, "gemm": 1.3, "peer_each": 1.0, "peer_geomean": 3.0, "sweep": 1.5,
         "approx_speed": 10.0, "approx_recall": 0.95}
CHILD_TIMEOUT_S = 3600


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def emit(lines: list[str]) -> None:
    """Print a finished section at once (a later failure keeps it)."""
    print("\n".join(["", *lines]), flush=True)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall s, CPU s) of one call."""
    w0, c0 = time.perf_counter(), cpu_s()
    fn()
    return time.perf_counter() - w0, cpu_s() - c0


def best(runs: list[tuple[float, float]]) -> dict[str, float]:
    """The run with the least CPU time (and its wall time)."""
    wall, cpu = min(runs, key=lambda r: r[1])
    return {"wall_s": wall, "cpu_s": cpu}


def malloc_trim() -> None:
    """Return freed heap memory to the OS, so the next RSS high-water mark counts what the
    next measurement allocates."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


# Mahalanobis / RMD peers cost O(C D^2) per scored row whatever N is: at reduced N they score
# fewer rows (time extrapolated, as bench_scorers does with PEER_ROWS at full size).
QUICK_PEER_ROWS = {"mds": 20, "rmds": 20}


def peer_rows(name: str, full: bool) -> int | None:
    if not full and name in QUICK_PEER_ROWS:
        return QUICK_PEER_ROWS[name]
    return bs.PEER_ROWS.get(name)


# --------------------------------------------------------------------------- children
def floor_inputs(store: Any, rows: int | None) -> floors.FloorInputs:
    from scorers import get_scorer
    from scorers.knn_index import subsample_size

    weight, bias = store.head
    train_rows = store.split("id/train").num_rows
    nng = get_scorer("nnguide")
    knn_splits = bs._scored_splits(rows)
    return floors.FloorInputs(
        train=store.split("id/train").path, val=store.split("id/val").path,
        scored=[store.split(s).path for s in bs.SCORE_SPLITS],
        weight=np.ascontiguousarray(weight, dtype=np.float32),
        bias=np.ascontiguousarray(bias, dtype=np.float32),
        vim_dim=1000 if weight.shape[1] >= 2048 else weight.shape[1] // 2,
        knn_k=int(get_scorer("knn").params["K"]), nnguide_k=int(nng.params["K"]),
        nnguide_bank=subsample_size(train_rows, float(nng.params["alpha"])),
        react_percentile=float(get_scorer("react").params["percentile"]),
        knn_scored=[store.split(s).path for s in knn_splits], knn_rows=rows,
        kl_log_templates=floors.kl_template_operand(store.split("id/val").path))


def fit_and_score(scorer: Any, store: Any, splits: list[Any]) -> list[np.ndarray]:
    scorer.fit(store)
    return [scorer.score(s) for s in splits]


def _featstore_row(spec: dict[str, Any], repeats: int) -> dict[str, Any]:
    """featstore's first (measured) run of one scorer, then its floor and further runs."""
    from featstore import Store
    from scorers import get_scorer

    name, rows = spec["scorer"], spec.get("rows")
    malloc_trim()
    res = bs._child_featstore(spec)
    if spec.get("params"):
        return res
    store = Store.open(spec["store"])
    inputs = floor_inputs(store, rows)
    splits = [store.split(s) for s in bs._scored_splits(rows)]
    if rows:
        splits = [bs._prefix_split(s, rows) for s in splits]
    if name in floors.LOGIT_CORE:
        fitted = get_scorer(name).fit(store)
        fs_runs, fl_runs = [], []
        for _ in range(max(repeats, 3)):
            fl_runs.append(timed(lambda: floors.logit_floor(name, inputs)))
            fs_runs.append(timed(lambda: [fitted.score(s) for s in splits]))
        res["fs_best"], res["floor"] = best(fs_runs), best(fl_runs)
    elif name in floors.GEMM_FLOORS:
        fn = floors.GEMM_FLOORS[name][0]
        fs_runs = [(res["fit_s"] + res["score_s"], res["fit_cpu_s"] + res["score_cpu_s"])]
        fl_runs = [timed(lambda: fn(inputs))]
        for _ in range(repeats - 1):
            fs_runs.append(timed(lambda: fit_and_score(get_scorer(name), store, splits)))
            fl_runs.append(timed(lambda: fn(inputs)))
        res["fs_best"], res["floor"] = best(fs_runs), best(fl_runs)
        fact = floors.factorizations(name, int(store.head[0].shape[1]))
        if fact is not None:
            res["factorizations"] = best([timed(lambda: fact(inputs))])
        trust = floors.TRUST_FLOORS.get(name)
        if trust is not None:
            res["trust_floor"] = best([timed(lambda: trust(inputs)) for _ in range(repeats)])
    store.close()
    return res


def _child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    results = []
    for i, run in enumerate(spec["runs"]):
        label = run["scorer"] + (f" {run['params']}" if run.get("params") else "")
        progress(f"  [{spec['role']}] {label}")
        try:
            if spec["role"] == "featstore":
                res = _featstore_row(run, spec["repeats"])
            else:
                malloc_trim()
                res = bs._child_peer(run)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        scores = res.pop("scores", {})
        np.savez(out.with_name(f"{out.stem}.{i}.npz"),
                 **{k.replace("/", "_"): v for k, v in scores.items()})
        results.append(res)
        out.write_text(json.dumps(results, default=str))
    return 0


def run_child(workdir: Path, role: str, runs: list[dict[str, Any]], repeats: int
              ) -> list[dict[str, Any]]:
    """One child interpreter that measures `runs` one after the other; results in order."""
    out = workdir / f"{role}.json"
    spec_path = workdir / f"{role}.spec.json"
    spec_path.write_text(json.dumps({"role": role, "runs": runs, "repeats": repeats,
                                     "out": str(out)}))
    progress(f"{role}: {len(runs)} measurement(s) in one child")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_quick", "--child",
                           str(spec_path)], cwd=Path(__file__).resolve().parent.parent,
                          timeout=CHILD_TIMEOUT_S)
    results = json.loads(out.read_text()) if out.exists() else []
    if proc.returncode != 0:
        progress(f"{role}: child exit status {proc.returncode}")
    for i, res in enumerate(results):
        npz = out.with_name(f"{out.stem}.{i}.npz")
        if npz.exists():
            with np.load(npz) as z:
                res["scores"] = {k.replace("_", "/", 1): z[k] for k in z.files}
    results += [{"error": "child did not finish"}] * (len(runs) - len(results))
    return results


# --------------------------------------------------------------------------- formatting
def fmt_ratio(ratio: float, goal: float, at_most: bool, approx: bool = False) -> str:
    ok = ratio <= goal if at_most else ratio >= goal
    text = ("~" if approx else "") + f"{ratio:.2f}x"
    return f"{text} | " + ("met" if ok else "**not met**")


def cell(t: dict[str, float]) -> str:
    return f"{t['cpu_s']:.3f} ({t['wall_s']:.3f})"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def logit_section(fs: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for name in LOGIT_ROWS:
        r = fs.get(name)
        if r is None:
            continue
        if "floor" not in r:
            rows.append([name, floors.LOGIT_CORE[name], f"failed: {r.get('error')}", "", "",
                         ""])
            continue
        ratio = r["fs_best"]["cpu_s"] / r["floor"]["cpu_s"]
        rows.append([name, floors.LOGIT_CORE[name], cell(r["fs_best"]), cell(r["floor"]),
                     fmt_ratio(ratio, GOALS["logit"], at_most=True)])
    return ["### 1. Logit-only scorers: score pass vs read + one float32 core-op pass", "",
            "CPU s (wall s) of scoring id/test + 4 OOD splits; fastest of the alternated runs; "
            f"goal: ratio <= {GOALS['logit']:g}x.", "",
            *table(["scorer", "core op", "featstore score", "floor", "ratio (CPU)", "goal"],
                   rows)]


def gemm_section(fs: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for name in GEMM_ROWS:
        r = fs.get(name)
        if r is None:
            continue
        if "floor" not in r:
            rows.append([name, floors.GEMM_FLOORS[name][1], f"failed: {r.get('error')}", "",
                         "", "", "", "", ""])
            continue
        ratio = r["fs_best"]["cpu_s"] / r["floor"]["cpu_s"]
        fact = r.get("factorizations")
        with_fact = ("–" if fact is None else
                     f"{fact['cpu_s']:.2f} / "
                     f"{r['fs_best']['cpu_s'] / (r['floor']['cpu_s'] + fact['cpu_s']):.2f}x")
        trust = r.get("trust_floor")
        fact_s = 0.0 if fact is None else fact["cpu_s"]
        with_trust = ("–" if trust is None else
                      f"{trust['cpu_s']:.2f} / "
                      f"{r['fs_best']['cpu_s'] / (trust['cpu_s'] + fact_s):.2f}x")
        rows.append([name, floors.GEMM_FLOORS[name][1], cell(r["fs_best"]), cell(r["floor"]),
                     fmt_ratio(ratio, GOALS["gemm"], at_most=True), with_fact, with_trust])
    return ["### 2. GEMM-bound fits: fit + score vs store read + float32 sgemm floor", "",
            "CPU s (wall s) of construct + fit + score (id/test + 4 OOD splits; exact KNN: the "
            "queried rows below); floor = the reads + the products listed, float32, in RAM; "
            "fastest of the runs. Last column: the float64 D x D eigendecompositions (and the "
            "C x C one of W W^T) the fit needs besides, CPU s, and the ratio against floor + "
            "them. Trust "
            "floor: the same floor with the id/train Gram(s) in float64 dgemm, the precision "
            "the issue's 1e-5 bar allows for the covariances (docs/DESIGN.md section 5; fdbd: "
            "W W^T in float64, its boundary table cancels for close classes; rmds: its scored "
            "rows' whitening in float64 too, a float32 one moved it by 2.3e-5), CPU s, and the "
            "ratio against it + the factorizations. "
            f"Goal: ratio <= {GOALS['gemm']:g}x.", "",
            *table(["scorer", "products (float32)", "featstore fit+score", "floor",
                    "ratio (CPU)", "goal", "float64 factorizations CPU s / ratio with them",
                    "trust floor (float64 Gram) CPU s / ratio with factorizations"],
                   rows)]


def peer_section(fs: dict[str, dict[str, Any]], peers: dict[str, dict[str, Any]],
                 total_rows: int) -> tuple[list[str], list[str]]:
    rows, cache_ratios, ram_ratios, verdicts = [], [], [], []
    for name, p in peers.items():
        f = fs.get(name, {"error": "not run"})
        if "error" in f or "error" in p:
            rows.append([name, f"failed: {f.get('error') or p.get('error')}"] + [""] * 8)
            continue
        f_score_w, f_score_c, f_apx = bs._scaled(f, total_rows)
        p_score_w, p_score_c, p_apx = bs._scaled(p, total_rows)
        f_cpu = f["fit_cpu_s"] + f_score_c
        f_wall = f["fit_s"] + f_score_w
        p_ram_cpu = p["fit_cpu_s"] + p_score_c
        p_ram_wall = p["fit_s"] + p_score_w
        p_cache_cpu = p["load_cpu_s"] + p_ram_cpu
        p_cache_wall = p["load_s"] + p_ram_wall
        approx = f_apx or p_apx
        r_cache, r_ram = p_cache_cpu / f_cpu, p_ram_cpu / f_cpu
        cache_ratios.append(r_cache)
        ram_ratios.append(r_ram)
        lower = f["peak_mb"] < p["job_peak_mb"]
        ok = r_cache >= GOALS["peer_each"] and lower
        if not ok:
            verdicts.append(name)
        a = "~" if approx else ""
        rows.append([name, p["label"], f"{f_cpu:.3f} ({f_wall:.3f})",
                     f"{p['load_cpu_s']:.3f} + {a}{p_ram_cpu:.3f} ({p_cache_wall:.3f})",
                     f"{a}{r_cache:.2f}x", f"{a}{r_ram:.2f}x", f"{f['peak_mb']:.0f}",
                     f"{p['job_peak_mb']:.0f}", "met" if ok else "**not met**"])
    geo_cache = math.exp(np.mean(np.log(cache_ratios))) if cache_ratios else float("nan")
    geo_ram = math.exp(np.mean(np.log(ram_ratios))) if ram_ratios else float("nan")
    summary = [
        f"- pytorch-ood from its cache: geometric mean {geo_cache:.2f}x over "
        f"{len(cache_ratios)} scorers (goal >= {GOALS['peer_geomean']:g}x: "
        f"{'met' if geo_cache >= GOALS['peer_geomean'] else 'not met'}); in RAM "
        f"{geo_ram:.2f}x; min {min(cache_ratios, default=float('nan')):.2f}x (cache), "
        f"{min(ram_ratios, default=float('nan')):.2f}x (RAM); rows below 1.0x or not at "
        f"lower peak memory: {', '.join(verdicts) or 'none'}"]
    lines = ["### 3. pytorch-ood 0.4 from its own cache (torch.load) and in RAM", "",
             "CPU s (wall s). featstore: fit + score from the store (first run in the child). "
             "pytorch-ood: torch.load of the tensors it needs + fit + score (in RAM: fit + "
             "score only). Ratios = pytorch-ood CPU s / featstore CPU s. Peak MB: featstore "
             "above the opened store; pytorch-ood job above the process before torch.load "
             "(its inputs included).", "",
             *table(["scorer", "pytorch-ood detector", "featstore fit+score",
                     "pytorch-ood load + fit+score", "ratio from cache", "ratio in RAM",
                     "featstore peak MB", "pytorch-ood job peak MB", "goal (>= 1x, less memory)"],
                    rows), "", *summary]
    return lines, summary


def approx_section(fs_runs: dict[str, dict[str, Any]], sk: dict[str, Any],
                   total_rows: int) -> list[str]:
    rows = []
    if "error" in sk:
        return ["### 5. Approximate KNN vs scikit-learn brute force", "",
                f"sklearn run failed: {sk['error']}"]
    sk_w, sk_c, _ = bs._scaled(sk, total_rows)
    sk_cpu, sk_wall = sk["fit_cpu_s"] + sk_c, sk["fit_s"] + sk_w
    for index, r in fs_runs.items():
        if "error" in r:
            rows.append([index, f"failed: {r['error']}", "", "", "", "", ""])
            continue
        sw, sc, apx = bs._scaled(r, total_rows)
        cpu, wall = r["fit_cpu_s"] + sc, r["fit_s"] + sw
        recall = r.get("diagnostics", {}).get("recall_at_k")
        opts = r.get("diagnostics", {}).get("index_options", {})
        width = f"{opts.get('nprobe', opts.get('ef_search', '—'))}"
        speed = sk_cpu / cpu
        ok = recall is not None and recall >= GOALS["approx_recall"] and \
            speed >= GOALS["approx_speed"]
        rows.append([index, f"{cpu:.2f} ({wall:.2f})", f"{sk_cpu:.2f} ({sk_wall:.2f})",
                     ("~" if apx else "") + f"{speed:.2f}x",
                     "—" if recall is None else f"{recall:.3f}", width,
                     "met" if ok else "**not met**"])
    return ["### 5. Approximate KNN vs scikit-learn brute force NearestNeighbors (K = 50)", "",
            "CPU s (wall s) of fit + score of the same queries; recall@K against exact "
            "search on 256 id/val queries (the scorer's diagnostics; the search width, IVF "
            "nprobe / HNSW ef_search, calibrated at fit to recall_target 0.95). Goal: recall >= "
            f"{GOALS['approx_recall']:g} and >= {GOALS['approx_speed']:g}x.", "",
            *table(["index", "featstore fit+score", "sklearn brute fit+score", "speed-up (CPU)",
                    "recall@K", "calibrated width", "goal"], rows)]


# --------------------------------------------------------------------------- sweeps
def sweep_rows(tmp: Path, full: bool, repeats: int, only: set[str] | None
               ) -> tuple[str, list[list[str]]]:
    """Grid vs one setting per scorer with a default grid (bench_sweep's store and sides)."""
    from threadpoolctl import threadpool_limits

    from benchmarks import bench_sweep as sw
    from scorers import get_scorer
    from scorers.sweep import format_setting

    sizes = (sw.SizesA(dim=2048, classes=1000, train=10000, val=1000, ood=1000) if full
             else sw.SizesA(dim=1024, classes=200, train=5000, val=1000, ood=1000))
    store = sw.imagenet_like_store(tmp / "sweep_store", sizes)
    rows = []
    for name in sw.grid_scorers():
        if only is not None and name not in only:
            continue
        base, settings, adjusted = sw.planned(name, store, sw.A_BASE.get(name, {}))
        if not settings:
            rows.append([name, "0", "no valid setting", adjusted[-1]["reason"], *[""] * 5])
            continue
        grid = {k: list(dict.fromkeys(s[k] for s in settings)) for k in settings[0]}
        defaults = get_scorer(name, **base).params
        one = next((s for s in settings if all(defaults.get(k) == v for k, v in s.items())),
                   settings[0])
        progress(f"  [sweep] {name}: {len(settings)} settings vs {format_setting(one)}")

        def time_one(setting: dict[str, Any], name: str = name, base: dict = base) -> float:
            t0 = time.process_time()
            sw.side_refit(name, store, base, {k: [v] for k, v in setting.items()})
            return time.process_time() - t0

        t_grid, t_one = [], []
        with threadpool_limits(1), sw.one_scoring_thread():
            for _ in range(max(repeats, 2)):  # the first pair also warms up (Numba, FAISS)
                t_one.append(time_one(one))
                t_grid.append(time.process_time())
                sw.side_featstore(name, store, base, grid)
                t_grid[-1] = time.process_time() - t_grid[-1]
            floor = sweep_floors.grid_floor(name, store, settings, one, min(t_one),
                                            lambda s: min(time_one(s) for _ in range(2)),
                                            base)
        ratio = min(t_grid) / min(t_one)
        r_floor = None if floor is None else min(t_grid) / floor.cpu_s
        note = "; ".join(f"{format_setting(a['setting'])} -> {format_setting(a['used'])}"
                         for a in adjusted if a["used"])
        rows.append([name, str(len(settings)) + (f" ({note}, clamped)" if note else ""),
                     f"{min(t_grid):.3f}", f"{min(t_one):.3f} ({format_setting(one)})",
                     fmt_ratio(ratio, GOALS["sweep"], at_most=True),
                     "–" if floor is None else f"{floor.cpu_s:.3f} ({floor.what})",
                     "–" if r_floor is None else f"{r_floor:.2f}x",
                     sweep_floors.verdict(ratio, r_floor, GOALS["sweep"])])
    store.close()
    note = (f"store: D = {sizes.dim}, C = {sizes.classes}, id/train {sizes.train:,}, scored "
            f"id/val {sizes.val:,} + val OOD {sizes.ood:,}")
    return note, rows


def sweep_section(note: str, body: list[list[str]]) -> list[str]:
    return ["### 4. Sweeps: whole default grid vs one setting", "",
            f"CPU s (one BLAS thread, one scoring worker), fastest of the runs; {note}; "
            "grid = construct + fit(store, grid) + score_grid on the two scored splits; one "
            f"setting = construct + fit + score. Goal: ratio <= {GOALS['sweep']:g}x.", "",
            "Grid floor (`benchmarks.sweep_floors`): the one setting + the work each other "
            "setting cannot share, measured bare in RAM; verdict 'at the floor' within "
            f"{sweep_floors.AT_FLOOR:g}x of it.", "",
            *table(["scorer", "settings", "grid CPU s", "one setting CPU s", "ratio",
                    "goal", "grid floor CPU s", "grid / floor", "verdict"], body)]


# --------------------------------------------------------------------------- main
def header(args: argparse.Namespace, argv: list[str] | None, sizes: bs.Sizes,
           gen: dict[str, Any], cache_mb: float | None) -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    return [
        "## Roofline goals (issue 19): `benchmarks.bench_quick`", "",
        f"- date: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; commit "
        f"{commit.strip() or '?'}",
        "- command: `" + " ".join(["python -m benchmarks.bench_quick",
                                   *(sys.argv[1:] if argv is None else argv)]) + "`",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
        f"{platform.platform()}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- software: Python {platform.python_version()}, NumPy {bs._version('numpy')}, "
        f"faiss {bs._version('faiss-gpu', 'faiss-cpu')}, torch {bs._version('torch')}, "
        f"pytorch-ood {bs._version('pytorch-ood')}, scikit-learn {bs._version('scikit-learn')}",
        f"- data: D = {bs.DIM}, C = {bs.NUM_CLASSES}; id/train {sizes.train:,}, id/val "
        f"{sizes.val:,}, id/test {sizes.test:,}, 4 OOD x {sizes.ood:,}; float32 store "
        f"written in {gen['stores']['float32']['write_s']:.1f} s"
        + ("" if cache_mb is None else f"; pytorch-ood torch.save cache {cache_mb:.0f} MB"),
    ]


def sweep_only(args: argparse.Namespace) -> int:
    """Section 4 alone (`--sweep-only`), with the load average before and after."""
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-sweep-", dir="/tmp"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        emit(sweep_section(*sweep_rows(tmp, args.full, args.repeats or 2, only)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit([f"- load average at start {load}, at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"])
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="bench_scorers' full sizes")
    ap.add_argument("--only", default="", help="comma-separated scorer names (default: all)")
    ap.add_argument("--repeats", type=int, default=0,
                    help="runs per side (fastest kept; default 2, 1 with --full)")
    ap.add_argument("--no-peers", action="store_true", help="skip pytorch-ood and sklearn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep-only", action="store_true",
                    help="only section 4 (sweeps), on its own store")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child)
    if args.sweep_only:
        return sweep_only(args)
    t_start = time.perf_counter()
    sizes = bs.FULL if args.full else bs.QUICK
    repeats = args.repeats or (1 if args.full else 2)
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    names = [n for n in (*LOGIT_ROWS, *GEMM_ROWS, *PEERS)
             if only is None or n in only]
    names = list(dict.fromkeys(names))
    knn_rows = bs.KNN_ROWS if args.full else None
    total_rows = sum(sizes.rows(s) for s in bs.SCORE_SPLITS)
    have_peer = bs._version("pytorch-ood") != "not installed" and not args.no_peers
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-quick-", dir="/tmp"))
    try:
        store_path = str(tmp / "store")
        gen = bs.Runner(tmp).run({"role": "generate", "sizes": vars(sizes), "seed": args.seed,
                                  "stores": {"float32": store_path}}, "generate + store")
        if "error" in gen:
            print(f"data generation failed: {gen['error']}")
            return 1
        warm = str(tmp / "warm_store")
        bs.write_warm_store(warm, args.seed)
        cache_mb = None
        if have_peer:
            from benchmarks import peer_cache
            from featstore import Store

            cache_mb = peer_cache.write_cache(Store.open(store_path), tmp / "torch") / 2**20
        from benchmarks.peer_cache import warm_page_cache

        warm_page_cache([Path(store_path)] + ([tmp / "torch"] if have_peer else []))
        emit(header(args, argv, sizes, gen, cache_mb))
        runs = [{"scorer": n, "store": store_path, "warm_store": warm,
                 "rows": knn_rows if n == "knn" else None} for n in names]
        if "knn" in names:
            runs += [{"scorer": "knn", "store": store_path, "warm_store": warm,
                      "rows": knn_rows, "params": {"index": ix}} for ix in APPROX_INDEXES]
        results = run_child(tmp, "featstore", runs, repeats)
        fs = {r["scorer"]: res for r, res in zip(runs, results, strict=True)
              if not r.get("params")}
        approx = {r["params"]["index"]: res for r, res in zip(runs, results, strict=True)
                  if r.get("params")}
        emit(logit_section(fs))
        emit(gemm_section(fs))
        summary: list[str] = []
        if have_peer:
            peer_runs = [{"scorer": n, "store": store_path, "torch_cache": str(tmp / "torch"),
                          "rows": knn_rows if n == "knn" else peer_rows(n, args.full)}
                         for n in names if n in PEERS]
            peer_res = run_child(tmp, "peers", peer_runs, repeats)
            peers = {r["scorer"]: res for r, res in zip(peer_runs, peer_res, strict=True)}
            section, summary = peer_section(fs, peers, total_rows)
            emit(section)
        else:
            emit(["### 3. pytorch-ood: not run (install the `bench` extra)"])
        emit(sweep_section(*sweep_rows(tmp, args.full, repeats, only)))
        if "knn" in names and have_peer:
            sk = bs.Runner(tmp).run({"role": "sklearn_knn", "store": store_path,
                                     "rows": knn_rows}, "sklearn NearestNeighbors")
            emit(approx_section(approx, sk, total_rows))
        if "knn" in names:
            from benchmarks import bench_ann

            emit(bench_ann.quick_section())
        emit([f"- load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"total wall time {(time.perf_counter() - t_start) / 60:.1f} min", *summary])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
