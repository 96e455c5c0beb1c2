"""Fault injection, resource limits and user code (issue 36 items 17, 18, 19, 21): a
`module:callable` that raises or feeds its head too few rows, FAISS under `ulimit -v`, a seed
count of 1e11, the exit codes of bad model files, matplotlib with an unusable HOME. Real
processes under real rlimits, real modules written to tmp_path, the tiny CNN. References: the
README's exit-code table (1: what the command names is missing or broken; 2: the command line
is wrong) and the exact error fragments written by hand."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from featstore import Store
from tests.helpers.cli import last_line_error as _one_line
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
TRANSFORM = ("[transform]\nresize = 16\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
             "std = [0.25, 0.25, 0.25]\n")
NOISE = '\n[[split]]\nname = "ood/far/n"\nsource = { builtin = "noise", count = 8 }\n'

BAD_MODELS = '''
import torch
from torch import nn


def raises():
    raise RuntimeError("constructor exploded")


class Few(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3))[:1])      # one row whatever the batch


class Crash(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3)))[:, [7]]  # IndexError on the head's output
'''


def _id_split(tmp_path: Path) -> str:
    """An id/test ImageFolder split, one folder per class of the 3-class models (extraction
    needs an ID split)."""
    from PIL import Image

    for cls in "abc":
        (tmp_path / "idimgs" / cls).mkdir(parents=True)
        Image.new("RGB", (20, 20)).save(tmp_path / "idimgs" / cls / "ok.png")
    return (f'\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = '
            f'"{tmp_path / "idimgs"}" }}\n')


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent)
    env["OMP_NUM_THREADS"] = "1"
    return env



@pytest.fixture
def bad_models(tmp_path, monkeypatch):
    (tmp_path / "badmods.py").write_text(BAD_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(HERE.parent))
    (tmp_path / "s.toml").write_text(TRANSFORM + NOISE + _id_split(tmp_path))
    return tmp_path


def _extract(capsys, where: Path, model: str, *extra):
    return run_cli(capsys, "extract", "--model", model, "--spec", where / "s.toml", "--out",
                   where / "o", "--device", "cpu", "--workers", "0", *extra)


def test_callable_that_raises_is_named(bad_models, capsys):
    """Issue 36 item 17: a module:callable that raises gave `unexpected RuntimeError`."""
    _one_line(_extract(capsys, bad_models, "badmods:raises"), 1,
              "--model 'badmods:raises'", "raises() raised RuntimeError", "constructor exploded")


def test_model_whose_head_sees_too_few_rows_is_named(bad_models, capsys):
    """Issue 36 item 17: a network feeding its head fewer rows than images gave `unexpected
    IndexError`, without naming the model."""
    torch.save(__import__("badmods").Few().state_dict(), bad_models / "few.pt")
    _one_line(_extract(capsys, bad_models, "badmods:Few", "--weights", bad_models / "few.pt"),
              1, "model 'badmods:Few'", "1 rows for 8 images")


def test_model_forward_that_raises_is_named(bad_models, capsys):
    torch.save(__import__("badmods").Crash().state_dict(), bad_models / "c.pt")
    _one_line(_extract(capsys, bad_models, "badmods:Crash", "--weights", bad_models / "c.pt"),
              1, "model 'badmods:Crash'", "raised IndexError")


def test_bad_model_files_are_exit_1(bad_models, capsys):
    """Issue 36 item 21: weights with missing keys and a garbage TorchScript file exited 2
    (the README's table: a missing or broken file named by the command is 1, as a shape
    mismatch already was)."""
    import torchvision

    state = torchvision.models.resnet18(num_classes=10).state_dict()
    del state["fc.bias"]
    torch.save(state, bad_models / "w.pth")
    _one_line(_extract(capsys, bad_models, "resnet18", "--weights", bad_models / "w.pth"), 1,
              "--weights", "missing keys", "fc.bias")
    (bad_models / "m.ts").write_bytes(b"not a torchscript archive")
    _one_line(_extract(capsys, bad_models, str(bad_models / "m.ts")), 1, "not a TorchScript")


def test_experiment_without_an_architecture_is_exit_1(tmp_path, capsys):
    """Issue 36 item 21: an experiment file naming no `arch` (for a spec that is not the
    digits) exited 2; the file's content is at fault: 1."""
    (tmp_path / "bench.toml").write_text(TRANSFORM + NOISE + _id_split(tmp_path))
    (tmp_path / "e.toml").write_text('name = "e"\n[data]\nspec = "bench.toml"\n'
                                      '[[method]]\nscorer = "msp"\n')
    _one_line(run_cli(capsys, "run", tmp_path / "e.toml", "--out", tmp_path / "o"), 1,
              "name the architecture")


def test_huge_seed_count_is_refused_before_any_work(tmp_path, capsys):
    """Issue 36 item 19: `seeds = 100000000000` gave `unexpected MemoryError`."""
    (tmp_path / "e.toml").write_text('seeds = 100000000000\n[data]\nosr = { data = "digits" }'
                                      '\n[[method]]\nscorer = "msp"\n')
    _one_line(run_cli(capsys, "run", tmp_path / "e.toml", "--out", tmp_path / "o"), 1,
              "seeds = 100000000000", "[1, 10000]")
    assert not (tmp_path / "o").exists()


def test_knn_under_a_memory_limit_runs_or_says_what_to_do(tmp_path):
    """Issue 36 item 18: `ulimit -v 1100000; featstore score S --method knn` gave `unexpected
    RuntimeError: faiss-gpu: failed to load libcublas.so.12` (msp worked). With a faiss-gpu
    wheel whose CUDA libraries do not fit the limit the error says what to do (exit 1); with a
    FAISS that loads, knn scores (exit 0). Either way no `unexpected`; msp works."""
    arrays = structured_arrays(num_classes=3, dim=8, n_train=40, n_val=20, n_test=20, n_ood=20)
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_100_000 * 1024, resource.RLIM_INFINITY))

    def score(method: str) -> subprocess.CompletedProcess:
        code = ("import sys; from cli.app import main; "
                f"main(['score', {str(tmp_path / 's')!r}, '--method', {method!r}, "
                "'--no-cache'])")
        return subprocess.run([sys.executable, "-c", code], env=_env(), preexec_fn=cap,
                              capture_output=True, text=True, timeout=300)

    assert score("msp").returncode == 0
    done = score("knn")
    assert "unexpected" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    if done.returncode != 0:
        assert done.returncode == 1
        assert "FAISS (nearest-neighbour search) cannot be loaded" in done.stderr
        assert "pip install faiss-cpu" in done.stderr and "raise the limit" in done.stderr
        assert 'README "CPU-only install"' in done.stderr   # issue 48 item 6: what to install


def test_report_with_an_unusable_home_prints_no_matplotlib_warnings(tmp_path):
    """Issue 36 item 21: `report -q` with an unwritable HOME printed two matplotlib warnings
    (HOME=/dev/null: its config directory cannot be created, even by root)."""
    env = {**_env(), "HOME": "/dev/null", "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""}
    env.pop("MPLCONFIGDIR", None)
    code = textwrap.dedent("""
        import featstore.workflows.report.plots as plots, matplotlib, os
        print(os.environ["MPLCONFIGDIR"])
    """)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert "featstore-mpl-" in done.stdout
    assert not Path(done.stdout.strip()).exists()   # removed at exit
