"""`featstore.ArrayStore` and `Scorer.fit_arrays` / `score_arrays` (issue 32 item 3): plain
arrays (NumPy or torch tensors) give the same numbers as the same arrays written with
`Store.from_arrays`. Reference: the on-disk store of the same arrays (same shapes, same
chunking, so equal bit for bit), read by the HDF5 reader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from featstore import ArrayStore, Store
from featstore.errors import UsageError
from featstore.store.values import NonFiniteError
from scorers import REGISTRY, get_scorer, unregister
from scorers.base import Scorer
from scorers.compare import compare
from scorers.evaluate import evaluate
from scorers.skipping import unsupported_reason
from scorers.sweep import sweep
from scorers.testing import contract_scorer
from scorers.testing.stores import BUILDERS, SCORED
from tests.helpers.stores import structured_arrays


class NormScorer(Scorer):
    """A user's scorer defined in a test: score = ||x||_p (Nobody 2025), as implemented."""

    name = "ol_norm"
    needs = ("features",)
    defaults = {"p": 2.0}
    paper = "Nobody (2025)"

    def _score(self, split):
        return np.linalg.norm(np.asarray(split.features, np.float64), ord=self.params["p"],
                              axis=1)


@pytest.fixture(scope="module", autouse=True)
def _unregister_norm():
    """evaluate registers NormScorer; later tests see the package's registry only."""
    yield
    unregister("ol_norm")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    arrays = structured_arrays(seed=3)
    path = tmp_path_factory.mktemp("arrays") / "store"
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return arrays, ArrayStore(head=arrays["head"], splits=arrays["splits"]), Store.open(path)


def strip(result):
    """The numbers of an evaluation (timings, the store path and cache flags dropped)."""
    return {m: {k: v for k, v in r.items() if k not in ("fit_seconds", "score_seconds",
                                                        "cached")}
            for m, r in result["methods"].items()}


def test_evaluate_equals_from_arrays(pair):
    arrays, mem, disk = pair
    methods = ["msp", "vim", "knn", NormScorer(p=1.0)]
    got = evaluate(mem, methods)
    want = evaluate(disk, methods, use_cache=False)
    assert strip(got) == strip(want) and got["id_acc"] == want["id_acc"]
    assert got["methods"]["ol_norm"]["params"] == {"p": 1.0}
    assert mem.model_sha256 == disk.model_sha256


def test_sweep_and_compare_run_on_arrays(pair):
    _, mem, disk = pair
    a, b = sweep(mem, "vim"), sweep(disk, "vim")
    assert a["chosen"] == b["chosen"] and a["test"]["splits"] == b["test"]["splits"]
    c = compare(mem, ["msp", "vim"], use_cache=False)
    d = compare(disk, ["msp", "vim"], use_cache=False)
    assert c["splits"] == d["splits"]


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_builtin_scores_equal_to_the_store(tmp_path, kind):
    """Every registered scorer that the data supports: fit + score on the ArrayStore equals
    fit + score on the HDF5 store of the same arrays, bit for bit."""
    arrays = BUILDERS[kind]()
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    disk = Store.open(tmp_path / "s")
    mem = ArrayStore(head=arrays["head"], splits=arrays["splits"])
    ran = 0
    for name in sorted(REGISTRY):
        if unsupported_reason(disk, name) is not None:
            continue
        a = contract_scorer(REGISTRY[name], disk).fit(disk)
        b = contract_scorer(REGISTRY[name], mem).fit(mem)
        for split in SCORED:
            assert np.array_equal(a.score(disk.split(split)), b.score(mem.split(split))), name
        ran += 1
    assert ran >= 10


def test_torch_tensors_and_float16(pair):
    arrays, mem, _ = pair
    tensors = {n: {k: torch.from_numpy(np.asarray(v)) if k != "usage" else v
                   for k, v in s.items()} for n, s in arrays["splits"].items()}
    head = tuple(torch.from_numpy(h) for h in arrays["head"])
    from_torch = ArrayStore(head=head, splits=tensors)
    assert strip(evaluate(from_torch, ["vim", "energy"])) == strip(evaluate(mem, ["vim",
                                                                                "energy"]))
    half = ArrayStore(head=arrays["head"], splits=arrays["splits"], dtype="float16")
    assert half.split("id/test").dtype == "float16"
    assert half.split("id/test").read("features").dtype == np.float32


def test_fit_arrays_and_score_arrays(pair):
    arrays, _, disk = pair
    train = arrays["splits"]["id/train"]
    for name in ("vim", "knn", "msp"):
        want = get_scorer(name).fit(disk).score(disk.split("ood/near/blend"))
        scorer = get_scorer(name).fit_arrays(train, head=arrays["head"])
        got = scorer.score_arrays(arrays["splits"]["ood/near/blend"]["features"])
        assert np.array_equal(got, want), name


def test_without_head(pair):
    """head=None: logits must be given; scorers needing the head are skipped with why."""
    arrays, _, disk = pair
    w, b = arrays["head"]
    splits = {n: {**s, "logits": s["features"] @ w.T + b} for n, s in arrays["splits"].items()}
    mem = ArrayStore(splits=splits)
    res = evaluate(mem, ["msp", "vim"])
    assert "vim" in res["skipped"] and "no head" in res["skipped"]["vim"]
    want = evaluate(disk, ["msp"], use_cache=False)["methods"]["msp"]["splits"]
    for split, metrics in want.items():
        assert res["methods"]["msp"]["splits"][split] == pytest.approx(metrics, abs=1e-9)
    with pytest.raises(UsageError, match="split 'id/test': logits are required when there "
                                         "is no head"):
        ArrayStore(splits={"id/test": {"features": splits["id/test"]["features"]}})


@pytest.mark.parametrize("change, message", [
    (lambda s: s["id/test"].update(features=s["id/test"]["features"][:, :5]),
     r"split 'id/test': features have D=5 but the head expects D=32"),
    (lambda s: s["id/test"].update(labels=s["id/test"]["labels"] + 100),
     r"split 'id/test': labels must lie in \[-1, 4\]"),
    (lambda s: s["id/test"].update(weights=1),
     r"split 'id/test': unknown key 'weights'"),
    (lambda s: s.update({"test": s["id/test"]}), r"split name 'test'"),
])
def test_bad_arrays_are_named(change, message):
    arrays = structured_arrays(seed=4, n_train=50, n_val=20, n_test=30, n_ood=20)
    splits = {n: dict(s) for n, s in arrays["splits"].items()}
    change(splits)
    with pytest.raises(UsageError, match=message):
        ArrayStore(head=arrays["head"], splits=splits)


def test_nonfinite_rows_are_an_error_naming_the_split():
    arrays = structured_arrays(seed=5, n_train=50, n_val=20, n_test=30, n_ood=20)
    arrays["splits"]["ood/far/faint"]["features"][[3, 7], 0] = np.nan
    mem = ArrayStore(head=arrays["head"], splits=arrays["splits"])
    with pytest.raises(NonFiniteError,
                       match=r"split 'ood/far/faint': 2 of 20 rows of logits hold NaN"):
        evaluate(mem, ["energy"], strict=True)
