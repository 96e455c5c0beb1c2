"""MC-Dropout (scorers/methods/mcdropout.py). References: Gal & Ghahramani 2016 / the
remote-sensing benchmark's eqs. 15-16 as plain Python loops over passes and classes (mean
softmax, its entropy and max, softmax of the mean logits); AUROC by the library's evaluation;
hand-built passes for the sign."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scorers import get_scorer, list_scorers
from scorers.evaluate import evaluate
from tests.helpers import references as refs
from tests.helpers import stores

RNG = np.random.default_rng(7)


def mc_extras(n, iid, t=5):
    base = RNG.normal(size=(1, n, stores.EXTRAS_C)) * (3.0 if iid else 0.3)
    noise = RNG.normal(size=(t, n, stores.EXTRAS_C)) * (0.2 if iid else 2.0)
    return {"mc_logits": (base + noise).astype(np.float32)}


def test_mcdropout_variants_against_numpy(tmp_path):
    st = stores.extras_store(tmp_path / "d", RNG, mc_extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        assert sp.extra_row_axis("mc_logits") == 1
        mc = np.asarray(sp.extra("mc_logits"), dtype=np.float64)
        t, n, _ = mc.shape
        ent, msp, lmean = [], [], []
        for i in range(n):
            probs = [refs.softmax_row(mc[k, i]) for k in range(t)]
            p_mean = [sum(p[c] for p in probs) / t for c in range(stores.EXTRAS_C)]
            ent.append(-refs.entropy_row(p_mean))
            msp.append(math.log(max(p_mean)))
            lmean.append(math.log(max(refs.softmax_row([sum(mc[k, i, c] for k in range(t)) / t
                                              for c in range(stores.EXTRAS_C)]))))
        for variant, expect in (("entropy", ent), ("msp", msp), ("logit_mean", lmean)):
            got = get_scorer("mcdropout", variant=variant).fit(st).score(sp)
            np.testing.assert_allclose(got, expect, rtol=1e-10, atol=1e-12)
    assert get_scorer("mcdropout").params["variant"] == "entropy"
    res = evaluate(st, ["mcdropout"], use_cache=False)
    assert res["methods"]["mcdropout"]["groups"]["far"]["auroc"] > 90.0


def test_mcdropout_sign():
    from scorers.methods.mcdropout import mc_dropout_scores

    peaked = np.tile(np.array([6.0, 0.0, 0.0, 0.0]), (4, 1, 1))              # passes agree
    spread = np.stack([np.roll([6.0, 0.0, 0.0, 0.0], k) for k in range(4)])[:, None, :]
    for variant in ("entropy", "msp"):
        assert mc_dropout_scores(peaked, variant)[0] > mc_dropout_scores(spread, variant)[0]
    assert mc_dropout_scores(spread, "entropy")[0] == pytest.approx(-math.log(4))


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["mcdropout"]
    assert entry["needs"] == ["extra:mc_logits"]
    assert entry["paper"]


def test_mc_dropout_id_accuracy_is_the_mc_mean_prediction(tmp_path):
    """Eq. 15 (issue 46.7): MC-Dropout predicts with p_mean = (1/T) sum_t softmax(mc_logits
    [t]); its ID accuracy is argmax p_mean against the labels (reference: the plain-Python
    mean softmax), which here differs from the deterministic logits' accuracy; the
    experiment runner reports it for the MC-Dropout row."""
    from featstore.specs.experiment import MethodRow
    from featstore.workflows.experiments.runner import score_row
    from scorers.methods.mcdropout import mc_id_accuracy

    st = stores.extras_store(tmp_path / "d", RNG, mc_extras)
    sp = st.split("id/test")
    mc = np.asarray(sp.extra("mc_logits"), dtype=np.float64)
    labels = np.asarray(sp.labels)
    pred = [int(np.argmax([sum(refs.softmax_row(mc[k, i])[c] for k in range(mc.shape[0]))
                           for c in range(stores.EXTRAS_C)])) for i in range(mc.shape[1])]
    ref = 100.0 * np.mean(np.asarray(pred)[labels != -1] == labels[labels != -1])
    det = 100.0 * np.mean(np.asarray(sp.logits).argmax(1)[labels != -1] == labels[labels != -1])
    assert mc_id_accuracy(sp) == pytest.approx(ref, abs=1e-12)
    assert ref != pytest.approx(det)
    row = MethodRow(name="MC-Dropout", train="mcdropout", scorer="mcdropout")
    assert score_row(st, row, "none", "auroc")["id_acc"] == pytest.approx(ref, abs=1e-12)
