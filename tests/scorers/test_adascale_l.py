"""AdaSCALE-L (scorers/methods/adascale_l.py). References, on the store's own arrays and the
scorer's id/val sample: (1) the paper's formula row by row in NumPy (`tests.helpers.views.
numpy_adascale`); (2) OpenOOD v1.5's computation transcribed from
`adascale_postprocessor.py` and `networks/adascale_net.py` at 3c35632
(`tests.helpers.views.openood_adascale`, logit_scaling=True); the percentile grid shares its
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
def test_adascale_l(tmp_path, params):
    st, _ = view_store(tmp_path / "s")
    s = get_scorer("adascale_l", **params).fit(st)
    p = s.params
    val = st.split("id/val")
    val_h = np.asarray(val.features)[s.sample]
    val_moved = np.asarray(val.extra(VIEW))[s.sample]
    weight, bias = st.head
    lo, hi = (float(v) for v in p["percentile"].split(":"))
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        args = (val_h, val_moved, np.asarray(sp.features), np.asarray(sp.extra(VIEW)), weight,
                bias, (lo, hi), p["k1"], p["k2"], p["lmbda"], True)
        got = s.score(sp)
        np.testing.assert_allclose(got, openood_adascale(*args), rtol=1e-9)
        np.testing.assert_allclose(got, numpy_adascale(*args), rtol=1e-9)


def test_adascale_l_grid_and_bad_inputs(tmp_path):
    st, _ = view_store(tmp_path / "s")
    s = get_scorer("adascale_l").fit(st)
    sp = st.split("ood/far/x")
    grid = s.score_grid(sp, {"percentile": ["60:65", "90:99"], "lmbda": [1.0, 10.0]})
    assert len(grid) == 4
    for setting, scores in grid:
        np.testing.assert_array_equal(
            scores, get_scorer("adascale_l", **setting).fit(st).score(sp))
    with pytest.raises(UsageError, match="percentile='85:75' must be 'p_min:p_max'"):
        get_scorer("adascale_l", percentile="85:75")
    with pytest.raises(FeatstoreError, match=r"no AdaSCALE view at o=0.1 \(stored o: 0.05\)"):
        get_scorer("adascale_l", o=0.1).fit(st)
