"""Gscore (scorers.gscore): modelling recovers known mixtures, distances equal hand-computed
values, the regression equals numpy lstsq, the tau search finds a constructed optimum,
meta-train and meta-test never share an OOD split, edge cases are defined, the JSON model
round-trips and guards the model sha256, the CLI as a user runs it, and end to end on a small
real extracted store. References: sklearn KMeans / GaussianMixture, numpy lstsq,
scipy.linalg.sqrtm, scipy quad integration of the KL divergence, hand arithmetic."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats

from featstore.errors import FeatstoreError, UsageError
from scorers import gscore as G
from scorers.evaluate import score_splits
from scorers.metrics import ood_metrics
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import graded_store


def _mixture(seed=0, n_ind=3000, n_ood=2000, mu=(3.0, 0.0), sd=(0.5, 0.7)):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(mu[0], sd[0], n_ind), rng.normal(mu[1], sd[1], n_ood)])


# ----------------------------------------------------------------------------- modelling


def test_kmeans_is_the_exact_two_means_and_recovers_centres():
    from sklearn.cluster import KMeans

    x = _mixture(0)
    pair = G.kmeans_pair(x[None, :], np.array([x.size]))
    km = KMeans(2, n_init=10, tol=0.0, max_iter=1000, random_state=0).fit(x[:, None])
    lo, hi = sorted(km.cluster_centers_.ravel())
    assert pair.mu_ind[0] == pytest.approx(hi, abs=1e-9)
    assert pair.mu_ood[0] == pytest.approx(lo, abs=1e-9)
    assert pair.mu_ind[0] == pytest.approx(3.0, abs=0.05)
    assert pair.mu_ood[0] == pytest.approx(0.0, abs=0.05)
    assert pair.n_ind[0] + pair.n_ood[0] == x.size
    # several sets at once (padded) give each set's own answer
    y = _mixture(1, 50, 80, mu=(10.0, 1.0))
    xs, n = G.pack([x, y])
    both = G.kmeans_pair(xs, n)
    assert both.mu_ind[0] == pytest.approx(pair.mu_ind[0]) and both.mu_ind[1] > 9.0


def test_gmm_recovers_parameters_and_matches_sklearn():
    from sklearn.mixture import GaussianMixture

    x = _mixture(2, 12000, 8000, mu=(2.0, -1.0), sd=(0.5, 1.0))
    p = G.gmm_params(x[None, :], np.array([x.size]), max_iter=5000, tol=1e-12)[0]
    w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi = p[:6]
    assert (mu_hi, sd_hi, w_hi) == pytest.approx((2.0, 0.5, 0.6), abs=0.05)
    assert (mu_lo, sd_lo, w_lo) == pytest.approx((-1.0, 1.0, 0.4), abs=0.05)
    gm = GaussianMixture(2, tol=1e-12, max_iter=5000, reg_covar=1e-12, random_state=0).fit(
        x[:, None])
    order = np.argsort(gm.means_.ravel())
    np.testing.assert_allclose([mu_lo, mu_hi], gm.means_.ravel()[order], atol=1e-4)
    np.testing.assert_allclose([sd_lo, sd_hi], np.sqrt(gm.covariances_.ravel()[order]),
                               atol=1e-4)
    # the engine's default pair uses the components directly (IND = higher mean)
    eng = G.GscoreEngine(x[None, :], np.array([x.size]))
    pair = eng.pair("gmm", None)
    assert pair.mu_ind[0] == pytest.approx(2.0, abs=0.05)
    # with a posterior threshold, well separated components split as the truth
    y = _mixture(3, 500, 500, mu=(6.0, 0.0), sd=(0.5, 0.5))
    pair = G.GscoreEngine(y[None, :], np.array([y.size])).pair("gmm", 0.5)
    assert (pair.n_ind[0], pair.n_ood[0]) == (500, 500)
    assert pair.mu_ind[0] == pytest.approx(6.0, abs=0.1)


def test_ude_splits_by_the_id_val_gaussian():
    x = _mixture(4, 2000, 2000, mu=(5.0, 0.0), sd=(0.5, 0.7))
    eng = G.GscoreEngine(x[None, :], np.array([x.size]), ref_mu=5.0, ref_sd=0.5)
    pair = eng.pair("ude", 0.01)  # |x - 5| <= 3.03 sigma_val
    assert pair.mu_ind[0] == pytest.approx(5.0, abs=0.05)
    assert pair.sd_ind[0] == pytest.approx(0.5, abs=0.05)
    assert pair.mu_ood[0] == pytest.approx(0.0, abs=0.05)
    assert pair.sd_ood[0] == pytest.approx(0.7, abs=0.05)
    # hand-computed: s_p = exp(-(x - 0)^2 / (2 * 2^2)) >= 0.5 <=> |x| <= 2.355
    v = np.array([0.0, 0.1, 1.0, 5.0, 6.0])
    e = G.GscoreEngine(v[None, :], np.array([5]), ref_mu=0.0, ref_sd=2.0)
    np.testing.assert_allclose(e.ude_similarity()[0], np.exp(-v ** 2 / 8.0))
    pair = e.pair("ude", 0.5)
    assert (pair.n_ind[0], pair.n_ood[0]) == (3, 2)
    assert pair.mu_ind[0] == pytest.approx(1.1 / 3) and pair.mu_ood[0] == pytest.approx(5.5)
    assert pair.sd_ind[0] == pytest.approx(np.std([0.0, 0.1, 1.0]))
    assert pair.sd_ood[0] == pytest.approx(0.5)
    # the paper's literal kernel exp(-(x-mu)^2 / (2 sigma)): |x| <= 1.665 -> same split here
    ep = G.GscoreEngine(v[None, :], np.array([5]), ref_mu=0.0, ref_sd=2.0, ude_kernel="paper")
    np.testing.assert_allclose(ep.ude_similarity()[0], np.exp(-v ** 2 / 4.0))


# ----------------------------------------------------------------------------- distances


def test_distances_equal_hand_computed_values():
    pair = G.Pair(*(np.array([v]) for v in (2.0, 0.5, 0.5, 1.0, 10.0, 10.0)))
    assert G.distance(pair, "l2")[0] == pytest.approx(1.5)
    assert G.distance(pair, "wasserstein")[0] == pytest.approx(2.25 + 0.25)
    assert G.distance(pair, "w2")[0] == pytest.approx(math.sqrt(2.5))
    kl = math.log(0.5 / 1.0) + (1.0 + 2.25) / (2 * 0.25) - 0.5  # eq. (1), sigma_1 = IND
    kl_rev = math.log(1.0 / 0.5) + (0.25 + 2.25) / (2 * 1.0) - 0.5
    assert G.distance(pair, "kl")[0] == pytest.approx(kl)
    assert G.distance(pair, "kl_rev")[0] == pytest.approx(kl_rev)

    def kl_num(mp, sp, mq, sq):  # KL(P || Q) by quadrature
        p, q = stats.norm(mp, sp), stats.norm(mq, sq)
        return integrate.quad(lambda t: p.pdf(t) * (p.logpdf(t) - q.logpdf(t)), -30, 30)[0]

    assert kl == pytest.approx(kl_num(0.5, 1.0, 2.0, 0.5), rel=1e-6)      # KL(OOD || IND)
    assert kl_rev == pytest.approx(kl_num(2.0, 0.5, 0.5, 1.0), rel=1e-6)  # KL(IND || OOD)
    with pytest.raises(UsageError):
        G.distance(pair, "cosine")


# ----------------------------------------------------------------------------- regression


def test_regression_equals_numpy_lstsq():
    rng = np.random.default_rng(0)
    g = rng.normal(size=60)
    p = 3.0 * g - 2.0 + rng.normal(0, 0.3, 60)
    (t1, t0), *_ = np.linalg.lstsq(np.column_stack([g, np.ones_like(g)]), p, rcond=None)
    f1, f0, mse = G.fit_line(g, p)
    assert (f1, f0) == pytest.approx((t1, t0), rel=1e-10)
    assert mse == pytest.approx(np.mean((p - (t1 * g + t0)) ** 2))
    rows = np.stack([g, 2 * g + 1, np.full(60, 4.0)])
    a1, a0, _ = G.fit_lines(rows, p)
    for i in range(2):
        (r1, r0), *_ = np.linalg.lstsq(np.column_stack([rows[i], np.ones(60)]), p, rcond=None)
        assert (a1[i], a0[i]) == pytest.approx((r1, r0), rel=1e-9)
    assert (a1[2], a0[2]) == (0.0, pytest.approx(p.mean()))  # constant G: the mean


def test_tau_search_finds_the_constructed_optimum():
    rng = np.random.default_rng(1)
    base, noise = rng.normal(size=40), rng.normal(size=40)
    p = 2.0 * base + 5.0

    def g_of(taus):  # exact linear relation only at tau = 0.37
        return np.stack([base + abs(t - 0.37) * noise for t in taus])

    res = G.search_tau(g_of, p)
    assert res["tau"] == pytest.approx(0.37) and res["tau_coarse"] == pytest.approx(0.4)
    assert res["loss"] == pytest.approx(0.0, abs=1e-20)
    assert (res["theta1"], res["theta0"]) == pytest.approx((2.0, 5.0))
    # on the UDE engine: the metric is a line of the Gscore at tau = 0.37
    sets = [np.concatenate([rng.normal(0, 1, 80), rng.normal(rng.uniform(-6, -1), 1, 80)])
            for _ in range(30)]
    x, n = G.pack(sets)
    eng = G.GscoreEngine(x, n, ref_mu=0.0, ref_sd=1.0)
    target = 3.0 * eng.gscore("ude", "wasserstein", 0.37) + 1.0
    fit = G.fit_variant(eng, G.parse_model("ude-wasserstein"), target)
    assert fit["tau"] == pytest.approx(0.37)
    assert (fit["theta1"], fit["theta0"]) == pytest.approx((3.0, 1.0))


# ----------------------------------------------------------------------------- protocol


def test_meta_train_and_meta_test_never_share_an_ood_split(tmp_path, monkeypatch):
    names = [f"ood/g/s{i}" for i in range(13)]
    for seed in range(50):
        tr, te = G.partition_splits(names, 0.75, np.random.default_rng(seed))
        assert not set(tr) & set(te) and sorted(tr + te) == sorted(names) and tr and te
    with pytest.raises(FeatstoreError, match="share OOD split"):
        G.check_disjoint(["ood/a/x", "ood/a/y"], ["ood/a/y"])
    with pytest.raises(UsageError, match="at least 2 OOD"):
        G.partition_splits(["ood/a/x"], 0.75, np.random.default_rng(0))
    st = graded_store(tmp_path / "s", n_ood=4, rows=60)
    from scorers.gscore import protocol  # the module that calls partition_splits

    monkeypatch.setattr(protocol, "partition_splits",
                        lambda names, frac, rng: (list(names)[:3], list(names)[2:]))
    with pytest.raises(FeatstoreError, match="share OOD split"):
        G.evaluate_gscore([st], repeats=1, sets_per_split=1, baselines=False)


def test_set_sizes_follow_ratio_and_pools():
    assert G.set_sizes(1.0, 200, 500, 500) == (100, 100)
    assert G.set_sizes(G.parse_ratio("1:3"), 200, 500, 500) == (50, 150)
    assert G.set_sizes(1.0, None, 135, 300) == (135, 135)
    assert G.set_sizes(G.parse_ratio("100:1"), None, 135, 300) == (135, 1)
    assert G.set_sizes(G.parse_ratio("1:100"), 50, 135, 300) == (1, 49)
    assert G.set_sizes(1.0, 400, 100, 1000) == (100, 100)  # scaled down, ratio kept
    with pytest.raises(UsageError):
        G.parse_ratio("1:0")


def test_edge_cases_are_defined_never_nan():
    cases = [np.array([0.7]), np.full(10, 0.3), np.array([1.0, 1.0, 1.0, 0.0]),
             np.array([0.0, 5.0]), np.r_[np.zeros(20), 9.0]]
    x, n = G.pack(cases)
    eng = G.GscoreEngine(x, n, ref_mu=0.0, ref_sd=1.0)
    for model in ("kmeans-l2", "gmm-kl", "gmm-wasserstein", "gmm-w2@0.5", "ude-kl@0.5",
                  "ude-kl_rev@0.0", "ude-wasserstein@1.0", "ude-w2@0.3"):
        spec = G.parse_model(model)
        g = eng.gscore(spec.modelling, spec.distance, spec.tau)
        assert np.isfinite(g).all(), (model, g)
    # one-element and constant sets: every distance is 0
    assert eng.gscore("kmeans", "l2", None)[:2] == pytest.approx([0.0, 0.0])
    assert eng.gscore("gmm", "kl", None)[:2] == pytest.approx([0.0, 0.0])
    # tau 0: every sample IND (empty OOD part takes the IND Gaussian) -> 0
    assert eng.gscore("ude", "wasserstein", 0.0) == pytest.approx(np.zeros(5))
    # a 1-sample part has sigma = the reference scale; zero variance is floored
    pair = eng.pair("ude", 0.5)  # set 4: twenty 0s IND (sd 0 -> floor), the 9 alone OOD
    assert pair.sd_ood[4] == pytest.approx(1.0) and pair.sd_ind[4] == pytest.approx(1e-3)
    assert eng.gscore("ude", "wasserstein", 0.5)[4] == pytest.approx(81.0 + (1 - 1e-3) ** 2)
    # sigma_val = 0 is replaced by a tiny positive value
    e0 = G.GscoreEngine(x, n, ref_mu=0.3, ref_sd=0.0)
    assert np.isfinite(e0.gscore("ude", "kl", 0.5)).all()
    with pytest.raises(UsageError, match="non-finite"):
        G.GscoreEngine(np.array([[1.0, np.nan]]), np.array([2]))


def test_frechet_batched_equals_scipy_sqrtm():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6))
    ref = rng.normal(size=(500, 6)) * 1.5
    mu, cov = ref.mean(0), np.cov(ref, rowvar=False)
    idx, n = G.pack([np.arange(0, 40), np.arange(100, 300), np.arange(10, 15)])
    fd = G.frechet_distances(mu, cov, feats, idx.astype(np.int64), n)
    for i, rows in enumerate([np.arange(0, 40), np.arange(100, 300), np.arange(10, 15)]):
        f = feats[rows]
        assert fd[i] == pytest.approx(G.frechet_distance(mu, cov, f.mean(0),
                                                         np.cov(f, rowvar=False)), rel=1e-6)


def test_frechet_n_by_n_form_equals_scipy_with_low_rank_reference():
    """Sets smaller than the feature dimension and an id/train Gaussian of rank < D (the
    mini-Gbench regime: 1280-dim features, 650 id/train rows): the n x n form, given the
    factor F = centred train rows / sqrt(N - 1), equals the D x D formula with scipy's sqrtm."""
    from scorers.gscore.baselines import frechet_distances

    rng = np.random.default_rng(1)
    d = 40
    train = rng.normal(size=(25, d)) @ rng.normal(size=(d, d)) * 0.3
    feats = rng.normal(size=(200, d)) @ rng.normal(size=(d, d)) * 0.2 + 0.1
    mu, cov = train.mean(0), np.cov(train, rowvar=False)
    factor = (train - mu).T / np.sqrt(train.shape[0] - 1.0)
    sets = [np.arange(0, 12), np.arange(50, 80), np.arange(100, 200)]
    idx, n = G.pack(sets)
    fd = frechet_distances(mu, None, feats, idx.astype(np.int64), n, ref_factor=factor)
    fd_cov = frechet_distances(mu, cov, feats, idx.astype(np.int64), n)
    for i, rows in enumerate(sets):
        f = feats[rows]
        ref = G.frechet_distance(mu, cov, f.mean(0), np.cov(f, rowvar=False))
        assert fd[i] == pytest.approx(ref, rel=1e-6)
        assert fd_cov[i] == pytest.approx(ref, rel=1e-6)


def test_confidence_baseline_uses_msp_pseudo_labels():
    sets = G.MetaSets(idx=np.zeros((2, 4), np.int64), n=np.array([4, 4]), n_id=np.array([2, 2]),
                   store=np.zeros(2, np.int64), split=["a", "a"])
    x = np.array([[0.9, 0.8, 0.1, 0.5], [0.2, 0.3, 0.4, 0.5]])
    msp = np.array([[0.95, 0.99, 0.2, 0.5], [0.1, 0.2, 0.3, 0.4]])
    out = G.confidence_baseline(x, msp, sets, ["auroc", "fpr95", "aupr_in"])
    ref = ood_metrics([0.9, 0.8], [0.1, 0.5])
    assert out[0] == pytest.approx([ref["auroc"], ref["fpr95"], ref["aupr_in"]])
    assert out[1] == pytest.approx([50.0, 95.0, 0.0])  # nobody pseudo-ID: chance values


# ----------------------------------------------------------------------------- model file


def test_fit_json_round_trip_and_model_sha_guard(tmp_path):
    st = graded_store(tmp_path / "a", n_ood=6)
    other = graded_store(tmp_path / "b", seed=1, n_ood=6)
    model = G.fit_gscore([st], "msp", "fpr95", "ude-wasserstein", sets_per_split=3)
    assert model.tau is not None and 0.0 <= model.tau <= 1.0
    assert model.model_sha256 == st.model_sha256 and model.meta_train["n_sets"] == 18
    path = tmp_path / "g.json"
    model.save(path)
    obj = json.loads(path.read_text())  # plain JSON text, never pickle
    assert obj["format"] == "featstore-gscore" and obj["scorer"] == {"name": "msp",
                                                                      "params": {}}
    back = G.GscoreModel.load(path)
    assert back.to_json() == model.to_json()
    res = G.predict_gscore(back, st, ["id/test", "ood/g0/s0"], with_truth=True)
    assert 0.0 <= res["predicted"] <= 100.0 and res["truth"] is not None and not res["forced"]
    sc, _, _ = score_splits(st, "msp", {}, ["id/val", "id/test", "ood/g0/s0"])
    sc = {k: np.exp(v) for k, v in sc.items()}   # msp scores log p; Gscore models p
    ref = (float(sc["id/val"].mean()), float(sc["id/val"].std()))
    assert res["predicted"] == pytest.approx(
        back.predict(np.concatenate([sc["id/test"], sc["ood/g0/s0"]]), ref))
    assert res["reference"]["mu"] == pytest.approx(ref[0])
    with pytest.raises(UsageError, match="allow-other-model"):
        G.predict_gscore(back, other, ["id/test"])
    assert G.predict_gscore(back, other, ["id/test"], force=True)["forced"]
    with pytest.raises(UsageError, match="different models"):
        G.fit_gscore([st, other], sets_per_split=1)
    both = G.fit_gscore([st, other], sets_per_split=1, allow_other_model=True)
    assert set(both.model_sha256s) == {st.model_sha256, other.model_sha256}
    path.write_text('{"format": "featstore-gscore", "format_version": 1, "modelling": "x"}')
    with pytest.raises(UsageError, match="unknown modelling|malformed"):
        G.GscoreModel.load(path)


# ----------------------------------------------------------------------------- CLI


def test_cli_fit_predict_evaluate(tmp_path, capsys):
    st = graded_store(tmp_path / "s", n_ood=8)
    graded_store(tmp_path / "o", seed=3, n_ood=8)
    s, o, model = str(st.path), str(tmp_path / "o"), str(tmp_path / "g.json")
    code, out, err = run(capsys, "gscore", "fit", s, "--method", "energy", "--target", "auroc",
                         "--model", "gmm-wasserstein@auto", "--sets-per-split", "2", "--out",
                         model)
    assert code == 0, err
    assert "wrote" in out and json.loads((tmp_path / "g.json").read_text())["tau"] is not None
    code, out, err = run(capsys, "gscore", "predict", model, s, "--split", "id/test",
                         "--split", "ood/g1/s4", "--truth", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["target"] == "auroc" and 0 <= res["predicted"] <= 100 and res["truth"] > 50
    code, out, err = run(capsys, "gscore", "evaluate", s, o, "--methods", "msp,energy",
                         "--ratios", "1:10", "--sizes", "40", "--repeats", "2",
                         "--sets-per-split", "2", "--robust-models", "ude-wasserstein")
    assert code == 0, err
    for needle in ("RMSE (%) of predicted FPR@TPR95", "Gscore (UDE + Wasserstein)",
                   "Confidence score (baseline)", "Auto evaluation", "Robustness",
                   "Across stores", "meta-sets"):
        assert needle in out, needle
    code, out, err = run(capsys, "gscore", "evaluate", s, "--repeats", "1", "--sets-per-split",
                         "1", "--no-baselines", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert set(res["table"]["msp"]["fpr95"]) == set(G.DEFAULT_MODELS)
    bad = [
        (("gscore", "fit", s, "--model", "ude-cosine", "--out", model), 2, "ude-cosine"),
        (("gscore", "fit", s, "--target", "accuracy", "--out", model), 2, "target"),
        (("gscore", "fit", s, "--method", "nope", "--out", model), 2, "unknown scorer"),
        (("gscore", "fit", s, "--model", "kmeans-l2@0.5", "--out", model), 2, "Kmeans"),
        (("gscore", "fit", str(tmp_path / "missing"), "--out", model), 1, "does not exist"),
        (("gscore", "predict", model, o, "--split", "id/test"), 2, "allow-other-model"),
        (("gscore", "predict", model, s, "--split", "ood/x/y"), 2, "does not exist"),
        (("gscore", "predict", str(tmp_path / "nope.json"), s, "--split", "id/test"), 1,
         "file not found"),
        (("gscore", "evaluate", s, "--ratio", "1:0"), 2, "ratio"),
        (("gscore", "evaluate", s, "--size", "1"), 2, "at least 2"),
        (("gscore", "evaluate", s, "--model", "gmm-kl@2"), 2, "[0, 1]"),
    ]
    for args, code_, needle in bad:
        code, _, err = run(capsys, *args)
        assert code == code_ and needle in err and len(err.strip().splitlines()) == 1, (args,
                                                                                        err)
        assert "Traceback" not in err
    code, _, err = run(capsys, "gscore", "predict", model, o, "--split", "id/test",
                       "--allow-other-model")
    assert code == 0, err


# ----------------------------------------------------------------------------- real data


@pytest.mark.slow
def test_end_to_end_on_a_small_real_store(tmp_path):
    """A tiny mini-Gbench (id/val, id/test and 4 OOD sets of real images) extracted with the
    demo ResNet (seeded initial weights: training is the benchmark's business): the protocol
    runs, correlations are computed and finite."""
    import torch

    from featstore.extraction.extract import ExtractOptions, extract
    from featstore.extraction.zoo.demo_resnet import demo_resnet
    from featstore.workflows.demo.gbench import gbench_spec_text
    from featstore.workflows.demo.pipeline import MODEL_SPEC

    torch.manual_seed(0)
    torch.save(demo_resnet(6).state_dict(), tmp_path / "init.pt")
    only = ["ood/near/digit7", "ood/photo/astronaut", "ood/noise/uniform", "ood/cov/rotate45"]
    text = gbench_spec_text(only, patch_count=40, noise_count=40)
    head, _, rest = text.partition('[[split]]\nname = "id/train"')
    (tmp_path / "spec.toml").write_text(head + rest.partition("\n\n")[2])  # no id/train
    st = extract(MODEL_SPEC, tmp_path / "spec.toml", tmp_path / "store",
                 weights=tmp_path / "init.pt",
                 options=ExtractOptions(device="cpu", num_workers=0, progress=False))
    assert st.splits() == ["id/val", "id/test", *only]
    res = G.evaluate_gscore([st], methods=["msp", "energy"],
                            models=["ude-wasserstein", "gmm-wasserstein", "kmeans-l2"],
                            repeats=2, sets_per_split=5, train_fraction=0.5, baselines=False,
                            tau_from=None)  # untrained net: MSP's tau need not suit energy
    for method in ("msp", "energy"):
        for target in ("fpr95", "auroc"):
            cell = res["table"][method][target]["ude-wasserstein"]
            assert np.isfinite(cell["rmse"]["mean"])
            assert np.isfinite(cell["pearson_train"]["mean"]), (method, target, cell)
            assert abs(cell["pearson_train"]["mean"]) <= 1.0
    assert res["meta_sets"] == 2 * 4 * 5
