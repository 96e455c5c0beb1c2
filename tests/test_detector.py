"""`featstore.Detector` (issue 32 item 4, feature batches): fit on a store, threshold at a
target TPR / FPR, save as HDF5 (no pickle), load in a fresh process, score features with
decisions. References: `featstore score --save` (the CLI's scores of the same split), and
the threshold rule computed by hand from sorted scores."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

import featstore
from featstore.errors import InputError, UsageError
from scorers import get_scorer
from tests.helpers.cli import run_cli


@pytest.mark.parametrize("method", ["vim", "knn"])
def test_saved_detector_scores_like_featstore_score_in_a_fresh_process(
        structured_store, tmp_path, capsys, method):
    store = structured_store
    det = featstore.Detector.fit(store, method, target_tpr=0.9)
    artifact = det.save(tmp_path / "det.h5")
    with h5py.File(artifact, "r") as fh:  # plain arrays and attributes, nothing pickled
        assert fh.attrs["format"] == "featstore-detector" and fh.attrs["scorer"] == method
        assert all(isinstance(fh[k], h5py.Group) for k in ("head", "fit"))
    code, _, err = run_cli(capsys, "score", store.path, "--method", method, "--split",
                           "ood/far/faint", "--save", tmp_path / "cli.npz", "--json")
    assert code == 0, err
    want = np.load(tmp_path / "cli.npz")["ood__far__faint"]
    np.save(tmp_path / "x.npy", np.asarray(store.split("ood/far/faint").features))
    script = ("import json, sys, numpy as np, featstore\n"
              f"d = featstore.Detector.load({str(artifact)!r})\n"
              f"s, ok = d.score_features(np.load({str(tmp_path / 'x.npy')!r}))\n"
              f"np.save({str(tmp_path / 'got.npy')!r}, s)\n"
              "print(json.dumps({'t': d.threshold, 'ok': ok.tolist()}))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    got = np.load(tmp_path / "got.npy")
    np.testing.assert_array_equal(got, want)
    out = json.loads(run.stdout)
    assert out["t"] == det.threshold and out["ok"] == (want >= det.threshold).tolist()


def test_thresholds_by_hand(structured_store):
    store = structured_store
    det = featstore.Detector.fit(store, "msp", target_tpr=0.95)
    s = np.sort(get_scorer("msp").fit(store).score(store.split("id/val")))
    assert det.threshold == s[10]  # 200 rows: floor(0.05 * 200) = 10 below the threshold
    assert np.mean(s >= det.threshold) >= 0.95
    det = featstore.Detector.fit(store, "msp", target_fpr=0.1)
    ood = np.sort(get_scorer("msp").fit(store).score(store.split("ood/near/blend_val")))
    assert np.sum(ood >= det.threshold) == 12  # floor(0.1 * 125) rows accepted
    _, decisions = det.score_features(np.asarray(store.split("ood/near/blend_val").features))
    assert decisions.sum() == 12


def test_bad_artifacts_and_options(structured_store, tmp_path):
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(InputError, match="junk.h5.*not an HDF5 file"):
        featstore.Detector.load(tmp_path / "junk.h5")
    with h5py.File(tmp_path / "other.h5", "w") as fh:
        fh.attrs["format"] = "x"
    with pytest.raises(InputError, match="not a featstore detector"):
        featstore.Detector.load(tmp_path / "other.h5")
    with pytest.raises(UsageError, match="not both"):
        featstore.Detector.fit(structured_store, "msp", target_tpr=0.9, target_fpr=0.1)
