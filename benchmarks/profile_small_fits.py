"""Where the small GEMM fits' time goes (issue 19, table 2 of bench_quick): the fit / score
CPU s split of fdbd, nci, she and nnguide on the bench_quick store, and fdbd's score pass
taken apart into its bare NumPy parts (the reads, the per-row gap + gather of the C x C
boundary table, the per-row norm of x - mu) and the W W^T of its fit.

`python -m benchmarks.profile_small_fits [--dir DIR]` generates the store of
`benchmarks.bench_scorers` at its QUICK sizes (seed 0) in DIR (default: a new temporary
directory) unless it is there, then prints the fastest of 3 runs of each part, in CPU s.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import bench_scorers as bs

SCORERS = ("fdbd", "nci", "she", "nnguide")


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def fastest(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        c0 = cpu_s()
        fn()
        times.append(cpu_s() - c0)
    return min(times)


def fdbd_parts(store, names: list[str]) -> list[tuple[str, float]]:
    feats = [store.split(s).read("features") for s in names]
    logits = [store.split(s).read("logits") for s in names]
    w = np.asarray(store.head[0], dtype=np.float64)
    table = np.random.default_rng(0).random((w.shape[0], w.shape[0]))  # 1/||w_c - w_j|| shape
    mu = feats[0].mean(axis=0).astype(np.float64)

    def reads() -> None:
        for s in names:
            store.split(s).read("features")
            store.split(s).read("logits")

    def gap_gather() -> None:
        for lg in logits:
            l64 = lg.astype(np.float64)
            pred = l64.argmax(axis=1)
            gap = np.abs(l64 - l64[np.arange(len(pred)), pred][:, None])
            np.einsum("nc,nc->n", gap, table[pred])

    def norms() -> None:
        for x in feats:
            np.linalg.norm(x.astype(np.float64) - mu, axis=1)

    w32 = w.astype(np.float32)
    return [("reads of features + logits of the scored splits (h5py)", fastest(reads)),
            ("gap + gather of the boundary-table row per scored row (M C, float64)",
             fastest(gap_gather)),
            ("norm of x - mu per scored row (M D, float64)", fastest(norms)),
            ("W W^T (C^2 D), float64", fastest(lambda: w @ w.T)),
            ("W W^T (C^2 D), float32", fastest(lambda: w32 @ w32.T))]


def main(argv: list[str] | None = None) -> int:
    from featstore import Store
    from scorers import get_scorer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="featstore-small-fits-"))
    store_path = work / "store"
    if not store_path.exists():
        bs.Runner(work).run({"role": "generate", "sizes": vars(bs.QUICK), "seed": 0,
                             "stores": {"float32": str(store_path)}}, "generate + store")
    store = Store.open(str(store_path))
    names = bs._scored_splits(None)
    splits = [store.split(s) for s in names]
    with open("/proc/loadavg") as f:
        print(f"store {store_path}; load average {' '.join(f.read().split()[:3])}")
    print("| part | CPU s |\n|---|---:|")
    for label, t in fdbd_parts(store, names):
        print(f"| fdbd: {label} | {t:.3f} |")
    for name in SCORERS:
        fit = fastest(lambda n=name: get_scorer(n).fit(store))
        fitted = get_scorer(name).fit(store)
        score = fastest(lambda f=fitted: [f.score(s) for s in splits])
        print(f"| featstore {name}: fit / score | {fit:.3f} / {score:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
