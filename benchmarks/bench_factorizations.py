"""The D x D factorizations of the principal-subspace / Mahalanobis fits, float64 (featstore's
trust bar) vs float32 (pytorch-ood 0.4's ViM), on this machine's BLAS/LAPACK.

`python -m benchmarks.bench_factorizations` prints CPU s and wall s of: NumPy eigh (LAPACK
syevd) of a 2048 x 2048 covariance in float64; SciPy eigh with the MRRR driver (evr), full and
for a subset of eigenvectors (what ViM needs at dim = 1000 and its default grid); eigvalsh;
torch.linalg.eigh of the same matrix in float32; the thin SVD of a 1000 x 2048 head W in
float64 and torch.linalg.pinv of it in float32. Each call runs once to warm up, then is timed.
Then the float64 Gram sum of 10,000 x 2048 rows by read chunk: NumPy `acc += x.T @ x` vs
`scorers.kernels.gram.GramSum` (dsyrk).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import numpy as np
import scipy.linalg

D, ROWS, CLASSES = 2048, 4000, 1000


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def timed(name: str, fn: Callable[[], object]) -> None:
    fn()
    w0, c0 = time.perf_counter(), cpu_s()
    fn()
    print(f"| {name} | {cpu_s() - c0:.2f} | {time.perf_counter() - w0:.2f} |", flush=True)


def main() -> int:
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, D)) * (1.0 / np.arange(1, D + 1)) ** 0.5  # decaying spectrum
    cov = x.T @ x / ROWS
    w = rng.standard_normal((CLASSES, D))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"covariance {D} x {D} (float64), head W {CLASSES} x {D}; load average {load}")
    print("| factorization | CPU s | wall s |\n|---|---:|---:|")
    timed("numpy eigh float64 (syevd)", lambda: np.linalg.eigh(cov))
    timed("scipy eigh float64, evr, all", lambda: scipy.linalg.eigh(cov, driver="evr"))
    timed("scipy eigh float64, evr, 1048 vectors",
          lambda: scipy.linalg.eigh(cov, driver="evr", subset_by_index=[0, 1047]))
    timed("numpy eigvalsh float64", lambda: np.linalg.eigvalsh(cov))
    cov32 = torch.from_numpy(cov.astype(np.float32))
    timed("torch eigh float32", lambda: torch.linalg.eigh(cov32))
    timed("numpy thin SVD of W float64", lambda: np.linalg.svd(w, full_matrices=False))
    w32 = torch.from_numpy(w.astype(np.float32))
    timed("torch pinv of W float32", lambda: torch.linalg.pinv(w32))
    gram_sums()
    return 0


def gram_sums(rows: int = 10_000) -> None:
    """The id/train Gram sum of the fits (float64) over chunks of the scorers' read size:
    `acc += x.T @ x` per chunk against `scorers.kernels.gram.GramSum` (one dsyrk per chunk
    into one matrix), and one product of all rows at once."""
    from scorers.kernels.gram import GramSum

    x32 = np.random.default_rng(1).standard_normal((rows, D)).astype(np.float32)

    def numpy_sum(chunk: int) -> None:
        acc = np.zeros((D, D))
        for lo in range(0, rows, chunk):
            x = x32[lo:lo + chunk].astype(np.float64)
            acc += x.T @ x

    def dsyrk_sum(chunk: int) -> None:
        gram = GramSum(D)
        for lo in range(0, rows, chunk):
            gram.add(x32[lo:lo + chunk].astype(np.float64))
        gram.matrix(rows)

    print(f"\nGram sum of {rows} x {D} float32 rows in float64, by read chunk")
    print("| chunk rows | acc += x.T @ x CPU s | GramSum (dsyrk) CPU s |\n|---:|---:|---:|")
    dsyrk_sum(rows)  # warm-up: loads the Numba mirror kernel
    for chunk in (512, 2048, rows):
        c0 = cpu_s()
        numpy_sum(chunk)
        c1 = cpu_s()
        dsyrk_sum(chunk)
        print(f"| {chunk} | {c1 - c0:.2f} | {cpu_s() - c1:.2f} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
