"""The terminal as a person sees it: `featstore eval --all` in a 100-column terminal (one line
per scorer, no name cut), `info` never cutting a split name, the metric convention in the
headers, `--version`, clean boolean flag names, completion of scorer and split names.

The numbers a cell shows are checked against the result JSON written by the same run,
formatted by hand here (`value±h`, h = (hi - lo) / 2, one decimal)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import cli.console as console
from featstore import Store
from featstore.version import __version__
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import structured_arrays

SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory) -> Store:
    """A small store shaped like the demo's: one near split, four far splits with long
    names (so the per-split table needs more than one 100-column block)."""
    arrays = structured_arrays(**SMALL)
    far = arrays["splits"].pop("ood/far/faint")
    for name in ("photos_of_everyday_scenes", "textures_and_gravel_patches",
                 "faces_labelled_in_the_wild", "gaussian_noise_images"):
        arrays["splits"][f"ood/far/{name}"] = dict(far)
    path = tmp_path_factory.mktemp("terminal") / "store"
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


@pytest.fixture
def columns(monkeypatch):
    """Set the width of the stdout console, as a terminal of that many columns would."""
    def set_width(n: int) -> None:
        monkeypatch.setattr(console.out, "width", n)
    return set_width


def test_eval_all_fits_100_columns_one_line_per_scorer(capsys, demo_like, columns, tmp_path):
    columns(100)
    out_json = tmp_path / "r.json"
    code, out, err = run(capsys, "eval", demo_like.path, "--all", "--boot", "100",
                         "--out", out_json)
    assert code == 0, err
    result = json.loads(out_json.read_text())
    names = list(result["methods"])
    assert len(names) >= 15  # the registry's scorers that run on features + logits
    lines = out.splitlines()
    too_long = [ln for ln in lines if len(ln) > 100]
    assert not too_long, too_long
    assert "…" not in out  # rich's ellipsis: nothing cut
    # the group table: from its title to the convention line, one row per scorer, in order
    start = next(i for i, ln in enumerate(lines) if ln.startswith("OOD detection vs"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("all in %"))
    rows = [ln for ln in lines[start:end] if "│" in ln]
    assert [r.split()[0] for r in rows] == names
    for row, name in zip(rows, names, strict=True):
        g = result["methods"][name]["groups"]
        lo, hi = g["near"]["auroc_ci"]
        v, h = g["near"]["auroc"], (hi - lo) / 2  # ±h, or [lo, hi] where lopsided (> h / 4
        lopsided = abs(v - (lo + hi) / 2) > h / 4 and f"{h:.1f}" != "0.0"  # off the centre)
        want = f"{v:.1f} [{lo:.1f}, {hi:.1f}]" if lopsided else f"{v:.1f}±{h:.1f}"
        assert row.split("│")[1].strip() == want, (name, row)
    # the convention is stated, and every split appears in the per-split blocks
    assert "FPR95↓ = FPR at 95% TPR, ID positive" in out
    for split in result["ood_splits"]:
        group, rest = split.removeprefix("ood/").split("/", 1)
        assert rest in out, split
    # each scorer is one line in every per-split block too
    blocks = out.split("per split")[1]
    for name in names:
        per_block = [ln for ln in blocks.splitlines() if ln.split() and ln.split()[0] == name]
        assert len(per_block) >= 2, name  # 5 splits of up to 30 columns: two blocks or more


def test_eval_wide_shows_every_column_with_bounds(capsys, demo_like, columns):
    columns(100)
    code, out, err = run(capsys, "eval", demo_like.path, "--method", "msp", "--method",
                         "energy", "--boot", "50", "--wide")
    assert code == 0, err
    assert "fit+score" in out and "AUPR-IN" in out
    msp = next(ln for ln in out.splitlines() if ln.startswith(" msp "))
    assert " [" in msp and "]" in msp and len(msp) > 100  # [lo, hi] bounds, not fitted


def test_info_never_cuts_a_split_name(capsys, tmp_path, columns):
    columns(50)
    arrays = structured_arrays(**SMALL)
    long = "ood/far/a_rather_long_dataset_name_that_is_the_key"
    arrays["splits"][long] = arrays["splits"].pop("ood/far/faint")
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    code, out, err = run(capsys, "info", tmp_path / "s")
    assert code == 0, err
    assert any(ln.split() and ln.split()[0] == long for ln in out.splitlines()), out
    assert "hidden to fit the terminal" in out  # the columns that did not fit are named
    assert "extras" not in out and "complete" not in out  # empty / all-yes columns hidden


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"featstore {__version__}"


def _options() -> list[tuple[str, object]]:
    from cli.app import app

    found: list[tuple[str, object]] = []

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")
        for p in getattr(cmd, "params", []):
            found.append((path, p))

    walk(typer.main.get_command(app), "featstore")
    return found


def test_boolean_flags_have_clean_names():
    """No `--no-no-x`, and a flag that is off by default has no `--no-x` twin: only flags
    whose default is on (or unset) come as a pair."""
    for path, p in _options():
        names = [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
        assert not [n for n in names if n.startswith("--no-no-")], (path, names)
        if getattr(p, "is_flag", False) and p.secondary_opts:
            assert p.default is not False, (path, names)


def _complete(words: str, cword: int) -> list[str]:
    """What bash completion offers, through the installed console script run from bash."""
    exe = str(Path(sys.executable).with_name("featstore"))
    env = {**os.environ, "SHELL": "/bin/bash", "_FEATSTORE_COMPLETE": "complete_bash",
           "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = subprocess.run(["bash", "-c", f"{shlex.quote(exe)}; exit $?"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_completion_of_scorer_and_split_names(demo_like):
    assert _complete("featstore eval STORE --method kn", 4) == ["knn"]
    got = _complete(f"featstore score {demo_like.path} --split ood/far/", 4)
    assert got == [s for s in demo_like.splits() if s.startswith("ood/far/")]
