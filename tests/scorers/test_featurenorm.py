"""FeatureNorm (scorers/methods/featurenorm.py). References: the authors' computation
(github.com/gist-ailab/block-selection-for-OOD-detection `normratio.py`:
`torch.norm(F.relu(x), dim=[2,3], p=2).mean(dim=1)`) on the same maps the store's view was
made from; the default layer; a bad and a missing layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer
from tests.helpers.views import view_store


def test_featurenorm_equals_the_authors_norm(tmp_path):
    st, arrays = view_store(tmp_path / "s")
    for layer in ("l1", "l2"):
        s = get_scorer("featurenorm", layer=layer).fit(st)
        for name in ("id/test", "ood/far/x"):
            maps = torch.as_tensor(arrays["splits"][name]["maps"][layer])[..., None]
            want = torch.norm(F.relu(maps), dim=[2, 3], p=2).mean(dim=1).numpy()
            np.testing.assert_allclose(s.score(st.split(name)), want, rtol=1e-6)
    default = get_scorer("featurenorm").fit(st)        # no recorded order: name order, last
    assert default.layer == "l2"
    assert np.array_equal(default.score(st.split("id/test")),
                          get_scorer("featurenorm", layer="l2").fit(st).score(st.split("id/test")))


def test_featurenorm_bad_layers(tmp_path):
    st, _ = view_store(tmp_path / "s")
    with pytest.raises(FeatstoreError, match=r"no 'layer_featurenorm' view of layer 'l9' "
                                             r"\(stored: l1, l2\)"):
        get_scorer("featurenorm", layer="l9").fit(st)
    with pytest.raises(UsageError, match="must name one layer"):
        get_scorer("featurenorm", layer="l1,l2")
