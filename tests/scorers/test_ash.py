"""ASH (scorers/methods/ash.py). References: Djurisic et al. 2023's official ash_p / ash_b /
ash_s transcribed here row by row in NumPy (ties at the k-th value broken by lowest index),
energy by `scipy.special.logsumexp`, compared at rtol 1e-6 with the scorer in 97-row chunks;
a separate construct/fit/score per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_ash(store: Store, split: str, variant: str = "b", percentile: float = 90) -> np.ndarray:
    """Djurisic et al. 2023 (official ash_p/ash_b/ash_s), row by row: keep the k largest
    entries, ties at the k-th value broken by lowest index."""
    w, b = refs.head(store)
    x = refs.feats(store, split)
    d = x.shape[1]
    k = d - int(np.round(d * percentile / 100.0))
    shaped = np.zeros_like(x)
    for i, row in enumerate(x):
        kth = np.sort(row)[::-1][k - 1]
        keep = row > kth
        keep[np.flatnonzero(row == kth)[: k - keep.sum()]] = True
        s1 = row.sum()
        if variant == "p":
            shaped[i] = np.where(keep, row, 0.0)
        elif variant == "b":
            shaped[i] = np.where(keep, s1 / k, 0.0)
        else:
            pruned = np.where(keep, row, 0.0)
            shaped[i] = pruned * np.exp(s1 / pruned.sum())
    return refs.energy(shaped @ w.T + b)


CASES = [{"variant": v, "percentile": p} for v in ("p", "b", "s") for p in (65, 90)]


@pytest.mark.parametrize("params", CASES, ids=[f"{c['variant']}-{c['percentile']}"
                                                for c in CASES])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the row-by-row transcription of the official code."""
    kit.assert_chunked_matches_reference(shared_store, "ash", params, ref_ash)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "ash")


@pytest.mark.parametrize("variant", ["p", "b", "s"])
def test_default_grid_equals_separate_runs(shared_store, variant):
    kit.assert_grid_equals_separate(shared_store, "ash", {"variant": variant})


def test_explicit_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "ash", {},
                                    {"variant": ["p", "b", "s"], "percentile": [50, 95]})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["ash"]
    assert row["defaults"] == {"variant": "b", "percentile": 90}
    assert row["grid"] == {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    assert row["paper"]


@pytest.mark.parametrize("value", kit.BAD_PERCENTILES)
def test_bad_percentile(value):
    kit.assert_bad_percentile("ash", "percentile", value)


def test_bad_ash_variant_and_empty_keep(shared_store):
    with pytest.raises(ValueError, match=r"variant must be one of p, b, s \(got 'q'\)"):
        get_scorer("ash", variant="q")
    kit.assert_keeps_no_activation("ash", shared_store)
