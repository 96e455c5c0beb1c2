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
  stops when the mean per-sample log-likelihood changes by at most `GMM_TOL` (1e-10) relative
  (absolute below |l| = 1) over an iteration, at most `GMM_MAX_ITER` (10,000) EM steps; a fit
  that hits the cap is reported as not converged (JSON `gmm_fits`, a warning), never silently
  used. Each variance is floored at `SIGMA_FLOOR_REL`**2 of the set's variance (sklearn's
  reg_covar made scale free; the floored M step is the exact constrained maximiser, so plain
  EM stays monotone). EM is a Numba kernel over many sets at once (one pass, one exp and one
  log1p per sample and step; large batches split over threads), accelerated with SQUAREM
  (Varadhan & Roland 2008, scheme S3) under a monotonicity safeguard: an extrapolated point is
  accepted only if it lies in the parameter space and its log-likelihood is no lower than the
  plain EM iterate's it extrapolates from, else the plain EM step is taken (scorers/gscore/
  em.py). The tests check the final log-likelihood against sklearn's GaussianMixture from the
  same initialisation on every OOD split of real stores.
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
first value in grid order. As in the paper (supplementary B) tau is tuned on MSP's
meta-train sets and reused for every detector (`tau_from="msp"`, the default; `tau_from=None`
searches it on each detector's own sets), per target metric and variant.
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
- Random partitions (default): each repeat r (seeded by (seed, r)) permutes the OOD split
  names; the first round(train_fraction * S) (at least 1, at most S - 1) are meta-train, the
  rest meta-test — never the same split on both sides (checked, `check_disjoint`).
  Cross-validation (`cv=K`, `repeats` rounds; crossval.py): each round cuts the permuted
  splits into K folds and tests every split once, so every set is tested in every round.
- ID pools: as in the paper (a CIFAR-10 train partition for meta-train sets, the CIFAR-10
  test set for meta-test sets), meta-train and meta-test sets draw their ID rows from
  disjoint random parts of id/test, re-drawn each repeat/round (`id_train_fraction=0.5`,
  the default). With a small id/test (a few hundred rows) every meta-test set shares the
  same ID rows, so the FPR95 threshold (the ~5% lowest ID scores) moves every meta-test
  target at once: that noise is measured, not argued, by `floor` below.
  `id_train_fraction=None` shares one pool between both sides (optimistic: it leaks).
- Each (store, split) gives `sets_per_split` meta-sets, each a seeded subsample without
  replacement: n_id:n_ood = `ratio`, n_id + n_ood = `size`. `size=None` takes the largest
  set with that ratio the two pools allow. A requested size larger than a pool is scaled
  down with the ratio kept; each side keeps at least one sample. The actual mean sizes are
  reported.
- True metric of a meta-set: `scorers.metrics.ood_metrics` on its own ID vs OOD rows (percent).
  Per partition (random) or round (cv): `rmse` of the (clipped) prediction against these
  sampled targets; `rmse_split` against the split-level target of the set's OOD split (all
  id/test rows vs every row of the split: no subsampling noise); `floor`: the RMSE against
  the sampled targets of the oracle split-level predictor, the split's metric from the
  meta-train ID rows vs every row of the split (no predictor that knows only the split and
  the meta-train ID rows does better in expectation; it measures the target noise); Pearson
  and Spearman between Gscore and the true metric on the meta-test sets (`corr_on="train"`:
  on the meta-train sets; both kept). Each summarised as {"mean", "ci", "std", "n",
  "values"}: the mean over partitions/rounds, its 95% Student-t interval (std ddof 1), and
  every partition's value.
- Baselines, same sets and partitions. Confidence score (paper's baseline): pseudo-label a
  sample ID where MSP > 0.9 (MSP from the same store's logits, whatever the detector) and
  compute the detector's metric against those pseudo-labels; when every sample falls on one
  side the metric is undefined and the chance value is used (AUROC 50, FPR95 95, detection
  error 50, AUPR-In / AUPR-Out = 100 x the pseudo-ID / pseudo-OOD share). Auto-evaluation
  (Deng & Zheng, CVPR 2021): Fréchet distance between the Gaussian of id/train features and
  the Gaussian of the meta-set's features (np.cov, ddof 1), regressed linearly to the metric.
  Exact through n x n matrices: with S_1 = F F^T (F = the centred id/train rows /
  sqrt(N - 1), or from eigh when N > D), tr sqrtm(S_1 S_2) = sum sqrt(eig(Z_c Z_c^T /
  (n - 1))) with Z_c the set's centred rows times F (every pooled row is projected on F
  once); no D x D product per set. The tests check it against scipy.linalg.sqrtm.
- `paper=True` (`--paper`): the paper's settings where the defaults differ, each with its
  source line in `spec.PAPER_PRESET`: one meta-set per split, GMM with a searched tau, the
  UDE kernel as printed, no clipping, correlations on meta-train sets.
- Robustness: the same protocol at other ratios / sizes (meta-train and meta-test at that
  setting, tau re-searched), plus `rmse_shift`: the model fitted at the main setting applied
  to meta-test sets at the other setting (the deployment ratio is unknown in practice).
- Across stores: a model fitted on one store's meta-train sets is applied to another store's
  meta-test sets (its scores, its own id/val reference for UDE).

`fit_gscore` also cross-validates itself over the OOD splits (5 folds, tau search inside each
fold): the RMSE and the 95% quantile of the absolute residuals, which `predict_gscore` turns
into a 95% prediction interval (prediction ± that quantile, clipped like the prediction).

The fitted model (`GscoreModel`) is saved as JSON (never pickle) with the modelling, the
distance, tau, the coefficients, the target metric, the scorer's name and parameters and the
sha256 of the store model(s) it was fitted on; predicting on a store of another model is an
error unless forced. At prediction, the scorer is fitted on and the UDE reference is taken
from the PREDICTED store (its id/train, id/val): those belong to the model being evaluated,
only OOD labels are missing; the fit-time reference is recorded in the JSON for information.
"""

from __future__ import annotations

from .baselines import _confidence_baseline, frechet_distance, frechet_distances
from .em import gmm_params
from .engine import GscoreEngine, kmeans_pair
from .metasets import _Sets, check_disjoint, partition_splits, set_sizes
from .model import GscoreModel, fit_gscore, predict_gscore
from .parts import Pair, distance, pack
from .protocol import evaluate_gscore, gbench_protocol
from .regression import _fit_spec, fit_line, fit_lines, search_tau
from .spec import (
    DEFAULT_MODELS,
    DISTANCES,
    MODELLINGS,
    TARGETS,
    ModelSpec,
    parse_model,
    parse_ratio,
    ratio_label,
)

__all__ = [
    "DEFAULT_MODELS", "DISTANCES", "MODELLINGS", "TARGETS", "GscoreEngine", "GscoreModel",
    "ModelSpec", "Pair", "check_disjoint", "distance", "evaluate_gscore", "fit_gscore",
    "fit_line", "fit_lines", "frechet_distance", "frechet_distances", "gbench_protocol",
    "gmm_params", "kmeans_pair",
    "pack", "parse_model", "parse_ratio", "partition_splits", "predict_gscore", "ratio_label",
    "search_tau", "set_sizes", "_Sets", "_confidence_baseline", "_fit_spec",
]
