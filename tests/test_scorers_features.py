"""Tests for the features+head scorers: vim, residual, react, ash, scale, dice, gradnorm, fdbd,
nci, rankfeat.

References:
- each paper's formula transcribed here in plain full-matrix NumPy/SciPy (no chunking, none of
  the modules' helpers): `ref_*` below, compared at rtol 1e-6 with the scorers run at a small
  chunk size (97 rows) so that the chunked paths are exercised;
- a separate construct/fit/score per setting for `score_grid` (rtol 1e-9);
- torch autograd for GradNorm's gradient norm;
- `np.percentile` over all entries (float64) for ReAct's exact, memory-bounded threshold.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from conftest import structured_arrays
from scipy.special import logsumexp as sp_logsumexp
from scipy.special import softmax as sp_softmax

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from scorers.base import expand_grid

CHUNK = 97
SCORED = ("id/test", "ood/near/blend", "ood/far/faint")
FEATURE_SCORERS = ["vim", "residual", "react", "ash", "scale", "dice", "gradnorm", "fdbd", "nci",
                   "rankfeat"]
SCORERS_DIR = Path(__file__).resolve().parent.parent / "scorers" / "methods"


# --------------------------------------------------------------------------- stores
@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    """The structured store (D=32, C=5), shared by the module's tests (read-only)."""
    path = tmp_path_factory.mktemp("features") / "store"
    arrays = structured_arrays(seed=0)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory) -> Store:
    """D=1040 > 1000, so that ViM's default grid (OpenOOD dim_list [256, 1000]) is valid."""
    path = tmp_path_factory.mktemp("wide") / "store"
    arrays = structured_arrays(seed=3, num_classes=6, dim=1040, n_train=1200, n_val=40,
                               n_test=150, n_ood=80)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


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


def fitted(name: str, store: Store, **params) -> object:
    scorer = get_scorer(name, **params)
    scorer.chunk_rows = CHUNK
    return scorer.fit(store)


# --------------------------------------------------------------------------- references
def feats(store: Store, split: str) -> np.ndarray:
    return np.asarray(store.split(split).features, dtype=np.float64)


def logits(store: Store, split: str) -> np.ndarray:
    return np.asarray(store.split(split).logits, dtype=np.float64)


def head(store: Store) -> tuple[np.ndarray, np.ndarray]:
    w, b = store.head
    return np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)


def energy(z: np.ndarray) -> np.ndarray:
    return sp_logsumexp(z, axis=1)


def vim_dim(d: int, dim: int | None) -> int:
    """The ViM paper's default principal dimension."""
    if dim is not None:
        return dim
    return 1000 if d >= 2048 else 512 if d >= 768 else d // 2


def ref_vim_parts(store: Store, dim: int | None):
    """Wang et al. 2022: origin -pinv(W) b, null space of the uncentered covariance about it.
    The structured head's rows sum to zero (rank C-1); its float32 rounding leaves a ~1e-8
    singular value that pinv must treat as zero (float32 precision of the stored head)."""
    w, b = head(store)
    u = -np.linalg.pinv(w, rtol=max(w.shape) * np.finfo(np.float32).eps) @ b
    xtr = feats(store, "id/train") - u
    cov = xtr.T @ xtr / len(xtr)
    evals, evecs = np.linalg.eigh(cov)
    ns = evecs[:, np.argsort(-evals)[vim_dim(w.shape[1], dim):]]
    alpha = logits(store, "id/train").max(axis=1).mean() / np.linalg.norm(xtr @ ns, axis=1).mean()
    return u, ns, alpha


def ref_vim(store: Store, split: str, dim: int | None = None) -> np.ndarray:
    u, ns, alpha = ref_vim_parts(store, dim)
    r = np.linalg.norm((feats(store, split) - u) @ ns, axis=1)
    return energy(logits(store, split)) - alpha * r


def ref_residual(store: Store, split: str, dim: int | None = None) -> np.ndarray:
    u, ns, _ = ref_vim_parts(store, dim)
    return -np.linalg.norm((feats(store, split) - u) @ ns, axis=1)


def ref_react(store: Store, split: str, percentile: float = 90,
              percentile_split: str = "id/train") -> np.ndarray:
    """Sun et al. 2021: clip at the p-th percentile of all ID activations, then energy."""
    c = np.percentile(np.asarray(store.split(percentile_split).features).ravel(), percentile)
    w, b = head(store)
    return energy(np.minimum(feats(store, split), c) @ w.T + b)


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


def ref_scale(store: Store, split: str, percentile: float = 85) -> np.ndarray:
    """Xu et al. 2024: h * exp(sum(h) / sum of the top-k activations), then energy."""
    w, b = head(store)
    x = feats(store, split)
    d = x.shape[1]
    k = d - int(np.round(d * percentile / 100.0))
    s2 = np.array([np.sort(row)[::-1][:k].sum() for row in x])
    return energy((x * np.exp(x.sum(axis=1) / s2)[:, None]) @ w.T + b)


def ref_dice(store: Store, split: str, p: float = 90) -> np.ndarray:
    """Sun & Li 2022: keep the head weights whose contribution mean(h) * W is above the p-th
    percentile of all C*D contributions."""
    w, b = head(store)
    contrib = feats(store, "id/train").mean(axis=0)[None, :] * w
    mask = contrib > np.percentile(contrib, p)
    return energy(feats(store, split) @ (w * mask).T + b)


def ref_gradnorm(store: Store, split: str) -> np.ndarray:
    """Huang et al. 2021: ||d KL(u || softmax(h W^T + b)) / dW||_1."""
    w, b = head(store)
    x = feats(store, split)
    grad = (sp_softmax(x @ w.T + b, axis=1) - 1.0 / len(b))[:, :, None] * x[:, None, :]
    return np.abs(grad).sum(axis=(1, 2))


def ref_fdbd(store: Store, split: str, distance_as_normalizer: bool = True) -> np.ndarray:
    """Liu & Qin 2024: mean over j != c of |l_c - l_j| / ||w_c - w_j||, over ||h - mu||."""
    w, _ = head(store)
    x, lg = feats(store, split), logits(store, split)
    mu = feats(store, "id/train").mean(axis=0)
    num_classes = w.shape[0]
    out = np.empty(len(x))
    for i in range(len(x)):
        c = int(np.argmax(lg[i]))
        total = sum(abs(lg[i, c] - lg[i, j]) / np.linalg.norm(w[c] - w[j])
                    for j in range(num_classes) if j != c)
        norm = np.linalg.norm(x[i] - mu) if distance_as_normalizer else np.linalg.norm(x[i])
        out[i] = total / (num_classes - 1) / norm
    return out


def ref_nci(store: Store, split: str, alpha: float = 0.0001) -> np.ndarray:
    """OpenOOD v1.5 NCI: w_c . (h - mu_G) / ||h - mu_G|| + alpha ||h||_1."""
    w, _ = head(store)
    x, lg = feats(store, split), logits(store, split)
    centered = x - feats(store, "id/train").mean(axis=0)
    c = lg.argmax(axis=1)
    return (np.sum(w[c] * centered, axis=1) / np.linalg.norm(centered, axis=1)
            + alpha * np.abs(x).sum(axis=1))


def ref_rankfeat(store: Store, split: str, temperature: float = 1.0) -> np.ndarray:
    """Song et al. 2022: subtract s1 u1 v1^T (numpy SVD) from each map, pool, energy at T."""
    w, b = head(store)
    maps = np.asarray(store.split(split).extra("feature_maps"), dtype=np.float64)
    pooled = np.empty(maps.shape[:2])
    for i, m in enumerate(maps.reshape(len(maps), maps.shape[1], -1)):
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        pooled[i] = (m - s[0] * np.outer(u[:, 0], vt[0])).mean(axis=1)
    return temperature * sp_logsumexp((pooled @ w.T + b) / temperature, axis=1)


REFERENCES = {"vim": ref_vim, "residual": ref_residual, "react": ref_react, "ash": ref_ash,
              "scale": ref_scale, "dice": ref_dice, "gradnorm": ref_gradnorm, "fdbd": ref_fdbd,
              "nci": ref_nci}

CASES = [
    ("vim", {}), ("vim", {"dim": 8}), ("vim", {"dim": 27}),
    ("residual", {}), ("residual", {"dim": 5}),
    ("react", {}), ("react", {"percentile": 99}),
    ("react", {"percentile": 50, "percentile_split": "id/val"}),
    ("ash", {"variant": "p", "percentile": 65}), ("ash", {"variant": "p", "percentile": 90}),
    ("ash", {"variant": "b", "percentile": 65}), ("ash", {"variant": "b", "percentile": 90}),
    ("ash", {"variant": "s", "percentile": 65}), ("ash", {"variant": "s", "percentile": 90}),
    ("scale", {}), ("scale", {"percentile": 65}),
    ("dice", {}), ("dice", {"p": 50}),
    ("gradnorm", {}),
    ("fdbd", {"distance_as_normalizer": True}), ("fdbd", {"distance_as_normalizer": False}),
    ("nci", {}), ("nci", {"alpha": 0.1}),
]


# --------------------------------------------------------------------------- (1) formulas
@pytest.mark.parametrize(("name", "params"), CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}"
                              for n, p in CASES])
def test_matches_reference(store, name, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    scorer = fitted(name, store, **params)
    for split in SCORED:
        got = scorer.score(store.split(split))
        assert got.dtype == np.float64 and got.shape == (store.split(split).num_rows,)
        np.testing.assert_allclose(got, REFERENCES[name](store, split, **params),
                                   rtol=1e-6, atol=1e-10, err_msg=f"{name} {params} {split}")


@pytest.mark.parametrize("params", [{}, {"temperature": 2.0}])
def test_rankfeat_matches_reference(maps_store, params):
    scorer = fitted("rankfeat", maps_store, **params)
    for split in ("id/test", "ood/far/rank1"):
        np.testing.assert_allclose(scorer.score(maps_store.split(split)),
                                   ref_rankfeat(maps_store, split, **params), rtol=1e-6,
                                   atol=1e-10)


def test_vim_wide_default_dim_matches_reference(wide_store):
    """D=1040: the paper's rule gives dim=512 (768 <= D < 2048)."""
    scorer = fitted("vim", wide_store)
    np.testing.assert_allclose(scorer.score(wide_store.split("id/test")),
                               ref_vim(wide_store, "id/test", 512), rtol=1e-6, atol=1e-10)


# --------------------------------------------------------------------------- (2) sign
@pytest.mark.parametrize("name", [n for n in FEATURE_SCORERS if n not in ("rankfeat",
                                                                          "residual")])
def test_sign_id_above_far_ood(store, name):
    """Higher = more ID: the ID test split outscores the far OOD cluster on average."""
    scorer = fitted(name, store)
    assert (scorer.score(store.split("id/test")).mean()
            > scorer.score(store.split("ood/far/faint")).mean())


def test_sign_residual(store):
    """Residual fails on ood/far/faint by nature: that cluster is small-magnitude features
    close to the origin u, so every residual norm is small. It must hold on ood/near/blend,
    whose isotropic spread (1.0) exceeds the ID clusters' (0.8) outside the principal space."""
    scorer = fitted("residual", store)
    assert (scorer.score(store.split("id/test")).mean()
            > scorer.score(store.split("ood/near/blend")).mean())


def test_sign_rankfeat(maps_store):
    """Data built on RankFeat's premise (OOD maps dominated by one singular direction; the
    structured store has no maps), where removing the rank-1 part must hurt OOD more."""
    scorer = fitted("rankfeat", maps_store)
    assert (scorer.score(maps_store.split("id/test")).mean()
            > scorer.score(maps_store.split("ood/far/rank1")).mean())


# --------------------------------------------------------------------------- (3) grids
def assert_grid_equals_separate(store: Store, name: str, params: dict, grid=None) -> None:
    scorer = fitted(name, store, **params)
    settings = expand_grid(scorer.grid if grid is None else grid) or [{}]
    alone = [fitted(name, store, **{**params, **setting}) for setting in settings]
    for split in [s for s in ("id/test", "ood/far/faint", "ood/far/rank1") if store.has_split(s)]:
        results = scorer.score_grid(store.split(split), grid)
        assert [s for s, _ in results] == settings
        for (setting, scores), single in zip(results, alone, strict=True):
            np.testing.assert_allclose(scores, single.score(store.split(split)), rtol=1e-9,
                                       atol=1e-12, err_msg=f"{name} {setting} {split}")


@pytest.mark.parametrize(("name", "params"), [
    ("react", {}), ("ash", {"variant": "p"}), ("ash", {"variant": "b"}), ("ash", {"variant": "s"}),
    ("scale", {}), ("dice", {}), ("gradnorm", {}), ("fdbd", {}), ("nci", {}),
])
def test_default_grid_equals_separate_runs(store, name, params):
    assert_grid_equals_separate(store, name, params)


@pytest.mark.parametrize("name", ["vim", "residual"])
def test_vim_default_grid_equals_separate_runs(wide_store, name):
    """ViM/Residual default grid (OpenOOD dim_list [256, 1000]) needs D > 1000."""
    assert get_scorer(name).grid == {"dim": [256, 1000]}
    assert_grid_equals_separate(wide_store, name, {})


@pytest.mark.parametrize(("name", "grid"), [
    ("vim", {"dim": [3, 16, 30]}),           # V[:, 3:] (29 columns), not V[:, :30]
    ("vim", {"dim": [2, 6, 9]}),             # V[:, :9] (9 columns), not V[:, 2:] (30)
    ("residual", {"dim": [1, 16, 31]}),
    ("residual", {"dim": [4, 11]}),
    ("react", {"percentile_split": ["id/train", "id/val"], "percentile": [10, 90]}),
    ("ash", {"variant": ["p", "b", "s"], "percentile": [50, 95]}),
    ("fdbd", {"distance_as_normalizer": [False, True]}),
])
def test_explicit_grid_equals_separate_runs(store, name, grid):
    assert_grid_equals_separate(store, name, {}, grid)


def test_rankfeat_grid_equals_separate_runs(maps_store):
    assert_grid_equals_separate(maps_store, "rankfeat", {}, {"temperature": [0.5, 1.0, 2.0]})


def test_default_grids_and_defaults_are_documented():
    rows = {row["name"]: row for row in list_scorers()}
    expected = {
        "vim": ({"dim": None}, {"dim": [256, 1000]}),
        "residual": ({"dim": None}, {"dim": [256, 1000]}),
        "react": ({"percentile": 90, "percentile_split": "id/train"},
                  {"percentile": [85, 90, 95, 99]}),
        "ash": ({"variant": "b", "percentile": 90},
                {"percentile": [65, 70, 75, 80, 85, 90, 95]}),
        "scale": ({"percentile": 85}, {"percentile": [65, 70, 75, 80, 85, 90, 95]}),
        "dice": ({"p": 90}, {"p": [10, 30, 50, 70, 90]}),
        "gradnorm": ({}, {}),
        "fdbd": ({"distance_as_normalizer": True}, {"distance_as_normalizer": [True, False]}),
        "nci": ({"alpha": 0.0001}, {"alpha": [0.0001, 0.001, 0.01, 0.1]}),
        "rankfeat": ({"temperature": 1.0}, {}),
    }
    for name, (defaults, grid) in expected.items():
        assert rows[name]["defaults"] == defaults and rows[name]["grid"] == grid, name
        assert rows[name]["paper"]
    assert rows["rankfeat"]["needs"] == ["extra:feature_maps", "head"]


# --------------------------------------------------------------------------- (4) params
@pytest.mark.parametrize(("name", "param"), [("react", "percentile"), ("ash", "percentile"),
                                             ("scale", "percentile"), ("dice", "p")])
@pytest.mark.parametrize("value", [0, 100, 150, -5])
def test_bad_percentile(name, param, value):
    with pytest.raises(ValueError, match=rf"{param} must be in \(0, 100\) \(got {value}\)"):
        get_scorer(name, **{param: value})


@pytest.mark.parametrize("name", ["vim", "residual"])
@pytest.mark.parametrize("dim", [32, 40])
def test_bad_vim_dim_at_fit(store, name, dim):
    scorer = get_scorer(name, dim=dim)
    with pytest.raises(ValueError, match=rf"dim must satisfy 1 <= dim < D = 32 \(got {dim}\)"):
        scorer.fit(store)


@pytest.mark.parametrize("name", ["vim", "residual"])
def test_bad_vim_dim_construct_and_grid(store, name):
    for bad in (0, -3, 2.5, "16", True):
        with pytest.raises(ValueError, match="dim"):
            get_scorer(name, dim=bad)
    scorer = fitted(name, store)
    with pytest.raises(ValueError, match=r"1 <= dim < D = 32 \(got 256\)"):
        scorer.score_grid(store.split("id/test"))          # OpenOOD's grid is for D > 1000


def test_vim_zero_residual_is_an_error_not_nan(tmp_path):
    """Train features spanning 3 directions (bias 0, so the origin is 0): dim >= 3 leaves no
    residual and alpha = mean max-logit / 0 would be inf/NaN."""
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(3, 8)).astype(np.float32)
    bias = np.zeros(3, dtype=np.float32)
    x = np.zeros((50, 8), dtype=np.float32)
    x[:, :3] = np.abs(rng.normal(size=(50, 3)))
    st = Store.from_arrays(tmp_path / "s", head=(weight, bias),
                           splits={"id/train": {"features": x}, "id/test": {"features": x}})
    scorer = get_scorer("vim", dim=5).fit(st)
    with pytest.raises(ValueError, match="dim=5 leaves no residual"):
        scorer.score(st.split("id/test"))
    assert np.isfinite(get_scorer("vim", dim=2).fit(st).score(st.split("id/test"))).all()


def rank3_store(path):
    """id/train features in 3 directions of D=8 (bias 0, so u = 0): S has rank 3."""
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(3, 8)).astype(np.float32)
    x = np.zeros((50, 8), dtype=np.float32)
    x[:, :3] = np.abs(rng.normal(size=(50, 3)))
    test = np.abs(rng.normal(size=(20, 8))).astype(np.float32)
    return Store.from_arrays(path, head=(weight, np.zeros(3, dtype=np.float32)),
                             splits={"id/train": {"features": x}, "id/test": {"features": test}})


def test_residual_dim_beyond_rank_is_an_error(tmp_path):
    """rank(S) = 3: dim = 3 is the train span (well defined: the score is minus the test row's
    norm outside the first 3 coordinates, computed here by hand); dim = 4 or 5 would add
    arbitrary null-space directions, and is an error naming the rank."""
    st = rank3_store(tmp_path / "s")
    test = st.split("id/test").read("features").astype(np.float64)
    got = get_scorer("residual", dim=3).fit(st).score(st.split("id/test"))
    np.testing.assert_allclose(got, -np.linalg.norm(test[:, 3:], axis=1), rtol=1e-9)
    for dim in (4, 5):
        with pytest.raises(ValueError, match=rf"dim={dim} is more than the principal "
                           r"directions spanned by 'id/train' .*numerical rank 3.*"
                           r"valid: 1 <= dim <= 3"):
            get_scorer("residual", dim=dim).fit(st).score(st.split("id/test"))
    with pytest.raises(ValueError, match=r"dim=3 leaves no residual on 'id/train' .*"
                       r"valid: 1 <= dim <= 2"):
        get_scorer("vim", dim=3).fit(st).score(st.split("id/test"))


@pytest.mark.parametrize("name", ["vim", "residual"])
def test_dim_not_below_train_rows_is_refused_before_fit(tmp_path, name):
    """N = 12 id/train rows, D = 32: dim >= 12 is refused from the store's size (S has rank
    <= 12), at fit and as a dropped default-grid setting of a sweep; dim = 11 fits."""
    arrays = structured_arrays(seed=0)
    splits = dict(arrays["splits"])
    splits["id/train"] = {k: v[:12] for k, v in splits["id/train"].items()}
    st = Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=splits)
    with pytest.raises(ValueError, match=rf"scorer '{name}': dim=12 is not below the 12 rows "
                       r"of 'id/train' .*valid: 1 <= dim < min\(D, N\) = 12"):
        get_scorer(name, dim=12).fit(st)
    with pytest.raises(ValueError, match=r"dim=16 is not below the 12 rows"):
        get_scorer(name).fit(st)  # the paper's default, D // 2 = 16
    assert np.isfinite(get_scorer(name, dim=11).fit(st).score(st.split("id/test"))).all()


def test_bad_ash_variant_and_empty_keep(store):
    with pytest.raises(ValueError, match=r"variant must be one of p, b, s \(got 'q'\)"):
        get_scorer("ash", variant="q")
    for name in ("ash", "scale"):
        # D=32: k = 32 - round(31.68) = 0 activations kept.
        with pytest.raises(ValueError, match=r"percentile 99 keeps no activation of D=32"):
            get_scorer(name, percentile=99).fit(store)


def test_bad_other_params(store):
    with pytest.raises(ValueError, match=r"alpha must be a finite number >= 0 \(got -1\)"):
        get_scorer("nci", alpha=-1)
    with pytest.raises(ValueError, match=r"temperature must be a finite number > 0 \(got 0\)"):
        get_scorer("rankfeat", temperature=0)
    with pytest.raises(ValueError, match=r"distance_as_normalizer must be True or False"):
        get_scorer("fdbd", distance_as_normalizer="yes")
    with pytest.raises(ValueError, match=r"percentile_split 'id/nope' is not a split"):
        get_scorer("react", percentile_split="id/nope").fit(store)
    with pytest.raises(ValueError, match="unknown parameter"):
        get_scorer("gradnorm", temperature=2)


# --------------------------------------------------------------------------- (5) GradNorm
def test_gradnorm_matches_torch_autograd(store):
    """Per sample: nn.Linear with the head, loss sum_c -(1/C) log_softmax, backward, L1 norm
    of weight.grad (the bias gradient is not part of the score, as in the official code)."""
    torch = pytest.importorskip("torch")
    w, b = head(store)
    fc = torch.nn.Linear(w.shape[1], w.shape[0], dtype=torch.float64)
    with torch.no_grad():
        fc.weight.copy_(torch.from_numpy(w))
        fc.bias.copy_(torch.from_numpy(b))
    scorer = fitted("gradnorm", store)
    for split in ("id/test", "ood/far/faint"):
        x = torch.from_numpy(feats(store, split))
        expected = []
        for row in x:
            fc.zero_grad()
            loss = torch.sum(-(1.0 / w.shape[0]) * torch.log_softmax(fc(row[None]), dim=-1))
            loss.backward()
            expected.append(float(fc.weight.grad.abs().sum()))
        np.testing.assert_allclose(scorer.score(store.split(split)), expected, rtol=1e-9)


# --------------------------------------------------------------------------- (6) float16
@pytest.mark.parametrize("name", ["vim", "react"])
def test_float16_store_close_to_float32(make_store, name):
    """The same data stored as float16 scores within 1e-3 relative of the float32 store.
    ViM's score is energy - alpha * r, a difference of two terms of similar size (it crosses
    zero), so it is compared relative to the size of those terms: float16 rounding (2^-11
    relative per entry) moves r by a few 1e-4 relative, which is what this bounds."""
    s32 = make_store("f32", dtype="float32", seed=2)
    s16 = make_store("f16", dtype="float16", seed=2)
    a = fitted(name, s32)
    b = fitted(name, s16)
    for split in SCORED:
        x32 = a.score(s32.split(split))
        x16 = b.score(s16.split(split))
        if name == "react":
            np.testing.assert_allclose(x16, x32, rtol=1e-3)
        else:
            lse = energy(logits(s32, split))
            terms = np.abs(lse) + np.abs(lse - x32)        # |energy| + alpha * r
            assert np.all(np.abs(x16 - x32) <= 1e-3 * terms), np.max(np.abs(x16 - x32) / terms)


# --------------------------------------------------------------------------- ReAct threshold
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_exact_percentiles_equal_numpy(chunk):
    """The radix-select threshold equals np.percentile over all entries (float64 'linear'),
    including ties, zeros of both signs, negatives, and tiny inputs."""
    from scorers.kernels.select import exact_percentiles

    rng = np.random.default_rng(chunk)
    x = np.maximum(rng.normal(0.0, 1.0, size=(301, 13)), 0.0).astype(np.float32)
    x[::5, ::3] = np.round(x[::5, ::3], 1)             # ties
    x[1, :4] = [-0.0, -2.5, -1e-30, 3.4e38]            # signs, subnormal, huge
    ps = [0.5, 1, 25, 50, 60, 85, 90, 95, 99, 99.99]
    for data in (x, x[:1, :1], x[:1, :2], -x):
        rows = [data[i:i + chunk] for i in range(0, len(data), chunk)]
        got = exact_percentiles(lambda rows=rows: iter(rows), ps)
        want = np.percentile(data.astype(np.float64).ravel(), ps)
        assert got == list(want)


def test_exact_percentiles_refuse_nan_and_infinities_sort():
    """A NaN anywhere is an error (a percentile over it is undefined), never a silent
    threshold; +-inf are ordinary ordered values (reference: np.percentile)."""
    from scorers.kernels.select import exact_percentiles

    x = np.linspace(-3.0, 3.0, 40, dtype=np.float32).reshape(8, 5)
    x[2, 3], x[5, 0] = np.inf, -np.inf
    rows = [x[:3], x[3:]]
    assert exact_percentiles(lambda: iter(rows), [10, 50, 90]) == list(
        np.percentile(x.astype(np.float64).ravel(), [10, 50, 90]))
    x[6, 1] = np.nan
    with pytest.raises(FeatstoreError, match="features contain NaN"):
        exact_percentiles(lambda: iter([x[:3], x[3:]]), [90])


# --------------------------------------------------------------------------- RankFeat extra
def test_rankfeat_without_maps_names_the_flag(store):
    scorer = get_scorer("rankfeat").fit(store)       # no fit split: nothing to check yet
    with pytest.raises(FeatstoreError, match="--feature-maps"):
        scorer.score(store.split("id/test"))
    with pytest.raises(FeatstoreError, match="--feature-maps"):
        scorer.score_grid(store.split("id/test"), {"temperature": [1.0, 2.0]})


# --------------------------------------------------------------------------- modules
@pytest.mark.parametrize("name", FEATURE_SCORERS)
def test_module_docstring_and_no_torch(name):
    """Each module names its paper and formula, and never imports torch."""
    tree = ast.parse((SCORERS_DIR / f"{name}.py").read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and "as implemented" in doc.lower()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "torch" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "torch"


# --------------------------------------------------------------------------- stored logits
def test_stored_logits_are_head_probe(tmp_path, make_store):
    """float32 logits = features @ W.T + b (what `Store.from_arrays` computes in float32, as
    a network's head does): True; the same logits scaled by 2 (another head's output) or
    stored as float16: False."""
    from scorers.base import stored_logits_are_head

    assert stored_logits_are_head(make_store("f32", seed=4)) is True
    assert stored_logits_are_head(make_store("f16", dtype="float16", seed=4)) is False
    arrays = structured_arrays(seed=4)
    Store.from_arrays(tmp_path / "scaled", head=arrays["head"],
                      splits=other_head_logits(arrays))
    assert stored_logits_are_head(Store.open(tmp_path / "scaled")) is False


def other_head_logits(arrays: dict) -> dict:
    """The splits of `arrays` with logits 2 (x @ W.T + b): not the head's output."""
    w, b = arrays["head"]
    return {n: {**a, "logits": 2.0 * (a["features"] @ w.T + b)}
            for n, a in arrays["splits"].items()}


@pytest.mark.parametrize("percentile", [65, 85])
def test_scale_from_features_when_logits_are_not_the_head(tmp_path, percentile):
    """SCALE reads z = l - b off the stored logits only when they are the head's output; with
    logits of another head (scaled by 2) it multiplies the features with W and matches the
    float64 transcription (ref_scale) to 1e-9; with the head's own float32 logits, to 1e-6."""
    arrays = structured_arrays(seed=6)
    Store.from_arrays(tmp_path / "own", head=arrays["head"], splits=arrays["splits"])
    Store.from_arrays(tmp_path / "other", head=arrays["head"], splits=other_head_logits(arrays))
    for name, rtol in (("own", 1e-6), ("other", 1e-9)):
        st = Store.open(tmp_path / name)
        scorer = fitted("scale", st, percentile=percentile)
        assert scorer.logits_are_head is (name == "own")
        for split in SCORED:
            np.testing.assert_allclose(scorer.score(st.split(split)),
                                       ref_scale(st, split, percentile), rtol=rtol, atol=1e-12,
                                       err_msg=f"{name} {split}")
