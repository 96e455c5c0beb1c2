"""The scorer contract (scorers/base.py, DESIGN §3-§5), checked for EVERY scorer in
`scorers.REGISTRY` with the public checks of `scorers.testing` (what `check_scorer` runs on a
researcher's scorer): a scorer added to the registry is tested here without editing this file.

Per scorer (each check's reference is in `scorers.testing`'s docstring): 1. module docstring
names the paper and states the formula, no torch import; 2. unknown parameter; 3. score
before fit; 4. sign (AUROC > 50 of id/test vs the OOD split); 5. `score_grid` = separate fits
(bit for bit, except `scorers.testing.BUILTIN_GRID_RTOL`); 6. thread-count determinism;
7. float16 store within `FLOAT16_TOL`. The stores are
`scorers.testing.stores.contract_stores`, built once per session; a scorer no store supports
FAILS, naming the need to add to a builder there.

tests/scorers/test_check_scorer.py checks that `check_scorer` fails, readably, on broken
scorers (wrong sign, grid != separate fits, ...).
"""

from __future__ import annotations

import pytest

from scorers import REGISTRY
from scorers.testing import (
    BUILTIN_GRID_RTOL,
    BUILTIN_THREAD_PARAMS,
    check_float16,
    check_grid,
    check_module,
    check_score_before_fit,
    check_sign,
    check_threads,
    check_unknown_parameter,
    contract_stores,
    store_for,
)

NAMES = sorted(REGISTRY)


@pytest.fixture(scope="session")
def stores(tmp_path_factory):
    """{dtype: {store name: Store}} for float32 and float16, built once per session."""
    return contract_stores(tmp_path_factory.mktemp("contract"))


@pytest.mark.parametrize("name", NAMES)
def test_module_docstring_and_no_torch(name):
    check_module(REGISTRY[name])


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_names_every_valid_one(name):
    check_unknown_parameter(REGISTRY[name])


@pytest.mark.parametrize("name", NAMES)
def test_score_before_fit_is_a_clear_error(stores, name):
    check_score_before_fit(REGISTRY[name], store_for(stores["float32"], REGISTRY[name]))


@pytest.mark.parametrize("name", NAMES)
def test_sign_higher_is_more_in_distribution(stores, name):
    """check_sign: AUROC (scorers.metrics, equal to scikit-learn's roc_auc_score:
    tests/test_metrics.py) of id/test against the OOD split > 50."""
    cls = REGISTRY[name]
    assert check_sign(cls, store_for(stores["float32"], cls)) > 50


@pytest.mark.parametrize("name", NAMES)
def test_score_grid_equals_separate_fits(stores, name):
    cls = REGISTRY[name]
    rtol = BUILTIN_GRID_RTOL.get(name, (0.0, ""))[0]
    assert check_grid(cls, store_for(stores["float32"], cls), rtol) >= 2


@pytest.mark.parametrize("name", NAMES)
def test_scores_bit_identical_with_one_and_three_threads(stores, name):
    cls = REGISTRY[name]
    check_threads(cls, store_for(stores["float32"], cls), BUILTIN_THREAD_PARAMS.get(name))


@pytest.mark.parametrize("name", NAMES)
def test_float16_store_scores_like_the_float32_store(stores, name):
    cls = REGISTRY[name]
    s32 = store_for(stores["float32"], cls)
    kind = next(k for k, v in stores["float32"].items() if v is s32)
    assert stores["float16"][kind].split("id/test").dtype == "float16"
    check_float16(cls, s32, stores["float16"][kind])
