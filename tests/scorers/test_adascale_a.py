"""AdaSCALE-A (scorers/methods/adascale_a.py). References, on the store's own arrays and the
scorer's id/val sample: (1) the paper's formula row by row in NumPy (`tests.helpers.views.
numpy_adascale`); (2) OpenOOD v1.5's computation transcribed from
`adascale_postprocessor.py` and `networks/adascale_net.py` at 3c35632
(`tests.helpers.views.openood_adascale`, logit_scaling=False); the percentile grid shares its
passes and equals separate fits."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer
from tests.helpers.views import numpy_adascale, openood_adascale, view_store

VIEW = "adascale_features/0.05"


@pytest.mark.parametrize("params", [{}, {"percentile": "60:95", "k1": 10, "k2": 3,
                                         "lmbda": 2.0, "num_samples": 40}])
def test_adascale_a(tmp_path, params):
    st, _ = view_store(tmp_path / "s")
    s = get_scorer("adascale_a", **params).fit(st)
    p = s.params
    val = st.split("id/val")
    val_h = np.asarray(val.features)[s.sample]
    val_moved = np.asarray(val.extra(VIEW))[s.sample]
    weight, bias = st.head
    lo, hi = (float(v) for v in p["percentile"].split(":"))
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        args = (val_h, val_moved, np.asarray(sp.features), np.asarray(sp.extra(VIEW)), weight,
                bias, (lo, hi), p["k1"], p["k2"], p["lmbda"], False)
        got = s.score(sp)
        np.testing.assert_allclose(got, openood_adascale(*args), rtol=1e-9)
        np.testing.assert_allclose(got, numpy_adascale(*args), rtol=1e-9)


def test_adascale_a_grid_and_bad_inputs(tmp_path):
    st, _ = view_store(tmp_path / "s")
    s = get_scorer("adascale_a").fit(st)
    sp = st.split("ood/far/x")
    grid = s.score_grid(sp, {"percentile": ["60:65", "90:99"], "lmbda": [1.0, 10.0]})
    assert len(grid) == 4
    for setting, scores in grid:
        np.testing.assert_array_equal(
            scores, get_scorer("adascale_a", **setting).fit(st).score(sp))
    with pytest.raises(UsageError, match="percentile='85:75' must be 'p_min:p_max'"):
        get_scorer("adascale_a", percentile="85:75")
    with pytest.raises(FeatstoreError, match=r"no AdaSCALE view at o=0.1 \(stored o: 0.05\)"):
        get_scorer("adascale_a", o=0.1).fit(st)


def test_top_mask_keeps_ties_in_index_order():
    """The k largest by partition equal a stable descending argsort's first k (reference:
    np.argsort(-h, kind="stable")), on rows full of ties (ReLU zeros, repeated values)."""
    from scorers.kernels.adascale import top_cumsum, top_mask

    rng = np.random.default_rng(3)
    h = np.maximum(rng.integers(-3, 4, (200, 30)).astype(np.float64), 0.0)
    order = np.argsort(-h, axis=1, kind="stable")
    for k in (0, 1, 5, 17, 30):
        want = np.zeros(h.shape, dtype=bool)
        np.put_along_axis(want, order[:, :k], True, axis=1)
        assert np.array_equal(top_mask(h, k), want), k
    np.testing.assert_array_equal(top_cumsum(h, 12),
                                  np.cumsum(-np.sort(-h, axis=1), axis=1)[:, :12])
