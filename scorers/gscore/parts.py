"""The IND/OOD Gaussians of a set (`Pair`), their edge-case rules and the distances.

Distances (1 = IND, 2 = OOD): l2 |mu_1 - mu_2|; kl the paper's eq. (1)
log(s1/s2) + (s2^2 + (mu_1 - mu_2)^2) / (2 s1^2) - 1/2 with s1 = sd_ind (kl_rev swaps the
sigmas); wasserstein the paper's eq. (2) (mu_1 - mu_2)^2 + (s1 - s2)^2; w2 its square root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from featstore.errors import UsageError

from .spec import DISTANCES, SIGMA_FLOOR_REL


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

def _row_std(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    valid = np.arange(x.shape[1])[None, :] < n[:, None]
    mean = np.where(valid, x, 0.0).sum(axis=1) / n
    return np.sqrt(np.where(valid, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / n)

def _clean(g: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(g), 0.0, np.minimum(g, np.finfo(np.float64).max))


def _row_of(pair: Pair, i: int) -> Pair:
    return Pair(*(np.asarray(getattr(pair, f))[i] for f in
                  ("mu_ind", "sd_ind", "mu_ood", "sd_ood", "n_ind", "n_ood")))


# =============================================================================== regression
