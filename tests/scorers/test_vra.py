"""VRA (scorers/methods/vra.py). Reference: OpenOOD's `VRAPostprocessor`
(`openood/postprocessors/vra_postprocessor.py` at 3c35632) transcribed to NumPy float64:
thresholds np.percentile(activations.flatten(), p_high / p_low) over the ID split, features
clipped to [low, high], logits = clip @ W.T + b, score = logsumexp(logits). The store's
stored logits are the head's output (float32), so the sparse path carries their rounding:
rtol 1e-6. Settings: the defaults, OpenOOD's own fit split (id/val), and a band (40, 60) too
wide for the sparse sums (the dense path). Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import get_scorer
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def openood_vra(store, split, p_high, p_low, fit_split) -> np.ndarray:
    activation_log = refs.feats(store, fit_split)
    high = np.percentile(activation_log.flatten(), p_high)
    low = np.percentile(activation_log.flatten(), p_low)
    weight, bias = refs.head(store)
    logits = np.clip(refs.feats(store, split), low, high) @ weight.T + bias
    return refs.energy(logits)


@pytest.mark.parametrize("params", [
    {},
    {"percentile_split": "id/val", "percentile_high": 95, "percentile_low": 5},
    {"percentile_high": 60, "percentile_low": 40},
])
def test_vra_matches_openood(shared_store, params):
    full = {**get_scorer("vra").params, **params}
    scorer = kit.fitted("vra", shared_store, **params)
    for name in kit.EVAL_SPLITS:
        want = openood_vra(shared_store, name, full["percentile_high"], full["percentile_low"],
                           full["percentile_split"])
        np.testing.assert_allclose(scorer.score(shared_store.split(name)), want, rtol=1e-6)


def test_vra_grid_from_one_pass_equals_reference(shared_store):
    """Every setting of the default 4 x 4 grid against the transcription."""
    scorer = kit.fitted("vra", shared_store)
    for setting, scores in scorer.score_grid(shared_store.split("ood/far/faint")):
        want = openood_vra(shared_store, "ood/far/faint", setting["percentile_high"],
                           setting["percentile_low"], "id/train")
        np.testing.assert_allclose(scores, want, rtol=1e-6, err_msg=str(setting))


@pytest.mark.parametrize("params, words", [
    ({"percentile_low": 90, "percentile_high": 90}, "must be below percentile_high"),
    ({"percentile_low": 0}, "percentile_low must be in (0, 100)"),
    ({"percentile_split": 3}, "percentile_split must be a split name"),
])
def test_vra_bad_parameters(params, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        get_scorer("vra", **params)


def test_vra_unknown_split_named(shared_store):
    with pytest.raises(UsageError, match="percentile_split 'id/nope' is not a split"):
        get_scorer("vra", percentile_split="id/nope").fit(shared_store)
