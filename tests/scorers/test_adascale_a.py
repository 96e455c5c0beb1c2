"""AdaSCALE-A (scorers/methods/adascale_a.py). References, on the store's own arrays and the
scorer's id/val sample: (1) the paper's formula row by row in NumPy (`tests.helpers.views.
numpy_adascale`); (2) OpenOOD v1.5's computation transcribed from
`adascale_postprocessor.py` and `networks/adascale_net.py` at 3c35632
(`tests.helpers.views.openood_adascale`, logit_scaling=False); the percentile grid shares its
passes and equals separate fits."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.views import (
    check_adascale_against_references,
    check_adascale_grid_and_bad_inputs,
)


@pytest.mark.parametrize("params", [{}, {"percentile": "60:95", "k1": 10, "k2": 3,
                                         "lmbda": 2.0, "num_samples": 40}])
def test_adascale_a(tmp_path, params):
    check_adascale_against_references(tmp_path, "adascale_a", params, logit_scaling=False)


def test_adascale_a_grid_and_bad_inputs(tmp_path):
    check_adascale_grid_and_bad_inputs(tmp_path, "adascale_a")


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
