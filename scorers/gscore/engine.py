"""The Gscore of many sets at once: each set's IND and OOD Gaussians (`Pair`) by the Kmeans,
GMM or UDE modelling (`GscoreEngine`), and the distance between them (`distance`). Scores
are higher = more ID (DESIGN §4); the formulas are in the docstrings below."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .clustering import gmm_params, kmeans_rows, lloyd_rows, lloyd_starts
from .spec import (
    DISTANCES,
    GMM_MAX_ITER,
    GMM_TOL,
    MODELLINGS,
    SIGMA_FLOOR_REL,
    TAU_HALFWIDTH,
    UDE_KERNELS,
)


@dataclass
class Pair:
    """The IND and OOD Gaussians of each set, (M,) arrays; n_* are the part sizes."""

    mu_ind: np.ndarray
    sd_ind: np.ndarray
    mu_ood: np.ndarray
    sd_ood: np.ndarray
    n_ind: np.ndarray
    n_ood: np.ndarray

    def row(self, i: int = 0) -> dict[str, float]:
        return {"mu_ind": float(self.mu_ind[i]), "sd_ind": float(self.sd_ind[i]),
                "mu_ood": float(self.mu_ood[i]), "sd_ood": float(self.sd_ood[i]),
                "n_ind": float(self.n_ind[i]), "n_ood": float(self.n_ood[i])}


def _finalize(mu1: np.ndarray, sd1: np.ndarray, n1: np.ndarray, mu0: np.ndarray,
              sd0: np.ndarray, n0: np.ndarray, ref: np.ndarray,
              floor_rel: float = SIGMA_FLOOR_REL) -> Pair:
    """The IND (1) and OOD (0) Gaussians from raw part statistics, with the edge-case rules
    (defined, never NaN). `ref` is the set's reference scale (sigma_val for UDE, the set's
    own standard deviation for Kmeans/GMM; 1.0 where it is 0 or not finite):
    - a part with 0 samples takes the other part's (mu, sigma), so every distance is 0 ("no
      separation observed");
    - a part with exactly 1 sample: mu = that sample, sigma = ref (its spread is unknown);
    - zero or tiny variance: sigma is floored at floor_rel (SIGMA_FLOOR_REL, 1e-3) * ref,
      which keeps KL finite."""
    ref = np.where((ref > 0) & np.isfinite(ref), ref, 1.0)
    n1 = np.asarray(n1, dtype=np.float64)
    n0 = np.asarray(n0, dtype=np.float64)
    sd1 = np.where(n1 == 1, ref, sd1)
    sd0 = np.where(n0 == 1, ref, sd0)
    floor = floor_rel * ref
    sd1 = np.maximum(np.nan_to_num(sd1, nan=0.0), floor)
    sd0 = np.maximum(np.nan_to_num(sd0, nan=0.0), floor)
    e1, e0 = n1 == 0, n0 == 0
    mu1_f = np.where(e1, mu0, mu1)
    sd1_f = np.where(e1, sd0, sd1)
    mu0_f = np.where(e0, mu1, mu0)
    sd0_f = np.where(e0, sd1, sd0)
    return Pair(mu1_f.astype(np.float64), sd1_f.astype(np.float64), mu0_f.astype(np.float64),
                sd0_f.astype(np.float64), n1, n0)


def distance(pair: Pair, name: str) -> np.ndarray:
    """Gscore of each set: the distance `name` between its IND (1) and OOD (2) Gaussians.

    - `l2`: |mu_1 - mu_2| (the paper's Kmeans distance; for GMM/UDE it ignores the sigmas).
    - `kl`: the paper's eq. (1) with sigma_1 = sd_ind, sigma_2 = sd_ood:
      log(sigma_1/sigma_2) + (sigma_2^2 + (mu_1 - mu_2)^2) / (2 sigma_1^2) - 1/2, which is
      KL(N_ood || N_ind); `kl_rev` the other ordering (sigma_1 = sd_ood), KL(N_ind || N_ood).
    - `wasserstein`: the paper's eq. (2), (mu_1 - mu_2)^2 + (sigma_1 - sigma_2)^2, the
      SQUARED 2-Wasserstein distance of two 1-D Gaussians; `w2` its square root."""
    d = pair.mu_ind - pair.mu_ood
    if name == "l2":
        return np.abs(d)
    if name in ("wasserstein", "w2"):
        w = d * d + (pair.sd_ind - pair.sd_ood) ** 2
        return np.sqrt(w) if name == "w2" else w
    if name == "kl":
        s1, s2 = pair.sd_ind, pair.sd_ood
    elif name == "kl_rev":
        s1, s2 = pair.sd_ood, pair.sd_ind
    else:
        raise UsageError(f"distance {name!r}: expected one of {', '.join(DISTANCES)}")
    return np.log(s1 / s2) + (s2 * s2 + d * d) / (2.0 * s1 * s1) - 0.5


def pack(values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length 1-D arrays -> (X (M, L) zero-padded float64, n (M,))."""
    n = np.array([len(v) for v in values], dtype=np.int64)
    x = np.zeros((len(values), int(n.max()) if len(values) else 0))
    for i, v in enumerate(values):
        x[i, :n[i]] = v
    return x, n


def _row_std(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    valid = np.arange(x.shape[1])[None, :] < n[:, None]
    mean = np.where(valid, x, 0.0).sum(axis=1) / n
    return np.sqrt(np.where(valid, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / n)


def _clean(g: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(g), 0.0, np.minimum(g, np.finfo(np.float64).max))


def _row_of(pair: Pair, i: int) -> Pair:
    return Pair(*(np.asarray(getattr(pair, f))[i] for f in
                  ("mu_ind", "sd_ind", "mu_ood", "sd_ood", "n_ind", "n_ood")))


class _Splitter:
    """Threshold splits of many sets by a per-sample key (IND where key >= tau), each part's
    Gaussian its mean and population std (`_finalize` for the edge cases).

    Sorting each row once by the key and keeping prefix sums of the standardised values makes
    every tau an O(M * L) comparison plus O(M) lookups."""

    def __init__(self, x: np.ndarray, valid: np.ndarray, n: np.ndarray, key: np.ndarray,
                 center: np.ndarray, scale: np.ndarray, floor_rel: float):
        self.n = n
        self.center, self.scale, self.floor_rel = center, scale, floor_rel
        key = np.where(valid, key, -np.inf)
        order = np.argsort(-key, axis=1, kind="stable")
        self.key = np.take_along_axis(key, order, axis=1)
        z = np.where(valid, (x - center[:, None]) / scale[:, None], 0.0)
        z = np.take_along_axis(z, order, axis=1)
        m = x.shape[0]
        self.s = np.concatenate([np.zeros((m, 1)), np.cumsum(z, axis=1)], axis=1)
        self.q = np.concatenate([np.zeros((m, 1)), np.cumsum(z * z, axis=1)], axis=1)

    def pair(self, taus: Sequence[float]) -> Pair:
        """Parts for every tau at once: arrays of shape (T, M)."""
        t = np.asarray(taus, dtype=np.float64)
        rows = np.arange(self.n.size)[None, :]
        k = (self.key[None, :, :] >= t[:, None, None]).sum(axis=2)
        s1, q1 = self.s[rows, k], self.q[rows, k]
        s_all, q_all = self.s[rows, self.n[None, :]], self.q[rows, self.n[None, :]]
        s0, q0 = s_all - s1, q_all - q1
        n1, n0 = k.astype(np.float64), (self.n[None, :] - k).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            m1, m0 = s1 / n1, s0 / n0
            v1 = np.maximum(q1 / n1 - m1 * m1, 0.0)
            v0 = np.maximum(q0 / n0 - m0 * m0, 0.0)
        c, sc = self.center[None, :], self.scale[None, :]
        return _finalize(c + sc * m1, sc * np.sqrt(v1), n1, c + sc * m0, sc * np.sqrt(v0), n0,
                         np.broadcast_to(sc, n1.shape), self.floor_rel)


def kmeans_pair(x: np.ndarray, n: np.ndarray, floor_rel: float = SIGMA_FLOOR_REL,
                lloyd_seed: int | None = None) -> Pair:
    """The Kmeans modelling: by default the exact 2-means partition of each padded row
    (`clustering.kmeans_rows`: deterministic, never worse than Lloyd's); with `lloyd_seed`
    (`--paper`) the paper's (§5.1: "Kmeans starts with two random centroids and iteratively
    updates the centroids"), Lloyd's algorithm from two random samples of each set
    (`clustering.lloyd_rows`, `lloyd_starts(n, lloyd_seed)`). IND = the cluster with the
    higher mean, each cluster's (mean, population std) its Gaussian, edge cases as
    `_finalize` with ref = the set's std (a constant set has no cut: one empty part, G =
    0)."""
    xs, ns = np.ascontiguousarray(x, dtype=np.float64), n.astype(np.int64)
    raw = (kmeans_rows(xs, ns) if lloyd_seed is None
           else lloyd_rows(xs, ns, lloyd_starts(ns, lloyd_seed)))
    ref = _row_std(x, n)
    return _finalize(raw[:, 3], raw[:, 4], raw[:, 5], raw[:, 0], raw[:, 1], raw[:, 2], ref,
                     floor_rel)


class GscoreEngine:
    """Gscores of many sets at once (one padded (M, L) matrix), memoised per (model, tau).

    `ref_mu`, `ref_sd`: the UDE reference Gaussian of each set (scalars broadcast), i.e. the
    scorer's mean and population std (ddof 0) on the id/val split of the set's store;
    ref_sd = 0 (every id/val score equal) is replaced by 1e-12 * max(1, |ref_mu|). A GMM fit
    (`gmm`) is made once per engine; `pair` gives the IND/OOD Gaussians of a modelling,
    `gscores` their distance for several taus at once."""

    def __init__(self, x: np.ndarray, n: np.ndarray, ref_mu: Any = None, ref_sd: Any = None,
                 *, ude_kernel: str = "gauss", floor_rel: float = SIGMA_FLOOR_REL,
                 gmm_max_iter: int = GMM_MAX_ITER, gmm_tol: float = GMM_TOL,
                 lloyd_seed: int | None = None, tau_halfwidth: float = TAU_HALFWIDTH):
        x = np.asarray(x, dtype=np.float64)
        n = np.asarray(n, dtype=np.int64)
        if x.ndim != 2 or n.shape != (x.shape[0],):
            raise UsageError(f"GscoreEngine: expected X (M, L) and n (M,), got {x.shape}, "
                             f"{n.shape}")
        if n.size and (n.min() < 1 or n.max() > x.shape[1]):
            raise UsageError("GscoreEngine: every set needs 1 <= n <= L samples")
        if ude_kernel not in UDE_KERNELS:
            raise UsageError(f"ude_kernel {ude_kernel!r}: expected one of "
                             f"{', '.join(UDE_KERNELS)}")
        self.valid = np.arange(x.shape[1])[None, :] < n[:, None]
        bad = int((~np.isfinite(x) & self.valid).sum())
        if bad:
            raise UsageError(f"gscore: {bad} non-finite scores (NaN/inf); scorers must return "
                             "finite values")
        self.x = np.where(self.valid, x, 0.0)
        self.n = n
        self.m = x.shape[0]
        self.kernel = ude_kernel
        self.lloyd_seed = lloyd_seed  # Kmeans: None = exact 2-means, a seed = Lloyd's
        self.tau_halfwidth = tau_halfwidth  # the tau refinement's window (`search_tau`)
        self.floor_rel = floor_rel
        self.gmm_max_iter, self.gmm_tol = gmm_max_iter, gmm_tol
        self.mean = self.x.sum(axis=1) / n
        self.std = _row_std(self.x, n)
        self.ref_mu = None if ref_mu is None else np.broadcast_to(
            np.asarray(ref_mu, dtype=np.float64), (self.m,)).copy()
        self.ref_sd = None
        if ref_sd is not None:
            sd = np.broadcast_to(np.asarray(ref_sd, dtype=np.float64), (self.m,)).copy()
            tiny = 1e-12 * np.maximum(1.0, np.abs(self.ref_mu))
            self.ref_sd = np.where(sd > 0, sd, tiny)
        self._kmeans: Pair | None = None
        self._gmm: np.ndarray | None = None
        self._gmm_pair: Pair | None = None
        self._splitters: dict[str, _Splitter] = {}
        self._g: dict[tuple[str, str, Any], np.ndarray] = {}

    # ------------------------------------------------------------------ parts
    def gmm(self) -> np.ndarray:
        """The two-component GMM of every set (`clustering.gmm_params`, columns GMM_COLUMNS),
        fitted once."""
        if self._gmm is None:
            self._gmm = gmm_params(self.x, self.n, self.gmm_max_iter, self.gmm_tol,
                                   self.floor_rel)
        return self._gmm

    def gmm_status(self) -> dict[str, int] | None:
        """How the GMM fits of these sets ended (None if no GMM was fitted): sets, not
        converged within gmm_max_iter EM steps, collapsed, rejected SQUAREM extrapolations."""
        if self._gmm is None:
            return None
        p = self._gmm
        return {"sets": int(p.shape[0]), "not_converged": int((p[:, 9] == 0).sum()),
                "collapsed": int((p[:, 7] == 1).sum()), "max_steps": int(p[:, 6].max(initial=0)),
                "rejected_extrapolations": int(p[:, 10].sum())}

    def ude_similarity(self) -> np.ndarray:
        """UDE (unilateral density estimation) similarity s_p of every sample (0 beyond n):
        s_p = exp(-(x - mu_val)^2 / (2 sigma_val^2)) with the `gauss` kernel (the Gaussian's
        own exponent: s_p >= tau <=> |x - mu_val| <= sqrt(-2 ln tau) sigma_val, scale free,
        so one tau grid means the same for MSP in [0, 1] and energy in the tens), or
        exp(-(x - mu_val)^2 / (2 sigma_val)) with the `paper` kernel (the denominator as the
        paper prints it). Both define windows symmetric around mu_val; samples far ABOVE
        mu_val fall outside too (the paper's s_p is symmetric)."""
        if self.ref_mu is None or self.ref_sd is None:
            raise UsageError("UDE needs the reference Gaussian of the scorer on id/val "
                             "(ref_mu, ref_sd)")
        d2 = (self.x - self.ref_mu[:, None]) ** 2
        denom = 2.0 * (self.ref_sd ** 2 if self.kernel == "gauss" else self.ref_sd)
        return np.where(self.valid, np.exp(-d2 / denom[:, None]), 0.0)

    def gmm_posterior(self) -> np.ndarray:
        """P(IND component | x) of every sample under the set's GMM (0 beyond n): with
        a_c = log w_c - log sd_c - (x - mu_c)^2 / (2 sd_c^2), P = 1 / (1 + exp(a_lo - a_hi));
        sd floored as in `_finalize`."""
        p = self.gmm()
        ref = np.where(self.std > 0, self.std, 1.0)
        sd_lo = np.maximum(p[:, 2], self.floor_rel * ref)[:, None]
        sd_hi = np.maximum(p[:, 5], self.floor_rel * ref)[:, None]
        a = np.log(p[:, 0])[:, None] - np.log(sd_lo) - 0.5 * ((self.x - p[:, 1:2]) / sd_lo) ** 2
        b = np.log(p[:, 3])[:, None] - np.log(sd_hi) - 0.5 * ((self.x - p[:, 4:5]) / sd_hi) ** 2
        post = 1.0 / (1.0 + np.exp(np.clip(a - b, -700, 700)))
        return np.where(self.valid, post, 0.0)

    def _splitter(self, modelling: str) -> _Splitter:
        if modelling not in self._splitters:
            if modelling == "ude":
                key = self.ude_similarity()
                center, scale = self.ref_mu, self.ref_sd
            else:
                key = self.gmm_posterior()
                center, scale = self.mean, np.where(self.std > 0, self.std, 1.0)
            self._splitters[modelling] = _Splitter(self.x, self.valid, self.n, key, center,
                                                   scale, self.floor_rel)
        return self._splitters[modelling]

    def pair(self, modelling: str, tau: float | None) -> Pair:
        """IND/OOD Gaussians of every set for a modelling and a numeric tau (or None).

        - kmeans (tau None): `kmeans_pair`.
        - gmm, tau None: the two components' (mu, sigma) directly, IND = the component with
          the higher mean ("GMM gives us means and variances"); n_ind, n_ood are the soft
          counts w * n. A collapsed fit gives the whole set's Gaussian twice: G = 0.
        - gmm, numeric tau (the paper validates one for GMM too, supplementary B): the samples
          with P(IND component | x) >= tau (`gmm_posterior`) form the IND subset, the rest
          the OOD subset, one Gaussian (mean, population std) fitted to each.
        - ude, numeric tau: the samples with s_p >= tau (`ude_similarity`) form the IND
          subset, the rest the OOD subset, one Gaussian fitted to each (ref = sigma_val).
        Edge cases as `_finalize`."""
        if modelling == "kmeans":
            if tau is not None:
                raise UsageError("tau: Kmeans has no threshold")
            if self._kmeans is None:
                self._kmeans = kmeans_pair(self.x, self.n, self.floor_rel, self.lloyd_seed)
            return self._kmeans
        if modelling == "gmm" and tau is None:
            if self._gmm_pair is None:
                p = self.gmm()
                ref = np.where(self.std > 0, self.std, 1.0)
                big = np.full(self.m, 2.0)  # components are never "1-sample parts"
                pair = _finalize(p[:, 4], p[:, 5], big, p[:, 1], p[:, 2], big, ref,
                                 self.floor_rel)
                pair.n_ind, pair.n_ood = p[:, 3] * self.n, p[:, 0] * self.n  # soft counts
                self._gmm_pair = pair
            return self._gmm_pair
        if modelling in ("gmm", "ude"):
            if tau is None:
                raise UsageError("UDE needs a numeric tau")
            return _row_of(self._splitter(modelling).pair([float(tau)]), 0)
        raise UsageError(f"modelling {modelling!r}: expected one of {', '.join(MODELLINGS)}")

    def gscores(self, modelling: str, dist: str, taus: Sequence[float | None]) -> np.ndarray:
        """(T, M) Gscores `distance(pair(modelling, tau), dist)` for several taus (memoised
        per tau, rounded to 10 decimals); a NaN distance (0/0 of two empty parts) is 0 and
        an infinite one the largest float."""
        keys = [None if t is None else round(float(t), 10) for t in taus]
        todo = sorted({k for k in keys if (modelling, dist, k) not in self._g},
                      key=lambda k: -1.0 if k is None else k)
        if todo:
            if modelling in ("gmm", "ude") and todo != [None]:
                numeric = [k for k in todo if k is not None]
                with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                    g = distance(self._splitter(modelling).pair(numeric), dist)
                for k, row in zip(numeric, _clean(g), strict=True):
                    self._g[(modelling, dist, k)] = row
            if None in todo:
                with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                    g = distance(self.pair(modelling, None), dist)
                self._g[(modelling, dist, None)] = _clean(g)
        return np.stack([self._g[(modelling, dist, k)] for k in keys])

    def gscore(self, modelling: str, dist: str, tau: float | None) -> np.ndarray:
        """(M,) Gscores for one tau."""
        return self.gscores(modelling, dist, [tau])[0]
