"""Where the small GEMM fits' time goes (issue 19, table 2 of bench_quick): the fit / score
CPU s split of fdbd, nci, she and nnguide on the bench_quick store; fdbd's score pass taken
apart into its bare NumPy parts (the reads, the per-row gap + gather of the C x C boundary
table, the per-row norm of x - mu) and the W W^T of its fit; NCI's six per-row float64
passes vs the one its floor counts; NNGuide's FAISS search vs a bare sgemm + partition.

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


def nci_parts(store, names: list[str]) -> list[tuple[str, float]]:
    """NCI's per-row float64 passes over (M, D) as written in scorers/methods/nci.py: the
    float64 copy, x - mu, its norm, the gather W[pred], the row dot, the L1 norm."""
    feats = [store.split(s).read("features") for s in names]
    preds = [store.split(s).read("logits").argmax(axis=1) for s in names]
    w = np.asarray(store.head[0], dtype=np.float64)
    mu = feats[0].mean(axis=0).astype(np.float64)

    def passes() -> None:
        for x, pred in zip(feats, preds, strict=True):
            x64 = x.astype(np.float64)
            centered = x64 - mu
            np.linalg.norm(centered, axis=1)
            np.einsum("nd,nd->n", w[pred], centered)
            np.abs(x64).sum(axis=1)

    def one_pass() -> None:
        for x in feats:
            np.einsum("nd,nd->n", x, x)

    return [("the six per-row float64 passes of its formula (M D each)", fastest(passes)),
            ("one float32 row-dot pass (M D), what its floor counts", fastest(one_pass))]


def she_parts(store, names: list[str]) -> list[tuple[str, float]]:
    """SHE's fit and score in parts: the reads (id/train features, logits, labels; the scored
    features and logits), the argmax of id/train's logits, the class sums by correctness
    (N D float64 adds into the class's row; featstore's Numba kernel, and the bare NumPy
    float64 form: a stable sort by class + np.add.reduceat), the scored row dots."""
    from scorers.kernels.classstats import add_class_sums_by_correctness
    from scorers.kernels.rowfeat import pattern_dot_rows

    train = store.split("id/train")
    x, logits = train.read("features"), train.read("logits")
    labels = np.asarray(train.read("labels"), dtype=np.int64)
    pred = logits.argmax(axis=1)
    classes, dim = logits.shape[1], x.shape[1]
    scored = [(store.split(s).read("features"), store.split(s).read("logits").argmax(axis=1))
              for s in names]
    patterns = np.random.default_rng(0).random((classes, dim))

    def reads() -> None:
        for field in ("features", "logits", "labels"):
            train.read(field)
        for s in names:
            store.split(s).read("features")
            store.split(s).read("logits")

    def kernel_sums() -> None:
        add_class_sums_by_correctness(x, pred, labels, np.zeros((classes, dim)),
                                      np.zeros(classes, np.int64), np.zeros((classes, dim)),
                                      np.zeros(classes, np.int64))

    def numpy_sums() -> None:
        key = labels * 2 + (pred != labels)  # class and correctness in one sort key
        order = np.argsort(key, kind="stable")
        ks = key[order]
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        np.add.reduceat(x[order].astype(np.float64), starts, axis=0)

    def dots() -> None:
        for feats, p in scored:
            pattern_dot_rows(feats, p, patterns, np.empty(len(feats)))

    return [("reads: id/train features + logits + labels, scored features + logits",
             fastest(reads)),
            ("argmax of id/train's logits (N C)", fastest(lambda: logits.argmax(axis=1))),
            ("class sums by correctness, featstore's Numba kernel (N D float64)",
             fastest(kernel_sums)),
            ("class sums by correctness, bare NumPy (sort + float64 reduceat)",
             fastest(numpy_sums)),
            ("scored row dots with the predicted pattern (M D float64, Numba)", fastest(dots))]


def nnguide_parts(store, names: list[str], bank_rows: int, k: int) -> list[tuple[str, float]]:
    """NNGuide's score: FAISS IndexFlatIP search of a (bank_rows, D) bank at K vs the bare
    sgemm + np.partition of the same top-K, on the normalized scored features."""
    import faiss

    from scorers.kernels.iptopk import exact_ip_values
    from scorers.knn_index import l2_normalize

    feats = [l2_normalize(store.split(s).read("features")) for s in names]
    bank = l2_normalize(store.split("id/train").read("features", slice(0, bank_rows)))
    index = faiss.IndexFlatIP(bank.shape[1])
    index.add(bank)

    def search() -> None:
        for q in feats:
            index.search(q, k)

    def bare() -> None:
        for q in feats:
            np.partition(-(q @ bank.T), k - 1, axis=1)[:, :k]

    def own() -> None:
        for q in feats:
            exact_ip_values(bank, q, k)

    def normalize() -> None:
        for s in names:
            l2_normalize(store.split(s).read("features"))

    return [("read + l2_normalize of the scored features", fastest(normalize)),
            (f"FAISS IndexFlatIP search, bank {bank_rows} rows, K = {k}", fastest(search)),
            (f"sgemm with the bank + np.partition at K = {k} (bare)", fastest(bare)),
            ("featstore's search at K >= bank / 10: sgemm + partition + sort of the K "
             "values (exact_ip_values)", fastest(own))]


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
    for label, t in nci_parts(store, names):
        print(f"| nci: {label} | {t:.3f} |")
    for label, t in she_parts(store, names):
        print(f"| she: {label} | {t:.3f} |")
    bank_rows = max(1, int(np.ceil(0.01 * store.split("id/train").num_rows)))
    for label, t in nnguide_parts(store, names, bank_rows, min(100, bank_rows)):
        print(f"| nnguide: {label} | {t:.3f} |")
    for name in SCORERS:
        fit = fastest(lambda n=name: get_scorer(n).fit(store))
        fitted = get_scorer(name).fit(store)
        score = fastest(lambda f=fitted: [f.score(s) for s in splits])
        print(f"| featstore {name}: fit / score | {fit:.3f} / {score:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
