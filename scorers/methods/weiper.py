"""WeiPer+KLD: OOD detection with weight perturbations of the class projections (Granz,
Heurich & Landgraf, "WeiPer: OOD Detection using Weight Perturbations of Class
Projections", NeurIPS 2024).

Formula as implemented (float64 arithmetic on float32 perturbed weights), the authors'
OpenOOD integration (`openood/postprocessors/weiper_kldiv_postprocessor.py` and
`weiper_kldiv/utils.py` of their repository, github.com/mgranz/weiper_icml, read from an
indexed copy whose commit the index does not record), with x the penultimate feature (D values),
(W, b) the head (C classes), r = `n_repeats`, delta = `perturbation_distance`:

    W_i   = W + delta * diag(||w_c||) * N_i / ||N_i rows||,  N_i ~ N(0, 1)^(C x D), i = 1..r
            (each class row moved by delta ||w_c|| in a random direction; float32, as theirs)
    z(x)  = (W_1 x + b, ..., W_r x + b)                        the r*C perturbed logits
    fit (id/train): [lo_f, hi_f] = min / max over all entries of the features, [lo_z, hi_z]
          over all perturbed logits ("exact_minmax"); edges lo + (i/B)(hi + 1e-8 - lo),
          B = `n_bins`; a row's density = the fraction of its values in each bin (values
          outside dropped, not renormalized); p_f, p_z = the mean density over id/train rows
    score: KLD_f = SKL_{s1, 0.01}(p_f, density of x),  KLD_z = SKL_{s2, 0.025}(p_z, density of
          z(x)), MSP_r = (1/r) sum_i max softmax(W_i x + b)
          score = -(KLD_f + lambda_1 KLD_z - lambda_2 MSP_r)

SKL_{s, eps}(p, q): q smoothed by a uniform moving average of width s over the bins (edges
replicated), eps added to both, both normalized, KL(p||q) + KL(q||p)
(`scorers.kernels.histkl`). Higher is more in-distribution. The perturbations are drawn from
`numpy.random.default_rng(seed)` (the authors draw them with torch.randn, unseeded), so a
seed fixes the scores. Defaults: the authors' `calculate_WeiPerKLDiv_score` defaults
(n_bins 100, perturbation_distance 2.1, n_repeats 100, smoothing 20, smoothing_perturbed 20,
lambda_1 1, lambda_2 1; eps 0.01 and 0.025 fixed there and here). Default sweep grid:
lambda_1 x lambda_2 around those defaults, featstore's (the authors' weiper_kldiv.yml sweep
list was not reachable here); a grid over the lambdas shares every pass.

Differences from their code: (1) their `batch_histogram` splits a row of more than 1000
values into chunks of 1000 and averages the chunks' densities unweighted, so the last, short
chunk's values weigh more (D = 2048: 48 features count about 20x); here every value counts
1/m (the two agree whenever the values split into equal chunks, e.g. D <= 1000 or r*C a
multiple of 1000); (2) their id/train density is the mean over loader batches of batch means
(equal to the row mean for equal batches), here the mean over rows; (3) the bin edges are
float64 here (theirs float32: hi + 1e-8 rounds to hi there, so the largest id/train value
falls out of the last bin there and into it here).
Memory: the perturbed weights, r*C*D float32 (100 x 1000 x 2048: 0.8 GB).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.histkl import add_row_hist, hist_edges, sym_kl_rows
from ..kernels.softmax import max_softmax
from ..paper import Paper

EPS_FEATURES = 0.01
EPS_PERTURBED = 0.025
GROUP_BYTES = 8 << 20
_INTS = ("n_bins", "n_repeats", "smoothing", "smoothing_perturbed", "seed")


class WeiPer(Scorer):
    name = "weiper"
    needs = ("features", "head", "fit:id/train")
    defaults = {"lambda_1": 1.0, "lambda_2": 1.0, "perturbation_distance": 2.1,
                "n_repeats": 100, "n_bins": 100, "smoothing": 20, "smoothing_perturbed": 20,
                "seed": 0}
    grid = {"lambda_1": [0.1, 0.5, 1, 2.5], "lambda_2": [0.1, 1, 5]}
    paper = Paper(title="WeiPer: OOD Detection using Weight Perturbations of Class "
                        "Projections",
                  authors=("Granz", "Heurich", "Landgraf"), venue="NeurIPS", year=2024,
                  url="https://openreview.net/forum?id=8HeUvbImKT",
                  code="https://github.com/mgranz/weiper_icml", note="WeiPer+KLD")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        for key in ("lambda_1", "lambda_2", "perturbation_distance"):
            v = params[key]
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
                    or v < 0:
                raise UsageError(f"scorer {self.name!r}: {key} must be a finite number >= 0 "
                                 f"(got {v!r})")
        for key in _INTS:
            v = params[key]
            low = 0 if key == "seed" else (2 if key == "n_bins" else 1)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
                raise UsageError(f"scorer {self.name!r}: {key} must be an integer >= {low} "
                                 f"(got {v!r})")
        for key in ("smoothing", "smoothing_perturbed"):
            if params[key] > params["n_bins"]:
                raise UsageError(f"scorer {self.name!r}: {key} must be <= n_bins = "
                                 f"{params['n_bins']} (got {params[key]!r})")

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.bias = np.asarray(bias, dtype=np.float64)
        self.n_repeats = int(self.params["n_repeats"])
        self.perturbed_t = perturbed_weights(np.asarray(weight, dtype=np.float64),
                                             float(self.params["perturbation_distance"]),
                                             int(self.params["n_repeats"]),
                                             int(self.params["seed"]))
        split = self.fit_split(store, "id/train")
        lo_f, hi_f, lo_z, hi_z = np.inf, -np.inf, np.inf, -np.inf
        for _, (x,) in self.chunks(split, "features"):
            x64 = x.astype(np.float64)
            lo_f, hi_f = min(lo_f, float(x64.min())), max(hi_f, float(x64.max()))
            for z in self._perturbed(x64):
                lo_z, hi_z = min(lo_z, float(z.min())), max(hi_z, float(z.max()))
        nb = int(self.params["n_bins"])
        self.edges_f, self.edges_z = hist_edges(lo_f, hi_f, nb), hist_edges(lo_z, hi_z, nb)
        sum_f, sum_z = np.zeros(nb), np.zeros(nb)
        for _, (x,) in self.chunks(split, "features"):
            dens_f, dens_z, _ = self._densities(x)
            sum_f += dens_f.sum(axis=0)
            sum_z += dens_z.sum(axis=0)
        self.train_f, self.train_z = sum_f / split.num_rows, sum_z / split.num_rows

    def _perturbed(self, x64: np.ndarray) -> Iterator[np.ndarray]:
        """The perturbed logits of the rows, (n, g*C) for groups of g repeats (one GEMM each,
        about `GROUP_BYTES` of logits)."""
        n = x64.shape[0]
        c = self.bias.size
        g = max(1, min(self.n_repeats, GROUP_BYTES // max(1, 8 * n * c)))
        for lo in range(0, self.n_repeats, g):
            hi = min(self.n_repeats, lo + g)
            z = x64 @ self.perturbed_t[:, lo * c:hi * c].astype(np.float64)
            z += np.tile(self.bias, hi - lo)
            yield z

    def _densities(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the feature density, the perturbed-logit density and MSP_r."""
        x64 = x.astype(np.float64)
        n, nb, c = x.shape[0], self.edges_f.size - 1, self.bias.size
        dens_f, dens_z, msp = np.zeros((n, nb)), np.zeros((n, nb)), np.zeros(n)
        add_row_hist(x64, self.edges_f, dens_f)
        for z in self._perturbed(x64):
            add_row_hist(z, self.edges_z, dens_z)
            msp += max_softmax(z.reshape(-1, c)).reshape(n, -1).sum(axis=1)
        return dens_f / x.shape[1], dens_z / (self.n_repeats * c), msp / self.n_repeats

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        if any({k: v for k, v in s.items() if not k.startswith("lambda_")}
               != {k: v for k, v in self.params.items() if not k.startswith("lambda_")}
               for s in full):
            return super()._score_grid(split, settings)
        s1, s2 = int(self.params["smoothing"]), int(self.params["smoothing_perturbed"])

        def block(x: np.ndarray) -> list[np.ndarray]:
            dens_f, dens_z, msp = self._densities(x)
            kl_f, kl_z = np.empty(x.shape[0]), np.empty(x.shape[0])
            sym_kl_rows(dens_f, self.train_f, s1, EPS_FEATURES, kl_f)
            sym_kl_rows(dens_z, self.train_z, s2, EPS_PERTURBED, kl_z)
            return [-(kl_f + float(s["lambda_1"]) * kl_z - float(s["lambda_2"]) * msp)
                    for s in full]

        return self.map_rows(split, ("features",), block, outputs=len(full))


def perturbed_weights(weight: np.ndarray, delta: float, repeats: int, seed: int) -> np.ndarray:
    """(D, r*C) float32: [W_1^T ... W_r^T], W_i = W + delta ||w_c|| N_i / ||N_i's rows||,
    N_i drawn in order from default_rng(seed) (rows of norm 0 kept at 0, as F.normalize)."""
    rng = np.random.default_rng(seed)
    norms = np.linalg.norm(weight, axis=1, keepdims=True)
    c_num, dim = weight.shape
    out = np.empty((dim, repeats * c_num), dtype=np.float32)
    for i in range(repeats):
        g = rng.standard_normal(weight.shape)
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
        out[:, i * c_num:(i + 1) * c_num] = (weight + delta * g * norms).T
    return out
