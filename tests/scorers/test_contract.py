"""The scorer contract (scorers/base.py, DESIGN §3-§5), checked for EVERY scorer in
`scorers.REGISTRY`: a scorer added to the registry is tested here without editing this file.

Per scorer:
1. its module's docstring names the paper (the first author of `cls.paper`) and states the
   formula as implemented (the phrase "as implemented" and a `score = ...` / `score(x) = ...`
   line), and the module imports no torch (syntax tree, function-local imports included);
2. an unknown parameter is a UsageError naming it and every valid one (`cls.defaults`);
3. `score` and `score_grid` before `fit` are a FeatstoreError saying to call fit;
4. sign convention, higher = more in-distribution: AUROC (scikit-learn `roc_auc_score`, ID
   positive) of id/test against the store's OOD test split > 50;
5. `score_grid` over the scorer's default grid (clamped to the store by the library's one
   rule, `scorers.adapt.adapt_grid`) equals a separate construct/fit/score per setting bit for
   bit where the grid computes each setting through the same operations on arrays of the same
   shapes (so the same bits on any CPU); where the grid shares float work, or runs a BLAS
   product of another shape, within GRID_RTOL (each entry says why);
6. determinism: scores with 1 and with 3 worker threads everywhere (FEATSTORE_THREADS, the
   BLAS pools via threadpoolctl, Numba, FAISS's OpenMP), in 16-row chunks, equal bit for bit;
7. the same data stored as float16 scores like the float32 store: every score within
   FLOAT16_TOL (relative to the float32 scores' range on that split) of the float32 one.

Stores (session-scoped, tiny, real HDF5): `plain` has features, logits, labels, head, id/train,
id/val, id/test and one OOD test split; `extras` carries every split extra a training-time
method or an extraction flag writes (confidence, godin_h/g, head2_logits, mc_logits,
odin_logits, feature_maps). Each scorer runs on the first store whose splits and extras meet
its `needs` (`scorers.evaluate.supported`); a scorer no store supports FAILS, naming the need to
add to `contract_stores` below. Parameters are the scorer's defaults clamped to the store by
`scorers.adapt.fit_defaults` (the rule evaluation applies).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from contextlib import contextmanager

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extra_keys import odin_name
from scorers import REGISTRY, get_scorer
from scorers.adapt import adapt_grid, fit_defaults
from scorers.evaluate import supported

ID_SPLIT, OOD_SPLIT = "id/test", "ood/far/other"
SCORED = (ID_SPLIT, OOD_SPLIT)
NAMES = sorted(REGISTRY)

# score_grid shares float work across settings in these scorers, or computes a setting through
# a BLAS product of another shape than a separate fit does, so a setting's scores may differ
# from a separate fit's in the last bits: |grid - single| <= rtol * (|single| + max |single|)
# (relative per entry, and relative to the split's largest score for entries near 0), and why.
# Every other scorer must be bit for bit: its grid runs each setting through the same
# operations on arrays of the same shapes as a separate fit, which gives the same bits
# whatever BLAS kernel the CPU selects. A BLAS library may pick another kernel (and another
# summation order) for another shape, e.g. OpenBLAS's small-matrix kernels on AVX-512 CPUs.
GRID_RTOL: dict[str, tuple[float, str]] = {
    "react": (1e-10, "the energies of every clip threshold come from one pass of sparse band "
                     "sums above the lowest clip value (scorers/kernels/bands.py)"),
    "dice": (1e-10, "the masked heads of a chain of percentiles are cumulative band sums of "
                    "the contribution matrix (scorers/kernels/bands.py), not one mask each"),
    "oodl": (1e-12, "the kernel rows of a block of query rows are one float64 GEMM against the "
                    "union of the support vectors of every nu (a separate fit: against its "
                    "own), in blocks sized by that union; BLAS may round the same entry "
                    "differently for another shape (1.4e-17 with OpenBLAS's SkylakeX "
                    "kernels; the decision values are O(1e-2..1e2))"),
}


def assert_grid_matches(name: str, got: np.ndarray, want: np.ndarray, msg: str) -> None:
    """The score_grid == separate fit check of item 5: bit for bit, or within GRID_RTOL."""
    rtol, _why = GRID_RTOL.get(name, (0.0, ""))
    if not rtol:
        assert np.array_equal(got, want), (msg, np.max(np.abs(got - want)))
        return
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=msg)

# float16 stores: features (and logits, extras) rounded to 2^-11 relative; a score moves by at
# most this share of the float32 scores' range over the scored splits (max - min).
FLOAT16_TOL = 1e-2

# the default 1% bank of the 600-row id/train is 6 rows; a 60-row bank makes FAISS's search
# do real (threaded) work in the determinism check (as the per-family test this replaces)
THREAD_PARAMS = {"nnguide": {"alpha": 0.1, "K": 5}}

ODIN_PAIRS = ((1000.0, 0.0014), (1000.0, 0.0), (10.0, 0.0028))


# --------------------------------------------------------------------------- stores
def plain_arrays(seed: int = 0, num_classes: int = 6, dim: int = 48, n_train: int = 600,
                 n_val: int = 120, n_test: int = 150, n_ood: int = 120) -> dict:
    """ID classes live on the first dim - 8 channels (ReLU'd Gaussian clusters, head aligned
    with the centred class means); the OOD rows are active on the last 8 channels only, where
    the head's weights are 0: small, flat logits, features far from every class and outside
    the ID principal space. Every scorer that reads features or logits separates them."""
    rng = np.random.default_rng(seed)
    k = dim - 8
    means = np.zeros((num_classes, dim))
    means[:, :k] = np.maximum(rng.normal(0.0, 2.0, size=(num_classes, k)), 0.0) + 0.3
    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    splits: dict[str, dict] = {}
    for name, n in (("id/train", n_train), ("id/val", n_val), ("id/test", n_test)):
        y = np.arange(n) % num_classes
        x = np.maximum(means[y] + rng.normal(0.0, 0.6, size=(n, dim)), 0.0)
        splits[name] = {"features": x.astype(np.float32), "labels": y}
    ood_mean = np.zeros(dim)
    ood_mean[k:] = 3.0
    x = np.maximum(ood_mean + rng.normal(0.0, 0.5, size=(n_ood, dim)), 0.0)
    splits[OOD_SPLIT] = {"features": x.astype(np.float32)}
    return {"head": (weight, bias), "splits": splits}


def extras_arrays(seed: int = 1, num_classes: int = 4, dim: int = 16, hw: int = 3,
                  n_id: int = 60, n_ood: int = 50) -> dict:
    """Every split extra, built so that ID rows look in-distribution to the method reading it:
    confident, agreeing logits (stored logits, godin_h, head2_logits, the MC passes, the
    ODIN-perturbed logits) with high confidence / g for ID; confident but mutually disagreeing
    ones with low confidence / g for OOD. Feature maps follow RankFeat's premise (an ID map is
    three class-aligned rank-1 terms of comparable strength on disjoint channels and positions;
    an OOD map is one strong rank-1 direction); features are the maps' average pool."""
    rng = np.random.default_rng(seed)
    c, t = num_classes, 4
    means = np.maximum(rng.normal(0.0, 1.5, size=(c, dim)), 0.0) + 0.1
    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=c).astype(np.float32)
    groups, places = np.arange(dim) % 3, np.arange(hw * hw) % 3

    def onehot(y: np.ndarray) -> np.ndarray:
        return 4.0 * np.eye(c)[y] + rng.normal(0.0, 0.2, size=(len(y), c))

    def rows(n: int, iid: bool) -> dict:
        y = np.arange(n) % c
        if iid:
            maps = np.zeros((n, dim, hw * hw))
            for g in range(3):
                channel = 3.0 * means[y] * (groups == g) * rng.uniform(0.8, 1.2, (n, dim))
                spatial = (places == g) * rng.uniform(0.5, 1.5, (n, hw * hw))
                maps += channel[:, :, None] * spatial[:, None, :]
        else:
            direction = np.abs(rng.normal(0.0, 1.0, (n, dim)))
            maps = 3.0 * direction[:, :, None] * rng.uniform(0.5, 1.5, (n, hw * hw))[:, None]
        maps += np.abs(rng.normal(0.0, 0.05, size=maps.shape))
        maps = maps.reshape(n, dim, hw, hw).astype(np.float32)
        logits = onehot(y)
        other = (y + 1 + rng.integers(0, c - 1, n)) % c
        mc = np.stack([logits + rng.normal(0.0, 0.2, logits.shape) if iid
                       else onehot((y + k) % c) for k in range(t)])
        extras = {
            "feature_maps": maps,
            "confidence": rng.uniform(0.6, 1.0, n) if iid else rng.uniform(0.0, 0.5, n),
            "godin_h": logits if iid else rng.normal(0.0, 0.5, (n, c)),
            "godin_g": rng.uniform(0.5, 0.95, n) if iid else rng.uniform(0.05, 0.4, n),
            "head2_logits": logits + rng.normal(0.0, 0.1, logits.shape) if iid
            else onehot(other),
            "mc_logits": mc,
            **{odin_name(temp, eps): (1.5 * logits if iid else rng.normal(0.0, 0.5, (n, c)))
               for temp, eps in ODIN_PAIRS},
        }
        out = {"features": maps.mean(axis=(2, 3)), "logits": logits,
               "extras": {k: np.asarray(v, dtype=np.float32) for k, v in extras.items()}}
        if iid:
            out["labels"] = y
        return out

    splits = {name: rows(n_id, True) for name in ("id/train", "id/val", "id/test")}
    splits[OOD_SPLIT] = rows(n_ood, False)
    return {"head": (weight, bias), "splits": splits}


BUILDERS = {"plain": plain_arrays, "extras": extras_arrays}


@pytest.fixture(scope="session")
def contract_stores(tmp_path_factory) -> dict[str, dict[str, Store]]:
    """{dtype: {store name: Store}} for float32 and float16, built once per session."""
    root = tmp_path_factory.mktemp("contract")
    out: dict[str, dict[str, Store]] = {}
    for dtype in ("float32", "float16"):
        out[dtype] = {}
        for name, build in BUILDERS.items():
            arrays = build()
            path = root / f"{name}_{dtype}"
            Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"], dtype=dtype)
            out[dtype][name] = Store.open(path)
    return out


def store_for(stores: dict[str, Store], name: str) -> Store:
    """The first contract store that has what scorer `name` needs."""
    reasons = []
    for store_name, store in stores.items():
        ok, why = supported(store, name)
        if ok:
            return store
        reasons.append(f"{store_name}: {why}")
    raise AssertionError(f"no contract store supports scorer {name!r} ({'; '.join(reasons)}); "
                         "add what it needs to a builder in tests/scorers/test_contract.py")


def contract_scorer(name: str, store: Store, **params):
    """Scorer `name` with its defaults clamped to `store` (scorers.adapt.fit_defaults), plus
    `params`, unfitted, reading 16-row chunks."""
    cls = REGISTRY[name]
    used, _ = fit_defaults(cls(**params), params, store)
    scorer = cls(**used)
    scorer.chunk_rows = 16
    return scorer


# --------------------------------------------------------------------------- 1. module
def module_tree(name: str) -> tuple[str, ast.Module]:
    source = inspect.getsource(sys.modules[REGISTRY[name].__module__])
    return source, ast.parse(source)


@pytest.mark.parametrize("name", NAMES)
def test_module_docstring_names_paper_and_states_formula(name):
    """Reference: DESIGN §1/§5 (a scorer module's docstring names the paper and states the
    formula as implemented), one assertion for every scorer."""
    cls = REGISTRY[name]
    doc = ast.get_docstring(module_tree(name)[1]) or ""
    assert cls.paper, f"{name}: the class attribute `paper` is empty"
    first_author = re.split(r"[\s,.&]", cls.paper.strip())[0]
    assert first_author in doc, f"{name}: docstring does not name {first_author!r} ({cls.paper})"
    assert "as implemented" in " ".join(doc.split()).lower(), f"{name}: no 'as implemented'"
    assert re.search(r"\bscore(\(x\))?\s*=\s*\S", doc), f"{name}: no `score = ...` formula line"


@pytest.mark.parametrize("name", NAMES)
def test_module_imports_no_torch(name):
    """Reference: DESIGN §1 (`scorers` never imports torch), on the syntax tree of the
    scorer's module, function-local imports included."""
    for node in ast.walk(module_tree(name)[1]):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "torch" for a in node.names), name
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "torch", name


# --------------------------------------------------------------------------- 2-3. errors
@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_names_every_valid_one(name):
    """Reference: DESIGN §3, the exact message built from `cls.defaults` here."""
    valid = ", ".join(sorted(REGISTRY[name].defaults)) or "none"
    with pytest.raises(UsageError) as err:
        get_scorer(name, bogus_param=1)
    assert str(err.value) == (f"scorer {name!r}: unknown parameter 'bogus_param' "
                              f"(valid: {valid})")


@pytest.mark.parametrize("name", NAMES)
def test_score_before_fit_is_a_clear_error(contract_stores, name):
    """Reference: DESIGN §3 (score before fit -> FeatstoreError saying to call fit), for
    `score` and `score_grid`."""
    split = store_for(contract_stores["float32"], name).split(ID_SPLIT)
    scorer = get_scorer(name)
    with pytest.raises(FeatstoreError, match=rf"scorer '{name}': call fit\(store\) before"):
        scorer.score(split)
    with pytest.raises(FeatstoreError, match=rf"scorer '{name}': call fit\(store\) before"):
        scorer.score_grid(split)


# --------------------------------------------------------------------------- 4. sign
@pytest.mark.parametrize("name", NAMES)
def test_sign_higher_is_more_in_distribution(contract_stores, name):
    """Reference: scikit-learn `roc_auc_score` with ID positive: id/test against the store's
    OOD split, which the store separates clearly for every method, AUROC > 50."""
    store = store_for(contract_stores["float32"], name)
    scorer = contract_scorer(name, store).fit(store)
    id_s, ood_s = (scorer.score(store.split(s)) for s in SCORED)
    assert id_s.dtype == np.float64 and id_s.shape == (store.split(ID_SPLIT).num_rows,)
    assert np.isfinite(id_s).all() and np.isfinite(ood_s).all()
    auroc = 100 * roc_auc_score(np.r_[np.ones(len(id_s)), np.zeros(len(ood_s))],
                                np.r_[id_s, ood_s])
    assert auroc > 50, f"{name}: AUROC {auroc:.1f} <= 50 (is the sign flipped?)"


# --------------------------------------------------------------------------- 5. grid
@pytest.mark.parametrize("name", NAMES)
def test_score_grid_equals_separate_fits(contract_stores, name):
    """Reference: a separate construct/fit/score per setting (the base class's refit path).
    The grid is the scorer's default grid as `score_grid(split)` reads it on the store (e.g.
    every stored ODIN pair), or, where a default value is out of range on this tiny store
    (KNN's K = 1000), the default grid clamped by the library's rule (scorers.adapt.adapt_grid);
    a scorer without a grid is scored once. Bit for bit unless GRID_RTOL says why not."""
    store = store_for(contract_stores["float32"], name)
    scorer = contract_scorer(name, store).fit(store)
    settings, _ = adapt_grid(scorer, type(scorer).grid, (), store)
    clamped = {k: list(dict.fromkeys(s[k] for s in settings)) for k in settings[0]}
    for split in SCORED:
        try:
            results = scorer.score_grid(store.split(split))
        except UsageError:
            results = scorer.score_grid(store.split(split), clamped)
        assert results and len({repr(s) for s, _ in results}) == len(results)
        for setting, got in results:
            alone = contract_scorer(name, store, **{**scorer.params, **setting}).fit(store)
            want = alone.score(store.split(split))
            assert_grid_matches(name, got, want, f"{name} {setting} {split}")


# --------------------------------------------------------------------------- 6. threads
@contextmanager
def threads(count: int, monkeypatch):
    """Every thread pool the scorers use limited to `count` (Numba to its maximum if lower)."""
    import faiss
    import numba
    from threadpoolctl import threadpool_limits

    numba_before = numba.get_num_threads()
    monkeypatch.setenv("FEATSTORE_THREADS", str(count))
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    faiss.omp_set_num_threads(count)
    try:
        with threadpool_limits(limits=count):
            yield
    finally:
        numba.set_num_threads(numba_before)
        faiss.omp_set_num_threads(numba.config.NUMBA_NUM_THREADS)
        monkeypatch.delenv("FEATSTORE_THREADS")


@pytest.mark.parametrize("name", NAMES)
def test_scores_bit_identical_with_one_and_three_threads(contract_stores, monkeypatch, name):
    """Reference: the same scorer run single-threaded: fit + score with every pool at 1 and
    at 3 threads, in 16-row blocks, equal bit for bit on id/test and the OOD split.

    Why bit for bit holds on every CPU: scoring runs its BLAS products on one thread in row
    blocks whose sizes depend on the shapes only (`scorers.rowmap`), the worker threads only
    decide which block runs where; Numba kernels compute each row (or bootstrap lane) alone;
    FAISS's OpenMP splits the queries, each searched alone. The fits' BLAS/LAPACK calls on these
    stores (D <= 48) are below OpenBLAS's multithreading thresholds. Above them a LAPACK
    factorization's bits depend on the BLAS thread count (numpy eigh of a 1280 x 1280
    covariance: eigenvectors 7e-13 apart with 1 and 2 threads), so the fits' thread count is
    fixed by the user's setting, never by the machine's load."""
    store = store_for(contract_stores["float32"], name)
    runs = []
    for count in (1, 3):
        with threads(count, monkeypatch):
            scorer = contract_scorer(name, store, **THREAD_PARAMS.get(name, {})).fit(store)
            runs.append([scorer.score(store.split(s)) for s in SCORED])
    for split, one, three in zip(SCORED, *runs, strict=True):
        assert np.array_equal(one, three), (name, split)


# --------------------------------------------------------------------------- 7. float16
@pytest.mark.parametrize("name", NAMES)
def test_float16_store_scores_like_the_float32_store(contract_stores, name):
    """Reference: the float32 store of the same arrays. |s16 - s32| <= FLOAT16_TOL * (max s32
    - min s32), the range over id/test and the OOD split together (the scale a ranking metric
    sees): float16 rounding moves no score by more than 1% of that range."""
    s32 = store_for(contract_stores["float32"], name)
    kind = next(k for k, v in contract_stores["float32"].items() if v is s32)
    s16 = contract_stores["float16"][kind]
    assert s16.split(ID_SPLIT).dtype == "float16"
    a = contract_scorer(name, s32).fit(s32)
    b = contract_scorer(name, s16, **{k: v for k, v in a.params.items()
                                       if k in a.defaults}).fit(s16)
    x32 = {split: a.score(s32.split(split)) for split in SCORED}
    spread = float(np.ptp(np.concatenate(list(x32.values())))) or 1.0
    for split in SCORED:
        x16 = b.score(s16.split(split))
        worst = float(np.max(np.abs(x16 - x32[split]))) / spread
        assert worst <= FLOAT16_TOL, f"{name} {split}: {worst:.2e} of the score range"
