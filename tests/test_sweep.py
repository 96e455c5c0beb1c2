"""Sweeps without recompute (scorers.sweep, `featstore sweep`, `featstore eval --tune`).

References: (1) a separate construct/fit/score per setting for `score_grid` (every registered
scorer with a default grid, on its DEFAULT grid: the store is D=1040 wide with 1100 train rows
so that ViM's dims [42, ..., 1000], Residual's [256, 1000] and KNN's K up to 1000 are valid,
and it stores ODIN-perturbed logits for odin_perturbed's whole default grid; NNGuide alone gets the
explicit grid K [5, 11] x alpha [0.01, 0.1], because its default grid's 1% bank (11 rows here)
cannot hold its default K=100 below 10,000 train rows; oodl runs with max_train=300, for speed);
(2) logit stores built so that the val and test OOD splits prefer different energy
temperatures, which show that only val chooses; (3) NumPy's argmax/argmin (first index on
ties) for the choice.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import scorers.sweep as sweep_mod
from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.store.extra_keys import odin_name
from scorers import REGISTRY, get_scorer
from scorers.base import Scorer, expand_grid
from scorers.evaluate import evaluate
from scorers.fitting import principal
from scorers.metrics import METRIC_DIRECTIONS, OOD_METRIC_NAMES
from scorers.sweep import choose, plan_settings, sweep, sweep_all
from tests.helpers.cli import run_cli as run
from tests.helpers.scoring import assert_grid_close
from tests.helpers.stores import structured_arrays

GRID_SCORERS = [name for name, cls in REGISTRY.items() if cls.grid]
# explicit valid grids where the default grid cannot be valid on the wide store
WIDE_GRID = {"nnguide": {"K": [5, 11], "alpha": [0.01, 0.1]},
             # alpha <= C = 6 classes (the default grid's 10-20 are clamped by a sweep)
             "openmax": {"tailsize": [10, 20, 50], "alpha": [1, 3, 6]}}
# fixed non-grid parameters, for speed only (oodl: a 300-row one-class SVM per nu)
WIDE_BASE = {"oodl": {"max_train": 300}}


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory) -> Store:
    """D=1040 > 1000 and 1100 train rows: every default grid is valid (see the docstring)."""
    path = tmp_path_factory.mktemp("sweep_wide") / "store"
    arrays = structured_arrays(seed=3, num_classes=6, dim=1040, n_train=1100, n_val=30,
                               n_test=60, n_ood=60)
    rng = np.random.default_rng(4)
    weight, bias = arrays["head"]
    odin = REGISTRY["odin_perturbed"].grid if "odin_perturbed" in REGISTRY else {}
    for split in arrays["splits"].values():  # ODIN-perturbed logits for its default grid
        logits = split["features"] @ weight.T + bias
        split["extras"] = {
            odin_name(t, e): (logits + rng.normal(0.0, 0.5, logits.shape)).astype(np.float32)
            for t, e in itertools.product(odin.get("temperature", []), odin.get("epsilon", []))}
        # AdaSCALE's perturbed-input features (`--adascale-o 0.05`): the rows moved a little
        split["extras"]["adascale_features/0.05"] = (np.maximum(split["features"], 0.0) + np.abs(
            rng.normal(0.0, 0.05, split["features"].shape))).astype(np.float32)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    """The structured store (D=32, C=5, 600 train rows, one val OOD split)."""
    path = tmp_path_factory.mktemp("sweep") / "store"
    arrays = structured_arrays(seed=0)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


def logit_store(path, val_kind: str, test_kind: str, seed: int = 0,
                with_test: bool = True) -> Store:
    """Logits built so energy's temperatures disagree: ID rows have one logit near 5 and the
    rest near 0; `flat` OOD rows have every logit near 2 (max lower than ID: T=1 separates,
    mean higher: large T fails); `peaky` OOD rows have one logit near 7 and the rest near -3
    (max higher than ID: T=1 fails, mean lower: T >= 10 separates)."""
    rng = np.random.default_rng(seed)
    c, d = 5, 4

    def feats(n):
        return rng.normal(size=(n, d)).astype(np.float32)

    def id_split(n):
        y = np.arange(n) % c
        logits = rng.normal(0.0, 0.3, size=(n, c))
        logits[np.arange(n), y] += 5.0
        return {"features": feats(n), "logits": logits, "labels": y}

    def ood_split(kind, n, usage):
        if kind == "flat":
            logits = 2.0 + rng.normal(0.0, 0.3, size=(n, c))
        else:
            logits = -3.0 + rng.normal(0.0, 0.3, size=(n, c))
            logits[np.arange(n), rng.integers(0, c, n)] = 7.0 + rng.normal(0.0, 0.3, n)
        return {"features": feats(n), "logits": logits, "usage": usage}

    splits = {"id/train": id_split(50), "id/val": id_split(150)}
    splits["ood/x/val_part"] = ood_split(val_kind, 150, "val")
    if with_test:
        splits["id/test"] = id_split(150)
        splits["ood/x/test_part"] = ood_split(test_kind, 150, "test")
    head = (rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32))
    Store.from_arrays(path, head=head, splits=splits)
    return Store.open(path)


def untimed(result: dict) -> dict:
    """A sweep result without its timings (which differ between two runs)."""
    out = {k: v for k, v in result.items() if not k.endswith("_seconds")}
    out["test"] = {k: v for k, v in result["test"].items() if not k.endswith("_seconds")}
    return out


# --------------------------------------------------------------------------- (1) score_grid
def test_every_grid_scorer_is_covered():
    assert {"knn", "vim", "residual", "ash", "react", "dice", "scale", "gen", "energy", "odin",
            "nci", "fdbd", "oodl", "nnguide"} <= set(GRID_SCORERS)


@pytest.mark.parametrize("name", GRID_SCORERS)
def test_default_grid_score_grid_equals_separate_runs(wide_store, name):
    """score_grid over the scorer's DEFAULT grid == construct/fit/score per setting (1e-9;
    1e-6 of max |score| for the float32 default of vim / residual: `assert_grid_close`)."""
    st, grid, base = wide_store, WIDE_GRID.get(name), WIDE_BASE.get(name, {})
    grid = REGISTRY[name].grid if grid is None else grid  # passed explicitly: odin_perturbed's
    settings = expand_grid(grid)                           # grid=None means "stored pairs"
    # one BLAS thread: a 1040 x 1040 eigh with 2 OpenBLAS threads on a busy 2-core machine
    # takes seconds instead of well under one
    with threadpool_limits(1):
        scorer = get_scorer(name, **base, **settings[0]).fit(st)  # a valid setting, as sweep
        for setting in settings:  # the store is wide enough: nothing of the default grid drops
            scorer.check_params({**scorer.params, **setting}, st)
        alone = [get_scorer(name, **base, **s).fit(st) for s in settings]
        for split_name in ("id/test", "ood/far/faint"):
            split = st.split(split_name)
            results = scorer.score_grid(split, grid)
            assert [s for s, _ in results] == settings
            for (setting, scores), single in zip(results, alone, strict=True):
                assert_grid_close(scores, single.score(split), scorer,
                                  f"{name} {setting} on {split_name}")


# --------------------------------------------------------------------------- (1b) shared work
# The shared paths of score_grid against the formulas themselves (not only against the single
# setting, which may take the same path): ASH's running sums over nested kept sets, ReAct's
# band sums above a dense anchor, OODL's cached models and shared kernel rows.
def energy(z: np.ndarray) -> np.ndarray:
    from scipy.special import logsumexp as sp_logsumexp

    return sp_logsumexp(z, axis=1)


def test_ash_band_order_is_the_stable_descending_kept_set():
    """The first k positions of band_order = the first k of np.argsort(-x, kind="stable"),
    for every k of a grid: ties (lowest index first), signed zeros, NaN (last); and the top-k
    sums are those of the stable sort's values."""
    from scorers.kernels.topk import RowSort

    rng = np.random.default_rng(0)
    for trial in range(200):
        d = int(rng.integers(1, 40))
        x = rng.integers(-3, 4, size=(6, d)).astype(np.float32)
        if trial % 3 == 0:
            x[rng.random(x.shape) < 0.2] = np.nan
        if trial % 5 == 0:
            x[x == 0] = -0.0
        ks = sorted(set(rng.integers(1, d + 1, size=3).tolist()))
        rs = RowSort(x, max(ks))
        order = rs.order(ks)
        ref = np.argsort(-x, axis=1, kind="stable")
        for k in ks:
            np.testing.assert_array_equal(np.sort(order[:, :k], axis=1),
                                          np.sort(ref[:, :k], axis=1))
        top = np.take_along_axis(x.astype(np.float64), ref, axis=1)[:, :max(ks)]
        np.testing.assert_array_equal(rs.csum, np.cumsum(top, axis=1))


def ref_ash(x: np.ndarray, w: np.ndarray, b: np.ndarray, variant: str, k: int) -> np.ndarray:
    keep = np.zeros(x.shape, dtype=bool)
    np.put_along_axis(keep, np.argsort(-x, axis=1, kind="stable")[:, :k], True, axis=1)
    s1 = x.sum(axis=1, keepdims=True)
    pruned = np.where(keep, x, 0.0)
    if variant == "b":
        shaped = np.where(keep, s1 / k, 0.0)
    elif variant == "s":
        shaped = pruned * np.exp(s1 / pruned.sum(axis=1, keepdims=True))
    else:
        shaped = pruned
    return energy(shaped @ w.T + b)


@pytest.mark.parametrize("variant", ["p", "b", "s"])
def test_ash_running_sums_and_dense_settings_equal_the_formula(wide_store, variant):
    """D=1040: percentiles 95..75 keep 5% more entries each (one running sum per row), 30 and
    10 keep too many more (dense products); all equal the row formula and separate runs."""
    from scorers.kernels.topk import keep_count, plan_chain

    st, d = wide_store, 1040
    grid = {"percentile": [95, 90, 85, 80, 75, 30, 10]}
    ks = [keep_count(d, p) for p in grid["percentile"]]
    assert plan_chain(ks, d) == set(ks[:5])
    w, b = (np.asarray(a, dtype=np.float64) for a in st.head)
    scorer = get_scorer("ash", variant=variant).fit(st)
    for split_name in ("id/test", "ood/far/faint"):
        split = st.split(split_name)
        x = np.asarray(split.features, dtype=np.float64)
        results = scorer.score_grid(split, grid)
        again = scorer.score_grid(split, grid)
        for (setting, scores), k, (_, scores2) in zip(results, ks, again, strict=True):
            np.testing.assert_array_equal(scores, scores2)            # deterministic
            np.testing.assert_allclose(scores, ref_ash(x, w, b, variant, k), rtol=1e-9,
                                       atol=1e-12, err_msg=f"{setting} {split_name}")
            single = get_scorer("ash", variant=variant, **setting).fit(st).score(split)
            np.testing.assert_allclose(scores, single, rtol=1e-9, atol=1e-12)


def test_react_plan_anchor_cost_model():
    from scorers.kernels.bands import plan_anchor

    # a low threshold leaving 90% of the entries above it is cheaper as its own dense product
    assert plan_anchor([900, 150, 100, 50, 10], 1000) == 1
    assert plan_anchor([150, 100, 50, 10], 1000) == 0       # the default grid's shape
    assert plan_anchor([990, 980], 1000) == 1               # nothing pays: both dense
    assert plan_anchor([5], 1000) == 0


@pytest.mark.parametrize("logits_are_head", [True, False], ids=["stored-logits", "other-logits"])
def test_react_band_sums_equal_dense_clipping(wide_store, tmp_path, logits_are_head):
    """Percentiles 10 and 50 (most entries above their clip values: dense products and band
    sums from a dense anchor, == logsumexp(min(h, c) @ W.T + b) to 1e-9 in float64) and
    85..99 (from the stored float32 logits minus the clipped entries' part: to 1e-6, the
    float32 rounding of the logits; c from np.percentile), == separate runs (1e-9),
    deterministic. With logits that are not the head's output (scaled by 2: another head)
    every setting is computed from the features (1e-9)."""
    from scorers.methods.react import logits_pay

    st = wide_store
    if not logits_are_head:
        splits = {name: {"features": np.asarray(st.split(name).features),
                         "logits": 2.0 * np.asarray(st.split(name).logits),
                         **({"labels": np.asarray(st.split(name).labels)}
                            if name.startswith("id/") else {})}
                  for name in ("id/train", "id/test", "ood/far/faint")}
        st = Store.from_arrays(tmp_path / "other", head=st.head, splits=splits)
    grid = {"percentile": [10, 50, 85, 90, 95, 99]}
    train = np.asarray(st.split("id/train").features, dtype=np.float64)
    clips = np.percentile(train.ravel(), grid["percentile"])
    w, b = (np.asarray(a, dtype=np.float64) for a in st.head)
    scorer = get_scorer("react").fit(st)
    assert scorer.logits_are_head is logits_are_head
    for split_name in ("id/test", "ood/far/faint"):
        split = st.split(split_name)
        x = np.asarray(split.features, dtype=np.float64)
        results = scorer.score_grid(split, grid)
        again = scorer.score_grid(split, grid)
        for (setting, scores), c, (_, scores2) in zip(results, clips, again, strict=True):
            np.testing.assert_array_equal(scores, scores2)
            rtol = 1e-6 if logits_are_head and logits_pay(setting["percentile"]) else 1e-9
            np.testing.assert_allclose(scores, energy(np.minimum(x, c) @ w.T + b), rtol=rtol,
                                       atol=1e-12, err_msg=f"{setting} {split_name}")
            single = get_scorer("react", **setting).fit(st).score(split)
            np.testing.assert_allclose(scores, single, rtol=1e-9, atol=1e-12)


def test_react_fit_holds_the_default_grid_clip_values(wide_store, monkeypatch):
    """A sweep over the default grid after fit reads id/train no further; another
    percentile costs one pass (pass 1's histogram is kept)."""
    import scorers.fitting.percentiles as percentiles_mod  # ReAct's percentile passes

    scorer = get_scorer("react").fit(wide_store)
    passes = []
    real = percentiles_mod.high_histogram
    monkeypatch.setattr(percentiles_mod, "high_histogram",
                        lambda c: passes.append(1) or real(c))
    read = []
    split = wide_store.split("id/train")
    orig_iter = type(split).iter_chunks

    def spy(self, *a, **k):
        if self.name == "id/train":
            read.append(1)
        return orig_iter(self, *a, **k)

    monkeypatch.setattr(type(split), "iter_chunks", spy)
    scorer.score_grid(wide_store.split("id/test"))
    assert read == [] and passes == []
    scorer.score_grid(wide_store.split("id/test"), {"percentile": [42]})
    assert passes == [] and len(read) == 1


def test_vim_fit_told_the_grid_prepares_every_dim(wide_store, monkeypatch):
    """`fit(store, grid)` computes alpha of every grid dim in its own passes (score_grid then
    reads id/train no further); a fit not told the grid pays ONE more id/train pass for all
    the dims it lacks. Both give the same scores (1e-12 in float64; in the float32 default
    `assert_grid_close`, since alpha's mean residuals come from projections onto V[:, 256:] vs
    V[:, 1000:]; reference: the separate runs of
    test_default_grid_score_grid_equals_separate_runs)."""
    split = wide_store.split("id/train")
    orig_iter = type(split).iter_chunks
    read = []

    def spy(self, *a, **k):
        if self.name == "id/train":
            read.append(1)
        return orig_iter(self, *a, **k)

    monkeypatch.setattr(type(split), "iter_chunks", spy)
    principal._SPACES.pop(wide_store, None)  # a fresh fit (not the space an earlier one kept)
    dims = get_scorer("vim").grid["dim"]  # the default grid score_grid asks for below
    told = get_scorer("vim", dim=1000).fit(wide_store, {"dim": dims})
    assert sorted(told.mean_residual) == dims and len(read) == 2
    read.clear()
    grid_told = told.score_grid(wide_store.split("id/test"))
    assert read == []
    plain = get_scorer("vim", dim=1000).fit(wide_store)
    assert sorted(plain.mean_residual) == [1000]
    read.clear()
    grid_plain = plain.score_grid(wide_store.split("id/test"))
    assert len(read) == 1 and sorted(plain.mean_residual) == dims
    for (setting, a), (_, b) in zip(grid_told, grid_plain, strict=True):
        if told.params["precision"] == "float64":
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, err_msg=str(setting))
        else:
            assert_grid_close(a, b, told, str(setting))


def test_oodl_sweep_fits_each_model_once(wide_store, monkeypatch):
    """fit + score_grid on two splits: one SVM per nu (the fit's own reused), scores equal
    sklearn's StandardScaler + OneClassSVM(rbf, gamma='scale') (rtol 1e-6, as the reference
    test of oodl) and separate runs (1e-9)."""
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import OneClassSVM

    st, nus = wide_store, [0.01, 0.1, 0.5]
    fits = []
    real_fit = OneClassSVM.fit
    monkeypatch.setattr(OneClassSVM, "fit",
                        lambda self, *a, **k: fits.append(self.nu) or real_fit(self, *a, **k))
    scorer = get_scorer("oodl", nu=0.1).fit(st)
    results = {sp: scorer.score_grid(st.split(sp), {"nu": nus})
               for sp in ("id/test", "ood/far/faint")}
    assert sorted(fits) == sorted(nus)
    monkeypatch.setattr(OneClassSVM, "fit", real_fit)
    train = np.asarray(st.split("id/train").features, dtype=np.float64)
    ss = StandardScaler().fit(train)
    for sp, res in results.items():
        x = ss.transform(np.asarray(st.split(sp).features, dtype=np.float64))
        for (setting, scores), nu in zip(res, nus, strict=True):
            ref = OneClassSVM(kernel="rbf", gamma="scale", nu=nu).fit(ss.transform(train))
            np.testing.assert_allclose(scores, ref.decision_function(x), rtol=1e-6, atol=1e-9)
            single = get_scorer("oodl", **setting).fit(st).score(st.split(sp))
            np.testing.assert_allclose(scores, single, rtol=1e-9, atol=1e-12)


def test_dice_heads_are_built_once_per_p(wide_store, monkeypatch):
    st = wide_store
    scorer = get_scorer("dice").fit(st)
    calls = []
    real = np.percentile
    monkeypatch.setattr(np, "percentile", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = scorer.score_grid(st.split("id/test"))
    second = scorer.score_grid(st.split("ood/far/faint"))
    assert len(calls) == 1                     # the four p other than the fit's own, at once
    assert [s for s, _ in first] == [s for s, _ in second] == expand_grid(scorer.grid)


# --------------------------------------------------------------------------- (2) val only
def test_selection_uses_val_only(tmp_path):
    """val prefers T=1 and test prefers T>=10: T=1 is chosen although it fails on test;
    replacing the test split changes no choice; replacing the val split does."""
    flat_peaky = sweep(logit_store(tmp_path / "a", "flat", "peaky"), "energy")
    assert flat_peaky["grid"] == {"temperature": [1, 10, 100, 1000]}
    assert flat_peaky["chosen"]["setting"] == {"temperature": 1}
    assert flat_peaky["test"]["groups"]["x"]["auroc"] < 5.0          # bad on test, still chosen
    assert max(r["test"]["groups"]["x"]["auroc"] for r in flat_peaky["settings"]) > 95.0

    # same val split (same seed, same draws), a different test split: same choice, same val
    flat_flat = sweep(logit_store(tmp_path / "b", "flat", "flat"), "energy")
    assert flat_flat["chosen"] == flat_peaky["chosen"]
    assert [r["val"] for r in flat_flat["settings"]] == [r["val"] for r in flat_peaky["settings"]]
    assert flat_flat["test"]["groups"]["x"]["auroc"] > 95.0

    # another val split: another choice (the test split is the same kind as in `a`)
    peaky_peaky = sweep(logit_store(tmp_path / "c", "peaky", "peaky"), "energy")
    assert peaky_peaky["chosen"]["setting"]["temperature"] != 1
    assert peaky_peaky["test"]["groups"]["x"]["auroc"] > 95.0


def test_permuting_test_features_does_not_change_choice(tmp_path, store):
    """The test splits' rows permuted and the OOD test features perturbed: the chosen
    setting and the val table are unchanged (the test metrics do change)."""
    arrays = structured_arrays(seed=0)
    grid = {"K": [1, 5, 50, 100]}
    ref = sweep(store, "knn", grid)
    rng = np.random.default_rng(7)
    for name in ("id/test", "ood/near/blend", "ood/far/faint"):
        split = dict(arrays["splits"][name])
        order = rng.permutation(len(split["features"]))
        split = {k: v[order] if isinstance(v, np.ndarray) else v for k, v in split.items()}
        if name != "id/test":
            x = split["features"]
            split["features"] = np.maximum(x + rng.normal(0.0, 1.5, x.shape), 0.0).astype(x.dtype)
        arrays["splits"][name] = split
    Store.from_arrays(tmp_path / "perm", head=arrays["head"], splits=arrays["splits"])
    other = sweep(Store.open(tmp_path / "perm"), "knn", grid)
    assert other["chosen"] == ref["chosen"]
    assert [r["val"] for r in other["settings"]] == [r["val"] for r in ref["settings"]]
    assert other["test"]["splits"] != ref["test"]["splits"]


def test_choice_is_fixed_before_any_test_split_is_scored(tmp_path, monkeypatch):
    st = logit_store(tmp_path / "s", "flat", "peaky")
    events: list[str] = []
    score_grid, choose_ = Scorer.score_grid, sweep_mod.choose

    def spy_score_grid(self, split, grid=None, force=False):
        events.append(split.name)
        return score_grid(self, split, grid, force)

    def spy_choose(values, direction):
        events.append("<choose>")
        return choose_(values, direction)

    monkeypatch.setattr(Scorer, "score_grid", spy_score_grid)
    monkeypatch.setattr(sweep_mod, "choose", spy_choose)
    sweep(st, "energy")
    assert events == ["id/val", "ood/x/val_part", "<choose>", "id/test", "ood/x/test_part"]


def test_chosen_test_block_equals_evaluate_of_the_chosen_params(store):
    """Only val-flagged OOD splits choose; the test block is evaluate() of the choice."""
    result = sweep(store, "knn", {"K": [1, 5, 50]})
    assert result["val_splits"] == {"id": "id/val", "ood": ["ood/near/blend_val"]}
    assert result["test_splits"] == {"id": "id/test",
                                     "ood": ["ood/near/blend", "ood/far/faint"]}
    ev = evaluate(store, ["knn"], {"knn": result["chosen"]["params"]}, use_cache=False)
    ref = ev["methods"]["knn"]
    assert set(result["test"]) >= set(ref) - {"cached"}
    for split, metrics in ref["splits"].items():
        assert result["test"]["splits"][split] == pytest.approx(metrics, rel=1e-12)
    for group, metrics in ref["groups"].items():
        assert result["test"]["groups"][group] == pytest.approx(metrics, rel=1e-12)
    assert result["test"]["params"] == ref["params"]


# --------------------------------------------------------------------------- (3) choice rule
def test_choose_first_of_ties():
    assert choose([1.0, 3.0, 3.0, 2.0], "max") == 1
    assert choose([2.0, 1.0, 1.0, 3.0], "min") == 1
    assert choose([5.0, 5.0], "max") == 0 and choose([5.0, 5.0], "min") == 0


def test_tie_between_settings_goes_to_first_in_grid_order(store):
    """KNN on the full bank: the subsampling seed changes nothing, so every setting ties."""
    for seeds in ([3, 1, 2], [1, 3]):
        result = sweep(store, "knn", {"seed": seeds, "K": [5]})
        vals = [r["val"]["mean"] for r in result["settings"]]
        assert all(v == vals[0] for v in vals)                      # a genuine tie
        assert result["chosen"]["index"] == 0
        assert result["chosen"]["setting"] == {"seed": seeds[0], "K": 5}
        for metric in ("fpr95", "detection_error"):
            assert sweep(store, "knn", {"seed": seeds, "K": [5]},
                         select_by=metric)["chosen"]["index"] == 0


@pytest.mark.parametrize("metric", OOD_METRIC_NAMES)
def test_select_by_every_metric(store, metric):
    result = sweep(store, "knn", {"K": [1, 5, 50, 100, 300]}, select_by=metric)
    values = np.array([r["val"]["mean"][metric] for r in result["settings"]])
    pick = np.argmin if METRIC_DIRECTIONS[metric] == "min" else np.argmax
    assert result["chosen"]["index"] == int(pick(values))
    assert result["direction"] == METRIC_DIRECTIONS[metric]


def test_select_by_fpr95_picks_the_min(store):
    result = sweep(store, "ash", {"percentile": [10, 50, 65, 80, 95]}, select_by="fpr95")
    fprs = [r["val"]["mean"]["fpr95"] for r in result["settings"]]
    assert len(set(fprs)) > 1
    assert result["chosen"]["val"]["fpr95"] == min(fprs)
    assert result["chosen"]["index"] == fprs.index(min(fprs))


def test_val_mean_is_unweighted_over_val_splits(tmp_path):
    arrays = structured_arrays(seed=1)
    x = arrays["splits"]["ood/far/faint"]["features"]
    arrays["splits"]["ood/far/faint_val"] = {"features": x[:40], "usage": "val"}
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    result = sweep(Store.open(tmp_path / "s"), "energy")
    for row in result["settings"]:
        per = row["val"]["splits"]
        assert set(per) == {"ood/near/blend_val", "ood/far/faint_val"}
        for m in OOD_METRIC_NAMES:
            assert row["val"]["mean"][m] == pytest.approx(np.mean([v[m] for v in per.values()]))
        assert set(row["val"]["groups"]) == {"near", "far"}


# --------------------------------------------------------------------------- (4) grids
def test_default_grid_fitted_to_the_bank_with_a_note(store):
    """scorers.adapt's rule: knn's default grid K [50, 100, 200, 500, 1000] is set for a
    50,000-row bank; on this 600-row bank every K is scaled by 600 / 50,000 (by hand:
    0.6, 1.2, 2.4, 6, 12 rounded = 1, 1, 2, 6, 12), equal settings scored once, every change
    listed; the scores are an explicit K [1, 2, 6, 12] sweep's."""
    result = sweep(store, "knn")
    assert result["grid_source"] == "default"
    assert [r["setting"]["K"] for r in result["settings"]] == [1, 2, 6, 12]
    assert [(a["setting"]["K"], a["used"]["K"]) for a in result["adjusted"]] == [
        (50, 1), (100, 1), (200, 2), (500, 6), (1000, 12)]
    assert all("scaled by this store's bank 600/50000" in a["reason"]
               for a in result["adjusted"])
    assert result["test"]["adjusted"] == result["adjusted"]
    explicit = sweep(store, "knn", {"K": [1, 2, 6, 12]})
    for got, ref in zip(result["settings"], explicit["settings"], strict=True):
        assert got["val"]["mean"] == pytest.approx(ref["val"]["mean"], rel=1e-12)


def test_default_grid_clamp_names_a_degenerate_bank(store):
    """nnguide's default grid (K=100, alpha=0.01) over 600 id/train rows: the bank is
    ceil(0.01 * 600) = 6 rows, so K clamps to 6 = the whole bank: DEGENERATE, naming the
    rows the default needs (100 / 0.01 = 10,000)."""
    _, settings, adjusted = plan_settings(store, "nnguide")
    assert settings == [{"K": 6, "alpha": 0.01}]
    (adj,) = adjusted
    assert adj["setting"] == {"K": 100, "alpha": 0.01} and adj["used"]["K"] == 6
    assert "DEGENERATE: K = the whole 6-row bank" in adj["reason"]
    assert "needs >= 10000 (it has 600)" in adj["reason"]


def test_plan_settings_is_what_sweep_scores(store):
    """plan_settings (what the benchmarks and the CLI see before scoring) applies the same
    rule: the default grid scaled to the 600-row bank, noted."""
    base, settings, adjusted = plan_settings(store, "knn")
    assert base == {} and [s["K"] for s in settings] == [1, 2, 6, 12]
    assert [(a["setting"], a["used"]) for a in adjusted][-1] == ({"K": 1000}, {"K": 12})
    with pytest.raises(UsageError, match="parameter 'K' is given both"):
        plan_settings(store, "knn", {"K": [5]}, {"K": 5})


def test_default_grid_clamped_settings_merge(store):
    """D = 32: both of residual's default dims (256, 1000) clamp to the largest valid dim,
    31 = min(D, N) - 1, and are scored once; the scores equal an explicit dim=31 sweep's."""
    result = sweep(store, "residual")
    assert [r["setting"] for r in result["settings"]] == [{"dim": 31}]
    assert [(a["setting"], a["used"]) for a in result["adjusted"]] == [
        ({"dim": 256}, {"dim": 31}), ({"dim": 1000}, {"dim": 31})]
    assert "1 <= dim < min(D, N) = 32" in result["adjusted"][0]["reason"]
    explicit = sweep(store, "residual", {"dim": [31]})
    assert explicit["adjusted"] == [] and explicit["chosen"]["val"] == result["chosen"]["val"]


def test_default_grid_with_nothing_valid_is_an_error(tmp_path):
    """One id/train row: no dim satisfies 1 <= dim < min(D, N) = 1."""
    arrays = structured_arrays(seed=0)
    splits = dict(arrays["splits"])
    splits["id/train"] = {k: v[:1] for k, v in splits["id/train"].items()}
    st = Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=splits)
    with pytest.raises(ValueError, match=r"scorer 'vim': no value of dim is valid on store .*"
                                         r"1 <= dim < min\(D, N\) = 1"):
        sweep(st, "vim")


def test_base_params_fix_a_grid_key(store):
    result = sweep(store, "knn", base_params={"K": 7})
    assert result["grid"] == {} and len(result["settings"]) == 1
    assert result["chosen"]["params"]["K"] == 7
    vim = sweep(store, "vim", base_params={"dim": 8})
    assert vim["chosen"]["params"]["dim"] == 8


def test_scorer_without_hyperparameters_has_one_setting(store):
    result = sweep(store, "msp")
    assert result["grid"] == {} and [r["setting"] for r in result["settings"]] == [{}]
    assert result["chosen"] == {**result["chosen"], "index": 0, "setting": {}}


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"select_by": "accuracy"}, r"select_by='accuracy'.*valid: auroc, aupr_in"),
    ({"grid": {"K": [5, 601]}}, r"K=601.*valid: 1 <= K <= 600"),
    ({"grid": {"K": [0]}}, r"K=0 must be an integer >= 1"),
    ({"grid": {"k": [5]}},
     r"unknown grid parameter 'k' \(valid: K, bank_fraction, index, recall_target, seed\)"),
    ({"grid": {"K": []}}, r"grid parameter 'K' has no values"),
    ({"grid": {"K": [5]}, "base_params": {"K": 5}}, r"'K' is given both"),
    ({"base_params": {"Q": 1}}, r"unknown parameter 'Q'"),
])
def test_bad_inputs(store, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        sweep(store, "knn", **kwargs)


def test_explicit_out_of_range_values_are_errors_not_drops(store):
    with pytest.raises(ValueError, match=r"1 <= dim < D = 32 \(got 32\)"):
        sweep(store, "vim", {"dim": [4, 32]})
    with pytest.raises(ValueError, match=r"percentile must be in \(0, 100\) \(got 100\)"):
        sweep(store, "ash", {"percentile": [50, 100]})
    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        sweep(store, "nope")


def test_missing_val_splits_are_named(tmp_path):
    arrays = structured_arrays(seed=0)
    no_flag = {k: v for k, v in arrays["splits"].items() if k != "ood/near/blend_val"}
    Store.from_arrays(tmp_path / "a", head=arrays["head"], splits=no_flag)
    with pytest.raises(FeatstoreError, match=r'no OOD split flagged usage .val.*usage = "val"'):
        sweep(Store.open(tmp_path / "a"), "knn")
    no_val = {k: v for k, v in arrays["splits"].items() if k != "id/val"}
    Store.from_arrays(tmp_path / "b", head=arrays["head"], splits=no_val)
    with pytest.raises(FeatstoreError, match=r"no complete 'id/val' split"):
        sweep(Store.open(tmp_path / "b"), "energy")


def test_no_test_splits_still_chooses(tmp_path):
    result = sweep(logit_store(tmp_path / "s", "flat", "flat", with_test=False), "energy")
    assert result["chosen"]["setting"] == {"temperature": 1}
    assert result["test"] is None and result["test_splits"] is None
    assert all(r["test"] is None for r in result["settings"])


def test_json_round_trip(store):
    for result in (sweep(store, "knn"), sweep(store, "gen", select_by="fpr95"),
                   sweep_all(store, ["knn", "msp", "vim"])):
        text = json.dumps(result, allow_nan=False)  # strict JSON: no NaN, no numpy types
        assert json.loads(text) == result


def test_sweep_all_is_the_evaluate_structure(store):
    tuned = sweep_all(store, ["energy", "knn", "vim", "rankfeat"])
    plain = evaluate(store, ["energy"], use_cache=False)
    assert set(plain) <= set(tuned)
    assert tuned["ood_splits"] == plain["ood_splits"] and tuned["id_acc"] == plain["id_acc"]
    assert set(tuned["methods"]) == {"energy", "knn", "vim"}
    assert set(tuned["skipped"]) == {"rankfeat"} and "extra:feature_maps" in tuned["skipped"][
        "rankfeat"]
    # eval --tune sweeps ViM's default grid as `featstore sweep` does: its five dims scaled
    # to D = 32 by 32 / 2048 (round(42 / 64) = 1, 2, 4, 8, round(1000 / 64) = 16)
    assert [s["dim"] for s in plan_settings(store, "vim")[1]] == [1, 2, 4, 8, 16]
    assert tuned["methods"]["vim"]["settings_scored"] == 5
    assert tuned["methods"]["vim"]["chosen"] == sweep(store, "vim")["chosen"]["setting"]
    energy = tuned["methods"]["energy"]
    assert set(plain["methods"]["energy"]) <= set(energy)
    assert energy["chosen"] == sweep(store, "energy")["chosen"]["setting"]


# --------------------------------------------------------------------------- (5) CLI
def test_cli_sweep_json_and_out(store, capsys, tmp_path):
    out_file = tmp_path / "r.json"
    code, out, err = run(capsys, "sweep", str(store.path), "--method", "knn", "--grid",
                         "K=1,5,50", "--select-by", "fpr95", "--json", "--out", str(out_file))
    assert code == 0, err
    result = json.loads(out)
    assert result == json.loads(out_file.read_text())
    assert result["grid"] == {"K": [1, 5, 50]} and result["select_by"] == "fpr95"
    # the CLI's default --ci 0.95 --boot 1000 --boot-seed 0: the library call with that spec
    from scorers.stats import BootstrapSpec

    assert untimed(result) == untimed(sweep(store, "knn", {"K": [1, 5, 50]}, "fpr95",
                                            ci=BootstrapSpec(0.95, 1000, "percentile", 0)))
    assert result["test"]["ci"]["resamples"] == 1000
    assert all(f"{m}_ci" in result["test"]["groups"]["far"] for m in ("auroc", "fpr95"))
    assert "auroc_ci" not in result["settings"][0]["test"]["groups"]["far"]


def test_cli_sweep_table(store, capsys):
    code, out, err = run(capsys, "sweep", str(store.path), "--method", "ash", "--grid",
                         "variant=p,b", "--grid", "percentile=65,90")
    assert code == 0, err
    assert "▶" in out and "chosen: variant=" in out and "near (mean)" in out
    assert "test near AUROC" in out
    code, out, err = run(capsys, "sweep", str(store.path), "--method", "knn")
    assert code == 0 and "knn: adjusted to this store: K=1000 -> K=12 (the default K grid is " \
        "set for a 50000-row bank; scaled by this store's bank 600/50000" in out.replace("\n", " ")


@pytest.mark.parametrize(("args", "code_", "needle"), [
    (["--method", "knn", "--select-by", "acc"], 2, "select_by='acc'"),
    (["--method", "knn", "--grid", "K=5,601"], 2, "K=601"),
    (["--method", "knn", "--grid", "foo=1"], 2, "unknown grid parameter 'foo'"),
    (["--method", "knn", "--grid", "K"], 2, "expected key=value"),
    (["--method", "knn", "--grid", "K=1,,2"], 2, "expected key=value"),
    (["--method", "knn", "--grid", "K=1", "--grid", "K=2"], 2, "given twice"),
    (["--method", "vim", "--grid", "dim=4,32"], 2, "1 <= dim < D = 32 (got 32)"),
    (["--method", "nope"], 2, "unknown scorer 'nope'"),
])
def test_cli_sweep_bad_input(store, capsys, args, code_, needle):
    code, out, err = run(capsys, "sweep", str(store.path), *args)
    assert code == code_ and needle in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_cli_sweep_without_val_splits(tmp_path, capsys):
    arrays = structured_arrays(seed=0)
    splits = {k: v for k, v in arrays["splits"].items() if k != "ood/near/blend_val"}
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=splits)
    code, _, err = run(capsys, "sweep", str(tmp_path / "s"), "--method", "knn")
    assert code == 1 and 'usage = "val"' in err and len(err.strip().splitlines()) == 1


def test_cli_eval_tune(store, capsys):
    code, out, err = run(capsys, "eval", str(store.path), "--tune", "--method", "energy",
                         "--method", "knn", "--method", "msp", "--select-by", "fpr95",
                         "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["tuned"] and result["select_by"] == "fpr95"
    assert set(result["methods"]) == {"energy", "knn", "msp"}
    assert result["methods"]["knn"]["chosen"] == sweep(store, "knn", select_by="fpr95")[
        "chosen"]["setting"]
    code, out, err = run(capsys, "eval", str(store.path), "--tune", "--method", "knn",
                         "--method", "vim", "--param", "knn.K=7")
    assert code == 0, err
    assert "settings chosen on val" in out and "K=7 (fixed)" in out and "OOD detection vs" in out
    assert ("vim: adjusted to this store: dim=256 -> dim=4 (ViM's default dims are set for "
            "D = 2048; scaled by this store's D 32/2048)") in " ".join(out.split())
    # a scorer named by --method that cannot run is an error (exit 1), not a quiet skip
    code, out, err = run(capsys, "eval", str(store.path), "--tune", "--method", "knn",
                         "--method", "rankfeat")
    assert code == 1 and "scorer 'rankfeat' needs 'extra:feature_maps'" in err and not out
    code, _, err = run(capsys, "eval", str(store.path), "--select-by", "fpr95")
    assert code == 2 and "needs --tune" in err
    code, _, err = run(capsys, "eval", str(store.path), "--tune", "--select-by", "auc")
    assert code == 2 and "select_by='auc'" in err
