"""Grid floors of the sweep section of `benchmarks.bench_quick` (issue 19).

The sweep goal compares the whole default grid with ONE setting (construct + fit + score).
Part of a grid's work cannot be shared between settings, whatever the code does: a
temperature needs its own exp pass, an ASH percentile its own product of differently pruned
features, an ODIN-perturbed setting its own stored logits. This module measures that part
bare, so the table can say whether a ratio above the goal is the machine's or the code's:

    grid floor = one setting (measured, construct + fit + score)
                 + sum over the other settings of the bare work that setting alone needs

on the scored splits (`bench_sweep.A_SPLITS`), CPU seconds, arrays already in RAM, fastest
of `REPEATS` runs; the caller holds BLAS at one thread. The bare per-setting work, per scorer
(`PER_SETTING`; what can be shared, e.g. the float64 copy and the row max of the logits, is
outside it):

- energy, odin: one temperature's logsumexp pass over the float64 logits whose row max is
  known: z = l / T - m / T, exp, row sum, log (float64, as the scorers compute).
- odin_perturbed, ip_ts_mlv: the setting's stored (N, C) extra read with one h5py call, plus
  its pass (the logsumexp pass above; the row max / T).
- scale: one percentile's logsumexp(exp(s1 / s2) * z + b) over (N, C) (z = h @ W.T shared).
- ash, dice, react: one float32 sgemm of the scored rows (N x D) with the head (D x C), the
  operands of a setting (pruned / clipped features, masked head) differ per setting, plus the
  logsumexp pass of its logits. (ASH and DICE share nested kept sets as running sums, so
  they can come in under this floor.)
- knn: the grid is one search at its largest K; the other K read a column of it. The floor
  is one setting AT the largest K (measured like the one setting): FAISS's top-K selection
  costs more at K = 1000 than at K = 50 (its result handler keeps and sorts K per query).
- nnguide: a one-setting grid; the floor is the one setting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.bench_sweep import A_SPLITS
from featstore.extra_keys import odin_name

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


def _lse_pass(z64: np.ndarray, m: np.ndarray, temperature: float) -> np.ndarray:
    """One temperature's pass: log sum exp(l / T - m / T) + m / T, l and m given."""
    z = z64 / temperature
    mt = m / temperature
    z -= mt[:, None]
    np.exp(z, out=z)
    return mt + np.log(z.sum(axis=1))


class _Arrays:
    """The scored splits' arrays in RAM (read once, outside every timing)."""

    def __init__(self, store: Any):
        self.store = store
        self.splits = [store.split(name) for name in A_SPLITS]
        w, b = store.head
        self.wt32 = np.ascontiguousarray(np.asarray(w, dtype=np.float32).T)
        self.bias = np.asarray(b, dtype=np.float64)
        self._cache: dict[str, list[np.ndarray]] = {}

    def get(self, what: str) -> list[np.ndarray]:
        if what not in self._cache:
            if what == "logits64":
                arrs = [np.asarray(s.read("logits"), dtype=np.float64) for s in self.splits]
            elif what == "max":
                arrs = [a.max(axis=1) for a in self.get("logits64")]
            elif what == "features":
                arrs = [np.asarray(s.read("features"), dtype=np.float32) for s in self.splits]
            elif what == "z64":   # h @ W.T in float64, SCALE's shared product
                arrs = [f.astype(np.float64) @ self.wt32.astype(np.float64)
                        for f in self.get("features")]
            else:
                raise KeyError(what)
            self._cache[what] = arrs
        return self._cache[what]


def _temperature(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
    z, m = arr.get("logits64"), arr.get("max")
    return lambda: [_lse_pass(a, b, float(s["temperature"])) for a, b in zip(z, m, strict=True)]


def _perturbed(arr: _Arrays, s: dict[str, Any], max_only: bool = False) -> Callable[[], Any]:
    t = float(s["temperature"])
    names = [sp.dataset(f"extra:{odin_name(t, s['epsilon'])}") for sp in arr.splits]

    def run() -> None:
        for ds in names:
            l64 = np.asarray(ds[()], dtype=np.float64)
            m = l64.max(axis=1)
            if max_only:
                m / t
            else:
                _lse_pass(l64, m, t)
    return run


def _scale(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
    zs = arr.get("z64")
    rng = np.random.default_rng(0)
    factors = [np.exp(rng.uniform(0.5, 1.0, len(z))) for z in zs]   # exp(s1 / s2) stand-in

    def run() -> None:
        for z, f in zip(zs, factors, strict=True):
            y = z * f[:, None]
            y += arr.bias
            _lse_pass(y, y.max(axis=1), 1.0)
    return run


def _gemm(arr: _Arrays, s: dict[str, Any]) -> Callable[[], Any]:
    """A setting's own float32 sgemm of the scored rows with the head (its operands differ
    per setting; the cost does not depend on the values), then its logsumexp pass."""
    feats = arr.get("features")

    def run() -> None:
        for x in feats:
            y = (x @ arr.wt32).astype(np.float64)
            y += arr.bias
            _lse_pass(y, y.max(axis=1), 1.0)
    return run


# scorer -> (what one more setting costs at least, its bare work)
PER_SETTING: dict[str, tuple[str, Callable[[_Arrays, dict[str, Any]], Callable[[], Any]]]] = {
    "energy": ("a logsumexp pass per temperature", _temperature),
    "odin": ("a logsumexp pass per temperature", _temperature),
    "odin_perturbed": ("a read of the setting's stored logits + a logsumexp pass", _perturbed),
    "ip_ts_mlv": ("a read of the setting's stored logits + a max pass",
                  lambda a, s: _perturbed(a, s, max_only=True)),
    "scale": ("a scaled logsumexp pass per percentile", _scale),
    "ash": ("an N x D x C sgemm + logsumexp per percentile", _gemm),
    "dice": ("an N x D x C sgemm + logsumexp per p", _gemm),
    "react": ("an N x D x C sgemm + logsumexp per percentile", _gemm),
}
# scorers whose grid is one search at the largest K
AT_LARGEST = {"knn": "K", "nnguide": "K"}


def grid_floor(name: str, store: Any, settings: list[dict[str, Any]], one: dict[str, Any],
               t_one: float, time_setting: Callable[[dict[str, Any]], float]
               ) -> Floor | None:
    """The grid floor of `name` (None for a scorer without one here). `t_one`: the one
    setting's measured CPU s; `time_setting(s)`: CPU s of construct + fit + score of s."""
    if name in AT_LARGEST:
        key = AT_LARGEST[name]
        top = max(settings, key=lambda s: s[key])
        if top == one:
            return Floor(t_one, "the one setting (the grid's largest K)")
        return Floor(time_setting(top), f"one setting at {key}={top[key]} (the grid's search)")
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
