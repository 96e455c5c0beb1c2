"""Fixtures and pytest hooks only; the helpers the test files share live in tests/helpers/
(stores, references, scorer checks, the in-process CLI, images, the tiny models).

The store fixtures are real HDF5 files built from `tests.helpers.stores.structured_arrays`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from skimage import data as skdata
from threadpoolctl import threadpool_limits

from featstore import Store
from tests.helpers.cli import CliRun, run_cli_captured
from tests.helpers.demo import DEMO_TEST_SCALE, DemoRerun
from tests.helpers.images import random_crop_tree
from tests.helpers.scheduling import DEMO_TEST_FILES, make_scheduler, scope_rank
from tests.helpers.stores import open_built, structured_arrays

#: the RAM-backed filesystem the session's temporary directories go to when it has room
RAM_TEMP_ROOT = Path("/dev/shm")
#: free bytes RAM_TEMP_ROOT must have (a full session writes well under 1 GiB at once)
RAM_TEMP_MIN_FREE = 4 << 30
#: the session fixtures over the one demo run (their tests share one xdist scope)
DEMO_FIXTURES = frozenset({"demo_json_run", "demo_dir", "demo_rerun"})


def pytest_configure(config: pytest.Config) -> None:
    """Put the session's tmp_path / tmp_path_factory directories on a RAM-backed tmpfs when
    one with room exists (Linux /dev/shm; pytest's own PYTEST_DEBUG_TEMPROOT), unless the run
    chose a place itself (--basetemp, PYTEST_DEBUG_TEMPROOT). Every store write fsyncs its
    files and directories (tmp, fsync, rename: DESIGN.md); a file + directory fsync costs
    ~6 ms on this machine's disk and ~0.06 ms on tmpfs, and the suite writes thousands of
    files. The tests, their data and their assertions are the same on either filesystem (no
    test can observe durability across a power cut). tmp_path_retention_policy = "failed"
    (pyproject.toml) removes a passed test's directory at its teardown, so RAM holds only
    the running tests' files and the session fixtures'."""
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    try:
        fs = os.statvfs(RAM_TEMP_ROOT)
    except OSError:
        return
    if os.access(RAM_TEMP_ROOT, os.W_OK) and fs.f_bavail * fs.f_frsize >= RAM_TEMP_MIN_FREE:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(RAM_TEMP_ROOT)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist (`make test` runs `pytest -n auto`: one worker per CPU), each worker
    runs the BLAS / OpenMP libraries loaded so far and torch on one thread: N workers x N
    threads on N cores would make every OpenBLAS call spin-wait for a core (scorers/threads.py
    says why). featstore's own policy (`scorers.threads`) still sets its count inside every
    fit and score. No thread variable is exported: a library loaded later (FAISS's OpenBLAS,
    an OpenMP runtime) would start with it, outside the policy's controller."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    threadpool_limits(1)
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heaviest test files first (tests.helpers.scheduling: what `pytest -n N` hands out
    first; each file's own order is kept), and a test using the session's demo run only from
    a file of DEMO_TEST_FILES (its scope under xdist)."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if DEMO_FIXTURES.intersection(getattr(item, "fixturenames", ())) and \
                path not in DEMO_TEST_FILES:
            raise pytest.UsageError(f"{item.nodeid} uses the session's demo run: add {path} "
                                    "to DEMO_TEST_FILES in tests/helpers/scheduling.py")
    order = {id(item): (scope_rank(item.nodeid), i) for i, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`pytest -n N`: one scope per file, the demo-run files one scope, heaviest first."""
    return make_scheduler(config, log)


@pytest.fixture
def structured_store(tmp_path) -> Store:
    """A real on-disk store from `structured_arrays(seed=0)`."""
    arrays = structured_arrays(seed=0)
    Store.from_arrays(tmp_path / "store", head=arrays["head"], splits=arrays["splits"])
    return Store.open(tmp_path / "store")


@pytest.fixture
def make_store(tmp_path):
    """Factory: make_store(name="s", **structured_arrays kwargs) -> opened Store."""

    def _make(name: str = "s", dtype: str = "float32", **kwargs) -> Store:
        arrays = structured_arrays(**kwargs)
        Store.from_arrays(tmp_path / name, head=arrays["head"], splits=arrays["splits"],
                          dtype=dtype)
        return Store.open(tmp_path / name)

    return _make


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory) -> Store:
    """`structured_arrays(seed=0)` (D=32, C=5) built once per session; tests only read it."""
    return open_built(tmp_path_factory.mktemp("shared") / "store", structured_arrays(seed=0))


@pytest.fixture(scope="session")
def wide_store(tmp_path_factory) -> Store:
    """D=1040 > 1000, so that ViM's and Residual's default grids (dims up to 1000) are valid."""
    arrays = structured_arrays(seed=3, num_classes=6, dim=1040, n_train=1200, n_val=40,
                               n_test=150, n_ood=80)
    return open_built(tmp_path_factory.mktemp("wide") / "store", arrays)


@pytest.fixture(scope="session")
def demo_json_run(tmp_path_factory) -> tuple[Path, CliRun]:
    """The real demo as a user runs it, once per test session: `featstore demo --json --out
    DIR --scale DEMO_TEST_SCALE` in a fresh directory (the default backbone: frozen ImageNet
    EfficientNet-Lite0 + a linear head trained on the digits; extraction, the evaluation of
    every scorer, the HTML report). Every demo test shares this run (its JSON, its store, its
    report) instead of running the demo again. Returns (DIR, the run). It runs with
    $FEATSTORE_THREADS=1 (torch, BLAS and FAISS on one thread, as the test process's own
    references under xdist): two threads spin-wait for the core the other test worker holds."""
    out = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEATSTORE_THREADS", "1")
        run = run_cli_captured("demo", "--json", "--out", out, "--scale", DEMO_TEST_SCALE)
    if run.code != 0:
        raise RuntimeError(f"featstore demo failed (exit {run.code}): {run.err[-3000:]}")
    return out, run


@pytest.fixture(scope="session")
def demo_dir(demo_json_run) -> Path:
    """The directory of the session's demo (`demo_json_run`): spec.toml, model.pt +
    model.json, store/, report.html + report.md."""
    return demo_json_run[0]


@pytest.fixture(scope="session")
def demo_rerun(demo_json_run) -> DemoRerun:
    """`featstore demo --out DIR --scale DEMO_TEST_SCALE` (human output) rerun in the session
    demo's directory, once per session; it must reuse the model and every extracted split."""
    out = demo_json_run[0]
    before = (json.loads((out / "store" / "store.json").read_text(encoding="utf-8")),
              json.loads((out / "model.json").read_text(encoding="utf-8")),
              (out / "model.pt").read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEATSTORE_THREADS", "1")      # as the first run (demo_json_run)
        return DemoRerun(run_cli_captured("demo", "--out", out, "--scale", DEMO_TEST_SCALE),
                         *before)


@pytest.fixture
def user_spec(tmp_path) -> Path:
    """A user's ImageFolder benchmark: 3 ID classes (train / val / test folders), OOD val and
    test folders, as the README's worked example."""
    photos = {"astronaut": skdata.astronaut(), "coffee": skdata.coffee(),
              "chelsea": skdata.chelsea()}
    for part, n in (("train", 10), ("val", 4), ("test", 6)):
        random_crop_tree(tmp_path / "data" / part, photos, n)
    random_crop_tree(tmp_path / "data" / "ood_val", {"rocket": skdata.rocket()}, 6)
    random_crop_tree(tmp_path / "data" / "ood_test", {"brick": skdata.brick()}, 8)
    spec = tmp_path / "bench.toml"
    spec.write_text(
        '[transform]\nresize = 16\ncrop = 16\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n'
        + "".join(f'\n[[split]]\nname = "{n}"\nusage = "{u}"\nsource = {{ imagefolder = '
                  f'"data/{d}" }}\n' for n, u, d in (("id/train", "train", "train"),
                                                     ("id/val", "val", "val"),
                                                     ("id/test", "test", "test"),
                                                     ("ood/far/rocket_val", "val", "ood_val"),
                                                     ("ood/far/brick", "test", "ood_test"))))
    return spec
