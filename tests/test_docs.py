"""README.md and docs/ stay true: the CLI reference (docs/cli.md) equals the page generated
from the typer app, every Python block of README.md and docs/*.md runs (from an empty folder
holding a small demo-shaped store at runs/demo/store), and every `featstore ...` line of a
shell block names a real command and only options that command has.

A block that cannot run here is marked just above it with `<!-- not run: REASON -->` (e.g. it
needs a GPU or a dataset that is not bundled); the reason is the skip message. A block that
states its output in `# prints: TEXT` comments (one per printed line, in order) must print
exactly those lines: the numbers the text around it explains are the numbers it prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from cli.reference import render
from featstore import Store
from tests.helpers.stores import structured_arrays

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^\n]*?) -->\s*\n)?"
                   r"```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)


def blocks(lang: str) -> list[tuple[str, str, str | None]]:
    found = []
    for page in PAGES:
        for i, m in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8"))):
            if m.group("lang") == lang:
                found.append((f"{page.relative_to(ROOT)}#{i}", m.group("code"), m.group("why")))
    return found


def test_cli_reference_matches_the_app():
    page = ROOT / "docs" / "cli.md"
    assert page.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is out of date: run `python -m cli.reference docs/cli.md`")


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> Path:
    """An empty folder with a small store at runs/demo/store whose split names are the
    demo's (near digits, far photos / textures / faces / noise)."""
    folder = tmp_path_factory.mktemp("docs")
    arrays = structured_arrays(num_classes=3, dim=8, n_train=90, n_val=30, n_test=60,
                               n_ood=40)
    splits = arrays["splits"]
    near, far = splits.pop("ood/near/blend"), splits.pop("ood/far/faint")
    splits["ood/near/digits6to9"] = near
    splits["ood/near/digits6to9_val"] = splits.pop("ood/near/blend_val")
    for name in ("photos", "textures", "faces", "noise"):
        splits[f"ood/far/{name}"] = dict(far)
    Store.from_arrays(folder / "runs" / "demo" / "store", head=arrays["head"], splits=splits)
    return folder


@pytest.mark.parametrize(("where", "code", "why"), blocks("python"),
                         ids=[b[0] for b in blocks("python")])
def test_python_block_runs(where, code, why, demo_folder, monkeypatch, capsys):
    if why:
        pytest.skip(f"{where}: {why}")
    monkeypatch.chdir(demo_folder)
    capsys.readouterr()
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})  # noqa: S102
    stated = PRINTS.findall(code)
    if stated:
        assert capsys.readouterr().out.splitlines() == stated, (
            f"{where}: its `# prints:` comments no longer match what it prints")


PRINTS = re.compile(r"#\s*prints:\s*(.*?)\s*$", re.M)


def test_the_quickstart_states_what_it_prints():
    """The README's and api.md's first Python blocks (the first code a user runs) state their
    output, so the check above holds them to it (issue 47: they printed AUROC 45 and 0.0)."""
    firsts = {where.split("#")[0]: code for where, code, _ in reversed(blocks("python"))}
    for page in ("README.md", "docs/api.md"):
        assert len(PRINTS.findall(firsts[page])) >= 2, page


def _commands() -> dict[str, set[str]]:
    """'info' / 'gscore fit' -> the option names it takes."""
    from cli.app import app

    found: dict[str, set[str]] = {}

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}".strip())
        else:
            found[path] = {n for p in cmd.params for n in (*p.opts, *p.secondary_opts)}

    root = typer.main.get_command(app)
    walk(root, "")
    found[""] = {n for p in root.params for n in (*p.opts, *p.secondary_opts)} | {"--help"}
    return found


def test_shell_lines_name_real_commands_and_options():
    commands = _commands()
    checked = 0
    for lang in ("bash", "sh", "console", ""):
        for where, code, _ in blocks(lang):
            for line in code.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip().removeprefix("$ ")
                if not line.startswith("featstore ") or re.search(r"\[|\||\.\.\.", line):
                    continue  # not an invocation, or a synopsis ([optional], a|b, ...)
                try:
                    words = shlex.split(line)[1:]
                except ValueError:
                    continue
                words = [w for w in words if w not in ("--json", "--quiet", "-q", "--debug")]
                if not words or words[0].startswith("-"):
                    assert all(w in commands[""] for w in words if w.startswith("--")), line
                    continue
                name = words[0] if words[0] in commands else " ".join(words[:2])
                assert name in commands, f"{where}: {line!r}: no command {name!r}"
                for w in words:
                    opt = w.split("=")[0]
                    if opt.startswith("--"):
                        assert opt in commands[name] | {"--help"} | commands[""], (
                            f"{where}: {line!r}: `{name}` has no option {opt}")
                checked += 1
    assert checked >= 10


def test_readme_speaks_to_users_not_to_the_tracker():
    """The README names no issue number and no path outside the repository (issue 47: it
    named 'issue 19' and '../shared/DESIGN.md'); its layout line names the packages'
    sub-packages as they are on disk."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\bissues? #?\d+|(?<![\w/])#\d{1,3}\b", text, re.I)
    assert "../shared" not in text
    for package in sorted(p.name for p in (ROOT / "featstore").iterdir()
                          if p.is_dir() and (p / "__init__.py").is_file()):
        assert f"`{package}/`" in text, package
