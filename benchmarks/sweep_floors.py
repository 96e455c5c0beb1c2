"""Grid floors of the sweep section of `benchmarks.bench_quick` (issue 19).

The sweep goal compares the whole default grid with ONE setting (construct + fit + score).
Part of a grid's work cannot be shared between settings, whatever the code does: a
temperature needs its own exp pass, an ASH percentile its own product of differently pruned
features, an ODIN-perturbed setting its own stored logits. This module measures that part
bare, so the table can say whether a ratio above the goal is the machine's or the code's:

    grid floor = one setting (measured, construct + fit + score)
                 + sum over the other settings of the bare work that setting alone needs

on the scored splits (`bench_sweep.A_SPLITS`), CPU seconds, arrays already in RAM, fastest
of `REPEATS` runs; the caller holds BLAS at one thread. A setting's pass over its logits is
the issue's logit floor core op (`benchmarks.floors.CORE_OPS`: one NumPy float32 pass of max /
softmax / logsumexp; temperatures and the remaining per-row arithmetic not counted). The bare
per-setting work, per scorer (`PER_SETTING`):

- energy, odin: one temperature's core-op pass (logsumexp, softmax) over the logits.
- odin_perturbed, ip_ts_mlv: the setting's stored (N, C) extra read with one h5py call, plus
  its core-op pass (softmax; max).
- scale: one percentile's logsumexp pass over its rescaled logits exp(s1 / s2) * z + b
  (the rescale and the pass; z = h @ W.T is shared).
- ash, dice, react: one float32 sgemm of the scored rows (N x D) with the head (D x C), the
  operands of a setting (pruned / clipped features, masked head) differ per setting, plus the
  logsumexp pass of its logits. (ASH and DICE share nested kept sets as running sums, so
  they can come in under this floor.)
- knn: the grid is one search at its largest K; the other K read a column of it. The floor
  is one setting AT the largest K (measured like the one setting): FAISS's top-K selection
  costs more at K = 1000 than at K = 50 (its result handler keeps and sorts K per query).
- nnguide: a one-setting grid; the floor is the one setting.
- gen: per distinct gamma beyond the one setting's, one float32 exp pass over the top
  min(max M, C) entries of every row (settings of one gamma share it: running sums over M).
- oodl: per nu beyond the one setting's, its libsvm solve on the shared Gram matrix, its
  decision matvec, and (once over the grid) the scored rows' kernel rows against the support
  vectors the one setting's model does not have (`_oodl_floor`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.bench_sweep import A_SPLITS
from benchmarks.floors import CORE_OPS
from featstore.store.extra_keys import odin_name

REPEATS = 3
AT_FLOOR = 1.3   # a grid within this factor of its floor is "at the floor" (GEMM goal's bar)


@dataclass
class Floor:
    cpu_s: float     # the grid floor, CPU s
    what: str        # the per-setting work it adds (or how it is made)


def _best(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


class _Arrays:
    """The scored splits' arrays in RAM (read once, outside every timing)."""

    def __init__(self, store: Any):
        self.splits = [store.split(name) for name in A_SPLITS]
        w, b = store.head
        self.wt32 = np.ascontiguousarray(np.asarray(w, dtype=np.float32).T)
        self.bias32 = np.asarray(b, dtype=np.float32)
        self._cache: dict[str, list[np.ndarray]] = {}

    def get(self, what: str) -> list[np.ndarray]:
        if what not in self._cache:
            if what == "logits":
                arrs = [np.asarray(s.read("logits"), dtype=np.float32) for s in self.splits]
            elif what == "features":
                arrs = [np.asarray(s.read("features"), dtype=np.float32) for s in self.splits]
            elif what == "z":   # h @ W.T, SCALE's shared product
                arrs = [f @ self.wt32 for f in self.get("features")]
            else:
                raise KeyError(what)
            self._cache[what] = arrs
        return self._cache[what]


def _temperature(core: str) -> Callable[[_Arrays, dict[str, Any]], Callable[[], Any]]:
    def make(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
        logits, op = arr.get("logits"), CORE_OPS[core]
        return lambda: [op(x) for x in logits]
    return make


def _perturbed(core: str) -> Callable[[_Arrays, dict[str, Any]], Callable[[], Any]]:
    def make(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
        name = odin_name(float(s["temperature"]), s["epsilon"])
        datasets = [sp.dataset(f"extra:{name}") for sp in arr.splits]
        op = CORE_OPS[core]
        return lambda: [op(ds[()]) for ds in datasets]
    return make


def _scale(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
    zs = arr.get("z")
    rng = np.random.default_rng(0)
    factors = [np.exp(rng.uniform(0.5, 1.0, (len(z), 1))).astype(np.float32) for z in zs]

    def run() -> None:
        for z, f in zip(zs, factors, strict=True):
            y = z * f
            y += arr.bias32
            CORE_OPS["logsumexp"](y)
    return run


def _gemm(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
    """A setting's own float32 sgemm of the scored rows with the head (its operands differ
    per setting; the cost does not depend on the values), then its logsumexp pass."""
    feats = arr.get("features")

    def run() -> None:
        for x in feats:
            y = x @ arr.wt32
            y += arr.bias32
            CORE_OPS["logsumexp"](y)
    return run


# scorer -> (what one more setting costs at least, its bare work)
PER_SETTING: dict[str, tuple[str, Callable[[_Arrays, dict[str, Any]], Callable[[], Any]]]] = {
    "energy": ("a logsumexp pass per temperature", _temperature("logsumexp")),
    "odin": ("a softmax pass per temperature", _temperature("softmax")),
    "odin_perturbed": ("a read of the setting's stored logits + a softmax pass",
                       _perturbed("softmax")),
    "ip_ts_mlv": ("a read of the setting's stored logits + a max pass", _perturbed("max")),
    "scale": ("a rescale + logsumexp pass per percentile", _scale),
    "ash": ("an N x D x C sgemm + logsumexp per percentile", _gemm),
    "dice": ("an N x D x C sgemm + logsumexp per p", _gemm),
    "react": ("an N x D x C sgemm + logsumexp per percentile", _gemm),
}
# scorers whose grid is one search at the largest K
AT_LARGEST = {"knn": "K", "nnguide": "K"}


def _gen_floor(store: Any, settings: list[dict[str, Any]], one: dict[str, Any],
               t_one: float) -> Floor:
    """GEN: settings of one gamma share everything but a column lookup (running sums over
    the top max(M) probabilities of each row); each further distinct gamma needs one pass of
    (p (1 - p))^gamma = exp(gamma log(p (1 - p))) over the top min(max M, C) entries of every
    row: a float32 multiply + exp over an (N, min(max M, C)) array per such gamma."""
    arr = _Arrays(store)
    logits = arr.get("logits")
    width = min(max(int(s["M"]) for s in settings), logits[0].shape[1])
    rng = np.random.default_rng(0)
    lqs = [np.log(rng.uniform(1e-6, 0.25, (len(x), width))).astype(np.float32) for x in logits]
    gammas = sorted({float(s["gamma"]) for s in settings} - {float(one["gamma"])})
    extra = sum(_best(lambda g=g: [np.exp(np.float32(g) * lq) for lq in lqs]) for g in gammas)
    return Floor(t_one + extra, f"an exp pass over the top min(max M, C) = {width} per "
                                "distinct gamma")


def _oodl_floor(store: Any, settings: list[dict[str, Any]], one: dict[str, Any],
                t_one: float, base: dict[str, Any]) -> Floor:
    """OODL: the scaler, the subsample, the Gram matrix of the fitted rows and the transform of
    the scored rows are shared by every nu; each further nu needs its own libsvm solve on that
    Gram matrix (sklearn OneClassSVM(kernel="precomputed", nu).fit, bare), and the scored rows'
    kernel rows against its support vectors that the one setting's model does not already
    have (each such support vector counted once over the grid: float64 BLAS + exp, the
    scorer's `rbf_kernel`), plus its decision matvec."""
    from sklearn.svm import OneClassSVM

    from scorers import get_scorer
    from scorers.methods.oodl import rbf_kernel, row_norms_sq

    fitted = get_scorer("oodl", **{**base, **one}).fit(store)
    prep = fitted.prep
    gram = rbf_kernel(prep.x_fit, prep.x_fit, prep.gamma, prep.x_sq, prep.x_sq)
    z = np.concatenate([prep.transform(np.asarray(sp.read("features")))
                        for sp in _Arrays(store).splits])
    z_sq = row_norms_sq(z)
    others = [float(s["nu"]) for s in settings if s != one]
    models = {nu: OneClassSVM(kernel="precomputed", nu=nu, cache_size=64).fit(gram)
              for nu in others}
    solves = sum(_best(lambda nu=nu: OneClassSVM(kernel="precomputed", nu=nu,
                                                 cache_size=64).fit(gram)) for nu in others)
    extra = np.setdiff1d(np.concatenate([m.support_ for m in models.values()] or [[]]),
                         fitted.model.support_).astype(np.int64)
    sv, sv_sq = prep.x_fit[extra], prep.x_sq[extra]
    rows = _best(lambda: rbf_kernel(z, sv, prep.gamma, z_sq, sv_sq)) if extra.size else 0.0
    k_all = rbf_kernel(z, prep.x_fit, prep.gamma, z_sq, prep.x_sq)
    matvecs = sum(_best(lambda m=m: k_all[:, m.support_] @ m.dual_coef_[0])
                  for m in models.values())
    return Floor(t_one + solves + rows + matvecs,
                 f"a libsvm solve per nu on the shared Gram + kernel rows of the {extra.size} "
                 "support vectors beyond the one setting's + a matvec per nu")


def grid_floor(name: str, store: Any, settings: list[dict[str, Any]], one: dict[str, Any],
               t_one: float, time_setting: Callable[[dict[str, Any]], float],
               base: dict[str, Any] | None = None) -> Floor | None:
    """The grid floor of `name` (None for a scorer without one here). `t_one`: the one
    setting's measured CPU s; `time_setting(s)`: CPU s of construct + fit + score of s;
    `base`: the parameters the bench holds fixed (oodl's max_train)."""
    if name in AT_LARGEST:
        key = AT_LARGEST[name]
        top = max(settings, key=lambda s: s[key])
        if top == one:
            return Floor(t_one, "the one setting (the grid's largest K)")
        return Floor(time_setting(top), f"one setting at {key}={top[key]} (the grid's search)")
    if name == "gen":
        return _gen_floor(store, settings, one, t_one)
    if name == "oodl":
        return _oodl_floor(store, settings, one, t_one, base or {})
    if name not in PER_SETTING:
        return None
    what, make = PER_SETTING[name]
    arr = _Arrays(store)
    extra = sum(_best(make(arr, s)) for s in settings if s != one)
    return Floor(t_one + extra, what)


def verdict(ratio_one: float, ratio_floor: float | None, goal: float) -> str:
    """'met', or why not: at the floor (the per-setting work the machine must do) or above."""
    if ratio_one <= goal:
        return "met"
    if ratio_floor is None:
        return "**not met** (no floor measured)"
    if ratio_floor <= AT_FLOOR:
        return (f"**not met**: at the floor ({ratio_floor:.2f}x; the work no setting can "
                "share exceeds the goal)")
    return f"**not met**: {ratio_floor:.2f}x the floor"
