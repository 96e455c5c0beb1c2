"""Deep ensembles across stores (scorers/ensemble.py, `featstore eval --ensemble`).
Reference: a NumPy transcription, row by row, of the mean softmax's top probability and
entropy, the mutual information H(p_mean) - mean_t H(p_t) and the variation ratio 1 - f/T
(Lakshminarayanan et al. 2017; Gal's thesis for MI and VR), on real HDF5 stores whose second
member holds the same rows in another order (matched by ids)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from featstore import Store
from featstore.errors import UsageError
from scorers.ensemble import ensemble_scores, ensemble_store, evaluate_ensemble
from tests.helpers.cli import run_cli


def np_reference(member_logits: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {"msp": [], "entropy": [], "mi": [], "vr": []}
    for row in member_logits.astype(np.float64):                      # (T, C)
        p = np.exp(row - row.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        pm = p.mean(axis=0)
        h = -np.sum(pm * np.log(pm))
        out["msp"].append(np.log(pm.max()))
        out["entropy"].append(-h)
        out["mi"].append(-(h - np.mean([-np.sum(q * np.log(q)) for q in p])))
        votes = np.bincount(row.argmax(axis=1), minlength=row.shape[1])
        out["vr"].append(-(1 - votes.max() / row.shape[0]))
    return {k: np.array(v) for k, v in out.items()}


def test_scores_match_numpy_reference():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(200, 4, 7)).astype(np.float32)
    got, want = ensemble_scores(logits), np_reference(logits)
    for kind in want:
        np.testing.assert_allclose(got[kind], want[kind], rtol=1e-9, atol=1e-12, err_msg=kind)


def test_msp_keeps_confident_rows_apart():
    """Top-logit gaps of 40 and 60: the mean softmax's p rounds to 1.0, its log does not."""
    rows = np.zeros((2, 2, 3))
    rows[0, :, 0], rows[1, :, 0] = 40.0, 60.0
    msp = ensemble_scores(rows)["msp"]
    assert msp[1] > msp[0] and np.allclose(msp, -2 * np.exp([-40.0, -60.0]), rtol=1e-9)


def _stores(tmp_path, shuffle=True, **second):
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=(4, 6)).astype(np.float32), np.zeros(4, np.float32)

    def split(n, shift=0.0, labelled=True):
        x = (rng.normal(size=(n, 6)) + shift).astype(np.float32)
        d = {"features": x, "ids": np.array([f"img{i:03d}" for i in range(n)])}
        if labelled:
            d["labels"] = rng.integers(0, 4, n)
        return d

    a = {"id/train": split(40), "id/test": split(30), "ood/far/x": split(20, 2.0, False)}
    bsplits = {}
    for name, d in a.items():
        order = rng.permutation(len(d["ids"])) if shuffle else np.arange(len(d["ids"]))
        bd = {k: v[order] for k, v in d.items()}
        bd["features"] = bd["features"] + rng.normal(0, 0.5, bd["features"].shape).astype(
            np.float32)
        bsplits[name] = {**bd, **second.get(name, {})}
    sa = Store.from_arrays(tmp_path / "a", head=(w, b), splits=a)
    sb = Store.from_arrays(tmp_path / "b", head=(w, b), splits=bsplits)
    return sa, sb


def test_rows_matched_by_ids(tmp_path):
    sa, sb = _stores(tmp_path)
    combined = ensemble_store([sa, sb])
    for name in sa.splits():
        ids_b = np.asarray(sb.split(name).ids).astype(str)
        pos = {v: i for i, v in enumerate(ids_b)}
        order = [pos[v] for v in np.asarray(sa.split(name).ids).astype(str)]
        member = np.stack([np.asarray(sa.split(name).logits),
                           np.asarray(sb.split(name).logits)[order]], axis=1)
        np.testing.assert_array_equal(combined.split(name).extra("ensemble_logits"), member)
    result = evaluate_ensemble([sa, sb])
    assert set(result["methods"]) == {"ensemble_msp", "ensemble_entropy", "ensemble_mi",
                                      "ensemble_vr"}
    from scorers import REGISTRY  # the four exist for that call only: `eval --all` after it
    assert not [n for n in REGISTRY if n.startswith("ensemble_")]  # lists none of them
    want = np_reference(combined.split("id/test").extra("ensemble_logits"))
    from sklearn.metrics import roc_auc_score

    ood = np_reference(combined.split("ood/far/x").extra("ensemble_logits"))
    y = np.r_[np.ones(30), np.zeros(20)]
    auroc = 100 * roc_auc_score(y, np.r_[want["entropy"], ood["entropy"]])
    assert result["methods"]["ensemble_entropy"]["splits"]["ood/far/x"]["auroc"] == \
        pytest.approx(auroc, abs=1e-9)


def test_refusals(tmp_path):
    sa, sb = _stores(tmp_path / "ok")
    with pytest.raises(UsageError, match=r"ensemble: needs at least 2 stores \(got 1\)"):
        ensemble_store([sa])
    ids = np.array([f"img{i:03d}" for i in range(29)] + ["other"])
    sa2, sb2 = _stores(tmp_path / "ids", shuffle=False, **{"id/test": {"ids": ids}})
    with pytest.raises(UsageError, match=r"split 'id/test' of store '.*b' lacks id 'img029' "
                                         r"\(30 rows against 30\)"):
        ensemble_store([sa2, sb2])


def test_cli_ensemble(tmp_path, capsys):
    sa, sb = _stores(tmp_path)
    code, out, _ = run_cli(capsys, "eval", str(sa.path), "--ensemble", str(sb.path), "--ci",
                           "0", "--json")
    assert code == 0 and "ensemble_mi" in json.loads(out)["methods"]
    code, _, err = run_cli(capsys, "eval", str(sa.path), "--ensemble", str(sb.path),
                           "--method", "msp")
    assert code == 2 and "--ensemble scores the ensemble's four scores" in err
