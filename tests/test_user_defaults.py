"""One defaults rule for the CLI and the API (issue 29, item 5): `get_scorer(name).fit(store)`
clamps a default the store makes invalid exactly as `evaluate` (the CLI's path) does, with a
FeatstoreWarning and `scorer.adjusted`; a degenerate clamp says so. References: the clamped
value written out by hand (dim = N - 1 with N id/train rows < D) and the scores of a scorer
given that value explicitly."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreWarning, UsageError
from scorers import get_scorer
from scorers.evaluate import evaluate
from scorers.sweep import plan_settings


@pytest.fixture
def small_store(tmp_path) -> Store:
    """D = 128 features (default dim 64), 40 id/train rows, a linear head of 4 classes."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 128)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)

    def split(n: int, shift: float, labelled: bool) -> dict:
        f = (rng.normal(size=(n, 128)) + shift).astype(np.float32)
        out = {"features": f}
        if labelled:
            out["labels"] = rng.integers(0, 4, n)
        return out

    return Store.from_arrays(tmp_path / "st", head=(w, b), splits={
        "id/train": split(40, 0.0, True), "id/test": split(30, 0.0, True),
        "ood/far/x": split(30, 1.0, False)})


@pytest.mark.parametrize("name", ["vim", "residual"])
def test_api_clamps_like_the_cli(small_store, name):
    with pytest.warns(FeatstoreWarning, match=r"dim=64 -> dim=39 .*DEGENERATE at dim = N - 1"):
        scorer = get_scorer(name).fit(small_store)
    assert scorer.params["dim"] == 39
    assert [a["used"] for a in scorer.adjusted] == [{"dim": 39}]
    cli = evaluate(small_store, [name], use_cache=False)["methods"][name]
    assert cli["adjusted"] == scorer.adjusted and cli["params"]["dim"] == 39
    explicit = get_scorer(name, dim=39).fit(small_store)
    assert explicit.adjusted == []
    split = small_store.split("ood/far/x")
    np.testing.assert_array_equal(scorer.score(split), explicit.score(split))
    # the user's own value is never changed
    with pytest.raises(UsageError, match="dim"):
        get_scorer(name, dim=50).fit(small_store)


def _tiny_store(path, rows: int, d: int) -> Store:
    """`rows` id/train rows of D = `d` non-negative features, a 3-class linear head."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(3, d)).astype(np.float32)

    def split(n: int, labelled: bool) -> dict:
        out = {"features": np.abs(rng.normal(size=(n, d))).astype(np.float32)}
        if labelled:
            out["labels"] = rng.integers(0, 3, n)
        return out

    return Store.from_arrays(path, head=(w, np.zeros(3, np.float32)), splits={
        "id/train": split(rows, True), "id/test": split(20, True), "ood/far/x": split(20, False)})


@pytest.mark.parametrize(("name", "rows", "d", "needle"), [
    # nnguide: bank = ceil(0.01 * 200) = 2 rows; the default K=100 needs 100 / 0.01 rows
    ("nnguide", 200, 8, r"K=100 -> K=2 .*DEGENERATE: K=2 < 5 neighbours and K = the whole "
                        r"2-row bank; the store lacks id/train rows: the default K=100 at "
                        r"alpha 0.01 needs >= 10000 \(it has 200\)"),
    # knn: K=50 over a 30-row bank clamps to the whole bank
    ("knn", 30, 8, r"K=50 -> K=30 .*DEGENERATE: K = the whole 30-row bank; .* needs >= 50 "
                   r"\(it has 30\)"),
    # ash on D = 4: percentile 90 keeps 4 - round(3.6) = 0; clamped to 75 keeps one; D = 5
    # keeps 5 - round(4.5) = 1
    ("ash", 40, 4, r"percentile=90 -> percentile=75.0 .*DEGENERATE: percentile=75 keeps a "
                   r"single one of the D = 4 features; .*needs D >= 5"),
])
def test_degenerate_clamp_names_what_the_store_lacks(tmp_path, name, rows, d, needle):
    st = _tiny_store(tmp_path / "st", rows, d)
    with pytest.warns(FeatstoreWarning, match=needle):
        get_scorer(name).fit(st)
    cli = evaluate(st, [name], use_cache=False)["methods"][name]
    assert "DEGENERATE" in cli["adjusted"][0]["reason"]


def test_api_default_grid_is_fitted_to_the_bank(tmp_path):
    """The API's sweep plan (`scorers.sweep.plan_settings`, what `sweep` and `featstore sweep`
    score): knn's default K [50 .. 1000] scaled by the 200-row bank / 50,000 (by hand: 0.2,
    0.4, 0.8, 2, 4 -> 1, 1, 1, 2, 4 -> [1, 2, 4]), every change noted; an explicit grid is
    never fitted (K beyond the bank is an error)."""
    st = _tiny_store(tmp_path / "st", 200, 8)
    base, settings, adjusted = plan_settings(st, "knn")
    assert base == {} and settings == [{"K": 1}, {"K": 2}, {"K": 4}]
    assert [(a["setting"]["K"], a["used"]["K"]) for a in adjusted] == [
        (50, 1), (100, 1), (200, 1), (500, 2), (1000, 4)]
    assert "bank 200/50000" in adjusted[0]["reason"]
    with pytest.raises(UsageError, match="K=500"):
        plan_settings(st, "knn", {"K": [500]})
