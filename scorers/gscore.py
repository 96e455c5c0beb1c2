"""Gscore: unsupervised evaluation of OOD detection (torch-free).

Paper: Yuhang Zhang, Weihong Deng, Liang Zheng, "Unsupervised Evaluation of Out-of-distribution
Detection: A Data-centric Perspective" (no public code). Given an UNLABELLED test set mixing
ID and OOD samples, the detector's score distribution is modelled as an IND and an OOD part,
the distance between the two parts is the Gscore `G`, and a linear regression `p = theta1 * G
+ theta0` fitted on labelled meta-train sets predicts the detection metric `p`.

Everything below is implemented as stated; each point the paper leaves open is a documented
choice (marked CHOICE).

Distribution modelling of one set of scores x_1..x_n (higher = more ID, DESIGN §4)
------------------------------------------------------------------------------------
- `kmeans`: two centroids; mu_ind is the higher one. CHOICE: the paper starts Lloyd's
  algorithm from two random centroids; in one dimension the optimal 2-means partition is a
  cut of the sorted values, so we compute the GLOBAL optimum exactly (sort, prefix sums, best
  cut; identical values are never separated). Deterministic and never worse than Lloyd's; the
  tests check it against sklearn's KMeans(n_init=10) run to convergence. Within-cluster
  standard deviations are kept as well (so any distance can be computed), but the paper pairs
  Kmeans with l2 only.
- `gmm`: two Gaussian components fitted by EM; IND = the component with the higher mean.
  CHOICE (deterministic, no seeds needed): the set is standardised (mean 0, std 1), EM starts
  from the exact 2-means partition above (weights, means, variances of the two clusters) and
  runs until no parameter (weights, means, standard deviations, in units of the set's std)
  moves by more than `GMM_TOL` (1e-5) in an EM step, at most `GMM_MAX_ITER` (2000) steps;
  each variance is floored at `SIGMA_FLOOR_REL`**2 of the set's variance (sklearn's
  reg_covar, made scale free). EM is a Numba kernel over many sets at once (one pass and one
  exp per sample and step; large batches split over threads), accelerated with SQUAREM
  (Varadhan & Roland 2008, scheme S3: two EM steps, a squared extrapolation, one stabilising
  EM step; an extrapolation outside the parameter space falls back to the plain EM step):
  3-5x fewer steps on the overlapping score mixtures met here. sklearn's GaussianMixture
  stops on the lower bound with tol 1e-3, which on overlapping score mixtures stops far from
  the optimum (the paper notes GMM's standard deviations are inaccurate); the tests check our
  fit against sklearn run to convergence.
  A component whose responsibility mass falls below 1e-8 * n is "collapsed": both parts
  become the whole set's Gaussian (G = 0). With `tau=None` (default for GMM) the two
  components' (mu, sigma) are used directly ("GMM gives us means and variances"). With a
  threshold tau (the paper validates a tau for GMM too, supplementary B: 0.95 / 0.50), the
  samples with posterior P(IND component | x) >= tau form the IND subset, the rest the OOD
  subset, and one Gaussian is fitted to each subset (as in UDE).
- `ude` (unilateral density estimation): one Gaussian (mu_val, sigma_val) is fitted (maximum
  likelihood, ddof 0) to the scorer's scores on the store's `id/val` split; each test sample
  gets s_p = exp(-(x - mu_val)^2 / (2 sigma_val^2)); s_p >= tau is the IND subset, the rest
  the OOD subset; one Gaussian (mean, population std) is fitted to each subset.
  CHOICE: the paper prints the denominator as `2 sigma^val`. We use 2 sigma_val^2, the
  Gaussian's own exponent: it makes s_p scale free (s_p >= tau <=> |x - mu_val| <= c(tau) *
  sigma_val with c = sqrt(-2 ln tau)), so one tau grid means the same thing for MSP (scores in
  [0, 1]) and energy (scores in the tens). The literal form is available as
  `ude_kernel="paper"`; both define windows |x - mu_val| <= w(tau) symmetric around mu_val,
  only the map tau -> w differs, and tau is searched anyway. Samples far ABOVE mu_val are
  put in the OOD subset too (the paper's s_p is symmetric).
  sigma_val = 0 (every id/val score equal) is replaced by 1e-12 * max(1, |mu_val|).

Edge cases (DEFINED, never NaN). `ref` is the set's reference scale: sigma_val for UDE, the
set's own standard deviation for Kmeans/GMM (1.0 if that is 0).
- a part with 0 samples (all samples on one side of the threshold or cut): it takes the other
  part's (mu, sigma), so every distance is 0 ("no separation observed");
- a part with exactly 1 sample: mu = that sample, sigma = ref (its spread is unknown);
- zero or tiny variance: sigma is floored at `SIGMA_FLOOR_REL` (1e-3) * ref, which keeps KL
  finite;
- a constant set: Kmeans finds no cut (one empty part), GMM is collapsed: G = 0.

Distances (subscript 1 = IND, 2 = OOD unless stated)
----------------------------------------------------
- `l2`: |mu_1 - mu_2| (the paper's Kmeans distance; for GMM/UDE it ignores the sigmas).
- `kl`: the paper's eq. (1) with sigma_1 = sigma_ind, sigma_2 = sigma_ood:
  log(sigma_1/sigma_2) + (sigma_2^2 + (mu_1 - mu_2)^2) / (2 sigma_1^2) - 1/2, which is
  KL(N_ood || N_ind). `kl_rev`: the other ordering (sigma_1 = sigma_ood), KL(N_ind || N_ood).
- `wasserstein`: the paper's eq. (2), (mu_1 - mu_2)^2 + (sigma_1 - sigma_2)^2 — the SQUARED
  2-Wasserstein distance between two 1-D Gaussians. `w2`: its square root, the proper W2.

Regression and tau
------------------
`fit_line`: ordinary least squares p = theta1 * G + theta0 in closed form (cov/var, vectorised
over many taus at once; the tests check it equals numpy lstsq on [G, 1]); when all meta-train
G are equal, theta1 = 0 and theta0 = mean(p). The training loss is the mean squared
residual. tau (UDE, and GMM when asked with `tau="auto"`) is chosen on meta-train sets only:
the grid 0, 0.1, ..., 1.0, then every 0.01 in [tau0 - 0.1, tau0 + 0.1] around the best grid
value tau0 (clipped to [0, 1]; supplementary B refines inside the best 0.1-interval, this
window covers both neighbouring intervals), minimising the training MSE; ties go to the
first value in grid order. CHOICE: tau is searched per (detector, target metric); the paper
tunes it with MSP and reuses it (pass a fixed tau to do the same).
Predictions are clipped to [0, 100] (CHOICE; a percent metric cannot leave that range, so
clipping never increases an error; `clip=False` turns it off).

Meta-sets and the evaluation protocol
-------------------------------------
Scores of every split are computed once per (store, scorer) with
`scorers.evaluate.score_splits` (cached in scores.h5); a meta-set is a pair of index subsets
(ID rows of `id/test`, rows of one OOD test split) into those arrays, and many meta-sets are
processed at once as a padded (M, L) matrix.
- OOD splits: the store's OOD splits with usage `test` (val-flagged parts are near-duplicates
  of their test parts and would leak between meta-train and meta-test). Several stores can be
  pooled; a split is identified by its NAME, so the same data under another backbone is on
  the same side.
- Each repeat r (seeded by (seed, r)): the OOD split names are permuted; the first
  round(train_fraction * S) (at least 1, at most S - 1) are meta-train, the rest meta-test —
  never the same split on both sides (checked, `check_disjoint`). CHOICE: by default the
  meta-train and meta-test sets draw their ID rows from the same id/test rows
  (`id_train_fraction=None`). The paper's two IND pools differ (a CIFAR-10 train partition vs
  the CIFAR-10 test set) but hold thousands of images each; a featstore id/test split often
  holds a few hundred, and two halves of it differ in their lowest 5% of scores, which sets
  the FPR95 threshold of EVERY meta-test set at once (mini-Gbench, MSP: FPR95 RMSE 5.7 with
  the shared pool, 16.8 with disjoint halves at equal Pearson -0.96/-0.98) — a property of
  the small ID pool, not of Gscore. `id_train_fraction=0.5` gives the disjoint protocol.
- Each (store, split) gives `sets_per_split` meta-sets, each a seeded subsample without
  replacement: n_id:n_ood = `ratio`, n_id + n_ood = `size`. `size=None` takes the largest
  set with that ratio the two pools allow. A requested size larger than a pool is scaled
  down with the ratio kept; each side keeps at least one sample. The actual mean sizes are
  reported.
- True metric of a meta-set: `scorers.metrics.ood_metrics` on its own ID vs OOD rows (percent).
  RMSE of the (clipped) prediction over the meta-test sets; Pearson and Spearman between
  Gscore and the true metric over the meta-test (and meta-train) sets; mean ± std over
  repeats (std with ddof 0).
- Baselines, same sets and partitions. Confidence score (paper's baseline): pseudo-label a
  sample ID where MSP > 0.9 (MSP from the same store's logits, whatever the detector) and
  compute the detector's metric against those pseudo-labels; when every sample falls on one
  side the metric is undefined and the chance value is used (AUROC 50, FPR95 95, detection
  error 50, AUPR-In / AUPR-Out = 100 x the pseudo-ID / pseudo-OOD share). Auto-evaluation
  (Deng & Zheng, CVPR 2021): Fréchet distance between the Gaussian of id/train features and
  the Gaussian of the meta-set's features (np.cov, ddof 1), regressed linearly to the metric.
  The trace term tr sqrtm(S_1 S_2) is computed as sum sqrt(eig(A S_2 A)) with A = S_1^(1/2)
  (same eigenvalues, batched with eigvalsh); the tests check it against scipy.linalg.sqrtm.
- Robustness: the same protocol at other ratios / sizes (meta-train and meta-test at that
  setting, tau re-searched), plus `rmse_shift`: the model fitted at the main setting applied
  to meta-test sets at the other setting (the deployment ratio is unknown in practice).
- Across stores: a model fitted on one store's meta-train sets is applied to another store's
  meta-test sets (its scores, its own id/val reference for UDE).

The fitted model (`GscoreModel`) is saved as JSON (never pickle) with the modelling, the
distance, tau, the coefficients, the target metric, the scorer's name and parameters and the
sha256 of the store model(s) it was fitted on; predicting on a store of another model is an
error unless forced. At prediction, the scorer is fitted on and the UDE reference is taken
from the PREDICTED store (its id/train, id/val): those belong to the model being evaluated,
only OOD labels are missing; the fit-time reference is recorded in the JSON for information.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from featstore.errors import FeatstoreError, UsageError

from .metrics import OOD_METRIC_NAMES, ood_metrics

__all__ = [
    "DEFAULT_MODELS", "DISTANCES", "MODELLINGS", "TARGETS", "GscoreEngine", "GscoreModel",
    "ModelSpec", "Pair", "check_disjoint", "distance", "evaluate_gscore", "fit_gscore",
    "fit_line", "fit_lines", "frechet_distance", "frechet_distances", "gmm_params", "kmeans_pair",
    "parse_model", "parse_ratio", "partition_splits", "predict_gscore", "search_tau",
    "set_sizes",
]

TARGETS: tuple[str, ...] = ("auroc", "fpr95", "aupr_in", "aupr_out", "detection_error")
MODELLINGS: tuple[str, ...] = ("kmeans", "gmm", "ude")
DISTANCES: tuple[str, ...] = ("l2", "kl", "kl_rev", "wasserstein", "w2")
#: The paper's Table 6 rows.
DEFAULT_MODELS: tuple[str, ...] = ("kmeans-l2", "gmm-kl", "gmm-wasserstein", "ude-kl",
                                   "ude-wasserstein")
UDE_KERNELS = ("gauss", "paper")
SIGMA_FLOOR_REL = 1e-3
GMM_MAX_ITER = 2000
GMM_TOL = 1e-5
CONFIDENCE_THRESHOLD = 0.9
TAU_COARSE: tuple[float, ...] = tuple(round(0.1 * i, 2) for i in range(11))
TAU_STEP = 0.01
TAU_HALFWIDTH = 0.1
FORMAT = "featstore-gscore"
FORMAT_VERSION = 1
ID_TEST, ID_VAL, ID_TRAIN = "id/test", "id/val", "id/train"
_METRIC_COL = {name: i for i, name in enumerate(OOD_METRIC_NAMES)}
_AUTO = "auto"


# =============================================================================== parsing


@dataclass(frozen=True)
class ModelSpec:
    """One Gscore variant: modelling + distance + tau ("auto" = searched, float, or None)."""

    modelling: str
    distance: str
    tau: str | float | None

    @property
    def label(self) -> str:
        base = f"{self.modelling}-{self.distance}"
        if self.tau == _default_tau(self.modelling):
            return base
        return f"{base}@{'none' if self.tau is None else self.tau}"

    @property
    def title(self) -> str:
        names = {"kmeans": "Kmeans", "gmm": "GMM", "ude": "UDE", "l2": "l2", "kl": "KL",
                 "kl_rev": "KL rev", "wasserstein": "Wasserstein", "w2": "W2"}
        text = f"Gscore ({names[self.modelling]} + {names[self.distance]})"
        if self.tau != _default_tau(self.modelling):
            text += f" tau={'none' if self.tau is None else self.tau}"
        return text


def _default_tau(modelling: str) -> str | None:
    return _AUTO if modelling == "ude" else None


def _parse_tau(text: Any, modelling: str) -> str | float | None:
    if text is None or (isinstance(text, str) and text.lower() == "none"):
        tau: str | float | None = None
    elif isinstance(text, str) and text.lower() == _AUTO:
        tau = _AUTO
    else:
        try:
            tau = float(text)
        except (TypeError, ValueError):
            raise UsageError(f"tau {text!r}: expected 'auto', 'none' or a number in [0, 1]"
                             ) from None
        if not 0.0 <= tau <= 1.0:
            raise UsageError(f"tau {text!r}: must lie in [0, 1]")
    if modelling == "kmeans" and tau is not None:
        raise UsageError("tau: Kmeans has no threshold (use tau none)")
    if modelling == "ude" and tau is None:
        raise UsageError("tau: UDE needs a threshold ('auto' searches it on meta-train sets)")
    return tau


def parse_model(text: str, tau: Any = "default") -> ModelSpec:
    """'ude-wasserstein', 'gmm-kl@auto', 'ude-w2@0.93', 'gmm-wasserstein@none' -> ModelSpec.

    `tau` (if not "default") overrides a tau given after '@'."""
    base, _, tau_text = str(text).strip().partition("@")
    modelling, sep, dist = base.partition("-")
    if not sep or modelling not in MODELLINGS or dist not in DISTANCES:
        raise UsageError(f"model {text!r}: expected <modelling>-<distance>[@tau] with modelling "
                         f"in {', '.join(MODELLINGS)} and distance in {', '.join(DISTANCES)} "
                         "(e.g. ude-wasserstein)")
    if tau != "default":
        value = _parse_tau(tau, modelling)
    elif tau_text:
        value = _parse_tau(tau_text, modelling)
    else:
        value = _default_tau(modelling)
    return ModelSpec(modelling, dist, value)


def parse_ratio(text: Any) -> float:
    """'1:100' -> 0.01 (IND per OOD sample), '3' -> 3.0; must be > 0."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        a, sep, b = str(text).partition(":")
        try:
            value = float(a) / float(b) if sep else float(a)
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"ratio {text!r}: expected IND:OOD like 1:1 or 1:100") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"ratio {text!r}: must be a positive IND:OOD ratio")
    return value


def ratio_label(ratio: float) -> str:
    if ratio >= 1:
        return f"{ratio:g}:1"
    return f"1:{1 / ratio:g}"


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise UsageError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    return target


# =============================================================================== kernels


@njit(cache=True)
def _best_cut(xs: np.ndarray, n: int) -> int:
    """Exact 1-D 2-means on ascending xs[:n]: the size of the low cluster (0: no cut).

    Maximises S_k^2/k + (T - S_k)^2/(n - k) (equivalently minimises the within-cluster sum of
    squares) over cuts between two different values."""
    total = 0.0
    for j in range(n):
        total += xs[j]
    best = -1.0
    best_k = 0
    s = 0.0
    for k in range(1, n):
        s += xs[k - 1]
        if xs[k - 1] == xs[k]:
            continue
        r = total - s
        v = s * s / k + r * r / (n - k)
        if v > best:
            best = v
            best_k = k
    return best_k


@njit(cache=True)
def _kmeans_rows(X: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per row: [mu_lo, sd_lo, n_lo, mu_hi, sd_hi, n_hi] of the optimal 2-means partition."""
    m = X.shape[0]
    out = np.zeros((m, 6))
    for i in range(m):
        ni = n[i]
        xs = np.sort(X[i, :ni])
        mean = xs.mean()
        k = _best_cut(xs - mean, ni)
        if k == 0:  # constant row: one cluster (IND) with every sample, an empty one
            out[i, 0] = mean
            out[i, 3] = mean
            out[i, 4] = xs.std()
            out[i, 5] = ni
            continue
        lo = xs[:k]
        hi = xs[k:]
        out[i, 0] = lo.mean()
        out[i, 1] = lo.std()
        out[i, 2] = k
        out[i, 3] = hi.mean()
        out[i, 4] = hi.std()
        out[i, 5] = ni - k
    return out


@njit(cache=True)
def _em_step(z: np.ndarray, sz: float, szz: float, th: np.ndarray, var_floor: float,
             out: np.ndarray) -> bool:
    """One EM update of th = [w0, m0, m1, v0, v1] on standardised z; False if collapsed.

    One pass and one exp per sample: with t = log(w0 N0(z)) - log(w1 N1(z)),
    P(1 | z) = 1 / (1 + exp(t)); the M step uses the sums of r, r z and r z^2."""
    w0, m0, m1, v0, v1 = th[0], th[1], th[2], th[3], th[4]
    i0 = 0.5 / v0
    i1 = 0.5 / v1
    c = np.log(w0 / (1.0 - w0)) - 0.5 * np.log(v0 / v1)
    n1 = 0.0
    s1 = 0.0
    q1 = 0.0
    ni = z.size
    for j in range(ni):
        zj = z[j]
        d0 = zj - m0
        d1 = zj - m1
        t = c - d0 * d0 * i0 + d1 * d1 * i1
        if t > 0.0:
            e = np.exp(-t)
            rj = e / (1.0 + e)
        else:
            rj = 1.0 / (1.0 + np.exp(t))
        n1 += rj
        s1 += rj * zj
        q1 += rj * zj * zj
    n0 = ni - n1
    if n0 < 1e-8 * ni or n1 < 1e-8 * ni:
        return False
    nm0 = (sz - s1) / n0
    nm1 = s1 / n1
    out[0] = n0 / ni
    out[1] = nm0
    out[2] = nm1
    out[3] = max((szz - q1) / n0 - nm0 * nm0, var_floor)
    out[4] = max(q1 / n1 - nm1 * nm1, var_floor)
    return True


@njit(cache=True)
def _em_delta(a: np.ndarray, b: np.ndarray) -> float:
    """Largest change of weight, means and standard deviations between two parameter sets."""
    d = max(abs(a[0] - b[0]), abs(a[1] - b[1]), abs(a[2] - b[2]))
    return max(d, abs(np.sqrt(a[3]) - np.sqrt(b[3])), abs(np.sqrt(a[4]) - np.sqrt(b[4])))


@njit(cache=True, nogil=True)
def _em_rows(X: np.ndarray, n: np.ndarray, max_iter: int, tol: float,
             var_floor: float) -> np.ndarray:
    """Per row, 2-component 1-D GMM by EM (SQUAREM-accelerated) on the standardised values.

    Returns [w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi, EM steps, collapsed] in the row's
    original units, component `lo` having the lower mean (module docstring)."""
    m = X.shape[0]
    out = np.zeros((m, 8))
    th0 = np.empty(5)
    th1 = np.empty(5)
    th2 = np.empty(5)
    thp = np.empty(5)
    for i in range(m):
        ni = n[i]
        x = X[i, :ni]
        mean = x.mean()
        sd = x.std()
        if ni < 2 or sd == 0.0:
            out[i, 0] = 0.5
            out[i, 1] = mean
            out[i, 2] = sd
            out[i, 3] = 0.5
            out[i, 4] = mean
            out[i, 5] = sd
            out[i, 7] = 1.0
            continue
        z = (x - mean) / sd
        zs = np.sort(z)
        k = _best_cut(zs, ni)
        if k == 0:
            k = ni // 2
        th0[0] = k / ni
        th0[1] = zs[:k].mean()
        th0[2] = zs[k:].mean()
        th0[3] = max(zs[:k].var(), var_floor)
        th0[4] = max(zs[k:].var(), var_floor)
        sz = z.sum()
        szz = (z * z).sum()
        steps = 0
        ok = True
        while steps < max_iter:
            ok = _em_step(z, sz, szz, th0, var_floor, th1)
            steps += 1
            if not ok or _em_delta(th1, th0) <= tol:
                th0[:] = th1
                break
            ok = _em_step(z, sz, szz, th1, var_floor, th2)
            steps += 1
            if not ok or _em_delta(th2, th1) <= tol:
                th0[:] = th2
                break
            # SQUAREM (Varadhan & Roland 2008, scheme S3): extrapolate, then one EM step
            rr = 0.0
            vv = 0.0
            for q in range(5):
                r = th1[q] - th0[q]
                v = th2[q] - 2.0 * th1[q] + th0[q]
                rr += r * r
                vv += v * v
            alpha = -np.sqrt(rr / vv) if vv > 0.0 else -1.0
            alpha = min(alpha, -1.0)
            for q in range(5):
                r = th1[q] - th0[q]
                v = th2[q] - 2.0 * th1[q] + th0[q]
                thp[q] = th0[q] - 2.0 * alpha * r + alpha * alpha * v
            if not (0.0 < thp[0] < 1.0 and thp[3] >= var_floor and thp[4] >= var_floor):
                thp[:] = th2  # outside the parameter space: plain EM
            ok = _em_step(z, sz, szz, thp, var_floor, th1)
            steps += 1
            if not ok:
                break
            th0[:] = th1
        collapsed = 0.0 if ok else 1.0
        w0, m0, m1, v0, v1 = th0[0], th0[1], th0[2], th0[3], th0[4]
        w1 = 1.0 - w0
        if collapsed == 1.0:
            m0 = 0.0
            m1 = 0.0
            v0 = 1.0
            v1 = 1.0
            w0 = 0.5
            w1 = 0.5
        if m0 > m1:
            m0, m1 = m1, m0
            v0, v1 = v1, v0
            w0, w1 = w1, w0
        out[i, 0] = w0
        out[i, 1] = mean + sd * m0
        out[i, 2] = sd * np.sqrt(v0)
        out[i, 3] = w1
        out[i, 4] = mean + sd * m1
        out[i, 5] = sd * np.sqrt(v1)
        out[i, 6] = steps
        out[i, 7] = collapsed
    return out


# =============================================================================== modelling


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
    """Apply the edge-case rules (module docstring) to raw part statistics (1 = IND)."""
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
    """Gscore of each set: the distance `name` (module docstring) between IND and OOD parts."""
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


class _Splitter:
    """Threshold splits of many sets by a per-sample key (IND where key >= tau).

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


def kmeans_pair(x: np.ndarray, n: np.ndarray, floor_rel: float = SIGMA_FLOOR_REL) -> Pair:
    """Exact 2-means of each padded row; IND = the higher cluster."""
    raw = _kmeans_rows(np.ascontiguousarray(x, dtype=np.float64), n.astype(np.int64))
    ref = _row_std(x, n)
    return _finalize(raw[:, 3], raw[:, 4], raw[:, 5], raw[:, 0], raw[:, 1], raw[:, 2], ref,
                     floor_rel)


def gmm_params(x: np.ndarray, n: np.ndarray, max_iter: int = GMM_MAX_ITER,
               tol: float = GMM_TOL, floor_rel: float = SIGMA_FLOOR_REL) -> np.ndarray:
    """(M, 8) [w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi, EM steps, collapsed] per row.

    Rows are independent: large batches are split over threads (the kernel releases the GIL),
    with results identical to one call."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    args = (int(max_iter), float(tol), float(floor_rel) ** 2)
    workers = min(os.cpu_count() or 1, max(1, x.shape[0] // 64))
    if workers < 2:
        return _em_rows(x, n, *args)
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, x.shape[0], workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda ab: _em_rows(x[ab[0]:ab[1]], n[ab[0]:ab[1]], *args),
                              zip(bounds[:-1], bounds[1:], strict=True)))
    return np.concatenate(parts)


def _row_std(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    valid = np.arange(x.shape[1])[None, :] < n[:, None]
    mean = np.where(valid, x, 0.0).sum(axis=1) / n
    return np.sqrt(np.where(valid, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / n)


class GscoreEngine:
    """Gscores of many sets at once (one padded (M, L) matrix), memoised per (model, tau).

    `ref_mu`, `ref_sd`: the UDE reference Gaussian of each set (scalars broadcast), i.e. the
    scorer's mean and std on the id/val split of the set's store."""

    def __init__(self, x: np.ndarray, n: np.ndarray, ref_mu: Any = None, ref_sd: Any = None,
                 *, ude_kernel: str = "gauss", floor_rel: float = SIGMA_FLOOR_REL,
                 gmm_max_iter: int = GMM_MAX_ITER, gmm_tol: float = GMM_TOL):
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
        if self._gmm is None:
            self._gmm = gmm_params(self.x, self.n, self.gmm_max_iter, self.gmm_tol,
                                   self.floor_rel)
        return self._gmm

    def ude_similarity(self) -> np.ndarray:
        """s_p of every sample (0 beyond n)."""
        if self.ref_mu is None or self.ref_sd is None:
            raise UsageError("UDE needs the reference Gaussian of the scorer on id/val "
                             "(ref_mu, ref_sd)")
        d2 = (self.x - self.ref_mu[:, None]) ** 2
        denom = 2.0 * (self.ref_sd ** 2 if self.kernel == "gauss" else self.ref_sd)
        return np.where(self.valid, np.exp(-d2 / denom[:, None]), 0.0)

    def gmm_posterior(self) -> np.ndarray:
        """P(IND component | x) of every sample (0 beyond n)."""
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
        """IND/OOD Gaussians of every set for a modelling and a numeric tau (or None)."""
        if modelling == "kmeans":
            if tau is not None:
                raise UsageError("tau: Kmeans has no threshold")
            if self._kmeans is None:
                self._kmeans = kmeans_pair(self.x, self.n, self.floor_rel)
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
        """(T, M) Gscores for several taus (memoised per tau)."""
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


def _clean(g: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(g), 0.0, np.minimum(g, np.finfo(np.float64).max))


def _row_of(pair: Pair, i: int) -> Pair:
    return Pair(*(np.asarray(getattr(pair, f))[i] for f in
                  ("mu_ind", "sd_ind", "mu_ood", "sd_ood", "n_ind", "n_ood")))


# =============================================================================== regression


def fit_line(g: np.ndarray, p: np.ndarray) -> tuple[float, float, float]:
    """Least squares p = theta1 * g + theta0 -> (theta1, theta0, training MSE)."""
    t1, t0, mse = fit_lines(np.asarray(g, dtype=np.float64)[None, :], p)
    return float(t1[0]), float(t0[0]), float(mse[0])


def fit_lines(g: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`fit_line` for every row of g (T, M) against the same p (M,): the closed-form
    least-squares solution (equal to numpy lstsq on [g, 1]); constant rows get theta1 = 0,
    theta0 = mean(p)."""
    g = np.asarray(g, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    if g.ndim != 2 or g.shape[1] < 1 or g.shape[1] != p.shape[0] or p.ndim != 1:
        raise UsageError(f"fit_line: need matching non-empty G and p, got {g.shape}, {p.shape}")
    gm = g.mean(axis=1, keepdims=True)
    dg = g - gm
    dp = p - p.mean()
    sxx = (dg * dg).sum(axis=1)
    ok = (sxx > 0) & np.isfinite(sxx) & (np.ptp(g, axis=1) > 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t1 = np.where(ok, (dg * dp[None, :]).sum(axis=1) / np.where(ok, sxx, 1.0), 0.0)
    t0 = p.mean() - t1 * gm[:, 0]
    resid = p[None, :] - (t1[:, None] * g + t0[:, None])
    return t1, t0, (resid * resid).mean(axis=1)


def search_tau(g_of_taus: Callable[[list[float]], np.ndarray], p: np.ndarray,
               coarse: Sequence[float] = TAU_COARSE, step: float = TAU_STEP,
               halfwidth: float = TAU_HALFWIDTH) -> dict[str, Any]:
    """Coarse-to-fine tau minimising the regression's training MSE (module docstring).

    `g_of_taus(taus)` returns the meta-train Gscores for each tau, shape (T, M)."""
    coarse = [round(float(t), 10) for t in coarse]
    t1c, t0c, lc = fit_lines(g_of_taus(coarse), p)
    i0 = int(np.argmin(lc))
    tau0 = coarse[i0]
    k = int(round(halfwidth / step))
    fine = sorted({round(min(1.0, max(0.0, tau0 + i * step)), 10) for i in range(-k, k + 1)})
    t1f, t0f, lf = fit_lines(g_of_taus(fine), p)
    j = int(np.argmin(lf))
    trace = dict(zip(coarse, lc.tolist(), strict=True))
    trace.update(zip(fine, lf.tolist(), strict=True))
    return {"tau": fine[j], "tau_coarse": tau0, "theta1": float(t1f[j]),
            "theta0": float(t0f[j]), "loss": float(lf[j]), "trace": sorted(trace.items())}


def _fit_spec(engine: GscoreEngine, spec: ModelSpec, p: np.ndarray,
              rows: np.ndarray | None = None) -> dict[str, Any]:
    """tau (searched if 'auto') and the line for one model on meta-train sets."""
    sel = slice(None) if rows is None else rows
    if spec.tau == _AUTO:
        res = search_tau(lambda ts: engine.gscores(spec.modelling, spec.distance, ts)[:, sel],
                         p)
    else:
        tau = None if spec.tau is None else float(spec.tau)
        t1, t0, mse = fit_line(engine.gscore(spec.modelling, spec.distance, tau)[sel], p)
        res = {"tau": tau, "theta1": t1, "theta0": t0, "loss": mse, "trace": []}
    return res


def _predict(theta1: float, theta0: float, g: np.ndarray, clip: bool) -> np.ndarray:
    pred = theta1 * np.asarray(g, dtype=np.float64) + theta0
    return np.clip(pred, 0.0, 100.0) if clip else pred


def _rankdata(a: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as scipy.stats.rankdata."""
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]]
    dense = np.empty(a.size, dtype=np.int64)
    dense[order] = np.cumsum(first)
    bounds = np.r_[np.flatnonzero(first), a.size]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def _corr(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Pearson, Spearman); NaN where either side is constant or has < 3 points."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), float("nan")
    return _pearson(a, b), _pearson(_rankdata(a), _rankdata(b))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    da, db = a - a.mean(), b - b.mean()
    den = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db) / den if den > 0 else float("nan")


def _rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    d = np.asarray(pred) - np.asarray(truth)
    return float(np.sqrt(np.mean(d * d)))


# =============================================================================== meta-sets


def set_sizes(ratio: float, size: int | None, id_pool: int, ood_pool: int) -> tuple[int, int]:
    """(n_id, n_ood) of a meta-set: ratio n_id/n_ood, total `size` (None: largest feasible);
    scaled down (ratio kept) where a pool is smaller; each side at least 1."""
    if id_pool < 1 or ood_pool < 1:
        raise UsageError("meta-set: empty ID or OOD pool")
    if size is None:
        n_ood = min(float(ood_pool), id_pool / ratio)
        n_id = n_ood * ratio
    else:
        if size < 2:
            raise UsageError(f"meta-set size {size}: must be >= 2")
        n_id = max(1, round(size * ratio / (1.0 + ratio)))
        n_ood = max(1, size - n_id)
        f = min(1.0, id_pool / n_id, ood_pool / n_ood)
        if f < 1.0:
            n_id, n_ood = math.floor(n_id * f), math.floor(n_ood * f)
    n_id = int(min(id_pool, max(1, round(n_id))))
    n_ood = int(min(ood_pool, max(1, round(n_ood))))
    return n_id, n_ood


def partition_splits(names: Sequence[str], train_fraction: float,
                     rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Random meta-train / meta-test partition of OOD split names (disjoint, both non-empty)."""
    names = list(dict.fromkeys(names))
    if len(names) < 2:
        raise UsageError(f"gscore evaluation needs at least 2 OOD test splits (one for "
                         f"meta-train, one for meta-test), got {len(names)}")
    if not 0.0 < train_fraction < 1.0:
        raise UsageError(f"train_fraction {train_fraction}: must lie in (0, 1)")
    perm = [names[i] for i in rng.permutation(len(names))]
    k = min(len(names) - 1, max(1, round(train_fraction * len(names))))
    train, test = perm[:k], perm[k:]
    check_disjoint(train, test)
    return train, test


def check_disjoint(train: Sequence[str], test: Sequence[str]) -> None:
    """Raise if an OOD split is both a meta-train and a meta-test split."""
    both = sorted(set(train) & set(test))
    if both:
        raise FeatstoreError(f"meta-train and meta-test share OOD split(s) {', '.join(both)}")


@dataclass
class _StoreData:
    """One store's scores pooled as [id/test rows, OOD split 1 rows, ...] per method."""

    index: int
    store: Any
    path: str
    sha: str
    ood: list[str]
    n_id: int
    sizes: dict[str, int]
    offset: dict[str, int]
    total: int
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    ref: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    features: np.ndarray | None = None
    train_gauss: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _ood_test_splits(store: Any) -> list[str]:
    return store.splits(role="ood", usage="test")


def _store_data(index: int, store: Any) -> _StoreData:
    for need in (ID_TEST, ID_VAL):
        if not store.has_split(need):
            raise UsageError(f"store {str(store.path)!r} has no complete {need!r} split; gscore "
                             f"needs id/test (ID rows of meta-sets) and id/val (UDE reference)")
    ood = _ood_test_splits(store)
    if not ood:
        raise UsageError(f"store {str(store.path)!r} has no OOD test split")
    n_id = store.split(ID_TEST).num_rows
    sizes = {s: store.split(s).num_rows for s in ood}
    offset, pos = {}, n_id
    for s in ood:
        offset[s] = pos
        pos += sizes[s]
    return _StoreData(index, store, str(store.path), store.model_sha256, ood, n_id, sizes,
                      offset, pos)


def _method_key(method: str, params: Mapping[str, Any]) -> str:
    return method if not params else method + json.dumps(dict(params), sort_keys=True)


def _load_scores(sd: _StoreData, key: str, method: str, params: Mapping[str, Any],
                 use_cache: bool) -> float:
    """Score id/val, id/test and every OOD test split once; returns the seconds spent."""
    from .evaluate import score_splits

    if key in sd.scores:
        return 0.0
    t0 = time.perf_counter()
    names = [ID_VAL, ID_TEST, *sd.ood]
    scores, _, _ = score_splits(sd.store, method, params, names, use_cache)
    for name, s in scores.items():
        bad = int((~np.isfinite(s)).sum())
        if bad:
            raise FeatstoreError(f"scorer {method!r}: {bad} non-finite scores in split {name!r}")
    sd.scores[key] = np.concatenate([scores[ID_TEST], *[scores[s] for s in sd.ood]])
    val = scores[ID_VAL]
    sd.ref[key] = (float(val.mean()), float(val.std()), int(val.size))
    return time.perf_counter() - t0


@dataclass
class _Sets:
    """Meta-sets as padded index matrices into the concatenation of the stores' pools."""

    idx: np.ndarray      # (M, L) global row index (0 beyond n)
    n: np.ndarray        # (M,)
    n_id: np.ndarray     # (M,) the first n_id entries of a row are ID rows
    store: np.ndarray    # (M,) store index
    split: list[str]     # (M,) OOD split name

    @property
    def m(self) -> int:
        return int(self.n.size)

    def values(self, pooled: np.ndarray) -> np.ndarray:
        valid = np.arange(self.idx.shape[1])[None, :] < self.n[:, None]
        return np.where(valid, pooled[self.idx], 0.0)

    def is_id(self) -> np.ndarray:
        return np.arange(self.idx.shape[1])[None, :] < self.n_id[:, None]


def _draw_sets(stores: Sequence[_StoreData], names: Sequence[str],
               id_pools: Sequence[np.ndarray], ratio: float, size: int | None,
               per_split: int, rng: np.random.Generator, offsets: Sequence[int]) -> _Sets:
    rows, n_ids, st, sp = [], [], [], []
    for sd, pool, base in zip(stores, id_pools, offsets, strict=True):
        for name in names:
            if name not in sd.sizes:
                continue
            n_pool = sd.sizes[name]
            for _ in range(per_split):
                n_id, n_ood = set_sizes(ratio, size, len(pool), n_pool)
                ids = rng.choice(pool, n_id, replace=False)
                oods = sd.offset[name] + rng.choice(n_pool, n_ood, replace=False)
                rows.append(base + np.concatenate([ids, oods]))
                n_ids.append(n_id)
                st.append(sd.index)
                sp.append(name)
    if not rows:
        raise UsageError("no meta-set could be drawn (no OOD split in these stores)")
    idx, n = pack(rows)
    return _Sets(idx.astype(np.int64), n, np.asarray(n_ids, dtype=np.int64),
                 np.asarray(st, dtype=np.int64), sp)


def _truth(x: np.ndarray, sets: _Sets) -> np.ndarray:
    """(M, 8) true metrics (percent) of every meta-set, columns as OOD_METRIC_NAMES."""
    out = np.empty((sets.m, len(OOD_METRIC_NAMES)))
    for i in range(sets.m):
        k, n = sets.n_id[i], sets.n[i]
        vals = ood_metrics(x[i, :k], x[i, k:n])
        out[i] = [vals[name] for name in OOD_METRIC_NAMES]
    return out


def _chance(target: str, share_id: float) -> float:
    if target == "aupr_in":
        return 100.0 * share_id
    if target == "aupr_out":
        return 100.0 * (1.0 - share_id)
    return {"auroc": 50.0, "fpr95": 95.0, "detection_error": 50.0}[target]


def _confidence_baseline(x: np.ndarray, msp: np.ndarray, sets: _Sets,
                         targets: Sequence[str]) -> np.ndarray:
    """(M, len(targets)) metric of the detector's scores against MSP > 0.9 pseudo-labels."""
    out = np.empty((sets.m, len(targets)))
    for i in range(sets.m):
        n = sets.n[i]
        s, pseudo = x[i, :n], msp[i, :n] > CONFIDENCE_THRESHOLD
        k = int(pseudo.sum())
        if 0 < k < n:
            vals = ood_metrics(s[pseudo], s[~pseudo])
            out[i] = [vals[t] for t in targets]
        else:
            out[i] = [_chance(t, k / n) for t in targets]
    return out


# =============================================================================== Fréchet


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray,
                     cov2: np.ndarray) -> float:
    """Reference Fréchet distance with scipy.linalg.sqrtm (Deng & Zheng / FID formula)."""
    from scipy import linalg

    covmean = linalg.sqrtm(np.asarray(cov1) @ np.asarray(cov2))
    covmean = np.real(covmean)
    diff = np.asarray(mu1) - np.asarray(mu2)
    return float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2.0 * np.trace(covmean))


def _sqrt_psd(cov: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(cov)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distances(ref_mu: np.ndarray, ref_cov: np.ndarray, feats: np.ndarray,
                      idx: np.ndarray, n: np.ndarray, chunk: int = 128,
                      ref_sqrt: np.ndarray | None = None) -> np.ndarray:
    """Fréchet distance between N(ref_mu, ref_cov) and the Gaussian (np.cov, ddof 1) of each
    set's feature rows feats[idx[i, :n[i]]]; batched (see module docstring). `ref_sqrt`: the
    precomputed ref_cov^(1/2), if any."""
    a = _sqrt_psd(np.asarray(ref_cov, dtype=np.float64)) if ref_sqrt is None else ref_sqrt
    tr_ref = float(np.trace(ref_cov))
    out = np.empty(idx.shape[0])
    cols = np.arange(idx.shape[1])
    for start in range(0, idx.shape[0], chunk):
        sl = slice(start, min(start + chunk, idx.shape[0]))
        nn = n[sl].astype(np.float64)
        f = np.where((cols[None, :] < n[sl, None])[..., None], feats[idx[sl]], 0.0)
        mu = f.sum(axis=1) / nn[:, None]
        scatter = f.transpose(0, 2, 1) @ f - nn[:, None, None] * (mu[:, :, None] * mu[:, None, :])
        cov = scatter / np.maximum(nn - 1.0, 1.0)[:, None, None]
        inner = a[None] @ cov @ a[None]
        eig = np.linalg.eigvalsh(inner)
        tr_sqrt = np.sqrt(np.clip(eig, 0.0, None)).sum(axis=1)
        diff = mu - ref_mu[None, :]
        out[sl] = ((diff * diff).sum(axis=1) + tr_ref + np.trace(cov, axis1=1, axis2=2)
                   - 2.0 * tr_sqrt)
    return out


def _load_features(sd: _StoreData) -> None:
    """Pooled features (id/test + OOD splits) and the id/train Gaussian of one store."""
    if sd.features is not None:
        return
    st = sd.store
    if not st.has_split(ID_TRAIN):
        raise UsageError(f"store {sd.path!r} has no id/train split (auto-evaluation baseline)")
    train = np.asarray(st.split(ID_TRAIN).features, dtype=np.float64)
    cov = np.cov(train, rowvar=False)
    sd.train_gauss = (train.mean(axis=0), cov, _sqrt_psd(cov))
    parts = [np.asarray(st.split(ID_TEST).features)] + [np.asarray(st.split(s).features)
                                                        for s in sd.ood]
    sd.features = np.concatenate(parts).astype(np.float32)


def _auto_eval_fd(stores: Sequence[_StoreData], sets: _Sets, offsets: Sequence[int]) -> np.ndarray:
    out = np.empty(sets.m)
    for sd, base in zip(stores, offsets, strict=True):
        rows = np.flatnonzero(sets.store == sd.index)
        if rows.size == 0:
            continue
        _load_features(sd)
        assert sd.train_gauss is not None and sd.features is not None
        local = np.where(np.arange(sets.idx.shape[1])[None, :] < sets.n[rows, None],
                         sets.idx[rows] - base, 0)
        out[rows] = frechet_distances(sd.train_gauss[0], sd.train_gauss[1], sd.features,
                                      local, sets.n[rows], ref_sqrt=sd.train_gauss[2])
    return out


# =============================================================================== the model


@dataclass
class GscoreModel:
    """A fitted Gscore regression; saved as JSON (never pickle)."""

    modelling: str
    distance: str
    tau: float | None
    theta1: float
    theta0: float
    target: str
    scorer: str
    scorer_params: dict[str, Any]
    model_sha256s: list[str]
    ude_kernel: str = "gauss"
    floor_rel: float = SIGMA_FLOOR_REL
    gmm_max_iter: int = GMM_MAX_ITER
    gmm_tol: float = GMM_TOL
    clip: bool = True
    reference: dict[str, Any] | None = None
    meta_train: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    @property
    def model_sha256(self) -> str:
        return self.model_sha256s[0]

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.modelling, self.distance, self.tau)

    # ---------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        from featstore import __version__

        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "featstore_version": __version__,
            "created": self.created,
            "modelling": self.modelling, "distance": self.distance, "tau": self.tau,
            "ude_kernel": self.ude_kernel, "sigma_floor_rel": self.floor_rel,
            "gmm": {"max_iter": self.gmm_max_iter, "tol": self.gmm_tol},
            "regression": {"theta1": self.theta1, "theta0": self.theta0, "clip": self.clip},
            "target": self.target,
            "scorer": {"name": self.scorer, "params": self.scorer_params},
            "model_sha256": self.model_sha256, "model_sha256s": list(self.model_sha256s),
            "reference": self.reference, "meta_train": self.meta_train,
        }

    def save(self, path: str | Path) -> None:
        from featstore.fileio import atomic_write_json

        atomic_write_json(Path(path), _json_safe(self.to_json()))

    @classmethod
    def from_json(cls, obj: Any, where: str = "gscore model") -> GscoreModel:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise UsageError(f"{where}: not a featstore gscore model (missing format "
                             f"{FORMAT!r}); write one with `featstore gscore fit`")
        if obj.get("format_version") != FORMAT_VERSION:
            raise UsageError(f"{where}: format_version {obj.get('format_version')!r}, this "
                             f"featstore reads {FORMAT_VERSION}")
        try:
            modelling, dist = obj["modelling"], obj["distance"]
            if modelling not in MODELLINGS or dist not in DISTANCES:
                raise UsageError(f"{where}: unknown modelling/distance {modelling!r}/{dist!r}")
            tau = obj["tau"]
            if tau is not None:
                tau = float(tau)
            _parse_tau("none" if tau is None else tau, modelling)
            reg = obj["regression"]
            scorer = obj["scorer"]
            shas = obj.get("model_sha256s") or [obj["model_sha256"]]
            model = cls(
                modelling=modelling, distance=dist, tau=tau, theta1=float(reg["theta1"]),
                theta0=float(reg["theta0"]), target=_check_target(obj["target"]),
                scorer=str(scorer["name"]), scorer_params=dict(scorer.get("params") or {}),
                model_sha256s=[str(s) for s in shas],
                ude_kernel=str(obj.get("ude_kernel", "gauss")),
                floor_rel=float(obj.get("sigma_floor_rel", SIGMA_FLOOR_REL)),
                gmm_max_iter=int(obj.get("gmm", {}).get("max_iter", GMM_MAX_ITER)),
                gmm_tol=float(obj.get("gmm", {}).get("tol", GMM_TOL)),
                clip=bool(reg.get("clip", True)), reference=obj.get("reference"),
                meta_train=dict(obj.get("meta_train") or {}), created=str(obj.get("created", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"{where}: malformed gscore model ({type(exc).__name__}: {exc})"
                             ) from None
        if not (math.isfinite(model.theta1) and math.isfinite(model.theta0)):
            raise UsageError(f"{where}: non-finite regression coefficients")
        return model

    @classmethod
    def load(cls, path: str | Path) -> GscoreModel:
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"gscore model {str(path)!r}: file not found")
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"gscore model {str(path)!r}: not valid JSON ({exc})") from None
        return cls.from_json(obj, f"gscore model {str(path)!r}")

    # ---------------------------------------------------------------- use
    def engine(self, x: np.ndarray, n: np.ndarray, ref_mu: Any = None,
               ref_sd: Any = None) -> GscoreEngine:
        return GscoreEngine(x, n, ref_mu, ref_sd, ude_kernel=self.ude_kernel,
                            floor_rel=self.floor_rel, gmm_max_iter=self.gmm_max_iter,
                            gmm_tol=self.gmm_tol)

    def gscore(self, scores: np.ndarray, ref: tuple[float, float] | None = None
               ) -> tuple[float, dict[str, float]]:
        """Gscore of one unlabelled set of scores and its fitted Gaussians."""
        s = np.asarray(scores, dtype=np.float64).ravel()
        if s.size < 1:
            raise UsageError("gscore: empty set of scores")
        if self.modelling == "ude" and ref is None:
            raise UsageError("gscore: UDE needs the id/val reference (mu_val, sd_val)")
        eng = self.engine(s[None, :], np.array([s.size]), *(ref or (None, None)))
        g = float(eng.gscore(self.modelling, self.distance, self.tau)[0])
        return g, eng.pair(self.modelling, self.tau).row(0)

    def predict(self, scores: np.ndarray, ref: tuple[float, float] | None = None) -> float:
        g, _ = self.gscore(scores, ref)
        return float(_predict(self.theta1, self.theta0, np.array([g]), self.clip)[0])


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.floating | np.integer):
        return _json_safe(obj.item())
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _json_safe(obj.tolist())
    return obj


def _check_models(stores: Sequence[Any], allow_other_model: bool) -> None:
    shas = {st.model_sha256 for st in stores}
    if len(shas) > 1 and not allow_other_model:
        raise UsageError("the stores were made by different models "
                         f"({', '.join(sorted(s[:12] for s in shas))}); pass "
                         "--allow-other-model / allow_other_model=True to pool them")


def fit_gscore(stores: Sequence[Any], method: str = "msp", target: str = "fpr95",
               model: str | ModelSpec = "ude-wasserstein", *, params: Mapping[str, Any] | None
               = None, tau: Any = "default", ratio: Any = 1.0, size: int | None = None,
               sets_per_split: int = 10, seed: int = 0, ude_kernel: str = "gauss",
               clip: bool = True, allow_other_model: bool = False,
               use_cache: bool = True) -> GscoreModel:
    """Fit a Gscore regression on meta-train sets built from EVERY OOD test split of `stores`
    (ID rows: all of id/test; `sets_per_split` seeded subsamples per split)."""
    from scorers import REGISTRY

    if not stores:
        raise UsageError("gscore fit: name at least one store")
    if method not in REGISTRY:
        raise UsageError(f"unknown scorer {method!r} (valid: {', '.join(REGISTRY)})")
    _check_target(target)
    spec = model if isinstance(model, ModelSpec) else parse_model(model, tau)
    if sets_per_split < 1:
        raise UsageError(f"sets_per_split {sets_per_split}: must be >= 1")
    ratio = parse_ratio(ratio)
    _check_models(stores, allow_other_model)
    params = dict(params or {})
    data = [_store_data(i, st) for i, st in enumerate(stores)]
    key = _method_key(method, params)
    for sd in data:
        _load_scores(sd, key, method, params, use_cache)
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    pooled = np.concatenate([sd.scores[key] for sd in data])
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    rng = np.random.default_rng([seed, 0])
    sets = _draw_sets(data, names, [np.arange(sd.n_id) for sd in data], ratio, size,
                      sets_per_split, rng, offsets)
    x = sets.values(pooled)
    truth = _truth(x, sets)[:, _METRIC_COL[target]]
    refs = np.array([data[s].ref[key][:2] for s in sets.store])
    eng = GscoreEngine(x, sets.n, refs[:, 0], refs[:, 1], ude_kernel=ude_kernel)
    res = _fit_spec(eng, spec, truth)
    g = eng.gscore(spec.modelling, spec.distance, res["tau"])
    pred = _predict(res["theta1"], res["theta0"], g, clip)
    pearson, spearman = _corr(g, truth)
    first = data[0]
    ref0 = first.ref[key]
    return GscoreModel(
        modelling=spec.modelling, distance=spec.distance, tau=res["tau"],
        theta1=res["theta1"], theta0=res["theta0"], target=target, scorer=method,
        scorer_params=params, model_sha256s=list(dict.fromkeys(sd.sha for sd in data)),
        ude_kernel=ude_kernel, clip=clip,
        reference={"split": ID_VAL, "store": first.path, "mu": ref0[0], "sd": ref0[1],
                   "n": ref0[2]},
        meta_train={"stores": [sd.path for sd in data], "splits": names, "n_sets": sets.m,
                    "ratio": ratio, "size": size, "sets_per_split": sets_per_split,
                    "seed": seed, "mean_n_id": float(sets.n_id.mean()),
                    "mean_n_ood": float((sets.n - sets.n_id).mean()),
                    "train_mse": res["loss"], "train_rmse": _rmse(pred, truth),
                    "pearson": pearson, "spearman": spearman,
                    "tau_search": [list(t) for t in res["trace"]],
                    "points": {"gscore": [float(v) for v in g],
                               "true": [float(v) for v in truth]}},
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )


def predict_gscore(model: GscoreModel, store: Any, splits: Sequence[str], *,
                   force: bool = False, use_cache: bool = True,
                   with_truth: bool = False) -> dict[str, Any]:
    """Predicted metric of the unlabelled set made of the named splits' rows (labels ignored).

    With `with_truth`, when the set holds both id/* and ood/* rows, the true metric (roles as
    labels) is reported beside the prediction."""
    from .evaluate import score_splits

    if store.model_sha256 not in model.model_sha256s and not force:
        raise UsageError(
            f"the gscore model was fitted on stores of model {model.model_sha256[:12]}… but "
            f"store {str(store.path)!r} comes from model {store.model_sha256[:12]}…; pass "
            "--allow-other-model (force=True) to predict anyway")
    splits = list(dict.fromkeys(splits))
    if not splits:
        raise UsageError("gscore predict: name at least one split (--split)")
    for s in splits:
        store.split(s)
    names = list(splits)
    need_ref = model.modelling == "ude"
    if need_ref:
        if not store.has_split(ID_VAL):
            raise UsageError(f"store {str(store.path)!r} has no id/val split: UDE takes its "
                             "reference Gaussian from the scorer's id/val scores")
        names = list(dict.fromkeys([ID_VAL, *names]))
    scores, _, _ = score_splits(store, model.scorer, model.scorer_params, names, use_cache)
    x = np.concatenate([scores[s] for s in splits])
    ref = None
    if need_ref:
        val = scores[ID_VAL]
        ref = (float(val.mean()), float(val.std()))
    g, parts = model.gscore(x, ref)
    pred = float(_predict(model.theta1, model.theta0, np.array([g]), model.clip)[0])
    out: dict[str, Any] = {
        "store": str(store.path), "splits": splits, "n": int(x.size), "scorer": model.scorer,
        "model": model.spec.label, "tau": model.tau, "target": model.target, "gscore": g,
        "predicted": pred, "parts": parts,
        "reference": None if ref is None else {"split": ID_VAL, "mu": ref[0], "sd": ref[1]},
        "forced": store.model_sha256 not in model.model_sha256s,
    }
    if with_truth:
        id_parts = [scores[s] for s in splits if s.startswith("id/") or s.startswith("csid/")]
        ood_parts = [scores[s] for s in splits if s.startswith("ood/")]
        out["truth"] = (ood_metrics(np.concatenate(id_parts), np.concatenate(ood_parts))
                        [model.target] if id_parts and ood_parts else None)
    return out


# =============================================================================== evaluation


def _agg(values: Sequence[float]) -> dict[str, float | None]:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std()), "n": int(v.size)}


def _eval_spec(eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
               p_te: np.ndarray, clip: bool) -> tuple[dict[str, float], dict[str, Any]]:
    fit = _fit_spec(eng_tr, spec, p_tr)
    g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])
    g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
    pred = _predict(fit["theta1"], fit["theta0"], g_te, clip)
    pr_tr, sp_tr = _corr(g_tr, p_tr)
    pr_te, sp_te = _corr(g_te, p_te)
    row = {"rmse": _rmse(pred, p_te), "pearson": pr_te, "spearman": sp_te,
           "pearson_train": pr_tr, "spearman_train": sp_tr,
           "tau": float("nan") if fit["tau"] is None else float(fit["tau"])}
    return row, fit


def _summarise(per_repeat: Mapping[Any, list[dict[str, float]]]) -> dict[Any, dict]:
    out = {}
    for key, rows in per_repeat.items():
        out[key] = {m: _agg([r[m] for r in rows]) for m in rows[0]}
    return out


def evaluate_gscore(
    stores: Sequence[Any],
    methods: Sequence[str] = ("msp",),
    models: Sequence[str | ModelSpec] = DEFAULT_MODELS,
    targets: Sequence[str] = ("fpr95", "auroc"),
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ratio: Any = 1.0,
    size: int | None = None,
    sets_per_split: int = 10,
    repeats: int = 5,
    seed: int = 0,
    train_fraction: float = 0.75,
    id_train_fraction: float | None = None,
    baselines: bool = True,
    ratios: Sequence[Any] = (),
    sizes: Sequence[int] = (),
    robust_models: Sequence[str | ModelSpec] | None = None,
    ude_kernel: str = "gauss",
    clip: bool = True,
    use_cache: bool = True,
    allow_other_model: bool = True,
    progress: Callable[[str], None] | None = None,
    step_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The paper's protocol (module docstring): Table-1/6 RMSE of every (detector, model,
    target), correlations, the baselines, a robustness table over `ratios` and `sizes`, and
    (with several stores) the cross-store table. Returns a JSON-ready dict.

    `progress(message)` is told each phase; `step_progress(done, total)` is called after
    each (repeat, meta-set setting, detector) step of the protocol."""
    from scorers import REGISTRY

    t_start = time.perf_counter()
    if not stores:
        raise UsageError("gscore evaluate: name at least one store")
    methods = list(dict.fromkeys(methods))
    for m in methods:
        if m not in REGISTRY:
            raise UsageError(f"unknown scorer {m!r} (valid: {', '.join(REGISTRY)})")
    targets = [_check_target(t) for t in dict.fromkeys(targets)]
    specs = [m if isinstance(m, ModelSpec) else parse_model(m) for m in models]
    specs = list(dict.fromkeys(specs))
    if not specs or not targets or not methods:
        raise UsageError("gscore evaluate: need at least one method, model and target")
    rspecs = specs if robust_models is None else [
        m if isinstance(m, ModelSpec) else parse_model(m) for m in robust_models]
    if not set(rspecs) <= set(specs):
        raise UsageError("robust_models must be a subset of models")
    if repeats < 1 or sets_per_split < 1:
        raise UsageError("repeats and sets_per_split must be >= 1")
    if id_train_fraction is not None and not 0.0 < id_train_fraction < 1.0:
        raise UsageError(f"id_train_fraction {id_train_fraction}: must lie in (0, 1) or be "
                         "None (meta-train and meta-test share the id/test rows)")
    ratio = parse_ratio(ratio)
    configs = [("ratio", parse_ratio(r), size) for r in ratios]
    configs += [("size", ratio, None if s is None else int(s)) for s in sizes]
    _check_models(stores, allow_other_model)
    params = {k: dict(v) for k, v in (params or {}).items()}
    say = progress or (lambda _m: None)

    data = [_store_data(i, st) for i, st in enumerate(stores)]
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    # ---------------------------------------------------------------- scores, once
    t0 = time.perf_counter()
    keys: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for m in methods:
        key = _method_key(m, params.get(m, {}))
        try:
            for sd in data:
                say(f"scoring {m} on {sd.path}")
                _load_scores(sd, key, m, params.get(m, {}), use_cache)
            keys[m] = key
        except UsageError as exc:
            skipped[m] = str(exc)
    if baselines:
        for sd in data:
            _load_scores(sd, "msp", "msp", {}, use_cache)
    score_seconds = time.perf_counter() - t0
    methods = [m for m in methods if m in keys]
    if not methods:
        raise UsageError(f"no scorer could run: {skipped}")
    pooled = {m: np.concatenate([sd.scores[keys[m]] for sd in data]) for m in methods}
    msp_pooled = np.concatenate([sd.scores["msp"] for sd in data]) if baselines else None
    refs = {m: np.array([data[i].ref[keys[m]][:2] for i in range(len(data))]) for m in methods}

    # per-repeat rows: main[(method, target, model)], base[(method, target, name)], ...
    main: dict[tuple, list] = {}
    base: dict[tuple, list] = {}
    robust: dict[tuple, list] = {}
    cross: dict[tuple, list] = {}
    sizes_seen: dict[int, list] = {}
    n_sets_total = 0
    t_proto = time.perf_counter()
    t_model = 0.0
    t_truth = 0.0
    baseline_note = None
    steps_total, steps_done = repeats * (1 + len(configs)) * len(methods), 0
    if step_progress:
        step_progress(0, steps_total)
    for rep in range(repeats):
        say(f"repeat {rep + 1}/{repeats}")
        rng_part = np.random.default_rng([seed, rep, 0])
        train_names, test_names = partition_splits(names, train_fraction, rng_part)
        pools_tr, pools_te = [], []
        for sd in data:
            perm = rng_part.permutation(sd.n_id)
            if id_train_fraction is None:
                pools_tr.append(np.arange(sd.n_id))
                pools_te.append(np.arange(sd.n_id))
                continue
            k = min(sd.n_id - 1, max(1, round(id_train_fraction * sd.n_id)))
            pools_tr.append(np.sort(perm[:k]))
            pools_te.append(np.sort(perm[k:]))
        fitted: dict[tuple, dict] = {}
        for ci, (kind, c_ratio, c_size) in enumerate([("main", ratio, size), *configs]):
            rng = np.random.default_rng([seed, rep, 1, ci])
            tr = _draw_sets(data, train_names, pools_tr, c_ratio, c_size, sets_per_split, rng,
                            offsets)
            te = _draw_sets(data, test_names, pools_te, c_ratio, c_size, sets_per_split, rng,
                            offsets)
            check_disjoint(sorted(set(tr.split)), sorted(set(te.split)))
            n_sets_total += tr.m + te.m
            sizes_seen.setdefault(ci, []).append(
                (float(te.n_id.mean()), float((te.n - te.n_id).mean())))
            fd = None
            if kind == "main" and baselines:
                try:
                    fd = (_auto_eval_fd(data, tr, offsets), _auto_eval_fd(data, te, offsets))
                except UsageError as exc:
                    baseline_note = str(exc)
            for m in methods:
                x_tr, x_te = tr.values(pooled[m]), te.values(pooled[m])
                t1 = time.perf_counter()
                truth_tr, truth_te = _truth(x_tr, tr), _truth(x_te, te)
                t_truth += time.perf_counter() - t1
                t1 = time.perf_counter()
                eng_tr = GscoreEngine(x_tr, tr.n, refs[m][tr.store, 0], refs[m][tr.store, 1],
                                      ude_kernel=ude_kernel)
                eng_te = GscoreEngine(x_te, te.n, refs[m][te.store, 0], refs[m][te.store, 1],
                                      ude_kernel=ude_kernel)
                for target in targets:
                    col = _METRIC_COL[target]
                    p_tr, p_te = truth_tr[:, col], truth_te[:, col]
                    for spec in (specs if kind == "main" else rspecs):
                        row, fit = _eval_spec(eng_tr, eng_te, spec, p_tr, p_te, clip)
                        if kind == "main":
                            main.setdefault((m, target, spec.label), []).append(row)
                            fitted[(m, target, spec.label)] = fit
                            if len(data) > 1:
                                _cross_rows(cross, data, tr, te, eng_tr, eng_te, spec, p_tr,
                                            p_te, m, target, clip)
                        else:
                            prev = fitted[(m, target, spec.label)]
                            g = eng_te.gscore(spec.modelling, spec.distance, prev["tau"])
                            row["rmse_shift"] = _rmse(
                                _predict(prev["theta1"], prev["theta0"], g, clip), p_te)
                            robust.setdefault((ci, m, target, spec.label), []).append(row)
                t_model += time.perf_counter() - t1
                if kind == "main" and baselines:
                    assert msp_pooled is not None
                    conf = _confidence_baseline(x_te, te.values(msp_pooled), te, targets)
                    for j, target in enumerate(targets):
                        p_te = truth_te[:, _METRIC_COL[target]]
                        base.setdefault((m, target, "confidence"), []).append(
                            {"rmse": _rmse(conf[:, j], p_te),
                             **dict(zip(("pearson", "spearman"), _corr(conf[:, j], p_te),
                                        strict=True))})
                        if fd is not None:
                            p_tr = truth_tr[:, _METRIC_COL[target]]
                            t1_, t0_, _ = fit_line(fd[0], p_tr)
                            pred = _predict(t1_, t0_, fd[1], clip)
                            base.setdefault((m, target, "auto_eval"), []).append(
                                {"rmse": _rmse(pred, p_te),
                                 **dict(zip(("pearson", "spearman"), _corr(fd[1], p_te),
                                            strict=True))})
                steps_done += 1
                if step_progress:
                    step_progress(steps_done, steps_total)
    proto_seconds = time.perf_counter() - t_proto

    def nest(rows: Mapping[tuple, dict], depth: int) -> dict:
        out: dict = {}
        for key, val in rows.items():
            d = out
            for k in key[:depth - 1]:
                d = d.setdefault(k, {})
            d[key[depth - 1]] = val
        return out

    robustness = []
    summary_r = _summarise(robust)
    for ci, (kind, c_ratio, c_size) in enumerate(configs, start=1):
        means = np.mean(sizes_seen[ci], axis=0)
        robustness.append({
            "kind": kind, "ratio": ratio_label(c_ratio), "size": c_size,
            "mean_n_id": float(means[0]), "mean_n_ood": float(means[1]),
            "results": nest({k[1:]: v for k, v in summary_r.items() if k[0] == ci}, 3),
        })
    main_sizes = np.mean(sizes_seen[0], axis=0)
    result = {
        "stores": [{"path": sd.path, "model_sha256": sd.sha, "ood_splits": len(sd.ood),
                    "id_test_rows": sd.n_id} for sd in data],
        "config": {"methods": methods, "models": [s.label for s in specs],
                   "targets": targets, "ratio": ratio_label(ratio), "size": size,
                   "sets_per_split": sets_per_split, "repeats": repeats, "seed": seed,
                   "train_fraction": train_fraction, "id_train_fraction": id_train_fraction,
                   "ude_kernel": ude_kernel, "clip": clip, "params": params,
                   "mean_n_id": float(main_sizes[0]), "mean_n_ood": float(main_sizes[1])},
        "splits": names,
        "models": {s.label: s.title for s in specs},
        "table": nest(_summarise(main), 3),
        "baselines": nest(_summarise(base), 3),
        "baseline_note": baseline_note,
        "robustness": robustness,
        "cross_store": nest(_summarise(cross), 5) if cross else {},
        "skipped": skipped,
        "meta_sets": n_sets_total,
        "set_evaluations": n_sets_total * len(methods),
        "seconds": {"scoring": score_seconds, "protocol": proto_seconds,
                    "modelling_and_regression": t_model, "true_metrics": t_truth,
                    "total": time.perf_counter() - t_start},
    }
    return _json_safe(result)


def _cross_rows(cross: dict, data: Sequence[_StoreData], tr: _Sets, te: _Sets,
                eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
                p_te: np.ndarray, method: str, target: str, clip: bool) -> None:
    """Model fitted on store a's meta-train sets, tested on store b's meta-test sets."""
    for a in data:
        rows_a = np.flatnonzero(tr.store == a.index)
        if rows_a.size < 2:
            continue
        fit = _fit_spec(eng_tr, spec, p_tr[rows_a], rows_a)
        g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
        for b in data:
            rows_b = np.flatnonzero(te.store == b.index)
            if rows_b.size == 0:
                continue
            pred = _predict(fit["theta1"], fit["theta0"], g_te[rows_b], clip)
            pr, sp = _corr(g_te[rows_b], p_te[rows_b])
            cross.setdefault((method, target, spec.label, a.path, b.path), []).append(
                {"rmse": _rmse(pred, p_te[rows_b]), "pearson": pr, "spearman": sp})
