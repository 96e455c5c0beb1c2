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
