"""RankFeat (scorers/methods/rankfeat.py). References: Song et al. 2022's rank-1 removal with
numpy's SVD per map, average pool and energy at T (`scipy.special.logsumexp`), compared at
rtol 1e-6 with the scorer in 97-row chunks, on feature maps built on RankFeat's premise; a
separate construct/fit/score per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def rankfeat_arrays(seed: int, dim: int, hw: tuple[int, int], n: int = 120) -> dict:
    """Feature maps built on RankFeat's premise: an ID map is a sum of three class-aligned
    rank-1 terms of comparable strength on disjoint channel groups and disjoint spatial
    positions (removing the top one leaves the others' class evidence); an OOD map is
    dominated by one strong direction (removing it leaves only noise). Features are the maps'
    global average pool and the logits go through the head, as at extraction."""
    rng = np.random.default_rng(seed)
    num_classes = 4
    means = np.maximum(rng.normal(0.0, 1.5, size=(num_classes, dim)), 0.0) + 0.1
    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    h, w = hw
    groups = np.arange(dim) % 3
    places = np.arange(h * w) % 3

    def id_maps(count: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(count) % num_classes
        maps = np.zeros((count, dim, h * w))
        for g in range(3):
            channel = 3.0 * means[y] * (groups == g) * rng.uniform(0.8, 1.2, size=(count, dim))
            spatial = (places == g) * rng.uniform(0.5, 1.5, size=(count, h * w))
            maps += channel[:, :, None] * spatial[:, None, :]
        maps += np.abs(rng.normal(0.0, 0.05, size=maps.shape))
        return maps.reshape(count, dim, h, w).astype(np.float32), y

    def ood_maps(count: int) -> np.ndarray:
        direction = np.abs(rng.normal(0.0, 1.0, size=(count, dim)))
        spatial = rng.uniform(0.5, 1.5, size=(count, h * w))
        maps = 3.0 * direction[:, :, None] * spatial[:, None, :]
        maps += np.abs(rng.normal(0.0, 0.05, size=maps.shape))
        return maps.reshape(count, dim, h, w).astype(np.float32)

    splits = {}
    maps, y = id_maps(n)
    splits["id/test"] = {"features": maps.mean(axis=(2, 3)), "labels": y,
                         "extras": {"feature_maps": maps}}
    maps = ood_maps(n)
    splits["ood/far/rank1"] = {"features": maps.mean(axis=(2, 3)),
                               "extras": {"feature_maps": maps}}
    return {"head": (weight, bias), "splits": splits}


@pytest.fixture(scope="module", params=[(16, (3, 3)), (4, (3, 3))], ids=["hw<=C", "hw>C"])
def maps_store(request, tmp_path_factory) -> Store:
    dim, hw = request.param
    path = tmp_path_factory.mktemp("maps") / "store"
    arrays = rankfeat_arrays(seed=5, dim=dim, hw=hw)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


def ref_rankfeat(store: Store, split: str, temperature: float = 1.0) -> np.ndarray:
    """Song et al. 2022: subtract s1 u1 v1^T (numpy SVD) from each map, pool, energy at T."""
    w, b = refs.head(store)
    maps = np.asarray(store.split(split).extra("feature_maps"), dtype=np.float64)
    pooled = np.empty(maps.shape[:2])
    for i, m in enumerate(maps.reshape(len(maps), maps.shape[1], -1)):
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        pooled[i] = (m - s[0] * np.outer(u[:, 0], vt[0])).mean(axis=1)
    return temperature * sp_logsumexp((pooled @ w.T + b) / temperature, axis=1)


@pytest.mark.parametrize("params", [{}, {"temperature": 2.0}])
def test_rankfeat_matches_reference(maps_store, params):
    scorer = kit.fitted("rankfeat", maps_store, **params)
    for split in ("id/test", "ood/far/rank1"):
        np.testing.assert_allclose(scorer.score(maps_store.split(split)),
                                   ref_rankfeat(maps_store, split, **params), rtol=1e-6,
                                   atol=1e-10)


def test_sign_rankfeat(maps_store):
    """Data built on RankFeat's premise (OOD maps dominated by one singular direction; the
    structured store has no maps), where removing the rank-1 part must hurt OOD more."""
    scorer = kit.fitted("rankfeat", maps_store)
    assert (scorer.score(maps_store.split("id/test")).mean()
            > scorer.score(maps_store.split("ood/far/rank1")).mean())


def test_rankfeat_grid_equals_separate_runs(maps_store):
    kit.assert_grid_equals_separate(maps_store, "rankfeat", {}, {"temperature": [0.5, 1.0, 2.0]})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["rankfeat"]
    assert row["defaults"] == {"temperature": 1.0} and row["grid"] == {}
    assert row["paper"]
    assert row["needs"] == ["extra:feature_maps", "head"]


def test_bad_temperature():
    with pytest.raises(ValueError, match=r"temperature must be a finite number > 0 \(got 0\)"):
        get_scorer("rankfeat", temperature=0)


def test_rankfeat_without_maps_names_the_flag(shared_store):
    scorer = get_scorer("rankfeat").fit(shared_store)  # no fit split: nothing to check yet
    with pytest.raises(FeatstoreError, match=r"ExtractOptions\(feature_maps=True\)") as info:
        scorer.score(shared_store.split("id/test"))
    assert info.value.need == "extra:feature_maps"
    with pytest.raises(FeatstoreError, match=r"ExtractOptions\(feature_maps=True\)"):
        scorer.score_grid(shared_store.split("id/test"), {"temperature": [1.0, 2.0]})
