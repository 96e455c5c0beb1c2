"""ODIN with input perturbation (scorers/methods/odin_perturbed.py). References: the log of max
softmax(l' / T) of the stored perturbed logits as plain Python per row (math.exp); every stored
(T, eps) pair for the default grid and a separate fit per setting (bit for bit); the `odin`
scorer on extras equal to the plain logits at eps = 0."""

from __future__ import annotations

import math

import numpy as np
import pytest

from featstore import Store
from featstore.errors import UsageError
from featstore.store.extra_keys import odin_name
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import stores
from tests.helpers.stores import ODIN_GRID, ODIN_RNG, odin_extras


def test_has_extra_lookup_matches_the_listing(tmp_path):
    """Split.has_extra looks one HDF5 path up; reference: its definition over the listing,
    `name in names or any(n.startswith(name + "/"))`, for stored names, the group, prefixes
    that are not names, missing names and names that are not plain paths; before and after
    the arrays are opened (cached per open file)."""
    st = stores.extras_store(tmp_path / "h", ODIN_RNG, odin_extras)
    sp = st.split("ood/far/x")
    names = sp.extra_names()
    asked = [*names, "odin_logits", "odin_log", "odin_logits/1000", "nothing", "nothing/x", "",
             "/odin_logits", "odin_logits/", "odin_logits//" + names[0].split("/")[1], "."]
    expect = [n in names or any(m.startswith(n + "/") for m in names) for n in asked]
    assert sum(expect) == len(names) + 1
    assert [sp.has_extra(n) for n in asked] == expect
    for n in names:
        sp.extra(n)
    assert [sp.has_extra(n) for n in asked] == expect


def test_odin_perturbed_against_numpy_and_grid(tmp_path):
    st = stores.extras_store(tmp_path / "o", ODIN_RNG, odin_extras)
    sp = st.split("ood/far/x")
    assert sp.has_extra("odin_logits") and not sp.has_extra("odin_log")
    for t, e in ODIN_GRID:
        lp = np.asarray(sp.extra(odin_name(t, e)), dtype=np.float64)
        expect = [math.log(max(refs.softmax_row([x / t for x in row]))) for row in lp]
        got = get_scorer("odin_perturbed", temperature=t, epsilon=e).fit(st).score(sp)
        np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-300)
    s = get_scorer("odin_perturbed").fit(st)       # defaults: T = 1000, eps = 0.0014
    grid = s.score_grid(sp)                          # every stored pair
    assert sorted((g["temperature"], g["epsilon"]) for g, _ in grid) == sorted(ODIN_GRID)
    for setting, scores in grid:
        np.testing.assert_array_equal(
            scores, get_scorer("odin_perturbed", **setting).fit(st).score(sp))
    explicit = s.score_grid(sp, {"temperature": [1000.0], "epsilon": [0.0014, 0.0]})
    assert [g for g, _ in explicit] == [{"temperature": 1000.0, "epsilon": 0.0014},
                                        {"temperature": 1000.0, "epsilon": 0.0}]
    with pytest.raises(UsageError, match=r"no ODIN-perturbed logits at temperature=1, "
                                         r"epsilon=0.0014 \(stored: .*\): extract them with "
                                         r"`ExtractOptions\(odin_grid=\(\(1, 0.0014\),\)\)`"):
        get_scorer("odin_perturbed", temperature=1).fit(st)
    with pytest.raises(UsageError, match="epsilon=-1"):
        get_scorer("odin_perturbed", epsilon=-1)


def test_odin_perturbed_sign_and_eps0_equals_odin(tmp_path):
    from scorers.kernels.softmax import log_max_softmax

    confident, flat = np.array([[9.0, 0.0, 0.0, 0.0]]), np.array([[1.0, 0.0, 0.0, 0.0]])
    assert log_max_softmax(confident, 10.0)[0] > log_max_softmax(flat, 10.0)[0]
    st = stores.extras_store(tmp_path / "z", ODIN_RNG, odin_extras)
    sp = st.split("id/test")
    # extras written as the plain logits at eps = 0 give exactly the `odin` scorer
    w, b = st.head
    logit_rows = np.asarray(sp.logits)
    Store.from_arrays(tmp_path / "z0", head=(w, b), splits={"id/test": {
        "features": np.asarray(sp.features), "logits": logit_rows,
        "labels": np.asarray(sp.labels), "extras": {odin_name(1000.0, 0.0): logit_rows}}})
    st0 = Store.open(tmp_path / "z0")
    np.testing.assert_array_equal(
        get_scorer("odin_perturbed", epsilon=0.0).fit(st0).score(st0.split("id/test")),
        get_scorer("odin", temperature=1000.0).fit(st0).score(st0.split("id/test")))


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["odin_perturbed"]
    assert entry["needs"] == ["extra:odin_logits"]
    assert entry["defaults"] == {"temperature": 1000.0, "epsilon": 0.0014}
    assert entry["paper"]
