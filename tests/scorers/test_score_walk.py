"""The scoring walk of `featstore score` / `featstore eval` (scorers.score_run.score_store,
scorers.evaluate): the method name is resolved once and built into ONE scorer per call, and the
finite-value check runs once per split per call (fit split and scored splits), while the scores
are those of the public API (`get_scorer(name, **params_used).fit(store).score(split)`, the
reference, bit for bit: the same computation on the same store).

Spies wrap the real functions (registry.resolve, values.require_finite, the scorer's
constructor) and count calls; nothing is replaced.
"""

from __future__ import annotations

import numpy as np
import pytest

import scorers.base as base_module
import scorers.evaluate as evaluate_module
import scorers.score_run as score_run_module
from featstore.store.store import Store
from scorers import get_scorer
from scorers.evaluate import evaluate
from scorers.methods.vim import ViM
from scorers.score_run import score_store
from scorers.testing.stores import OOD_SPLIT, plain_arrays

SCORED = ["id/test", OOD_SPLIT]


@pytest.fixture
def store(tmp_path):
    arrays = plain_arrays(n_train=40)  # D = 48 > N = 40: ViM's default dim 24 stays valid
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    return Store.open(tmp_path / "s")


@pytest.fixture
def spies(monkeypatch):
    calls: dict[str, list] = {"resolve": [], "built": [], "checked": []}
    real_resolve = evaluate_module.resolve
    real_finite = evaluate_module.require_finite
    real_init = ViM.__init__

    def resolve(method):
        calls["resolve"].append(method)
        return real_resolve(method)

    def require_finite(split, fields, what):
        calls["checked"].append(split.name)
        return real_finite(split, fields, what)

    def init(self, **params):
        calls["built"].append(params)
        real_init(self, **params)

    for module in (evaluate_module, score_run_module):
        monkeypatch.setattr(module, "resolve", resolve)
    for module in (evaluate_module, base_module):
        monkeypatch.setattr(module, "require_finite", require_finite)
    monkeypatch.setattr(ViM, "__init__", init)
    return calls


def test_score_resolves_builds_and_checks_once(store, spies):
    result = score_store(store, "vim", {"precision": "float64"}, SCORED, use_cache=False)
    assert spies["resolve"] == ["vim"]
    assert spies["built"] == [{"precision": "float64"}]
    assert sorted(spies["checked"]) == sorted(["id/train", *SCORED])
    reference = get_scorer("vim", **result["params_used"]).fit(store)
    for name in SCORED:
        scores = reference.score(store.split(name))
        assert result["splits"][name] == {
            "n": scores.size, "mean": float(scores.mean()), "std": float(scores.std()),
            "min": float(scores.min()), "max": float(scores.max())}


def test_score_with_nonfinite_allowed_checks_nothing(store, spies):
    score_store(store, "vim", {}, SCORED, use_cache=False, allow_nonfinite=True)
    assert spies["checked"] == [] and len(spies["built"]) == 1


def test_eval_builds_and_checks_once_per_method(store, spies):
    result = evaluate(store, ["vim"], use_cache=False)
    assert spies["built"] == [{}]
    assert sorted(spies["checked"]) == sorted(["id/train", *SCORED])
    reference = get_scorer("vim", **result["methods"]["vim"]["params"]).fit(store)
    ood = reference.score(store.split(OOD_SPLIT))
    ident = reference.score(store.split("id/test"))
    want = 100.0 * np.mean(ident[:, None] > ood[None, :]) + 50.0 * np.mean(
        ident[:, None] == ood[None, :])  # AUROC by pair counting, by hand
    assert result["methods"]["vim"]["splits"][OOD_SPLIT]["auroc"] == pytest.approx(want,
                                                                                   abs=1e-9)


def test_api_fit_and_score_still_check_on_their_own(store, spies):
    """A scorer used through the API (no walk) checks its fit split at `fit` and each split
    at `score`, as before."""
    scorer = get_scorer("vim").fit(store)
    scorer.score(store.split("id/test"))
    assert spies["checked"] == ["id/train", "id/test"]
