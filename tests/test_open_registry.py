"""A researcher's own scorer, first-class (issue 32 item 1): a `Scorer` subclass in a module
outside the package is evaluated, swept and compared from the CLI as `--method module:Class`
and from Python as a class or an instance; entry points of group `featstore.scorers`
register; a name clash with a built-in is an error; an edited scorer never reads its old
cached scores.

References: the scorer's formula transcribed in NumPy here (cosine to the nearest id/train
class mean) and scikit-learn's `roc_auc_score` for its AUROC."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from featstore.errors import UsageError
from scorers import REGISTRY, check_scorers, register, unregister
from scorers.evaluate import evaluate
from scorers.registry import load_entry_points, resolve
from tests.helpers.cli import run_cli

USER_SCORER = '''
"""Cosine to the nearest class mean (a user's scorer for the tests).

score(x) = SIGN * max_c cos(x, mu_c) ** power, as implemented: mu_c the id/train class means."""
import numpy as np

from scorers.base import Scorer

SIGN = {sign}


class CosMean(Scorer):
    name = "{name}"
    needs = ("features", "fit:id/train")
    defaults = {{"power": 1.0}}
    grid = {{"power": [1.0, 3.0]}}
    paper = "Nobody, A. (2025). A test scorer."

    def _fit(self, store):
        split = store.split("id/train")
        x = np.asarray(split.features, dtype=np.float64)
        y = np.asarray(split.labels)
        mu = np.stack([x[y == c].mean(0) for c in np.unique(y)])
        self.mu = mu / np.linalg.norm(mu, axis=1, keepdims=True)

    def _score(self, split):
        x = np.asarray(split.features, dtype=np.float64)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return SIGN * (x @ self.mu.T).max(1) ** self.params["power"]
'''


def write_module(path, module: str, name: str, sign: float = 1.0) -> None:
    (path / f"{module}.py").write_text(textwrap.dedent(USER_SCORER.format(name=name,
                                                                          sign=sign)))


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """`ol_user_scorers.CosMean` (scorer name "cosmean") importable from tmp_path."""
    write_module(tmp_path, "ol_user_scorers", "cosmean")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "ol_user_scorers"
    unregister("cosmean")
    sys.modules.pop("ol_user_scorers", None)


def reference_scores(store, split: str, power: float = 1.0) -> np.ndarray:
    """The scorer's formula, independently in NumPy."""
    train = store.split("id/train")
    x, y = np.asarray(train.features, np.float64), np.asarray(train.labels)
    mu = np.stack([x[y == c].mean(0) for c in range(5)])
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    z = np.asarray(store.split(split).features, np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    return (z @ mu.T).max(1) ** power


def reference_auroc(store, ood: str, power: float = 1.0) -> float:
    a, b = reference_scores(store, "id/test", power), reference_scores(store, ood, power)
    return 100 * roc_auc_score(np.r_[np.ones(len(a)), np.zeros(len(b))], np.r_[a, b])


def test_cli_eval_sweep_compare_module_class(structured_store, user_module, capsys):
    store = structured_store
    spec = f"{user_module}:CosMean"
    code, out, err = run_cli(capsys, "eval", store.path, "--method", spec, "--method", "msp",
                             "--param", f"{spec}.power=3", "--json", "--ci", "0")
    assert code == 0, err
    res = json.loads(out)["methods"]["cosmean"]
    assert res["params"] == {"power": 3}
    for ood in ("ood/near/blend", "ood/far/faint"):
        assert res["splits"][ood]["auroc"] == pytest.approx(reference_auroc(store, ood, 3.0),
                                                            abs=1e-9)
    code, out, err = run_cli(capsys, "sweep", store.path, "--method", spec, "--json")
    assert code == 0, err
    swept = json.loads(out)
    assert swept["method"] == "cosmean" and swept["grid"] == {"power": [1.0, 3.0]}
    code, out, err = run_cli(capsys, "compare", store.path, "--method", spec, "--method",
                             "vim", "--json", "--boot", "50")
    assert code == 0, err
    pairs = json.loads(out)["splits"]["ood/far/faint"]["delong_auroc"]
    assert (pairs[0]["a"], pairs[0]["b"]) == ("cosmean", "vim")
    assert pairs[0]["auroc_a"] == pytest.approx(reference_auroc(store, "ood/far/faint"),
                                                abs=1e-9)


def test_python_class_and_instance(structured_store, user_module):
    module = importlib.import_module(user_module)
    res = evaluate(structured_store, [module.CosMean(power=3.0), "msp"], use_cache=False)
    assert list(res["methods"]) == ["cosmean", "msp"]
    assert res["methods"]["cosmean"]["params"] == {"power": 3.0}
    got = res["methods"]["cosmean"]["splits"]["ood/far/faint"]["auroc"]
    assert got == pytest.approx(reference_auroc(structured_store, "ood/far/faint", 3.0), abs=1e-9)
    assert resolve(module.CosMean) == "cosmean" and REGISTRY["cosmean"] is module.CosMean
    assert check_scorers([f"{user_module}:CosMean", "vim"]) == ["cosmean", "vim"]


def test_name_clash_with_builtin_is_an_error(tmp_path, monkeypatch):
    write_module(tmp_path, "ol_clash", "vim")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=r"scorer name 'vim' of ol_clash:CosMean is already "
                                         r"taken by scorers\.methods\.vim:\w+ \(built-in\)"):
        check_scorers(["ol_clash:CosMean"])
    module = importlib.import_module("ol_clash")
    with pytest.raises(UsageError, match="already taken"):
        register(module.CosMean)
    assert REGISTRY["vim"].__module__ == "scorers.methods.vim"


@pytest.mark.parametrize("spec, message", [
    ("ol_no_such_module:X", "cannot import module 'ol_no_such_module'"),
    ("json:NoSuchClass", "module 'json' has no attribute 'NoSuchClass'"),
    ("json:dumps", "is function, not a subclass of scorers.base.Scorer"),
])
def test_bad_module_class_is_a_usage_error(structured_store, capsys, spec, message):
    code, out, err = run_cli(capsys, "eval", structured_store.path, "--method", spec)
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_edited_scorer_never_reads_stale_cached_scores(structured_store, tmp_path, monkeypatch):
    """The cache keys a user scorer by its module's source: flipping its sign in the source
    flips AUROC to 100 - AUROC, even though name and parameters are unchanged."""
    write_module(tmp_path, "ol_edited", "edited")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        first = evaluate(structured_store, ["ol_edited:CosMean"])["methods"]["edited"]
        again = evaluate(structured_store, ["ol_edited:CosMean"])["methods"]["edited"]
        assert again["cached"] and not first["cached"]
        write_module(tmp_path, "ol_edited", "edited", sign=-1.0)
        importlib.reload(sys.modules["ol_edited"])
        flipped = evaluate(structured_store, ["ol_edited:CosMean"])["methods"]["edited"]
        assert not flipped["cached"]
        for ood, row in first["splits"].items():
            assert flipped["splits"][ood]["auroc"] == pytest.approx(100 - row["auroc"],
                                                                    abs=1e-9)
    finally:
        unregister("edited")
        sys.modules.pop("ol_edited", None)


def _dist(path, module: str, value: str) -> None:
    info = path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[featstore.scorers]\nmine = {value}\n")


def test_entry_point_scorer_is_listed(tmp_path, monkeypatch, capsys):
    write_module(tmp_path, "ol_plugin", "plugged")
    _dist(tmp_path, "ol_plugin", "ol_plugin:CosMean")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_entry_points()
        code, out, err = run_cli(capsys, "scorers", "--json")
        assert code == 0, err
        row = next(d for d in json.loads(out) if d["name"] == "plugged")
        assert row["source"] == "entry point ol_plugin:CosMean"
        with pytest.raises(UsageError, match="already taken"):  # not replaceable by a class
            register(type("CosMean", (REGISTRY["plugged"],), {"__module__": "elsewhere"}))
    finally:
        unregister("plugged")


def test_entry_point_clashing_with_builtin_is_an_error(tmp_path, monkeypatch):
    write_module(tmp_path, "ol_bad_plugin", "msp")
    _dist(tmp_path, "ol_bad_plugin", "ol_bad_plugin:CosMean")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=r"entry point 'ol_bad_plugin:CosMean': scorer name "
                                         r"'msp' is already taken"):
        load_entry_points()
    assert REGISTRY["msp"].__module__ == "scorers.methods.msp"
