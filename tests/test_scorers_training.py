"""Scorers of training-time methods (confbranch, godin, mcd, mcdropout, odin_perturbed) on real
HDF5 stores with extras: each against a NumPy transcription of its formula written here
(explicit per-row loops), a sign test (the more in-distribution-looking row scores higher),
and the registry/evaluation plumbing (needs, missing extras, grids)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extra_keys import odin_name
from scorers import get_scorer, list_scorers
from scorers.evaluate import evaluate, supported

RNG = np.random.default_rng(7)
C, D = 4, 6


def _softmax_row(v):
    e = [math.exp(x - max(v)) for x in v]
    return [x / sum(e) for x in e]


def _entropy_row(p):
    return -sum(x * math.log(x) for x in p if x > 0)


def _split_arrays(n: int, extras: dict, labels: bool = True) -> dict:
    feats = RNG.normal(size=(n, D)).astype(np.float32)
    out = {"features": feats, "extras": extras}
    if labels:
        out["labels"] = np.arange(n) % C
    return out


def make_store(tmp_path, name: str, extras_fn, n_id: int = 40, n_ood: int = 30) -> Store:
    w = RNG.normal(size=(C, D)).astype(np.float32)
    b = RNG.normal(size=C).astype(np.float32)
    splits = {
        "id/train": _split_arrays(n_id, extras_fn(n_id, True)),
        "id/val": _split_arrays(n_id, extras_fn(n_id, True)),
        "id/test": _split_arrays(n_id, extras_fn(n_id, True)),
        "ood/far/x": {**_split_arrays(n_ood, extras_fn(n_ood, False), labels=False)},
    }
    Store.from_arrays(tmp_path / name, head=(w, b), splits=splits)
    return Store.open(tmp_path / name)


def _logits(n, scale):
    return (RNG.normal(size=(n, C)) * scale).astype(np.float32)


# --------------------------------------------------------------------------- confbranch
def test_confbranch_is_the_stored_confidence(tmp_path):
    st = make_store(tmp_path, "s", lambda n, iid: {
        "confidence": (RNG.uniform(0.6, 1.0, n) if iid else RNG.uniform(0.0, 0.5, n))
        .astype(np.float32)})
    s = get_scorer("confbranch").fit(st)
    for split in ("id/test", "ood/far/x"):
        conf = np.asarray(st.split(split).extra("confidence"))
        got = s.score(st.split(split))
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, [float(c) for c in conf])
    # sign: confident rows (ID) score higher than unconfident ones (OOD)
    assert s.score(st.split("id/test")).min() > s.score(st.split("ood/far/x")).max()
    res = evaluate(st, ["confbranch"], use_cache=False)
    assert res["methods"]["confbranch"]["groups"]["far"]["auroc"] == 100.0


# --------------------------------------------------------------------------- godin
def _godin_extras(n, iid):
    h = _logits(n, 3.0 if iid else 0.5)
    g = RNG.uniform(0.5, 0.95, n) if iid else RNG.uniform(0.05, 0.4, n)
    return {"godin_h": h, "godin_g": g.astype(np.float32)}


def test_godin_variants_against_numpy(tmp_path):
    st = make_store(tmp_path, "g", _godin_extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        h = np.asarray(sp.extra("godin_h"), dtype=np.float64)
        g = np.asarray(sp.extra("godin_g"), dtype=np.float64)
        ref = {
            "h": [max(row) for row in h],
            "g": list(g),
            "softmax": [max(_softmax_row([x / gi for x in row])) for row, gi in
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


# --------------------------------------------------------------------------- mcd
def test_mcd_variants_against_numpy(tmp_path):
    def extras(n, iid):
        return {"head2_logits": _logits(n, 2.0)}

    st = make_store(tmp_path, "m", extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        l1 = np.asarray(sp.logits, dtype=np.float64)
        l2 = np.asarray(sp.extra("head2_logits"), dtype=np.float64)
        p1 = [_softmax_row(r) for r in l1]
        p2 = [_softmax_row(r) for r in l2]
        pairs = list(zip(p1, p2, strict=True))
        l1_ref = [-sum(abs(a - b) for a, b in zip(r1, r2, strict=True)) for r1, r2 in pairs]
        ent_ref = [-(_entropy_row(r1) - _entropy_row(r2)) for r1, r2 in pairs]
        np.testing.assert_allclose(get_scorer("mcd").fit(st).score(sp), l1_ref, rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(get_scorer("mcd", variant="entropy").fit(st).score(sp),
                                   ent_ref, rtol=1e-10, atol=1e-12)


def test_mcd_sign():
    from scorers.methods.mcd import mcd_scores

    same = np.array([[3.0, 0.0, 0.0, 0.0]])
    agree = mcd_scores(same, same, "l1")
    disagree = mcd_scores(same, np.array([[0.0, 3.0, 0.0, 0.0]]), "l1")
    assert agree[0] == 0.0 and disagree[0] < agree[0]
    # eq. 14: head 1 uncertain, head 2 confident (what training does on OOD) -> low score
    flat = np.zeros((1, 4))
    assert mcd_scores(flat, same, "entropy")[0] < mcd_scores(same, same, "entropy")[0]


# --------------------------------------------------------------------------- mcdropout
def _mc_extras(n, iid, t=5):
    base = RNG.normal(size=(1, n, C)) * (3.0 if iid else 0.3)
    noise = RNG.normal(size=(t, n, C)) * (0.2 if iid else 2.0)
    return {"mc_logits": (base + noise).astype(np.float32)}


def test_mcdropout_variants_against_numpy(tmp_path):
    st = make_store(tmp_path, "d", _mc_extras)
    for split_name in ("id/test", "ood/far/x"):
        sp = st.split(split_name)
        assert sp.extra_row_axis("mc_logits") == 1
        mc = np.asarray(sp.extra("mc_logits"), dtype=np.float64)
        t, n, _ = mc.shape
        ent, msp, lmean = [], [], []
        for i in range(n):
            probs = [_softmax_row(mc[k, i]) for k in range(t)]
            p_mean = [sum(p[c] for p in probs) / t for c in range(C)]
            ent.append(-_entropy_row(p_mean))
            msp.append(max(p_mean))
            lmean.append(max(_softmax_row([sum(mc[k, i, c] for k in range(t)) / t
                                           for c in range(C)])))
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


# --------------------------------------------------------------------------- odin_perturbed
GRID = [(1000.0, 0.0014), (1000.0, 0.0), (10.0, 0.0028)]


def _odin_extras(n, iid):
    return {odin_name(t, e): _logits(n, 3.0 if iid else 0.5) for t, e in GRID}


def test_odin_perturbed_against_numpy_and_grid(tmp_path):
    st = make_store(tmp_path, "o", _odin_extras)
    sp = st.split("ood/far/x")
    assert sp.has_extra("odin_logits") and not sp.has_extra("odin_log")
    for t, e in GRID:
        lp = np.asarray(sp.extra(odin_name(t, e)), dtype=np.float64)
        expect = [max(_softmax_row([x / t for x in row])) for row in lp]
        got = get_scorer("odin_perturbed", temperature=t, epsilon=e).fit(st).score(sp)
        np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-300)
    s = get_scorer("odin_perturbed").fit(st)       # defaults: T = 1000, eps = 0.0014
    grid = s.score_grid(sp)                          # every stored pair
    assert sorted((g["temperature"], g["epsilon"]) for g, _ in grid) == sorted(GRID)
    for setting, scores in grid:
        np.testing.assert_array_equal(
            scores, get_scorer("odin_perturbed", **setting).fit(st).score(sp))
    explicit = s.score_grid(sp, {"temperature": [1000.0], "epsilon": [0.0014, 0.0]})
    assert [g for g, _ in explicit] == [{"temperature": 1000.0, "epsilon": 0.0014},
                                        {"temperature": 1000.0, "epsilon": 0.0}]
    with pytest.raises(UsageError, match=r"no ODIN-perturbed logits at temperature=1, "
                                         r"epsilon=0.0014 \(stored: .*--odin-grid '1:0.0014'"):
        get_scorer("odin_perturbed", temperature=1).fit(st)
    with pytest.raises(UsageError, match="epsilon=-1"):
        get_scorer("odin_perturbed", epsilon=-1)


def test_odin_perturbed_sign_and_eps0_equals_odin(tmp_path):
    from scorers.kernels.softmax import max_softmax

    confident, flat = np.array([[9.0, 0.0, 0.0, 0.0]]), np.array([[1.0, 0.0, 0.0, 0.0]])
    assert max_softmax(confident, 10.0)[0] > max_softmax(flat, 10.0)[0]
    st = make_store(tmp_path, "z", _odin_extras)
    sp = st.split("id/test")
    # extras written as the plain logits at eps = 0 give exactly the `odin` scorer
    w, b = st.head
    logits = np.asarray(sp.logits)
    Store.from_arrays(tmp_path / "z0", head=(w, b), splits={"id/test": {
        "features": np.asarray(sp.features), "logits": logits, "labels": np.asarray(sp.labels),
        "extras": {odin_name(1000.0, 0.0): logits}}})
    st0 = Store.open(tmp_path / "z0")
    np.testing.assert_array_equal(
        get_scorer("odin_perturbed", epsilon=0.0).fit(st0).score(st0.split("id/test")),
        get_scorer("odin", temperature=1000.0).fit(st0).score(st0.split("id/test")))


# --------------------------------------------------------------------------- ip_ts_mlv
def test_ip_ts_mlv_is_the_max_of_the_perturbed_logits_over_t(tmp_path):
    """FACETS' IP TS MLV: max_c l'_c / T of the stored ODIN-perturbed logits (a plain Python
    max per row); every stored (T, eps) pair in score_grid; a missing pair names the
    --odin-grid to extract; ranks like max l' (AUROC by sklearn equal)."""
    from sklearn.metrics import roc_auc_score

    st = make_store(tmp_path, "ip", _odin_extras)
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        for t, e in GRID:
            lp = np.asarray(sp.extra(odin_name(t, e)), dtype=np.float64)
            expect = [max(row) / t for row in lp.tolist()]
            got = get_scorer("ip_ts_mlv", temperature=t, epsilon=e).fit(st).score(sp)
            np.testing.assert_allclose(got, expect, rtol=1e-15, atol=0)
    s = get_scorer("ip_ts_mlv").fit(st)
    assert s.params == {"temperature": 1000.0, "epsilon": 0.0014}
    assert sorted((g["temperature"], g["epsilon"]) for g, _ in s.score_grid(
        st.split("id/test"))) == sorted(GRID)
    idl = np.asarray(st.split("id/test").extra(odin_name(1000.0, 0.0014)), dtype=np.float64)
    odl = np.asarray(st.split("ood/far/x").extra(odin_name(1000.0, 0.0014)), dtype=np.float64)
    ref = 100 * roc_auc_score(np.r_[np.ones(len(idl)), np.zeros(len(odl))],
                              np.r_[idl.max(1), odl.max(1)])
    res = evaluate(st, ["ip_ts_mlv"], use_cache=False)
    assert res["methods"]["ip_ts_mlv"]["splits"]["ood/far/x"]["auroc"] == pytest.approx(ref)
    with pytest.raises(UsageError, match=r"--odin-grid '1:0.0014'"):
        get_scorer("ip_ts_mlv", temperature=1).fit(st)


# --------------------------------------------------------------------------- plumbing
def test_missing_extras_are_skipped_by_evaluate_and_named_by_score(structured_store):
    for name in ("confbranch", "godin", "mcd", "mcdropout", "odin_perturbed", "ip_ts_mlv"):
        ok, why = supported(structured_store, name)
        assert not ok and "extra:" in why
        with pytest.raises(FeatstoreError, match="featstore (extract|train)"):
            get_scorer(name).fit(structured_store).score(structured_store.split("id/test"))
    res = evaluate(structured_store, ["msp", "confbranch", "mcd"], use_cache=False)
    assert list(res["methods"]) == ["msp"] and set(res["skipped"]) == {"confbranch", "mcd"}


def test_registry_entries():
    entries = {e["name"]: e for e in list_scorers()}
    assert entries["confbranch"]["needs"] == ["extra:confidence"]
    assert entries["godin"]["needs"] == ["extra:godin_h", "extra:godin_g"]
    assert entries["mcd"]["needs"] == ["logits", "extra:head2_logits"]
    assert entries["mcdropout"]["needs"] == ["extra:mc_logits"]
    assert entries["odin_perturbed"]["needs"] == ["extra:odin_logits"]
    assert entries["odin_perturbed"]["defaults"] == {"temperature": 1000.0, "epsilon": 0.0014}
    for name in ("confbranch", "godin", "mcd", "mcdropout", "odin_perturbed", "ip_ts_mlv"):
        assert entries[name]["paper"]
