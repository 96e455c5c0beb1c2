"""AdaSCALE-L (scorers/methods/adascale_l.py). References, on the store's own arrays and the
scorer's id/val sample: (1) the paper's formula row by row in NumPy (`tests.helpers.views.
numpy_adascale`); (2) OpenOOD v1.5's computation transcribed from
`adascale_postprocessor.py` and `networks/adascale_net.py` at 3c35632
(`tests.helpers.views.openood_adascale`, logit_scaling=True); the percentile grid shares its
passes and equals separate fits."""

from __future__ import annotations

import pytest

from tests.helpers.views import (
    check_adascale_against_references,
    check_adascale_grid_and_bad_inputs,
)


@pytest.mark.parametrize("params", [{}, {"percentile": "60:95", "k1": 10, "k2": 3,
                                         "lmbda": 2.0, "num_samples": 40}])
def test_adascale_l(tmp_path, params):
    check_adascale_against_references(tmp_path, "adascale_l", params, logit_scaling=True)


def test_adascale_l_grid_and_bad_inputs(tmp_path):
    check_adascale_grid_and_bad_inputs(tmp_path, "adascale_l")
