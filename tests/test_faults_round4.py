"""Fault injection, round four (issue 43 items 3 and 4): saved detectors that try to run
code or decide with a NaN, tampered artifacts, own scorers that misbehave, hostile result
directories and TOML, option values that are NaN or out of range. Real HDF5 files, real
modules written to tmp_path, real subprocesses where a limit is at stake. References: the
README's exit-code table (1: what the command names is broken; 2: the command line is
wrong), docs/FAULTS.md's rows and the error fragments written by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import featstore
from featstore.errors import InputError, UsageError
from tests.helpers.cli import last_line_error, run_cli

# a module that leaves a mark when anything imports it: a detector must never import it
EVIL = '''
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("ran")
from scorers.base import Scorer

class Evil(Scorer):
    name = "evil43"
    needs = ("logits",)
    def fit(self, store, grid=None):
        return super().fit(store, grid)
    def score(self, split):
        raise RuntimeError

def build(num_classes=None):
    raise RuntimeError("ran")
'''


def _arrays(rows: int = 30, dim: int = 6, classes: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    head = (rng.normal(size=(classes, dim)).astype(np.float32),
            rng.normal(size=classes).astype(np.float32))

    def split(n: int) -> dict:
        return {"features": rng.normal(size=(n, dim)).astype(np.float32),
                "labels": np.arange(n) % classes}

    return {"head": head, "splits": {"id/train": split(rows), "id/val": split(rows)}}


@pytest.fixture
def artifact(tmp_path, monkeypatch) -> Path:
    """A saved `mds` detector (fits on id/train, so /fit holds arrays), and `evil43mod` on
    sys.path (the current directory), which marks `IMPORTED` when imported."""
    arrays = _arrays()
    store = featstore.ArrayStore(arrays["head"], splits=arrays["splits"])
    path = featstore.Detector.fit(store, "mds", target_tpr=0.9).save(tmp_path / "d.h5")
    (tmp_path / "evil43mod.py").write_text(EVIL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return path


def _load_fails(path: Path, *fragments: str) -> str:
    with pytest.raises(InputError) as info:
        featstore.Detector.load(path)
    message = str(info.value)
    assert message.startswith(f"detector {str(path)!r}: "), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def test_a_detector_never_imports_the_scorer_it_names(artifact, tmp_path, capsys):
    """Item 3, security: `scorer = "module:Class"` was imported by the registry's `in` before
    the ':' check (the module's code ran, then the load refused)."""
    with h5py.File(artifact, "a") as fh:
        fh.attrs["scorer"] = "evil43mod:Evil"
    _load_fails(artifact, "unknown scorer 'evil43mod:Evil'", "never imports code")
    last_line_error(run_cli(capsys, "predict", artifact, tmp_path), 1, "evil43mod:Evil")
    assert not (tmp_path / "IMPORTED").exists()
    assert "evil43mod" not in sys.modules


def test_a_model_record_whose_kind_lies_is_not_loaded(artifact, tmp_path):
    """Item 3, security: `kind = "torchvision"` beside `name = "module:callable"` made
    `load_model` import and call it without `--model`. The name's own form decides."""
    record = {"name": "evil43mod:build", "kind": "torchvision", "architecture": "resnet18",
              "weights": None, "sha256": "0" * 64, "sha256_of": "state dict",
              "transform": {"resize": 8}, "head_layer": "fc", "dtype": "float32"}
    with h5py.File(artifact, "a") as fh:
        fh.attrs["model"] = json.dumps(record)
    det = featstore.Detector.load(artifact)
    with pytest.raises(UsageError, match="callable 'evil43mod:build', which is code"):
        det.load_model()
    assert not (tmp_path / "IMPORTED").exists()


@pytest.mark.parametrize("how", ["external link", "external storage"])
def test_fit_arrays_outside_the_artifact_are_refused(artifact, tmp_path, how):
    """Item 3, security: a /fit dataset as an HDF5 external link or with external raw storage
    was followed at load (another file's bytes fitted the scorer); refused like a store's."""
    other = tmp_path / "other.h5"
    with h5py.File(artifact, "a") as fh:
        grp = fh["fit"][next(iter(fh["fit"]))]
        features = grp["features"][()]
        del grp["features"]
        if how == "external link":
            with h5py.File(other, "w") as o:
                o["x"] = features
            grp["features"] = h5py.ExternalLink(str(other), "x")
        else:
            raw = tmp_path / "raw.bin"
            raw.write_bytes(features.tobytes())
            grp.create_dataset("features", shape=features.shape, dtype=features.dtype,
                               external=[(str(raw), 0, features.nbytes)])
    word = "external link" if how == "external link" else "keeps its data outside the file"
    _load_fails(artifact, word, "never follows links")


@pytest.mark.parametrize("threshold", [float("nan"), float("inf")])
def test_a_threshold_that_cannot_decide_is_refused(artifact, threshold):
    """Item 3, wrong numbers: a NaN threshold made every row OOD (NaN compares false) with
    exit 0. -inf (every row ID, what `target_fpr=1` gives) stays valid."""
    with h5py.File(artifact, "a") as fh:
        fh.attrs["threshold"] = threshold
    _load_fails(artifact, "cannot decide")
    with pytest.raises(InputError, match="cannot decide"):
        featstore.Detector(_fitted(), threshold, {})
    with h5py.File(artifact, "a") as fh:
        fh.attrs["threshold"] = -np.inf
    assert featstore.Detector.load(artifact).threshold == -np.inf


def _fitted():
    arrays = _arrays()
    from scorers import get_scorer
    return get_scorer("msp").fit(featstore.ArrayStore(arrays["head"], splits=arrays["splits"]))


@pytest.mark.parametrize("version", [2, 0, "1"])
def test_an_artifact_of_another_format_version_is_refused(artifact, version):
    """Item 3, wrong numbers: `version = 2` loaded silently as version 1."""
    with h5py.File(artifact, "a") as fh:
        fh.attrs["version"] = version
    _load_fails(artifact, "format version", "reads (1)")


def _tamper(fh: h5py.File, what: str) -> None:
    if what == "no scorer":
        del fh.attrs["scorer"]
    elif what == "params a list":
        fh.attrs["params"] = "[1, 2]"
    elif what == "params of a wrong type":
        fh.attrs["params"] = json.dumps({"shrinkage": "lots"})
    elif what == "unknown params":
        fh.attrs["params"] = json.dumps({"kk": 3})
    elif what == "rule not JSON":
        fh.attrs["rule"] = "{target"
    elif what == "no head":
        del fh["head"]
    elif what == "wrong width":
        del fh["head/weight"]
        fh["head/weight"] = np.zeros((3, 4), np.float32)
    elif what == "fit group without features":
        del fh["fit"][next(iter(fh["fit"]))]["features"]
    elif what == "threshold text":
        fh.attrs["threshold"] = "0.5"
    elif what == "model without name":
        fh.attrs["model"] = json.dumps({"kind": "torchvision"})


TAMPERED = {"no scorer": "'scorer' is missing", "params a list": "'params' is JSON list",
            "params of a wrong type": "shrinkage", "unknown params": "unknown parameter 'kk'",
            "rule not JSON": "'rule' is not valid JSON", "no head": "'head/weight' is missing",
            "wrong width": "", "fit group without features": "no dataset 'features'",
            "threshold text": "'threshold'", "model without name": "no text 'name'"}


@pytest.mark.parametrize("what", sorted(TAMPERED))
def test_tampered_detector_attributes_are_one_line_naming_the_file(artifact, tmp_path,
                                                                   capsys, what):
    """Item 3: each of these ended in `unexpected KeyError / TypeError / JSONDecodeError`."""
    with h5py.File(artifact, "a") as fh:
        _tamper(fh, what)
    _load_fails(artifact, TAMPERED[what])
    last_line_error(run_cli(capsys, "predict", artifact, tmp_path), 1, str(artifact))


BASE_SCORER = '''
import numpy as np
from scorers.base import Scorer

SIGN = {sign}

class MeanBase(Scorer):
    name = ""
    needs = ("features",)
    def score(self, split):
        return SIGN * np.asarray(split.features, dtype=np.float64).mean(axis=1)
'''
CHILD_SCORER = '''
from base43 import MeanBase

class Child(MeanBase):
    name = "child43"
'''


def test_scores_of_an_inherited_scorer_change_when_its_base_module_is_edited(
        tmp_path, monkeypatch):
    """Item 3, wrong numbers: the cache key hashed only the class's own module, so after
    base43.py (where the scoring code lives) was edited the old scores were served. Reference:
    the feature means, by hand, with the sign each version of base43.py sets."""
    from scorers.evaluate import score_splits
    from scorers.registry import unregister

    arrays = _arrays()
    store = featstore.Store.from_arrays(tmp_path / "s", head=arrays["head"],
                                        splits=arrays["splits"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    want = arrays["splits"]["id/val"]["features"].astype(np.float64).mean(axis=1)
    (tmp_path / "child43.py").write_text(CHILD_SCORER)
    try:
        for sign in (1, -1):
            (tmp_path / "base43.py").write_text(BASE_SCORER.format(sign=sign))
            for module in ("base43", "child43"):
                sys.modules.pop(module, None)
            got, _, _ = score_splits(store, "child43:Child", {}, ["id/val"])
            np.testing.assert_allclose(got["id/val"], sign * want, rtol=1e-12)
    finally:
        unregister("child43")
        for module in ("base43", "child43"):
            sys.modules.pop(module, None)


def test_python_m_featstore_under_a_memory_limit_is_one_line(artifact, tmp_path):
    """Item 3: `python -m featstore` imported torch (for torchrun's rank) before the CLI's
    error handling, so under `ulimit -v` every command ended in an ImportError traceback.
    Now `--version` runs, and a command that needs torch says what to do in one line
    (exit 1) when torch cannot load, or runs (exit 0/1 of its own) when it can."""
    import os
    import resource
    import subprocess

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_100_000 * 1024, resource.RLIM_INFINITY))

    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    image = tmp_path / "x.png"
    image.write_bytes(b"")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "featstore", *args], env=env,
                              preexec_fn=cap, capture_output=True, text=True, timeout=300)

    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("featstore "), done.stderr
    done = run("predict", str(artifact), str(image))
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr
    assert done.returncode in (1, 2) and done.stderr.startswith("error: "), done.stderr
