"""Fault injection, runner class (issue 36): two runners on one output directory, links planted
in the output, untrusted names in generated files and on the terminal, a run where every row is
skipped, row names that share a file name. Real processes (a second `featstore run` started
while the first one runs), real files and links; references: the victim files' bytes recorded
before the fault, the exact text the escaping must produce (written by hand)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import torch

from featstore import Store
from featstore.specs.benchmark import load_spec
from featstore.store.textsafe import md_text, term_text
from featstore.training.trainer import _save_atomically
from featstore.workflows.experiments import load_experiment, run_experiment
from featstore.workflows.experiments.render import markdown_report
from featstore.workflows.experiments.runner import _slug, run_spec
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _experiment(tmp_path: Path, name: str = '"exp"', rows: str = '"MSP"') -> Path:
    """An experiment whose every run is skipped fast (its id/train rows have no labels, and
    device "tpu" could not train them anyway). `name` and
    `rows` (the row's name) are TOML literals."""
    (tmp_path / "bench.toml").write_text(
        '[[split]]\nname = "id/train"\nsource = { builtin = "noise", count = 4 }\n'
        '[[split]]\nname = "id/test"\nsource = { builtin = "noise", count = 4 }\n')
    exp = tmp_path / "exp.toml"
    exp.write_text(f'name = {name}\narch = "tests.helpers.tiny_models:TinyCNN"\nseeds = [0]\n'
                   'device = "tpu"\n[data]\nspec = "bench.toml"\n'
                   f'[[method]]\nname = {rows}\nscorer = "msp"\n')
    return exp


def test_a_second_runner_on_the_same_output_is_refused(tmp_path):
    """Issue 36 item 1: two `featstore run --out O` at once both exited 0 and the second
    overwrote the first's results.json. Here a real second process starts while the first
    holds the output: it exits 1 naming the first, and writes nothing."""
    exp_file = _experiment(tmp_path)
    out = tmp_path / "out"
    second: list[subprocess.CompletedProcess] = []

    def start_second(_record):
        second.append(subprocess.run(
            [sys.executable, "-m", "featstore", "run", str(exp_file), "--out", str(out)],
            env=_env(), capture_output=True, text=True, timeout=300))
        assert not (out / "results.json").exists()   # the second wrote nothing

    result = run_experiment(load_experiment(exp_file), out, on_run=start_second)
    (done,) = second
    assert done.returncode == 1, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: output directory")
    assert f"being written by pid {os.getpid()}" in err[0] and "unexpected" not in err[0]
    assert len(result["runs"]) == 1 and (out / "results.json").is_file()
    # the lock is released when the first runner ends: the same command runs again
    assert run_experiment(load_experiment(exp_file), out)["runs"][0]["status"] == "skipped"


def test_every_run_skipped_is_exit_1_and_results_are_still_written(tmp_path, capsys):
    """Issue 36 item 8: a run whose every row is skipped exited 0 (README: exit 1)."""
    exp_file = _experiment(tmp_path)
    code, _out, err = run_cli(capsys, "run", exp_file, "--out", tmp_path / "out")
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: experiment ") and "every run was skipped" in line
    assert "training/extraction of 'ce' failed" in line and "unexpected" not in line
    assert (tmp_path / "out" / "results.json").is_file()


def test_runner_writes_never_follow_links_planted_in_the_output(tmp_path):
    """Issue 36 item 5: runs/<split>/seed0/spec.toml and OUT/results.md were written through
    planted symlinks. The victims keep their bytes; the names become regular files."""
    exp_file = _experiment(tmp_path)
    out = tmp_path / "out"
    seed_dir = out / "runs" / "spec" / "seed0"
    seed_dir.mkdir(parents=True)
    victims = {name: tmp_path / f"victim_{name}" for name in ("spec.toml", "results.md")}
    for name, victim in victims.items():
        victim.write_bytes(b"secret " + name.encode())
    (seed_dir / "spec.toml").symlink_to(victims["spec.toml"])
    (out / "results.md").symlink_to(victims["results.md"])
    run_experiment(load_experiment(exp_file), out)
    for name, victim in victims.items():
        assert victim.read_bytes() == b"secret " + name.encode()
    for path in (seed_dir / "spec.toml", out / "results.md"):
        assert path.is_file() and not path.is_symlink()
    assert load_spec(seed_dir / "spec.toml").splits[0].name == "id/train"


def test_checkpoint_save_never_follows_links(tmp_path):
    """Issue 36 item 5: torch.save wrote to the fixed name model.pt.tmp, through a link."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "model.pt.tmp").symlink_to(victim)
    (tmp_path / "model.pt").symlink_to(victim)
    _save_atomically({"w": torch.arange(3)}, tmp_path / "model.pt")
    assert victim.read_bytes() == b"keep"
    assert not (tmp_path / "model.pt").is_symlink()
    assert torch.equal(torch.load(tmp_path / "model.pt", weights_only=True)["w"],
                       torch.arange(3))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_untrusted_names_in_generated_spec_and_markdown(tmp_path):
    """Issue 36 item 6: a two-line experiment name broke every generated spec (and could add
    splits); method names with `|`, newlines and <script> reached results.md raw."""
    exp = load_experiment(_experiment(tmp_path, name='"two\\nlines\\n[[split]]"',
                                      rows='"a|b\\n<script>"'))
    bench, comment, _ = run_spec(exp, {"seed": 0}, tmp_path, None)
    text = bench.to_toml(comment)
    spec = tmp_path / "gen.toml"
    spec.write_text(text)
    assert [s.name for s in load_spec(spec).splits] == ["id/train", "id/test"]
    assert tomllib.loads(text)   # one comment line: valid TOML
    result = run_experiment(exp, tmp_path / "out")
    md = markdown_report(result)
    assert "<script>" not in md and "&lt;script&gt;" in md and "a\\|b" in md
    assert "# two lines \\[\\[split\\]\\]" in md
    assert md_text("x\x1b[2Jy") == "x\\x1b\\[2Jy"


def test_terminal_never_gets_escape_sequences_from_a_store(tmp_path, capsys):
    """Issue 36 item 6: a model name with ANSI / OSC escapes reached the terminal raw via
    `featstore info`. Every string the CLI prints goes through term_text."""
    arrays = structured_arrays(num_classes=3, dim=4, n_train=10, n_val=6, n_test=6, n_ood=6)
    evil = "net\x1b]0;owned\x07\x1b[2J\x9b"
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"],
                      provenance={"name": evil})
    code, out, err = run_cli(capsys, "info", tmp_path / "s")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "net\\x1b]0;owned\\x07\\x1b[2J\\x9b" in out
    assert term_text("a\tb\nc\x00") == "a\tb\nc\\x00"


def test_row_names_that_share_a_slug_get_their_own_files():
    """Issue 36 item 13: rows "A/B" and "A_B" shared results/A_B.json."""
    names = ["A/B", "A_B", "A B", "A.B", ".hidden"]
    slugs = [_slug(n) for n in names]
    assert len(set(slugs)) == len(names)
    assert _slug("A_B") == "A_B" and _slug("KNN") == "KNN"
    assert all("/" not in s and not s.startswith(".") for s in slugs)
