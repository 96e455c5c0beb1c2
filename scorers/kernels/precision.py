"""The `precision` of the GEMM-bound scorers' dense products: float32
products with float64 accumulation, or the all-float64 path.

`Operand(matrix, precision)` is a fitted right-hand factor of the scoring products (ViM /
Residual's eigenbasis, MDS's whitening matrix): it keeps the float64 matrix and, for
"float32", its float32 copy (made once at fit). `matmul(x, operand)` multiplies a block of
rows (float64, already shifted) by it: "float32" rounds the rows to float32 and runs float32
BLAS (sgemm); the float32 product is returned as float64, and every sum over its columns
or rows (squared norms, segment sums, means) is float64 after it.

What stays float64 whatever the precision: the D x D covariances (Gram sums of id/train) and
their eigendecompositions, pinv(W), the class terms' values (MDS / RMDS prune the classes
with float32 products and decide with float64 distances: `scorers.kernels.minsqdist`). The
covariance was measured in float32 too (float32 Gram of each chunk, its mean taken out in
float64, summed in float64): on the D = 1040 fidelity store ViM's scores then moved by 2.8e-5
relative (past the 1e-5 bar; the store's eigengap at dim = 512 is 1e-3 of the
eigenvalue there and 2e-7 of the largest, so the float32 rounding of the sums rotates the
subspace), and 64-row Gram blocks, accurate enough (3.5e-6), ran several times slower than
one float64 product. So the Gram is float64 BLAS (dsyrk) per chunk,
summed in float64 (`scorers.kernels.gram`).

Determinism: row blocks are fixed by shapes (the scorer's chunks and `map_rows` blocks), so
each precision gives the same scores bit for bit on the same inputs.
"""

from __future__ import annotations

import numpy as np

from featstore.errors import UsageError

PRECISIONS = ("float32", "float64")
# the default of vim, residual and mds (docs/DESIGN.md section 5): float32. It meets the 1e-5 bar
# against the float64 reference (scores within 1e-5 relative,
# AUROC within 0.01: tests/test_precision.py). A grid's float32 projection onto
# V[:, min(dims):] rounds differently from a single dim's onto V[:, dim:] (~1e-7 relative:
# BLAS panels start at different columns), so in float32 score_grid equals separate fits to
# GRID_RTOL, and bit for bit only in "float64". rmds has no float32 path: its difference of
# two distances moved by 2.3e-5.
DEFAULT_PRECISION = "float32"
# how far a float32 score_grid may sit from separate float32 fits, as a fraction of max |score|:
# measured ~1e-7 (float32 rounding of one projection panel vs another), bounded here at 1e-6,
# ten times below the 1e-5 fidelity bar.
GRID_RTOL = 1e-6


def check_precision(scorer_name: str, value: object) -> None:
    """UsageError unless `value` is one of PRECISIONS."""
    if value not in PRECISIONS:
        raise UsageError(f"scorer {scorer_name!r}: precision={value!r} is not one of "
                         f"{', '.join(PRECISIONS)}")


class Operand:
    """A fitted right-hand factor of the scoring products (a basis, a whitening matrix)."""

    def __init__(self, matrix: np.ndarray, precision: str):
        """`matrix` (D, r) float64; `precision` one of PRECISIONS."""
        self.matrix = matrix
        self.precision = precision
        self.single = (np.ascontiguousarray(matrix, dtype=np.float32)
                       if precision == "float32" else None)

    def columns(self, lo: int, hi: int | None = None) -> Operand:
        """The operand of columns lo..hi (views, no copy of the float32 matrix)."""
        part = Operand.__new__(Operand)
        part.matrix = self.matrix[:, lo:hi]
        part.precision = self.precision
        part.single = None if self.single is None else self.single[:, lo:hi]
        return part


def matmul(x: np.ndarray, operand: Operand) -> np.ndarray:
    """x @ operand.matrix as float64; in "float32", float32(x) @ the float32 copy."""
    if operand.single is None:
        return x @ operand.matrix
    return (x.astype(np.float32) @ operand.single).astype(np.float64)
