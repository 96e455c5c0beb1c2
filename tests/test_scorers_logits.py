"""Tests for the logit-only scorers: msp, mls, energy, odin, temp_scaling, gen, kl_matching,
entropy.

References (each test's docstring says which one it uses):
- the papers' formulas transcribed independently here with SciPy/NumPy (`scipy.special.softmax`,
  `scipy.special.logsumexp`, `scipy.stats.entropy`, plain loops), never the modules' helpers;
- the base class's refit-per-setting path (a separate construct/fit/score per setting) for
  `score_grid`;
- a brute-force grid minimisation of the NLL for temp_scaling's fitted temperature;
- scikit-learn's `roc_auc_score` for the sign tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp
from scipy.special import softmax as sp_softmax
from scipy.stats import entropy as sp_entropy
from sklearn.metrics import roc_auc_score

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from scorers.base import expand_grid

LOGIT_SCORERS = ["msp", "mls", "energy", "odin", "temp_scaling", "gen", "kl_matching", "entropy"]
GRID_SCORERS = ["energy", "odin", "gen"]
MODULES = {"msp": "msp", "mls": "mls", "energy": "energy", "odin": "odin",
           "temp_scaling": "temp_scaling", "gen": "gen", "kl_matching": "kl_matching",
           "entropy": "entropy"}
SCORERS_DIR = Path(__file__).resolve().parent.parent / "scorers" / "methods"


# --------------------------------------------------------------------------- references
def logits_of(store: Store, name: str) -> np.ndarray:
    return np.asarray(store.split(name).logits, dtype=np.float64)


def ref_msp(logits: np.ndarray) -> np.ndarray:
    """Hendrycks & Gimpel 2017: max_k softmax(l)_k."""
    return sp_softmax(logits, axis=1).max(axis=1)


def ref_mls(logits: np.ndarray) -> np.ndarray:
    """Hendrycks et al. 2022: max_k l_k."""
    return logits.max(axis=1)


def ref_energy(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Liu et al. 2020: -E(x; T) = T log sum_k exp(l_k / T)."""
    return temperature * sp_logsumexp(logits / temperature, axis=1)


def ref_odin(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Liang et al. 2018 without perturbation: max_k softmax(l / T)_k."""
    return sp_softmax(logits / temperature, axis=1).max(axis=1)


def ref_gen(logits: np.ndarray, gamma: float, m: int) -> np.ndarray:
    """Liu, Lochman & Zach 2023: -sum over the top-M probabilities of p^g (1 - p)^g."""
    probs = sp_softmax(logits, axis=1)
    top = np.sort(probs, axis=1)[:, -m:]  # like the paper's code; M > C keeps all C
    return -np.sum(top**gamma * (1.0 - top) ** gamma, axis=1)


def ref_entropy(logits: np.ndarray) -> np.ndarray:
    """-H(softmax(l)) via scipy.stats.entropy (natural log)."""
    return -sp_entropy(sp_softmax(logits, axis=1), axis=1)


def ref_kl_templates(val_logits: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Hendrycks et al. 2022: d_k = mean softmax of id/val rows predicted as k (k predicted)."""
    probs = sp_softmax(val_logits, axis=1)
    pred = np.argmax(probs, axis=1)
    classes = [k for k in range(probs.shape[1]) if np.any(pred == k)]
    return np.array(classes), [probs[pred == k].mean(axis=0) for k in classes]


def ref_kl_matching(logits: np.ndarray, templates: list[np.ndarray]) -> np.ndarray:
    """-min_k KL(p || d_k), KL written as in OpenOOD: sum where p != 0 of p log(p / q)."""
    probs = sp_softmax(logits, axis=1)
    out = np.empty(len(probs))
    for i, p in enumerate(probs):
        kls = []
        for q in templates:
            with np.errstate(divide="ignore", invalid="ignore"):
                kls.append(np.sum(np.where(p != 0, p * np.log(p / q), 0.0)))
        out[i] = -min(kls)
    return out


def ref_nll(logits: np.ndarray, labels: np.ndarray, temps: np.ndarray) -> np.ndarray:
    """Guo et al. 2017: mean NLL of softmax(l / T) at the true label, for every T in temps."""
    scaled = logits[None, :, :] / temps[:, None, None]  # (T, n, C)
    log_probs = scaled - sp_logsumexp(scaled, axis=2, keepdims=True)
    return -log_probs[:, np.arange(len(labels)), labels].mean(axis=1)


def brute_force_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """argmin_T NLL(T) on a log grid over [0.01, 100], refined once around the best point."""
    coarse = np.geomspace(0.01, 100.0, 401)
    i = int(np.argmin(ref_nll(logits, labels, coarse)))
    fine = np.linspace(coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)], 401)
    return float(fine[int(np.argmin(ref_nll(logits, labels, fine)))])


def reference_scores(name: str, params: dict, store: Store, scorer, split: str) -> np.ndarray:
    """The independent reference for `name` on `split` (temp_scaling at the scorer's T)."""
    logits = logits_of(store, split)
    if name == "msp":
        return ref_msp(logits)
    if name == "mls":
        return ref_mls(logits)
    if name == "energy":
        return ref_energy(logits, params.get("temperature", 1.0))
    if name == "odin":
        return ref_odin(logits, params.get("temperature", 1000.0))
    if name == "gen":
        return ref_gen(logits, params.get("gamma", 0.1), params.get("M", 100))
    if name == "entropy":
        return ref_entropy(logits)
    if name == "kl_matching":
        _, templates = ref_kl_templates(logits_of(store, "id/val"))
        return ref_kl_matching(logits, templates)
    if name == "temp_scaling":
        return ref_odin(logits, scorer.fitted_temperature)
    raise AssertionError(name)


CASES = {
    "msp": [{}],
    "mls": [{}],
    "entropy": [{}],
    "kl_matching": [{}],
    "temp_scaling": [{}],
    "energy": [{}, {"temperature": 0.5}, {"temperature": 1000}],
    "odin": [{}, {"temperature": 1}, {"temperature": 10.0}],
    "gen": [{}, {"gamma": 0.5, "M": 3}, {"gamma": 2, "M": 1}, {"gamma": 0.01, "M": 12}],
}


def _check_against_reference(store: Store, name: str, chunk_rows: int) -> None:
    for params in CASES[name]:
        scorer = get_scorer(name, **params)
        scorer.chunk_rows = chunk_rows
        scorer.fit(store)
        for split in store.splits():
            got = scorer.score(store.split(split))
            assert got.dtype == np.float64
            assert got.shape == (store.split(split).num_rows,)
            want = reference_scores(name, params, store, scorer, split)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12,
                                       err_msg=f"{name} {params} {split}")


@pytest.mark.parametrize("name", LOGIT_SCORERS)
def test_matches_paper_formula_structured_store(structured_store, name):
    """Reference: the paper's formula transcribed in this file (SciPy softmax/logsumexp/
    entropy, OpenOOD-style KL loop), for every parameter set in CASES; every split of
    `structured_store` (C=5), default chunks."""
    _check_against_reference(structured_store, name, chunk_rows=8192)


@pytest.mark.parametrize("name", LOGIT_SCORERS)
def test_matches_paper_formula_chunked_float16(make_store, name):
    """Reference: the paper's formula transcribed in this file, for every parameter set in
    CASES; a 12-class float16 store from `make_store`, scored in 37-row chunks (uneven last
    chunk) so chunking cannot change the numbers."""
    store = make_store("c12", dtype="float16", seed=3, num_classes=12, dim=16, n_train=120,
                       n_val=150, n_test=130, n_ood=90)
    _check_against_reference(store, name, chunk_rows=37)


# --------------------------------------------------------------------------- sign
@pytest.mark.parametrize("name", LOGIT_SCORERS)
def test_sign_id_scores_higher(structured_store, name):
    """Reference: scikit-learn `roc_auc_score` (ID positive); mean of id/test exceeds
    ood/far/faint and AUROC > 0.5 with default parameters (higher = more ID)."""
    scorer = get_scorer(name).fit(structured_store)
    id_s = scorer.score(structured_store.split("id/test"))
    ood_s = scorer.score(structured_store.split("ood/far/faint"))
    assert id_s.mean() > ood_s.mean()
    y = np.r_[np.ones(len(id_s)), np.zeros(len(ood_s))]
    assert roc_auc_score(y, np.r_[id_s, ood_s]) > 0.5


# --------------------------------------------------------------------------- grids
def _separate(store: Store, name: str, base: dict, setting: dict, split: str,
              chunk_rows: int) -> np.ndarray:
    scorer = get_scorer(name, **{**base, **setting})
    scorer.chunk_rows = chunk_rows
    return scorer.fit(store).score(store.split(split))


@pytest.mark.parametrize("name", GRID_SCORERS)
def test_default_grid_equals_separate_runs(structured_store, name):
    """Reference: a separate construct/fit/score per setting (what the base class's refit
    path does); the default grid on id/test and ood/near/blend, to 1e-9."""
    scorer = get_scorer(name).fit(structured_store)
    grid = type(scorer).grid
    assert grid, f"{name} should have a default grid"
    for split in ("id/test", "ood/near/blend"):
        results = scorer.score_grid(structured_store.split(split))
        assert [s for s, _ in results] == expand_grid(grid)
        for setting, got in results:
            want = _separate(structured_store, name, {}, setting, split, scorer.chunk_rows)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{name} {setting} {split}")


@pytest.mark.parametrize(("name", "base", "grid"), [
    ("energy", {}, {"temperature": [0.25, 1.0, 3, 1e4]}),
    ("odin", {"temperature": 5.0}, {"temperature": [1, 2.5, 1000]}),
    ("gen", {"gamma": 0.3}, {"M": [1, 5, 12, 100]}),
    ("gen", {"M": 4}, {"gamma": [0.01, 1, 10]}),
    ("gen", {}, {"M": [2, 12], "gamma": [0.5, 0.1]}),
])
def test_custom_grid_equals_separate_runs(make_store, name, base, grid):
    """Reference: a separate construct/fit/score per setting; custom grids (partial grids keep
    the scorer's other parameters) on a 12-class store in 50-row chunks, to 1e-9."""
    store = make_store("c12", seed=5, num_classes=12, dim=16, n_train=100, n_val=120,
                       n_test=110, n_ood=80)
    scorer = get_scorer(name, **base)
    scorer.chunk_rows = 50
    scorer.fit(store)
    results = scorer.score_grid(store.split("ood/far/faint"), grid)
    assert [s for s, _ in results] == expand_grid(grid)
    for setting, got in results:
        want = _separate(store, name, base, setting, "ood/far/faint", 50)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=f"{setting}")


def test_default_grids_match_openood():
    """Reference: OpenOOD v1.5 configs/postprocessors/{ebo,odin,gen}.yml postprocessor_sweep
    and postprocessor_args; the parameter-free scorers have no grid."""
    info = {s["name"]: s for s in list_scorers()}
    assert info["energy"]["grid"] == {"temperature": [1, 10, 100, 1000]}
    assert info["energy"]["defaults"] == {"temperature": 1.0}
    assert info["odin"]["grid"] == {"temperature": [1, 10, 100, 1000]}
    assert info["odin"]["defaults"] == {"temperature": 1000.0}
    assert info["gen"]["grid"] == {"gamma": [0.01, 0.1, 0.5, 1, 2, 5, 10],
                                   "M": [10, 50, 100, 200, 500, 1000]}
    assert info["gen"]["defaults"] == {"gamma": 0.1, "M": 100}
    for name in ("msp", "mls", "temp_scaling", "kl_matching", "entropy"):
        assert info[name]["grid"] == {} and info[name]["defaults"] == {}
    assert "fit:id/val" in info["temp_scaling"]["needs"]
    assert "fit:id/val" in info["kl_matching"]["needs"]
    for name in LOGIT_SCORERS:
        assert info[name]["paper"] and "logits" in info[name]["needs"]


# --------------------------------------------------------------------------- bad params
@pytest.mark.parametrize("name", LOGIT_SCORERS)
def test_unknown_param_names_valid_ones(name):
    """Reference: DESIGN §3 (unknown param -> ValueError naming the valid ones)."""
    with pytest.raises(ValueError, match="bogus") as err:
        get_scorer(name, bogus=1)
    valid = {"energy": ["temperature"], "odin": ["temperature"], "gen": ["M", "gamma"]}
    for param in valid.get(name, ["none"]):
        assert param in str(err.value)


@pytest.mark.parametrize(("name", "params", "pattern"), [
    ("energy", {"temperature": 0}, r"temperature=0 .*> 0"),
    ("energy", {"temperature": -1.5}, r"temperature=-1.5 .*> 0"),
    ("energy", {"temperature": float("inf")}, r"temperature=inf .*finite"),
    ("energy", {"temperature": float("nan")}, r"temperature=nan .*> 0"),
    ("energy", {"temperature": "hot"}, r"temperature='hot' .*> 0"),
    ("odin", {"temperature": 0}, r"temperature=0 .*> 0"),
    ("odin", {"temperature": True}, r"temperature=True .*> 0"),
    ("gen", {"M": 0}, r"M=0 .*>= 1"),
    ("gen", {"M": 2.5}, r"M=2.5 .*integer >= 1"),
    ("gen", {"gamma": -1}, r"gamma=-1 .*> 0"),
    ("gen", {"gamma": 0}, r"gamma=0 .*> 0"),
])
def test_out_of_range_params(name, params, pattern):
    """Reference: the scorers' documented ranges (T > 0 finite, gamma > 0, M integer >= 1);
    the ValueError names the parameter, the value and the range."""
    with pytest.raises(ValueError, match=pattern):
        get_scorer(name, **params)


def test_out_of_range_grid_values(structured_store):
    """Reference: Scorer.score_grid validates every setting before scoring; unknown grid
    parameters name the valid ones."""
    scorer = get_scorer("energy").fit(structured_store)
    split = structured_store.split("id/test")
    with pytest.raises(ValueError, match=r"temperature=0 .*> 0"):
        scorer.score_grid(split, {"temperature": [1, 0]})
    gen = get_scorer("gen").fit(structured_store)
    with pytest.raises(ValueError, match=r"M=0 .*>= 1"):
        gen.score_grid(split, {"M": [5, 0]})
    with pytest.raises(ValueError, match=r"'alpha'.*M, gamma"):
        gen.score_grid(split, {"alpha": [1]})


def test_gen_m_above_classes_uses_all_classes(structured_store):
    """Reference: GEN with M >= C is the sum over all C classes (paper code's [:, -M:])."""
    split = structured_store.split("ood/near/blend")
    logits = logits_of(structured_store, "ood/near/blend")
    full = get_scorer("gen", M=5).fit(structured_store).score(split)
    for m in (6, 100, 1000):
        got = get_scorer("gen", M=m).fit(structured_store).score(split)
        np.testing.assert_array_equal(got, full)
    probs = sp_softmax(logits, axis=1)
    np.testing.assert_allclose(full, -np.sum((probs * (1 - probs)) ** 0.1, axis=1), rtol=1e-9)


# --------------------------------------------------------------------------- fitted scorers
def test_temp_scaling_temperature_equals_brute_force(structured_store, make_store):
    """Reference: brute-force grid minimisation of the mean NLL of softmax(l / T) over the
    id/val rows (Guo et al. 2017), computed here; fitted T agrees to 1e-3 relative."""
    c12 = make_store("c12", seed=7, num_classes=12, dim=16, n_train=60, n_val=400, n_test=60,
                     n_ood=40)
    for store in (structured_store, c12):
        scorer = get_scorer("temp_scaling").fit(store)
        val = store.split("id/val")
        want = brute_force_temperature(logits_of(store, "id/val"), np.asarray(val.labels))
        assert scorer.fitted_temperature == pytest.approx(want, rel=1e-3)
        assert 0.01 < scorer.fitted_temperature < 100


def test_temp_scaling_ignores_unlabelled_rows(tmp_path):
    """Reference: brute-force NLL minimisation over the labelled id/val rows only (label -1
    rows carry no class and are left out of the NLL)."""
    rng = np.random.default_rng(11)
    c, d = 4, 6
    w, b = rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32)
    y = np.arange(300) % c
    logits = (rng.normal(size=(300, c)) + 2.0 * np.eye(c)[y]).astype(np.float32)
    labels = y.copy()
    labels[::3] = -1
    splits = {
        "id/val": {"features": rng.normal(size=(300, d)), "logits": logits, "labels": labels},
        "id/test": {"features": rng.normal(size=(50, d)), "labels": np.arange(50) % c},
    }
    store = Store.from_arrays(tmp_path / "s", head=(w, b), splits=splits)
    scorer = get_scorer("temp_scaling")
    scorer.chunk_rows = 64
    scorer.fit(store)
    keep = labels >= 0
    want = brute_force_temperature(logits[keep].astype(np.float64), labels[keep])
    assert scorer.fitted_temperature == pytest.approx(want, rel=1e-3)


def test_temp_scaling_warns_on_degenerate_fit(tmp_path):
    """Reference: when every id/val row is confidently wrong, the NLL keeps falling as
    T -> infinity (towards log C), so the optimum is the upper search bound (100) and the fit
    warns."""
    c, d = 3, 4
    y = np.arange(60) % c
    logits = (20.0 * np.eye(c)[(y + 1) % c]).astype(np.float32)
    splits = {"id/val": {"features": np.zeros((60, d)), "logits": logits, "labels": y}}
    store = Store.from_arrays(tmp_path / "s", head=(np.zeros((c, d), np.float32),
                                                    np.zeros(c, np.float32)), splits=splits)
    with pytest.warns(UserWarning, match="bound"):
        scorer = get_scorer("temp_scaling").fit(store)
    assert scorer.fitted_temperature == pytest.approx(100.0, rel=1e-2)


@pytest.mark.parametrize("name", ["temp_scaling", "kl_matching"])
def test_fit_without_id_val_names_it(tmp_path, name):
    """Reference: DESIGN §5 needs vocabulary; a store with only id/train, id/test and an OOD
    split cannot fit a scorer that needs `fit:id/val`."""
    rng = np.random.default_rng(0)
    c, d = 3, 5
    head = (rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32))
    splits = {
        "id/train": {"features": rng.normal(size=(40, d)), "labels": np.arange(40) % c},
        "id/test": {"features": rng.normal(size=(30, d)), "labels": np.arange(30) % c},
        "ood/far/noise": {"features": rng.normal(size=(20, d))},
    }
    store = Store.from_arrays(tmp_path / "s", head=head, splits=splits)
    with pytest.raises(FeatstoreError, match="id/val"):
        get_scorer(name).fit(store)


def test_kl_matching_skips_never_predicted_classes(tmp_path):
    """Reference: Hendrycks et al. 2022 templates computed here by a per-class loop; a class
    never predicted on id/val has no template and is left out of the minimum (documented)."""
    rng = np.random.default_rng(2)
    c, d = 5, 4
    val_logits = rng.normal(size=(200, c))
    val_logits[:, 4] -= 10.0  # class 4 is never the argmax on id/val
    test_logits = rng.normal(size=(80, c)) * 2.0
    splits = {
        "id/val": {"features": np.zeros((200, d)), "logits": val_logits.astype(np.float32),
                   "labels": np.arange(200) % c},
        "id/test": {"features": np.zeros((80, d)), "logits": test_logits.astype(np.float32),
                    "labels": np.arange(80) % c},
    }
    store = Store.from_arrays(tmp_path / "s", head=(np.zeros((c, d), np.float32),
                                                    np.zeros(c, np.float32)), splits=splits)
    scorer = get_scorer("kl_matching")
    scorer.chunk_rows = 30
    scorer.fit(store)
    classes, templates = ref_kl_templates(logits_of(store, "id/val"))
    assert list(classes) == [0, 1, 2, 3]
    np.testing.assert_array_equal(scorer.template_classes, classes)
    np.testing.assert_allclose(scorer.templates, np.stack(templates), rtol=1e-12)
    got = scorer.score(store.split("id/test"))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref_kl_matching(logits_of(store, "id/test"), templates),
                               rtol=1e-6, atol=1e-12)


# --------------------------------------------------------------------------- contract
@pytest.mark.parametrize("name", LOGIT_SCORERS)
def test_module_docstring_and_no_torch(name):
    """Reference: DESIGN §1 and §5 (a module docstring names the paper and the formula;
    `scorers` never imports torch), checked on the module's syntax tree."""
    tree = ast.parse((SCORERS_DIR / f"{MODULES[name]}.py").read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and ("Paper:" in doc or "Reference:" in doc) and "score(x)" in doc
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "torch" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "torch"
