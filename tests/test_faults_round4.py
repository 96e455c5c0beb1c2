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


def test_python_m_featstore_under_a_memory_limit_is_one_line():
    """Item 3: `python -m featstore` imported torch (for torchrun's rank) before the CLI's
    error handling, so under `ulimit -v` every command ended in an ImportError traceback.
    Now `--version` runs: `python -m featstore` reads torchrun's rank from the environment
    and imports nothing of torch before the CLI's error handling (which turns a library
    that cannot load later, inside a command, into one line: cli.app's ImportError)."""
    import os
    import resource
    import subprocess

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_100_000 * 1024, resource.RLIM_INFINITY))

    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "featstore", *args], env=env,
                              preexec_fn=cap, capture_output=True, text=True, timeout=300)

    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("featstore "), done.stderr


# ------------------------------------------------------------------ executors (run --executor)
def _existing_experiment(tmp_path: Path, executor: str = "") -> Path:
    """An experiment over one existing store (nothing to train), with an [executor] table."""
    arrays = _arrays()
    arrays["splits"]["id/test"] = arrays["splits"]["id/val"]
    arrays["splits"]["ood/far/x"] = {"features": arrays["splits"]["id/val"]["features"] + 3}
    featstore.Store.from_arrays(tmp_path / "s0", head=arrays["head"], splits=arrays["splits"])
    exp = tmp_path / "e.toml"
    exp.write_text('name = "e"\n[data]\nstores = ["s0"]\n[[method]]\nname = "MSP"\n'
                   f'scorer = "msp"\n{executor}')
    return exp


@pytest.mark.parametrize("table, args, code, fragment", [
    ('[executor]\nkind = "kubernetes"\n', (), 1, "[executor]: kind = 'kubernetes'"),
    ('[executor]\nkind = "slurm"\npartiton = "gpu"\n', (), 1, "unknown slurm executor key"),
    ('[executor]\nkind = "ray"\npoll_s = nan\n', (), 1, "poll_s = nan, expected a number > 0"),
    ('[executor]\nkind = "ray"\naddress = 9\n', (), 1, "address = 9, expected text"),
    ('[executor]\nworkers = 0\n', (), 1, "e.toml' [executor]: workers = 0"),
    ("", ("--workers", "0"), 2, "--workers 0: expected an integer >= 1"),
    ("", ("--workers", "-1"), 2, "--workers -1: expected an integer >= 1"),
    ('[executor]\nworkers = 2\n', ("--workers", "-1"), 2, "--workers -1"),
    ("", ("--executor", "kubernetes"), 2, "--executor 'kubernetes' (valid: local, slurm, ray)"),
])
def test_executor_faults_blame_the_file_or_the_option(tmp_path, capsys, table, args, code,
                                                      fragment):
    """Item 3: a bad value in the file's [executor] is the file's fault (exit 1, naming it);
    a bad --workers / --executor is the command line's (exit 2, naming the option, never
    the file: `--workers 0` was blamed on `[executor]`). Nothing is written."""
    exp = _existing_experiment(tmp_path, table)
    got = last_line_error(run_cli(capsys, "run", exp, "--out", tmp_path / "o", *args), code,
                          fragment)
    if code == 2:
        assert "[executor]" not in got
    assert not (tmp_path / "o").exists()


def test_existing_stores_never_run_locally_when_an_executor_is_asked(tmp_path, capsys):
    """Issue 47 item 4: `--executor` over existing stores was ignored (ran here, exit 0)."""
    exp = _existing_experiment(tmp_path)
    last_line_error(run_cli(capsys, "run", exp, "--out", tmp_path / "o", "--workers", "2"), 2,
                    "scores existing stores", "drop --executor / --workers")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind, install", [("slurm", "pip install 'featstore[slurm]'"),
                                           ("ray", "pip install 'featstore[ray]'")])
def test_an_engine_without_its_extra_names_the_install_command(tmp_path, capsys, monkeypatch,
                                                               kind, install):
    """Issue 47 item 4: without submitit / ray, `--executor slurm|ray` ended in `unexpected
    ModuleNotFoundError`. The package is made unimportable as Python itself does for a
    module whose sys.modules entry is None."""
    monkeypatch.setitem(sys.modules, "submitit" if kind == "slurm" else "ray", None)
    exp = _existing_experiment(tmp_path)
    last_line_error(run_cli(capsys, "run", exp, "--out", tmp_path / "o", "--executor", kind),
                    1, install)


def test_a_ray_address_that_does_not_answer_times_out_naming_it(tmp_path):
    """Item 3, a hang: `address = "127.0.0.1:9"` waited forever in ray.init ("Connecting to
    existing Ray cluster"). Port 9 (discard) has no listener here: refused at once; an
    address that never answers (192.0.2.1, TEST-NET-1: unroutable) times out after
    connect_s."""
    import time

    from featstore.errors import FeatstoreError
    from featstore.workflows.experiments.executors import make_executor, reach_ray

    pytest.importorskip("ray", reason="the optional extra featstore[ray]")
    ex = make_executor("ray", {"address": "127.0.0.1:9", "connect_s": 1})
    unit = {"id": "u", "key": "k", "label": "u"}
    with pytest.raises(FeatstoreError, match=r"no Ray cluster answers at address '127\.0\.0\.1:9'"):
        ex.run_calls(tmp_path, [unit], lambda u, log=None: None, lambda m: None)
    start = time.monotonic()
    with pytest.raises(FeatstoreError, match=r"'ray://192\.0\.2\.1:10001' within 0\.5 s"):
        reach_ray("ray://192.0.2.1:10001", 0.5)
    assert time.monotonic() - start < 5
    with pytest.raises(InputError, match="expected host:port"):
        reach_ray("nowhere", 1)


# ------------------------------------------------------------------ hostile files
def test_toml_nested_3000_deep_is_one_line(tmp_path, capsys):
    """Item 3: valid TOML 3,000 arrays deep raised RecursionError in the shared reader;
    40 deep parsed, then any recursive walk of it could fail. Both are refused, one line."""
    for depth, fragment in ((3000, "nested too deep to read"), (40, "more than 32 levels")):
        exp = tmp_path / f"d{depth}.toml"
        exp.write_text("x = " + "[" * depth + "]" * depth + "\n")
        last_line_error(run_cli(capsys, "run", exp, "--out", tmp_path / "o"), 1, fragment,
                        str(exp))


def _plan(tmp_path: Path, units: object, state: object = None) -> Path:
    out = tmp_path / "o"
    (out / "units").mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps({"executor": "local", "units": units}))
    if state is not None:
        (out / "units" / "u.json").write_text(state if isinstance(state, str)
                                              else json.dumps(state))
    return out


UNIT = {"id": "u", "label": "u", "key": "k"}


@pytest.mark.parametrize("units, state, code, fragment", [
    ("nope", None, 1, "expected a table with a list 'units'"),
    ([1], None, 1, "unit 1: expected a table"),
    ([{**UNIT, "id": "../../etc/passwd"}], None, 1, "expected a file name"),
    ([{"id": "u"}], None, 1, "label = None"),
    ([UNIT], {"state": "exploded", "key": "k"}, 0, "pending"),
    ([UNIT], {"state": "running", "key": "k", "started": "yesterday"}, 0, "pending"),
    ([UNIT], {"state": "running", "key": "k", "pid": 10**30, "host": "h"}, 0, "pending"),
    ([UNIT], [1, 2], 0, "pending"),
    ([UNIT], "[" * 100000, 0, "pending"),
    ([UNIT], {"state": "done", "key": "k", "started": 1.0, "finished": 3.0}, 0, "done"),
])
def test_run_status_on_hostile_directories(tmp_path, capsys, units, state, code, fragment):
    """Item 3: `run --status` on a plan or state file of another shape ended in `unexpected
    KeyError / TypeError / AttributeError / RecursionError / OverflowError`. A bad plan is
    exit 1 naming plan.json; a state file that is not a record reads as not started."""
    out = _plan(tmp_path, units, state)
    result = run_cli(capsys, "run", "--status", out)
    if code:
        last_line_error(result, 1, "plan.json", fragment)
    else:
        assert result[0] == 0, result[2]
        assert result[1].split()[0] == fragment


def _results() -> dict:
    entry = {"n": 1, "skipped": 0, "groups": {"far": {"auroc": {"mean": 90.0, "std": 0.0,
                                                                 "n": 1}}},
             "id_acc": None, "method_s": None, "total_s": None, "flags": []}
    return {"experiment": {"name": "e", "seeds": [0], "tune_rule": "val",
                           "select_by": "auroc", "spec": "x.toml", "train": {}},
            "arch": "resnet18", "wall_s": 1.0, "skipped": [],
            "aggregate": {"spec": {"MSP": entry}}}


HOSTILE_RESULTS = [
    (("aggregate", "spec", "MSP"), 3, "aggregate.spec.MSP is int"),
    (("aggregate", "spec", "MSP", "n"), "1", "aggregate.spec.MSP.n = '1'"),
    (("aggregate", "spec", "MSP", "groups", "far", "auroc"), [1], "groups.far.auroc is list"),
    (("aggregate", "spec", "MSP", "groups", "far", "auroc", "mean"), "x", "expected {mean"),
    (("skipped",), [{"split": 1}], "skipped: expected a list"),
    (("experiment", "seeds"), 2, "experiment.seeds = 2"),
    (("experiment", "osr"), "AID", "experiment.osr = 'AID'"),
    (("aggregate", "spec", "MSP", "flags"), "bad", "flags: expected a list of text"),
]


@pytest.mark.parametrize("layout", ["default", "paper"])
def test_table_on_hostile_results(tmp_path, capsys, layout):
    """Item 3: `featstore table` on a results.json of another shape ended in `unexpected
    TypeError / KeyError / AttributeError` inside the renderers. Exit 1 naming the file and
    the field (each case of HOSTILE_RESULTS). The unchanged file renders (exit 0)."""
    (tmp_path / "ok.json").write_text(json.dumps(_results()))
    assert run_cli(capsys, "table", tmp_path / "ok.json", "--layout", layout)[0] == 0
    for path, value, fragment in HOSTILE_RESULTS:
        data = _results()
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        (tmp_path / "r.json").write_text(json.dumps(data))
        last_line_error(run_cli(capsys, "table", tmp_path / "r.json", "--layout", layout), 1,
                        "r.json", fragment)


def test_table_datasets_file_cannot_point_outside_its_directory(tmp_path, capsys):
    """Item 4: a ten-methods directory's datasets.json naming `../x` or an absolute path
    read results from anywhere; now exit 1 naming the entry."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "datasets.json").write_text(json.dumps({"datasets": {"A": "/etc"}}))
    last_line_error(run_cli(capsys, "table", tmp_path / "d"), 1, "'A' = '/etc'",
                    "expected a path inside its directory")


# ------------------------------------------------------------------ training options
@pytest.mark.parametrize("args, fragment", [
    (("--weight-decay", "nan"), "--weight-decay nan: must be a finite number"),
    (("--lr", "inf"), "--lr inf: must be a finite number"),
    (("--momentum", "-1"), "--momentum -1.0: must be >= 0"),
    (("--momentum", "nan"), "--momentum nan: must be a finite number"),
    (("--method", "logitnorm", "--param", "tau=1e999"), "parameter tau = inf"),
    (("--method", "confbranch", "--param", "hints=3"), "hints = 3: expected true or false"),
])
def test_train_refuses_numbers_that_train_a_nan_model(tmp_path, capsys, args, fragment):
    """Item 3, wrong numbers: `train --weight-decay nan` trained and wrote a checkpoint of NaN
    weights with exit 0. Every numeric option is checked before any work (exit 2)."""
    last_line_error(run_cli(capsys, "train", "--arch", "resnet18", "--spec",
                            tmp_path / "none.toml", "--out", tmp_path / "m.pt", *args),
                    2, fragment)
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("line, fragment", [
    ("weight_decay = nan", "weight_decay = nan: expected a finite number >= 0"),
    ("lr = 0.0", "lr = 0.0: expected a finite number > 0"),
    ("epochs = 0", "epochs = 0: expected a finite number >= 1"),
])
def test_experiment_train_table_refuses_nan_and_out_of_range(tmp_path, capsys, line,
                                                            fragment):
    """Item 4: the same numbers in an experiment's [train] table are the file's fault."""
    (tmp_path / "s.toml").write_text("")
    exp = tmp_path / "e.toml"
    exp.write_text(f'name = "e"\narch = "resnet18"\nseeds = [0]\n[data]\nspec = "s.toml"\n'
                   f'[train]\n{line}\n[[method]]\nname = "MSP"\nscorer = "msp"\n')
    last_line_error(run_cli(capsys, "run", exp, "--out", tmp_path / "o"), 1, "[train]",
                    fragment)


# ------------------------------------------------------------------ protocol ten-methods
NOISE_SPEC = "".join(f'[[split]]\nname = "{n}"\nsource = {{ builtin = "noise", count = 4 }}\n'
                     for n in ("id/train", "id/val", "id/test", "ood/far/n"))


@pytest.mark.parametrize("label, taken, code, fragment", [
    ("datasets.json", None, 2, "label 'datasets.json' is the name of an output file"),
    ("Results.Paper.md", None, 2, "is the name of an output file"),
    ("B", "file", 1, "'B' (the dataset's folder) exists and is not a directory"),
    ("B", "datasets.json", 1, "'datasets.json' (an output file) is a directory"),
])
def test_ten_methods_label_colliding_with_an_output_is_refused_before_work(
        tmp_path, capsys, label, taken, code, fragment):
    """Item 3, work wasted: a label that collides with an output file of OUT trained every
    dataset, then failed writing datasets.json. Checked before the first training step
    (the first dataset's folder A is never made)."""
    (tmp_path / "b.toml").write_text(NOISE_SPEC)
    out = tmp_path / "o"
    out.mkdir()
    if taken == "file":
        (out / label).write_text("")
    elif taken is not None:
        (out / taken).mkdir()
    last_line_error(run_cli(capsys, "protocol", "ten-methods", "--spec",
                            f"A={tmp_path / 'b.toml'}", "--spec", f"{label}={tmp_path / 'b.toml'}",
                            "--methods", "msp", "--runs", "1", "--out", out), code, fragment)
    assert not (out / "A").exists()


# ------------------------------------------------------------------ a user's own scorers
OWN_SCORERS = '''
import numpy as np
from scorers.base import Scorer


class Base(Scorer):
    name = ""
    needs = ("features",)

    def _score(self, split):
        return np.asarray(split.features, dtype=np.float64).mean(axis=1)


class FitRaises(Base):
    name = "own43_fit"
    def _fit(self, store):
        raise ZeroDivisionError("my fit divided by zero")


class ScoreRaises(Base):
    name = "own43_score"
    def _score(self, split):
        raise KeyError("my key")


class Wide(Base):
    name = "own43_wide"
    def _score(self, split):
        return np.zeros((split.num_rows, 2))


class Words(Base):
    name = "own43_words"
    def _score(self, split):
        return np.array(["a"] * split.num_rows)


class Nothing(Base):
    name = "own43_none"
    def _score(self, split):
        return None


class Nan(Base):
    name = "own43_nan"
    def _score(self, split):
        return np.full(split.num_rows, np.nan)


class Good(Base):
    name = "own43_good"
'''


@pytest.fixture
def own_store(tmp_path, monkeypatch) -> Path:
    """A store, and own43.py in the working directory (not on sys.path: issue 47 item 5)."""
    arrays = _arrays()
    arrays["splits"]["id/test"] = arrays["splits"]["id/val"]
    arrays["splits"]["ood/far/x"] = {"features": arrays["splits"]["id/val"]["features"] + 3}
    featstore.Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    (tmp_path / "own43.py").write_text(OWN_SCORERS)
    (tmp_path / "own43broken.py").write_text("import no_such_package_43\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path / "s"
    from scorers.registry import REGISTRY, unregister
    for name in [n for n in REGISTRY if n.startswith("own43_")]:
        unregister(name)
    for module in ("own43", "own43broken"):
        sys.modules.pop(module, None)


@pytest.mark.parametrize("cls, fragment", [
    ("FitRaises", "(own43:FitRaises): its _fit raised ZeroDivisionError: my fit divided"),
    ("ScoreRaises", "its _score raised KeyError: 'my key'"),
    ("Wide", "_score returned shape (30, 2) for split"),
    ("Words", "returned an array of shape (30,) and dtype <U1 for split"),
    ("Nothing", "_score returned NoneType 'None'"),
    ("Nan", "_score returned 30 NaN / inf scores of 30"),
])
@pytest.mark.parametrize("command", ["score", "eval"])
def test_own_scorers_that_misbehave_are_named_in_one_line(own_store, capsys, cls, fragment,
                                                         command):
    """Item 3: a user's scorer raising in _fit / _score, or returning another shape, text,
    None or NaN on finite inputs, ended in `unexpected ...` (or, for NaN, the metrics'
    ValueError). Exit 1 naming the scorer, its class and what it returned."""
    last_line_error(run_cli(capsys, command, own_store, "--method", f"own43:{cls}",
                            "--no-cache"), 1, "scorer 'own43_", fragment)


def test_own_scorer_imports_from_the_working_directory_like_a_model(own_store, capsys):
    """Issue 47 item 5: `--method own43:Good` found own43.py in the working directory only
    with PYTHONPATH=. (`--model mymodels:build` always did): one rule for both. Reference:
    the features' row means (the scorer's formula) by hand."""
    code, out, err = run_cli(capsys, "score", own_store, "--method", "own43:Good",
                             "--split", "id/val", "--save", own_store.parent / "x.npz")
    assert code == 0, err
    want = featstore.Store.open(own_store).split("id/val").features[()].astype(np.float64)
    np.testing.assert_array_equal(np.load(own_store.parent / "x.npz")["id__val"],
                                  want.mean(axis=1))
    last_line_error(run_cli(capsys, "score", own_store, "--method", "own43broken:X"), 1,
                    "importing 'own43broken' raised ModuleNotFoundError: No module named "
                    "'no_such_package_43'")
    last_line_error(run_cli(capsys, "score", own_store, "--method", "own43absent:X"), 2,
                    "cannot import module 'own43absent'")


@pytest.mark.parametrize("what", ["gscore model", "store.json", "report source"])
def test_json_nested_100000_deep_is_one_line_naming_the_file(tmp_path, capsys, what):
    """Item 4: json.loads raises RecursionError (not a JSONDecodeError) on valid JSON nested
    100,000 deep; each reader of a file a command names says so in one line (exit 1)."""
    deep = "[" * 100000 + "]" * 100000
    arrays = _arrays()
    arrays["splits"]["id/test"] = arrays["splits"]["id/val"]
    store = tmp_path / "s"
    featstore.Store.from_arrays(store, head=arrays["head"], splits=arrays["splits"])
    if what == "gscore model":
        (tmp_path / "g.json").write_text(deep)
        args: tuple = ("gscore", "predict", tmp_path / "g.json", store, "--split", "id/test")
        fragment = "g.json"
    elif what == "store.json":
        (store / "store.json").write_text(deep)
        args, fragment = ("info", store), "store.json"
    else:
        (tmp_path / "r.json").write_text(deep)
        args, fragment = ("report", tmp_path / "r.json", "--out", tmp_path / "x.html"), "r.json"
    last_line_error(run_cli(capsys, *args), 1, fragment)


def test_report_on_an_eval_json_of_another_shape(tmp_path, capsys):
    """Item 4: `report r.json` (and `rank`) on an `eval --out` JSON whose fields have other
    shapes ended in `unexpected TypeError / KeyError` inside the renderers. Exit 1 naming the
    file and the field; the file as eval wrote it renders."""
    arrays = _arrays()
    arrays["splits"]["id/test"] = arrays["splits"]["id/val"]
    arrays["splits"]["ood/far/x"] = {"features": arrays["splits"]["id/val"]["features"] + 3}
    featstore.Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    assert run_cli(capsys, "eval", tmp_path / "s", "--method", "msp", "--out",
                   tmp_path / "ok.json")[0] == 0
    good = json.loads((tmp_path / "ok.json").read_text())
    assert run_cli(capsys, "report", tmp_path / "ok.json", "--out", tmp_path / "ok.html")[0] == 0
    cases = [(("methods",), 3, "methods is int"),
             (("methods", "msp"), 3, "methods.msp: expected a table"),
             (("methods", "msp", "splits"), [1], "methods.msp: expected a table"),
             (("methods", "msp", "splits", "ood/far/x", "auroc"), "x", "auroc = 'x'"),
             (("ood_splits",), [1], "ood_splits = [1]"),
             (("ood_splits",), ["ood/none"], "methods.msp.splits has no 'ood/none'")]
    for path, value, fragment in cases:
        data = json.loads(json.dumps(good))
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        (tmp_path / "r.json").write_text(json.dumps(data))
        last_line_error(run_cli(capsys, "report", tmp_path / "r.json", "--out",
                                tmp_path / "x.html"), 1, "r.json", fragment)
    # `rank` reads the same files by the same check (scorers.results.eval_json_problem)
    last_line_error(run_cli(capsys, "rank", tmp_path / "r.json"), 1, "r.json",
                    "methods.msp.splits has no 'ood/none'")


def test_detector_fit_on_zero_threshold_rows_and_zero_feature_rows():
    """Item 4: Detector.fit on an id/val of 0 rows raised IndexError from the threshold rule;
    scoring 0 rows gives 0 scores and 0 decisions."""
    arrays = _arrays()
    det = featstore.Detector.fit(featstore.ArrayStore(arrays["head"], splits=arrays["splits"]),
                                 "msp")
    scores, decisions = det.score_features(np.zeros((0, 6), np.float32))
    assert scores.shape == (0,) and decisions.shape == (0,)
    arrays["splits"]["id/val"] = {"features": np.zeros((0, 6), np.float32)}
    with pytest.raises(InputError, match="0 rows"):
        featstore.Detector.fit(featstore.ArrayStore(arrays["head"], splits=arrays["splits"]),
                               "msp")


@pytest.mark.parametrize("args, fragment", [(("--workers", "-1"), "--workers -1: must be"),
                                            (("--batch-size", "0"), "--batch-size 0: must be")])
def test_predict_loader_options_are_checked_before_any_work(artifact, tmp_path, capsys, args,
                                                            fragment):
    """Item 3: `predict --workers -1` reached torch's DataLoader (a ValueError) after loading
    the detector and the model. Exit 2 naming the option, first."""
    last_line_error(run_cli(capsys, "predict", artifact, tmp_path, *args), 2, fragment)
