"""ASH (scorers/methods/ash.py). References: Djurisic et al. 2023's official ash_p / ash_b /
ash_s transcribed here row by row in NumPy (ties at the k-th value broken by lowest index),
energy by `scipy.special.logsumexp`, compared at rtol 1e-6 with the scorer in 97-row chunks;
a separate construct/fit/score per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    assert_chunked_matches_reference,
    assert_grid_equals_separate,
    assert_id_mean_above,
    energy,
    feats,
    head,
)

from featstore import Store
from scorers import get_scorer, list_scorers


def ref_ash(store: Store, split: str, variant: str = "b", percentile: float = 90) -> np.ndarray:
    """Djurisic et al. 2023 (official ash_p/ash_b/ash_s), row by row: keep the k largest
    entries, ties at the k-th value broken by lowest index."""
    w, b = head(store)
    x = feats(store, split)
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
    return energy(shaped @ w.T + b)


CASES = [{"variant": v, "percentile": p} for v in ("p", "b", "s") for p in (65, 90)]


@pytest.mark.parametrize("params", CASES, ids=[f"{c['variant']}-{c['percentile']}"
                                                for c in CASES])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the row-by-row transcription of the official code."""
    assert_chunked_matches_reference(shared_store, "ash", params, ref_ash)


def test_sign_id_above_far_ood(shared_store):
    assert_id_mean_above(shared_store, "ash")


@pytest.mark.parametrize("variant", ["p", "b", "s"])
def test_default_grid_equals_separate_runs(shared_store, variant):
    assert_grid_equals_separate(shared_store, "ash", {"variant": variant})


def test_explicit_grid_equals_separate_runs(shared_store):
    assert_grid_equals_separate(shared_store, "ash", {},
                                {"variant": ["p", "b", "s"], "percentile": [50, 95]})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["ash"]
    assert row["defaults"] == {"variant": "b", "percentile": 90}
    assert row["grid"] == {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    assert row["paper"]


@pytest.mark.parametrize("value", [0, 100, 150, -5])
def test_bad_percentile(value):
    with pytest.raises(ValueError,
                       match=rf"percentile must be in \(0, 100\) \(got {value}\)"):
        get_scorer("ash", percentile=value)


def test_bad_ash_variant_and_empty_keep(shared_store):
    with pytest.raises(ValueError, match=r"variant must be one of p, b, s \(got 'q'\)"):
        get_scorer("ash", variant="q")
    # D=32: k = 32 - round(31.68) = 0 activations kept.
    with pytest.raises(ValueError, match=r"percentile 99 keeps no activation of D=32"):
        get_scorer("ash", percentile=99).fit(shared_store)
