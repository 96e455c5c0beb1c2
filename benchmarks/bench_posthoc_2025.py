"""Benchmark: fit + score time of the post-hoc scorers of issue 44 (part a: mds_pp, rmds_pp,
vra, relation, gmm, openmax, neco) against the fastest older scorer of each one's family,
each pair measured back to back in this process.

Run ``python -m benchmarks.bench_posthoc_2025 --demo STORE`` (a `featstore demo` store) and/or
``--large`` (a generated store: id/train 100k x D = 2048, C = 1000 as
`benchmarks.bench_scorers.generate`, with `--score-rows` rows (default 1000) in each of
id/test and ood/near/novel; gmm and its partner mds on a second store of the same shape with
C = 10 classes, because gmm's C per-class D x D covariances at C = 1000 need 62.5 GiB and are
refused). ``--only gmm,mds`` restricts the pairs. Prints one Markdown table per store.

Pairs (new -> older partner of its family): mds_pp -> mds, rmds_pp -> rmds, vra -> react,
relation -> knn (both: the whole id/train bank against every scored row), gmm -> mds, openmax
-> kl_matching (fitted logit scorers), neco -> vim (principal subspace of id/train). Each
scorer: a warm-up fit + score on a tiny store (Numba compiled or loaded, imports done), then
`fit(store)` and `score` of every non-train split (demo: id/test, id/val and every OOD split;
large: the two scored splits), timed as wall and CPU seconds (user + system, all threads),
with the 1-minute load average at the end (`--old-first`: the older scorer of each pair
first, to see the order's page-cache effect). Defaults throughout (scorers.adapt clamps
defaults a store makes invalid, e.g. neco's dim on the demo's D).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings
from typing import Any

from benchmarks import bench_scorers
from benchmarks.machine import cpu_model, load_average, mem_total_gib

PAIRS = (("mds_pp", "mds"), ("rmds_pp", "rmds"), ("vra", "react"), ("relation", "knn"),
         ("gmm", "mds"), ("openmax", "kl_matching"), ("neco", "vim"))


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _warm(name: str, tiny: Any) -> None:
    from scorers import get_scorer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = get_scorer(name).fit(tiny)
        scorer.score(tiny.split("id/test"))


def measure(name: str, store: Any, splits: list[str]) -> dict[str, float]:
    """Fit + score of every split in `splits`, wall and CPU seconds."""
    from scorers import get_scorer

    w0, c0 = time.perf_counter(), _cpu_s()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scorer = get_scorer(name).fit(store)
    w1 = time.perf_counter()
    for split in splits:
        scorer.score(store.split(split))
    w2, c2 = time.perf_counter(), _cpu_s()
    return {"fit_s": w1 - w0, "score_s": w2 - w1, "wall_s": w2 - w0, "cpu_s": c2 - c0,
            "load": os.getloadavg()[0]}


HEADER = ["| new | fit + score s (CPU s) | older | fit + score s (CPU s) | ratio wall (CPU) "
          "| load |", "|---|---|---|---|---|---|"]


def run_pairs(store: Any, splits: list[str], tiny: Any, pairs: list[tuple[str, str]],
              old_first: bool = False) -> list[str]:
    """One table row per (new, older) pair, measured back to back (the new one first, or
    the older one with `old_first`: the second of a pair reads a page cache the first
    warmed)."""
    rows = []
    for new, old in pairs:
        res = {}
        for name in ((old, new) if old_first else (new, old)):
            _warm(name, tiny)
            res[name] = measure(name, store, splits)
            print(f"  {name}: {res[name]}", file=sys.stderr, flush=True)
        a, b = res[new], res[old]
        rows.append(f"| {new} | {a['wall_s']:.2f} ({a['cpu_s']:.2f}) | {old} | "
                    f"{b['wall_s']:.2f} ({b['cpu_s']:.2f}) | {a['wall_s'] / b['wall_s']:.2f} "
                    f"({a['cpu_s'] / b['cpu_s']:.2f}) | {max(a['load'], b['load']):.1f} |")
    return rows


def large_store(path: str, classes: int, rows: int, seed: int) -> Any:
    """bench_scorers' generator at id/train 100k, D = 2048, `classes` classes."""
    from featstore import Store

    old = bench_scorers.NUM_CLASSES
    bench_scorers.NUM_CLASSES = classes
    try:
        data = bench_scorers.generate(bench_scorers.Sizes(train=100_000, val=rows, test=rows,
                                                          ood=rows), seed)
    finally:
        bench_scorers.NUM_CLASSES = old
    splits = {k: v for k, v in data["splits"].items() if k in ("id/train", "id/val",
                                                                 "id/test", "ood/near/novel")}
    Store.from_arrays(path, head=data["head"], splits=splits)
    return Store.open(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", help="a featstore demo store")
    ap.add_argument("--large", action="store_true", help="the 100k x 2048 stores")
    ap.add_argument("--score-rows", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma list of new scorers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--old-first", action="store_true",
                    help="measure the older scorer of each pair first")
    args = ap.parse_args(argv)
    from featstore import Store

    only = {s for s in args.only.split(",") if s}
    pairs = [p for p in PAIRS if not only or p[0] in only]
    print(f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, {mem_total_gib()}; load at start "
          f"{load_average()}\n")
    with tempfile.TemporaryDirectory(prefix="bench_posthoc_") as tmp:
        bench_scorers.write_warm_store(f"{tmp}/tiny", args.seed)
        tiny = Store.open(f"{tmp}/tiny")
        if args.demo:
            demo = Store.open(args.demo)
            splits = [s for s in demo.splits() if s != "id/train"]
            print(f"### Demo store ({args.demo}: scored splits {', '.join(splits)})\n")
            print("\n".join(HEADER + run_pairs(demo, splits, tiny, pairs, args.old_first)) + "\n")
        if args.large:
            splits = ["id/test", "ood/near/novel"]
            rows = []
            wide_pairs = [p for p in pairs if p[0] != "gmm"]
            if wide_pairs:
                wide = large_store(f"{tmp}/c1000", bench_scorers.NUM_CLASSES,
                                   args.score_rows, args.seed)
                rows += run_pairs(wide, splits, tiny, wide_pairs, args.old_first)
                del wide
            if len(wide_pairs) < len(pairs):
                few = large_store(f"{tmp}/c10", 10, args.score_rows, args.seed)
                rows += run_pairs(few, splits, tiny, [p for p in pairs if p[0] == "gmm"],
                                  args.old_first)
            print(f"### id/train 100k x 2048 (C = 1000; gmm and its mds: C = 10), "
                  f"{args.score_rows} rows each of {', '.join(splits)}\n")
            print("\n".join(HEADER + rows) + "\n")
        print(f"load at end {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
