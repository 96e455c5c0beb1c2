"""Run the test suite under every OpenBLAS kernel family this CPU can run, with 1 and 2 BLAS
threads, and tabulate the outcome (`make test-blas`; `--only tests/scorers` for a subset).

Why: BLAS libraries pick their kernels by CPU (OpenBLAS's DYNAMIC_ARCH build reads cpuid, or
OPENBLAS_CORETYPE when it is set), and a kernel may round a product of a given shape in another
order than the kernel another CPU gets. A test that asserts bit equality between computations of
different shapes can pass on one CPU and fail on the next; this runner replays the suite on each
kernel family the machine can execute, so a change can be checked the way CI's machines differ.

Kernel families tried (each only where the CPU has the instructions it needs, from the flags of
/proc/cpuinfo): Prescott (SSE3), Haswell (AVX2 + FMA), Zen (AVX2 + FMA; OpenBLAS maps it to its
Haswell kernels), SkylakeX (AVX-512 F/BW/DQ/VL), Cooperlake (+ AVX-512 BF16), SapphireRapids
(+ AMX). Which kernel really runs is read back with threadpoolctl in a child process started
with the same environment (its `architecture` field), and printed beside each run.

Output: a Markdown table (core type, the architecture threadpoolctl reports, threads, pytest's
closing line, exit code, wall time) on stdout and in benchmarks/out/suite_across_blas.md; exit 1
when any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine import cpu_model, load_average

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out" / "suite_across_blas.md"

# core type -> the /proc/cpuinfo flags its kernels need
CORE_TYPES: dict[str, tuple[str, ...]] = {
    "Prescott": ("sse3",),
    "Haswell": ("avx2", "fma"),
    "Zen": ("avx2", "fma"),
    "SkylakeX": ("avx512f", "avx512bw", "avx512dq", "avx512vl"),
    "Cooperlake": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"),
    "SapphireRapids": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16",
                       "amx_tile"),
}

_PROBE = ("import json, numpy, scipy.linalg; from threadpoolctl import threadpool_info; "
          "print(json.dumps(sorted({(i.get('architecture') or '?') + '/' + "
          "str(i.get('num_threads')) for i in threadpool_info() "
          "if i.get('internal_api') == 'openblas'})))")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (the first `flags` line of /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def runnable_core_types(flags: set[str]) -> list[str]:
    """The core types of CORE_TYPES whose required flags the CPU has, in table order
    ("pni" is /proc/cpuinfo's name for SSE3)."""
    have = flags | ({"sse3"} if "pni" in flags else set())
    return [name for name, need in CORE_TYPES.items() if all(f in have for f in need)]


def run_env(core_type: str, threads: int) -> dict[str, str]:
    """The environment of one run: the kernel family and the BLAS/OpenMP thread counts."""
    env = dict(os.environ)
    env.pop("OPENBLAS_L2_SIZE", None)
    env.update(OPENBLAS_CORETYPE=core_type, OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    return env


def probe(env: dict[str, str]) -> str:
    """The OpenBLAS architectures/thread counts threadpoolctl reports under `env`."""
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=False)
    try:
        return ", ".join(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return f"probe failed: {out.stderr.strip()[-200:]}"


def closing_line(output: str) -> str:
    """pytest's closing summary line ('1331 passed in 380.1s', '1 failed, ...')."""
    lines = [ln.strip("= ").strip() for ln in output.splitlines()
             if re.search(r"\d+ (passed|failed|error)", ln)]
    return lines[-1] if lines else "no summary line"


def run_suite(paths: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    """(exit code, closing line, wall seconds) of `pytest -q paths` under `env`."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *paths], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        sys.stderr.write("\n".join(failed[:20]) + "\n")
    return proc.returncode, closing_line(proc.stdout), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=["tests"],
                        help="test paths to run (default: the whole suite)")
    parser.add_argument("--threads", default="1,2", help="BLAS thread counts (default 1,2)")
    parser.add_argument("--core-types", default="",
                        help="comma-separated core types (default: every one the CPU can run)")
    args = parser.parse_args(argv)
    flags = cpu_flags()
    runnable = runnable_core_types(flags)
    wanted = [c for c in args.core_types.split(",") if c] or runnable
    refused = [c for c in wanted if c not in runnable]
    if refused:
        print(f"this CPU cannot run core type(s) {', '.join(refused)}", file=sys.stderr)
        return 2
    simd = sorted(f for f in flags if re.fullmatch(r"sse\d?_?\d?|ssse3|avx\w*|fma|amx\w*", f))
    header = [
        "# Test suite across BLAS kernels", "",
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; SIMD flags: {' '.join(simd)}",
        f"Core types this CPU can run: {', '.join(runnable)}; "
        f"load average at start: {load_average()}",
        f"Command: python -m benchmarks.suite_across_blas --only {' '.join(args.only)}", "",
        "| OPENBLAS_CORETYPE | kernel (threadpoolctl) | threads | pytest | exit | wall s |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(header), flush=True)
    rows, worst = [], 0
    for core in wanted:
        for threads in (int(t) for t in args.threads.split(",")):
            env = run_env(core, threads)
            rc, summary, wall = run_suite(args.only, env)
            worst = max(worst, rc)
            row = f"| {core} | {probe(env)} | {threads} | {summary} | {rc} | {wall:.0f} |"
            rows.append(row)
            print(row, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(header + rows) + "\n", encoding="utf-8")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
