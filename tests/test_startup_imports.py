"""The small commands import only what they need (issue 47: `featstore table` and `run --status`
took 20+ s importing torch and torchvision to read JSON). Each command runs in a fresh
interpreter, as the console script runs it, and the test reads which heavy packages it left in
sys.modules. Reference: the packages each command's work needs (reading JSON needs none of
them; scoring needs Numba and SciPy, never torch: DESIGN §1). Their wall times are measured in
benchmarks/bench_startup.py, not asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.stores import class_direction_store

HEAVY = ("torch", "torchvision", "sklearn", "matplotlib", "faiss", "numba", "scipy")
PROBE = (
    "import sys\nfrom cli.app import main\nsys.argv = ['featstore', *sys.argv[1:]]\n"
    "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
    f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A small store and a finished `featstore run` over it (an experiment on the existing
    store: nothing trains, so the runner writes no unit plan; the plan an executor writes is
    added with the runner's own writer, for `run --status`)."""
    from featstore.workflows.experiments import load_experiment, run_experiment, unitstate

    folder = tmp_path_factory.mktemp("startup")
    class_direction_store(folder / "store", {"id/train": 60, "id/test": 30,
                                             "ood/far/noise": 30})
    exp = folder / "exp.toml"
    exp.write_text('name = "startup"\n[data]\nstores = ["store"]\n'
                   '[[method]]\nname = "MSP"\nscorer = "msp"\n')
    run_experiment(load_experiment(exp), folder / "run")
    unitstate.write_plan(folder / "run", "local", [{"id": "u0", "label": "MSP", "key": "k0"}])
    return folder / "store", folder / "run"


def heavy_imports(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("HEAVY=")]
    return set(filter(None, line.removeprefix("HEAVY=").split(",")))


def test_reading_a_finished_run_imports_no_heavy_package(finished):
    _, run = finished
    assert heavy_imports("table", str(run)) == set()
    assert heavy_imports("run", "--status", str(run)) == set()


def test_scoring_imports_no_torch(finished):
    store, _ = finished
    got = heavy_imports("eval", str(store), "--method", "msp", "--no-cache", "--ci", "0")
    assert not got & {"torch", "torchvision", "matplotlib", "faiss", "sklearn"}, got
