"""Benchmark: stratified-bootstrap intervals of every metric (``scorers.stats``) against
``scipy.stats.bootstrap`` on the same work.

Run ``python -m benchmarks.bench_stats [--demo runs/demo] [--boot 1000] [--scipy-boot 1000]
[--large-scipy-boot 20] [--skip-demo] [--skip-large]``.

(a) demo store: the scores of every scorer ``featstore eval`` runs on the demo store (read
    from its score cache; the demo is built first when ``--demo`` holds none). featstore:
    ``bootstrap_evaluation`` with ``--boot`` resamples: the 8 OOD metrics of every (scorer,
    OOD test split), the group means, ID accuracy, misclassification AUROC, AURC and AUGRC,
    percentile intervals (and, separately timed, BCa). scipy: ``scipy.stats.bootstrap((id,
    ood), statistic, vectorized=False, n_resamples=--scipy-boot, method="percentile")`` per
    (scorer, split), the statistic returning the same 8 metrics (``ood_metrics``).
(b) large: 50,000 ID rows, 4 OOD splits x 10,000 rows, 20 scorers (correlated Gaussian scores,
    rounded to 4 decimals so ties occur, 90% of ID rows correctly classified), the same
    featstore call; scipy on one (scorer, split) pair with ``--large-scipy-boot`` resamples,
    extrapolated linearly to the full work (marked as such).

Wall seconds and CPU seconds (``time.process_time``: every thread of the process) are both
reported, with the load average, since the machine is shared. Numba compiles (or loads its
cache) in an untimed warm-up. Output is Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np
import scipy
from scipy import stats as sps

from benchmarks.machine import cpu_model, load_average, mem_total_gib
from scorers.metrics import OOD_METRIC_NAMES, ood_metrics
from scorers.stats import BootstrapSpec, bootstrap_evaluation


def _clock(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _statistic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = ood_metrics(x, y)
    return np.array([d[k] for k in OOD_METRIC_NAMES])


def scipy_side(scores: dict, id_name: str, pairs: list[tuple[str, str]],
               n_boot: int) -> tuple[float, float]:
    """(wall, CPU) seconds of scipy.stats.bootstrap over the (method, split) pairs."""
    def work() -> None:
        for m, s in pairs:
            sps.bootstrap((scores[m][id_name], scores[m][s]), _statistic, vectorized=False,
                          n_resamples=n_boot, method="percentile",
                          rng=np.random.default_rng(0))

    _, wall, cpu = _clock(work)
    return wall, cpu


def warm_up() -> None:
    rng = np.random.default_rng(0)
    sc = {"m": {"id": rng.normal(size=50), "o": rng.normal(size=40)}}
    for method in ("percentile", "bca"):
        bootstrap_evaluation(BootstrapSpec(0.95, 20, method, 0), "id", sc, {"g": ["o"]},
                             rng.random(50) < 0.8, np.ones(50, bool))


def demo_scores(demo: Path) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    from featstore import Store
    from scorers.evaluate import evaluate
    from scorers.uncertainty import id_correctness, split_groups

    if not (demo / "store" / "store.json").is_file():
        from featstore.workflows.demo.pipeline import run_demo

        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        run_demo(demo)
    st = Store.open(demo / "store")
    scores: dict = {}
    result = evaluate(st, params={"nnguide": {"alpha": 1.0}}, keep_scores=scores)
    scores = {m: scores[m] for m in result["methods"]}
    groups = split_groups(st, result["ood_splits"])
    split = st.split("id/test")
    correct, labelled = id_correctness(split.logits, split.labels)
    return scores, groups, correct, labelled


def large_scores(seed: int = 0) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_id, n_ood, k = 50_000, 10_000, 20
    base_id = rng.normal(1.0, 1.0, n_id)
    base_ood = [rng.normal(0.2 * j, 1.0, n_ood) for j in range(4)]
    scores = {}
    for m in range(k):
        noise = 0.3 + 0.05 * m
        sc = {"id/test": np.round(base_id + rng.normal(0, noise, n_id), 4)}
        for j in range(4):
            sc[f"ood/g{j // 2}/s{j}"] = np.round(base_ood[j] + rng.normal(0, noise, n_ood), 4)
        scores[f"scorer{m:02d}"] = sc
    groups = {"g0": ["ood/g0/s0", "ood/g0/s1"], "g1": ["ood/g1/s2", "ood/g1/s3"]}
    correct = rng.random(n_id) < 0.9
    return scores, groups, correct, np.ones(n_id, bool)


def run_case(title: str, data: tuple, n_boot: int, scipy_boot: int, scipy_pairs: int | None,
             bca: bool) -> list[str]:
    scores, groups, correct, labelled = data
    ood = [s for names in groups.values() for s in names]
    n_rows = len(next(iter(scores.values()))["id/test"]) + sum(
        len(next(iter(scores.values()))[s]) for s in ood)
    spec = BootstrapSpec(0.95, n_boot, "percentile", 0)
    load0 = load_average()
    _, wall, cpu = _clock(lambda: bootstrap_evaluation(spec, "id/test", scores, groups, correct,
                                                      labelled))
    lines = [f"### {title}", "",
             f"- data: {len(scores)} scorers; id/test {len(correct):,} rows; {len(ood)} OOD "
             f"test splits ({n_rows - len(correct):,} rows); {len(groups)} groups",
             f"- load average before: {load0}; after: {load_average()}", "",
             "| side | resamples | work | wall s | CPU s | x scipy (CPU s) |",
             "|---|---:|---|---:|---:|---:|"]
    rows = [("featstore `bootstrap_evaluation`, percentile", n_boot,
             f"{len(scores)} x {len(ood)} pairs, all metrics + groups + ID side", wall, cpu)]
    if bca:
        bspec = BootstrapSpec(0.95, n_boot, "bca", 0)
        _, w2, c2 = _clock(lambda: bootstrap_evaluation(bspec, "id/test", scores, groups,
                                                        correct, labelled))
        rows.append(("featstore, BCa (+ exact jackknife)", n_boot, "same", w2, c2))
    pairs = [(m, s) for m in scores for s in ood]
    todo = pairs if scipy_pairs is None else pairs[:scipy_pairs]
    w_sc, c_sc = scipy_side(scores, "id/test", todo, scipy_boot)
    scale = (len(pairs) / len(todo)) * (n_boot / scipy_boot)
    label = "measured" if scale == 1 else (f"measured {len(todo)} pair(s) x {scipy_boot} "
                                           f"resamples ({c_sc:.2f} CPU s), x{scale:g} "
                                           "extrapolated")
    for name, b, work, w, c in rows:
        lines.append(f"| {name} | {b} | {work} | {w:.2f} | {c:.2f} | "
                     f"{c_sc * scale / c:.1f}x |")
    lines.append(f"| `scipy.stats.bootstrap` per pair (8 OOD metrics only) | {n_boot} | "
                 f"{label} | {w_sc * scale:.1f} | {c_sc * scale:.1f} | 1x |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"))
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--scipy-boot", type=int, default=1000)
    ap.add_argument("--large-scipy-boot", type=int, default=20)
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--skip-large", action="store_true")
    args = ap.parse_args(argv)
    warm_up()
    out = ["## Bootstrap intervals: featstore vs scipy.stats.bootstrap", "",
           f"- date: {_dt.date.today()}",
           f"- command: `python -m benchmarks.bench_stats {' '.join(argv or sys.argv[1:])}`",
           f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
           f"{platform.platform()}",
           f"- software: Python {platform.python_version()}, NumPy {np.__version__}, Numba "
           f"{numba.__version__}, SciPy {scipy.__version__}", ""]
    if not args.skip_demo:
        out += run_case("(a) demo store, every default scorer", demo_scores(args.demo),
                        args.boot, args.scipy_boot, None, bca=True)
    if not args.skip_large:
        out += run_case("(b) 50k ID + 4 x 10k OOD rows x 20 scorers", large_scores(),
                        args.boot, args.large_scipy_boot, 1, bca=False)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
