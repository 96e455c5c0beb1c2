"""Benchmark: ``scorers.metrics.ood_metrics`` against the scikit-learn functions it replaces.

Run ``python -m benchmarks.bench_metrics [--n 10000000] [--repeat 3] [--seed 0]``.

Data: ``n // 2`` ID scores ~ N(1, 1) and ``n - n // 2`` OOD scores ~ N(0, 1), float64, fixed
seed. ``ood_metrics`` is called once on a small input first (Numba compile / cache load), then
timed. The scikit-learn side computes the same eight numbers: ``roc_auc_score``,
``roc_curve(drop_intermediate=False)`` twice (fpr95 and detection error with ID positive,
fpr95_ood with OOD positive on -score), ``precision_recall_curve`` + ``auc`` twice and
``average_precision_score`` twice. Building its concatenated score/label vectors is left out
of its time. Each side's time is the best of ``--repeat`` runs; its peak memory is measured
with ``tracemalloc`` in a separate run (NumPy reports its buffers to tracemalloc) and counts
what the call allocates beyond its inputs. The values must agree to 1e-9 relative (1e-9
absolute, in percent, for zeros) or the script exits with status 1. Output is Markdown.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable

import numba
import numpy as np
import sklearn
from sklearn.metrics import (
    auc,
    average_precision_score,
    precision_recall_curve,
    roc_auc_score,
    roc_curve,
)

from benchmarks.machine import cpu_model, mem_total_gib
from scorers.metrics import OOD_METRIC_NAMES, ood_metrics

REL = 1e-9
ABS = 1e-9


def sklearn_metrics(s: np.ndarray, y: np.ndarray, neg_s: np.ndarray) -> dict[str, float]:
    """The eight metrics in percent from scikit-learn (``s``: scores, ``y``: 1 = ID)."""
    y_ood = 1 - y
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    fpr95 = fpr[np.argmax(tpr >= 0.95)]
    det = np.min(0.5 * (1.0 - tpr) + 0.5 * fpr)
    del fpr, tpr
    fpr_o, tpr_o, _ = roc_curve(y_ood, neg_s, drop_intermediate=False)
    fpr95_ood = fpr_o[np.argmax(tpr_o >= 0.95)]
    del fpr_o, tpr_o
    p, r, _ = precision_recall_curve(y, s)
    aupr_in = auc(r, p)
    del p, r
    p, r, _ = precision_recall_curve(y_ood, neg_s)
    aupr_out = auc(r, p)
    del p, r
    out = {
        "auroc": roc_auc_score(y, s),
        "aupr_in": aupr_in,
        "aupr_out": aupr_out,
        "ap_in": average_precision_score(y, s),
        "ap_out": average_precision_score(y_ood, neg_s),
        "fpr95": fpr95,
        "fpr95_ood": fpr95_ood,
        "detection_error": det,
    }
    return {k: 100.0 * float(out[k]) for k in OOD_METRIC_NAMES}


def best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Best wall time over ``repeat`` calls and the last result."""
    best = float("inf")
    res: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return best, res


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated (and traced) during ``fn()`` beyond what was live before it."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base






def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="total scores (ID + OOD)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side (best is kept)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n < 2 or args.repeat < 1:
        ap.error("need --n >= 2 and --repeat >= 1")

    rng = np.random.default_rng(args.seed)
    n_id = args.n // 2
    id_s = rng.normal(1.0, 1.0, n_id)
    ood_s = rng.normal(0.0, 1.0, args.n - n_id)
    # scikit-learn's inputs, built outside its timing.
    s = np.concatenate([id_s, ood_s])
    y = np.concatenate([np.ones(n_id, dtype=np.int64), np.zeros(ood_s.size, dtype=np.int64)])
    neg_s = -s

    ood_metrics(id_s[:1000], ood_s[:1000])  # warm-up: Numba compile or cache load

    t_ours, ours = best_time(lambda: ood_metrics(id_s, ood_s), args.repeat)
    t_skl, ref = best_time(lambda: sklearn_metrics(s, y, neg_s), args.repeat)
    mem_ours = peak_bytes(lambda: ood_metrics(id_s, ood_s))
    mem_skl = peak_bytes(lambda: sklearn_metrics(s, y, neg_s))

    assert isinstance(ours, dict) and isinstance(ref, dict)
    worst = 0.0
    bad = []
    for k in OOD_METRIC_NAMES:
        diff = abs(ours[k] - ref[k])
        worst = max(worst, diff / max(abs(ref[k]), 1e-300))
        if diff > max(REL * abs(ref[k]), ABS):
            bad.append(f"{k}: featstore {ours[k]!r} vs sklearn {ref[k]!r}")

    input_mib = args.n * 8 / 2**20
    cmd = "python -m benchmarks.bench_metrics" + (" " + " ".join(sys.argv[1:])).rstrip()
    print("### OOD metrics: featstore `ood_metrics` vs scikit-learn")
    print()
    print(f"- date: {_dt.date.today().isoformat()}")
    print(f"- command: `{cmd}`")
    print(
        f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
        f"{platform.platform()}"
    )
    print(
        f"- software: Python {platform.python_version()}, NumPy {np.__version__}, "
        f"Numba {numba.__version__}, scikit-learn {sklearn.__version__}"
    )
    print(
        f"- data: n = {args.n:,} float64 scores ({n_id:,} ID ~ N(1,1), "
        f"{args.n - n_id:,} OOD ~ N(0,1)), seed {args.seed}; input {input_mib:.0f} MiB; "
        f"best of {args.repeat}"
    )
    print(
        f"- values: all 8 metrics agree, max relative difference {worst:.1e}"
        if not bad
        else "- values: MISMATCH: " + "; ".join(bad)
    )
    print()
    print("| implementation | seconds | speed-up | peak extra memory (MiB) | x input |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| featstore `ood_metrics` (2 sorts + 1 Numba pass) | {t_ours:.3f} | "
        f"{t_skl / t_ours:.1f}x | {mem_ours / 2**20:.0f} | {mem_ours / 2**20 / input_mib:.2f} |"
    )
    print(
        f"| scikit-learn (roc_auc_score, 2 roc_curve, 2 PR curve+auc, 2 AP) | {t_skl:.3f} | "
        f"1.0x | {mem_skl / 2**20:.0f} | {mem_skl / 2**20 / input_mib:.2f} |"
    )
    print()
    print("| metric | featstore | scikit-learn |")
    print("|---|---:|---:|")
    for k in OOD_METRIC_NAMES:
        print(f"| {k} | {ours[k]:.6f} | {ref[k]:.6f} |")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
