"""CFOOD: the k-NN-radius fraction of a reference set (OpenOOD v1.5
`openood/postprocessors/cfood_postprocessor.py` and `configs/postprocessors/cfood.yml` at
3c35632, added in commit 1aac049 of 2025-11-25; neither cites a paper).

Formula as implemented (float64), OpenOOD's computation, with f the penultimate feature,
normalized as u = f / (||f||_2 + 1e-10):

    fit: ref = u of a seeded random subset of n = int(alpha N) id/train rows (all N when
         alpha = 1); kval = [linspace(0.001, 0.1, 100), linspace(0.105, 0.5, 81),
         linspace(0.51, 0.99, 49)], kpos = int(kval n - 1), the positions where kpos
         increases kept (J of them); R[r, j] = the (kpos_j + 1)-th smallest squared distance
         from ref_r to the reference points (index 0 is ref_r itself)
    score of u: d_r = ||u - ref_r||^2,  count_j = #{r: R[r, j] >= d_r} / n,
         kappa = kval_j for the first j with count_j >= k (1.0 when none)
         score = -kappa

Higher is more in-distribution (a query inside the reference set's tight neighbourhoods is
reached by small radii). Defaults: OpenOOD's cfood.yml (alpha 0.1, k 0.01); default sweep
grid: its sweep list, alpha in {0.1, 0.5, 1} x k in {0.001, 0.005, 0.01, 0.05}. The subset is
the first n of `numpy.random.default_rng(seed).permutation(N)` (OpenOOD draws
torch.randperm unseeded), so the subsets of a grid's alphas are nested and a seed fixes the
scores. Squared distances are |u|^2 + |r|^2 - 2 u.r in float64 (OpenOOD sums (u - r)^2 in
float32): a kappa moves only where a distance ties a radius to ~1e-15.

Cost (why it is blocked, and what it costs): the fit is n x n distances (n^2 D flops) and a
sort of each reference row; a query costs n D flops plus n binary searches over J
(`scorers.kernels.knnfrac`), in row blocks, so no N_test x n matrix exists whole. The
reference set is held as n x D float64 (alpha 0.1 of 1.28M x 2048: 2.1 GB). A grid shares
each alpha's fit and each block's distances; its k values are thresholds on one histogram.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.knnfrac import first_fraction_index, sq_distances
from ..paper import Paper

NORM_EPS = 1e-10
_ROW_BLOCK = 256


def kappa_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(kval, kpos) of OpenOOD's setup for a reference set of n points."""
    kval = np.concatenate((np.linspace(0.001, 0.1, 100), np.linspace(0.105, 0.5, 81),
                           np.linspace(0.51, 0.99, 49)))
    kpos = np.array(kval * n - 1, dtype=int)
    keep = np.concatenate(([True], kpos[:-1] < kpos[1:]))
    return kval[keep], kpos[keep]


@dataclass
class Reference:
    ref: np.ndarray       # (n, D) float64, normalized rows
    ref_sq: np.ndarray    # (n,)
    radii: np.ndarray     # (n, J) float64
    kval: np.ndarray      # (J,)
    rows: np.ndarray      # (n,) the id/train rows it holds, ascending


def normalized(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    x64 /= np.linalg.norm(x64, axis=1, keepdims=True) + NORM_EPS
    return x64


class CFOOD(Scorer):
    name = "cfood"
    needs = ("features", "fit:id/train")
    defaults = {"alpha": 0.1, "k": 0.01, "seed": 0}
    grid = {"alpha": [0.1, 0.5, 1], "k": [0.001, 0.005, 0.01, 0.05]}
    paper = Paper(title="CFOOD post-hoc detector", authors=("OpenOOD",),
                  venue="OpenOOD v1.5 (cfood_postprocessor.py)", year=2025,
                  url="https://github.com/Jingkang50/OpenOOD/blob/main/openood/"
                      "postprocessors/cfood_postprocessor.py",
                  code="https://github.com/Jingkang50/OpenOOD",
                  note="added by Maria Pia in commit 1aac049, 2025-11-25; it cites no paper")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        for key in ("alpha", "k"):
            v = params[key]
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
                    or not 0 < float(v) <= 1:
                raise UsageError(f"scorer {self.name!r}: {key} must be in (0, 1] (got {v!r})")
        seed = params["seed"]
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise UsageError(f"scorer {self.name!r}: seed must be an integer >= 0 "
                             f"(got {seed!r})")
        if store is not None and store.has_split("id/train"):
            n_train = store.split("id/train").num_rows
            n = self._subset_size(float(params["alpha"]), n_train)
            if n < 2:
                raise UsageError(f"scorer {self.name!r}: alpha={params['alpha']!r} keeps {n} "
                                 f"of the {n_train} rows of 'id/train'; CFOOD needs >= 2")

    @staticmethod
    def _subset_size(alpha: float, n_train: int) -> int:
        return int(alpha * n_train) if alpha < 1.0 else n_train

    def _fit(self, store: StoreLike) -> None:
        self._refs: dict[float, Reference] = {}
        self.reference(float(self.params["alpha"]))

    def reference(self, alpha: float) -> Reference:
        """The fitted reference set of `alpha` (made once, kept)."""
        if alpha in self._refs:
            return self._refs[alpha]
        split = self.fit_split(self.fitted_store, "id/train")
        n_train = split.num_rows
        n = self._subset_size(alpha, n_train)
        rows = np.sort(np.random.default_rng(int(self.params["seed"])).permutation(n_train)[:n])
        ref = np.empty((n, split.dims["features"]))
        filled = 0
        for sl, (x,) in self.chunks(split, "features"):
            take = rows[(rows >= sl.start) & (rows < sl.stop)] - sl.start
            ref[filled:filled + take.size] = normalized(x[take])
            filled += take.size
        if filled != n:
            raise FeatstoreError(f"scorer {self.name!r}: read {filled} of {n} rows of 'id/train'")
        ref_sq = np.einsum("ij,ij->i", ref, ref)
        kval, kpos = kappa_grid(n)
        radii = np.empty((n, kval.size))
        for lo in range(0, n, _ROW_BLOCK):
            hi = min(n, lo + _ROW_BLOCK)
            d = sq_distances(ref[lo:hi], ref_sq[lo:hi], ref, ref_sq)
            d.sort(axis=1)       # (a partition at J ~ 230 kth values costs more)
            radii[lo:hi] = d[:, kpos + 1]
        self._refs[alpha] = Reference(ref, ref_sq, radii, kval, rows)
        return self._refs[alpha]

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        if any(int(s["seed"]) != int(self.params["seed"]) for s in full):
            return super()._score_grid(split, settings)
        alphas = sorted({float(s["alpha"]) for s in full})
        refs = {a: self.reference(a) for a in alphas}

        def block(x: np.ndarray) -> list[np.ndarray]:
            u = normalized(x)
            u_sq = np.einsum("ij,ij->i", u, u)
            out: dict[tuple[float, float], np.ndarray] = {}
            for a in alphas:
                ref = refs[a]
                d = sq_distances(u, u_sq, ref.ref, ref.ref_sq)
                kval = np.append(ref.kval, 1.0)
                ks = sorted({float(s["k"]) for s in full if float(s["alpha"]) == a})
                idx = np.empty((x.shape[0], len(ks)), dtype=np.int64)
                first_fraction_index(d, ref.radii, np.array(ks), idx)
                for t, k in enumerate(ks):
                    out[(a, k)] = -kval[idx[:, t]]
            return [out[(float(s["alpha"]), float(s["k"]))] for s in full]

        return self.map_rows(split, ("features",), block, outputs=len(full))
