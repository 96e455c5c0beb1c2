"""G-ODIN (scorers/methods/godin.py). References: the remote-sensing benchmark's eqs. 9-12 as
plain Python per row (max h, g, log max softmax(h / g) with math.exp); hand-built rows for the
sign of each variant."""

from __future__ import annotations

import math

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import stores

RNG = np.random.default_rng(7)


def godin_extras(n, iid):
    h = stores.random_logits(RNG, n, 3.0 if iid else 0.5)
    g = RNG.uniform(0.5, 0.95, n) if iid else RNG.uniform(0.05, 0.4, n)
    return {"godin_h": h, "godin_g": g.astype(np.float32)}


def test_godin_variants_against_numpy(tmp_path):
    st = stores.extras_store(tmp_path / "g", RNG, godin_extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        h = np.asarray(sp.extra("godin_h"), dtype=np.float64)
        g = np.asarray(sp.extra("godin_g"), dtype=np.float64)
        ref = {
            "h": [max(row) for row in h],
            "g": list(g),
            "softmax": [math.log(max(refs.softmax_row([x / gi for x in row]))) for row, gi in
                        zip(h, g, strict=True)],
        }
        for variant, expect in ref.items():
            got = get_scorer("godin", variant=variant).fit(st).score(sp)
            np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-15)
    # the default is the remote-sensing benchmark's eq. 12, max softmax(h / g)
    assert get_scorer("godin").params["variant"] == "softmax"
    np.testing.assert_array_equal(get_scorer("godin").fit(st).score(st.split("id/test")),
                                  get_scorer("godin", variant="softmax").fit(st)
                                  .score(st.split("id/test")))
    with pytest.raises(UsageError, match="variant='q' is not one of h, g, softmax"):
        get_scorer("godin", variant="q")


def test_godin_signs():
    from scorers.methods.godin import godin_scores

    h = np.array([[5.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    g = np.array([0.9, 0.1])
    assert np.diff(godin_scores(h, g, "h"))[0] < 0     # larger max h -> more ID
    assert np.diff(godin_scores(h, g, "g"))[0] < 0     # larger g -> more ID
    flat = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    assert np.diff(godin_scores(flat, np.array([0.5, 0.5]), "softmax"))[0] == 0
    assert np.diff(godin_scores(h, np.array([0.5, 0.5]), "softmax"))[0] < 0


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["godin"]
    assert entry["needs"] == ["extra:godin_h", "extra:godin_g"]
    assert entry["paper"]
