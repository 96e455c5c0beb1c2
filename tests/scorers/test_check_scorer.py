"""`scorers.testing.check_scorer` on a researcher's scorers (issue 32 item 2): it passes on a
correct one and fails with a readable ContractError on each kind of broken one (wrong sign
convention, grid != separate fits, torch import, no formula in the docstring, an unknown
parameter swallowed, score before fit allowed). Reference: the scorers below, each broken in
one known way, and the message the check must give."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from scorers.testing import ContractError, check_scorer, contract_stores

GOOD = '''
"""Cosine to the nearest class mean (Nobody 2025, a test scorer).

score(x) = max_c cos(x, mu_c), as implemented: mu_c the id/train class means, x ** power."""
import numpy as np

from scorers.base import Scorer


class CosMean(Scorer):
    name = "cosmean_check"
    needs = ("features", "fit:id/train")
    defaults = {"power": 1.0}
    grid = {"power": [1.0, 3.0]}
    paper = "Nobody, A. (2025). A test scorer."

    def _fit(self, store):
        split = store.split("id/train")
        x = np.asarray(split.features, dtype=np.float64)
        y = np.asarray(split.labels)
        mu = np.stack([x[y == c].mean(0) for c in np.unique(y)])
        self.mu = mu / np.linalg.norm(mu, axis=1, keepdims=True)

    def _cos(self, split):
        x = np.asarray(split.features, dtype=np.float64)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return (x @ self.mu.T).max(1)

    def _score(self, split):
        return np.sign(c := self._cos(split)) * np.abs(c) ** self.params["power"]


class WrongSign(CosMean):
    def _score(self, split):
        return -super()._score(split)


class SharedGridBug(CosMean):
    def _score_grid(self, split, settings):  # forgets the power of every setting but one
        return [self._cos(split) for _ in settings]


class Lax(CosMean):  # drops unknown parameters instead of refusing them
    def __init__(self, **params):
        super().__init__(**{k: v for k, v in params.items() if k in self.defaults})


class Eager(CosMean):  # scores before fit
    def score(self, split, force=False):
        return np.zeros(split.num_rows)


class FitRaises(CosMean):  # a bug in the user's fit
    def _fit(self, store):
        raise ZeroDivisionError("division by zero in my fit")
'''


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return contract_stores(tmp_path_factory.mktemp("check"))


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    root = tmp_path_factory.mktemp("mods")
    (root / "ol_check_mod.py").write_text(textwrap.dedent(GOOD))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("ol_check_mod")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("ol_check_mod", None)


def test_passes_on_a_correct_scorer(module, stores):
    got = check_scorer(module.CosMean, stores=stores)
    assert got["auroc"] > 50 and got["grid_settings"] == 4 and got["float16_share"] <= 1e-2


def test_default_stores_in_a_temporary_folder(module):
    """Without `stores`, check_scorer builds its own (what a researcher calls)."""
    assert check_scorer(module.CosMean())["grid_settings"] == 4


def test_wrong_sign_fails_readably(module, stores):
    with pytest.raises(ContractError) as err:
        check_scorer(module.WrongSign, stores=stores)
    message = str(err.value)
    assert message.startswith("check_scorer(WrongSign, name 'cosmean_check'): sign: AUROC ")
    assert "HIGHER for MORE in-distribution" in message and "sign flipped" in message
    assert "\n" not in message


def test_grid_unlike_separate_fits_fails_readably(module, stores):
    with pytest.raises(ContractError, match=r"^check_scorer\(SharedGridBug, name "
                                            r"'cosmean_check'\): grid: score_grid's setting "
                                            r"\{'power': 3\.0\} on id/test differs from a "
                                            r"separate fit by up to"):
        check_scorer(module.SharedGridBug, stores=stores)


def test_module_without_formula_passes_but_with_torch_fails(tmp_path, monkeypatch, stores):
    """Issue 47 item 5: the docstring phrase "as implemented" is the house style of the
    built-ins (tests/scorers/test_contract.py), not the contract: a user's scorer without
    it passes on behaviour; `check_module(..., style=True)` still names it. A torch import
    fails either way."""
    from scorers.testing import check_module

    bad = GOOD.replace("as implemented", "roughly")
    (tmp_path / "ol_check_noformula.py").write_text(textwrap.dedent(bad))
    (tmp_path / "ol_check_torch.py").write_text(
        textwrap.dedent(GOOD).replace("import numpy as np\n", "import numpy as np\n"
                                      "if False:\n    import torch\n", 1))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        nf = importlib.import_module("ol_check_noformula")
        assert check_scorer(nf.CosMean, stores=stores)["grid_settings"] == 4
        with pytest.raises(ContractError, match="must state the formula as implemented"):
            check_module(nf.CosMean, style=True)
        tm = importlib.import_module("ol_check_torch")
        with pytest.raises(ContractError, match=r"ol_check_torch imports torch \(line 7\)"):
            check_scorer(tm.CosMean, stores=stores)
    finally:
        sys.modules.pop("ol_check_noformula", None)
        sys.modules.pop("ol_check_torch", None)


def test_swallowed_parameter_and_score_before_fit_fail(module, stores):
    with pytest.raises(ContractError, match=r"unknown parameter: cls\(bogus_param=1\) raised "
                                            "nothing"):
        check_scorer(module.Lax, stores=stores)
    with pytest.raises(ContractError, match=r"score before fit: score\(split\) before "
                                            r"fit\(store\) raised nothing"):
        check_scorer(module.Eager, stores=stores)


def test_a_fit_that_raises_is_a_contract_error(module, stores):
    """Issue 43 item 3: the fit's exception came through as itself (a ZeroDivisionError out
    of check_scorer) instead of a ContractError naming the check and the scorer."""
    with pytest.raises(ContractError, match=r"^check_scorer\(FitRaises, name 'cosmean_check'"
                                            r"\): auroc: raised FeatstoreError: scorer "
                                            r"'cosmean_check' \(ol_check_mod:FitRaises\): its "
                                            r"_fit raised ZeroDivisionError: division by zero"):
        check_scorer(module.FitRaises, stores=stores)
