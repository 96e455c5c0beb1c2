"""Typed results (scorers/results.py): evaluate, sweep_all, sweep and compare return frozen
dataclasses that read as the plain dicts they replace, round-trip through JSON, and are
documented field by field in docs/RESULTS.md.

References: the plain-dict view itself (`json.loads(json.dumps(result))`, what every renderer
reads) and the dataclass's own fields; the numbers are evaluate's (checked against sklearn in
test_metrics.py), so these tests check structure and the round trip, not values."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from scorers.compare import compare
from scorers.evaluate import evaluate
from scorers.results import RESULT_TYPES, ComparisonResult, EvaluationResult, SweepResult
from scorers.stats import BootstrapSpec
from scorers.sweep import sweep, sweep_all
from tests.helpers.cli import run_cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "RESULTS.md"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from tests.helpers.stores import open_built, structured_arrays

    store = open_built(tmp_path_factory.mktemp("results") / "store",
                        structured_arrays(seed=1, n_train=200, n_val=80, n_test=90, n_ood=60))
    spec = BootstrapSpec(n_boot=50)
    return {"store": store,
            "evaluate": evaluate(store, ["msp", "energy"], use_cache=False, ci=spec),
            "sweep_all": sweep_all(store, ["energy"]),
            "sweep": sweep(store, "knn", {"K": [1, 5]}),
            "compare": compare(store, ["msp", "energy"], spec=spec, use_cache=False)}


@pytest.mark.parametrize("which, cls", [("evaluate", EvaluationResult),
                                        ("sweep_all", EvaluationResult),
                                        ("sweep", SweepResult),
                                        ("compare", ComparisonResult)])
def test_json_round_trip(results, which, cls):
    result = results[which]
    assert type(result) is cls
    text = result.to_json()
    back = cls.from_json(text)
    assert type(back) is cls
    np.testing.assert_equal(back, result)  # nested; NaN (an undefined metric) equals NaN
    assert back.to_json() == text                       # exact: the same JSON again
    np.testing.assert_equal(cls.from_json(json.loads(text)), result)  # from a mapping too
    assert json.loads(text) == json.loads(json.dumps(result))  # the dict view, as renderers see it
    if cls is ComparisonResult:
        assert type(back.evaluation) is EvaluationResult


def test_dict_style_read_access(results):
    ev, sw, cmp = results["evaluate"], results["sweep"], results["compare"]
    assert isinstance(ev, dict) and ev["methods"] is ev.methods
    assert ev["methods"]["msp"]["splits"]["ood/far/faint"]["auroc"] > 50
    assert ev.get("tuned") is None and "tuned" not in ev     # optional, absent while None
    assert ev["id_acc_ci"] == ev.id_acc_ci and len(ev.id_acc_ci) == 2
    assert list(ev) == [f.name for f in dataclasses.fields(ev) if f.name != "tuned"
                        and f.name not in ("select_by", "val_splits", "rule")]
    tuned = results["sweep_all"]
    assert tuned["tuned"] is True and tuned.select_by == "auroc" and tuned["ci"] is None
    assert sw["chosen"]["setting"]["K"] in (1, 5) and sw.method == "knn"
    assert cmp["splits"] is cmp.splits and set(cmp["evaluation"]["methods"]) == {"msp", "energy"}
    assert {**ev} == dict(ev.items())


def test_frozen_copyable_picklable(results):
    ev = results["evaluate"]
    with pytest.raises(TypeError, match="frozen"):
        ev["ci"] = None
    with pytest.raises(TypeError, match="frozen"):
        ev.update(ci=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.store = "elsewhere"
    np.testing.assert_equal(copy.deepcopy(ev), ev)
    np.testing.assert_equal(pickle.loads(pickle.dumps(ev)), ev)
    assert type(copy.deepcopy(ev)) is EvaluationResult
    changed = dataclasses.replace(ev, skipped={"knn": "why"})
    assert changed["skipped"] == {"knn": "why"} and ev["skipped"] == {}


def test_from_json_names_bad_keys(results):
    doc = json.loads(results["sweep"].to_json())
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['grids'\]"):
        SweepResult.from_json({**doc, "grids": {}})
    del doc["chosen"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['chosen'\]"):
        SweepResult.from_json(doc)
    with pytest.raises(ValueError, match="expected a JSON object"):
        EvaluationResult.from_json("[1, 2]")


def test_cli_json_reads_as_the_typed_result(results, capsys):
    """`featstore eval --json` prints the EvaluationResult's fields (console.py's renderer
    reads the typed result as the dict it was)."""
    code, out, err = run_cli(capsys, "eval", results["store"].path, "--method", "msp",
                             "--no-cache", "--json")
    assert code == 0, err
    back = EvaluationResult.from_json(out)
    assert list(back["methods"]) == ["msp"]


def test_schema_page_lists_every_field():
    """docs/RESULTS.md has a section per result type whose table lists exactly its fields."""
    text = DOC.read_text(encoding="utf-8")
    for cls in RESULT_TYPES:
        section = re.search(rf"^## {cls.__name__}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
        assert section, f"docs/RESULTS.md: no section for {cls.__name__}"
        listed = re.findall(r"^\| `([a-z_0-9]+)` \|", section.group(1), re.M)
        assert listed == [f.name for f in dataclasses.fields(cls)], cls.__name__
