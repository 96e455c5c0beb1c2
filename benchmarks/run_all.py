"""`make bench`: run every benchmark at its default (full) size in one go and collect their
Markdown in benchmarks/out/latest.md (figures to copy into the topic pages under
benchmarks/results/ with the date, command and commit); bench_scaling's plots go to
benchmarks/plots/.

Run ``python -m benchmarks.run_all [--only bench_scaling,bench_metrics,...]``.

Each benchmark runs as ``python -m benchmarks.NAME ARGS`` in a child process, one after the
other (never two at once: they time themselves), so all ratios in one section come from one
run. Their Markdown (stdout) is collected; their progress (stderr) goes straight to the
terminal. latest.md is rewritten after each benchmark, with its wall time, so a failure or an
interrupt late in the (hours-long) run keeps the sections already done. See
benchmarks/README.md for how long each takes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

OUT = "benchmarks/out"

# name -> extra arguments (the default, full sizes everywhere), in run order: bench_gscore
# builds the mini-Gbench store that bench_gscore_idsize reads.
BENCHMARKS: dict[str, list[str]] = {
    "bench_metrics": [],
    "bench_stats": [],
    "bench_store_layout": [],
    "bench_trust": [],
    "bench_extract": [],
    "bench_predict": [],
    "bench_startup": [],
    "bench_scorers": [],
    "bench_factorizations": [],
    "profile_small_fits": [],
    "bench_sweep": [],
    "bench_ann": [],
    "bench_ann_scale": [],  # 100k x 2048; the 1M table: --rows 1000000 (knn-ann.md)
    "bench_views": ["--rows", "100000", "--dim", "2048"],  # issue 44's size (posthoc-2025.md)
    "bench_gscore": [],
    "bench_gscore_cv": ["--store", f"{OUT}/gbench/store"],
    "bench_gscore_idsize": ["--store", f"{OUT}/gbench/store", "--large-out", f"{OUT}/gbench_bigid"],
    "bench_demo_head": ["--demo", f"{OUT}/demo"],
    "bench_posthoc_2025": ["--demo", f"{OUT}/demo/store", "--large"],
    "ten_methods_demo": [f"{OUT}/ten_methods", "6", "3"],
    "bench_threads": ["factor"],
    "bench_peer_threads": [],
    "bench_scaling": ["--peers"],
    "bench_quick": ["--full"],
}

# scripts of benchmarks/ that `make bench` does not run, and why
EXCLUDED: dict[str, str] = {
    "bench_posthoc_2025b": "needs a store made by `featstore demo` (its --demo STORE) and 1.5 GB "
                           "of disk for --large DIR: run it by hand after `make demo`",
    "suite_across_blas": "runs the test suite under each OpenBLAS kernel family, a correctness "
                         "check rather than a timing: `make test-blas`",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="",
                    help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.only.split(",") if s.strip()] or list(BENCHMARKS)
    if unknown := [n for n in names if n not in BENCHMARKS]:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)}")
    out_dir = Path(__file__).parent / "out"
    out_dir.mkdir(exist_ok=True)
    latest = out_dir / "latest.md"
    sections, failed = [], []
    for name in names:
        cmd = [sys.executable, "-m", f"benchmarks.{name}", *BENCHMARKS[name]]
        print(f"== benchmarks.{name} {' '.join(BENCHMARKS[name])}".rstrip(), flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        minutes = (time.perf_counter() - t0) / 60
        print(proc.stdout, flush=True)
        status = "" if proc.returncode == 0 else f", FAILED (exit status {proc.returncode})"
        if proc.returncode:
            failed.append(name)
        sections.append(f"{proc.stdout.rstrip()}\n\n_benchmarks.{name}: {minutes:.1f} min wall"
                        f"{status}_\n")
        latest.write_text("\n\n".join(sections))
        print(f"== benchmarks.{name}: {minutes:.1f} min{status}", flush=True)
    print(f"wrote {latest}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
