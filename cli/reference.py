"""The CLI reference page (docs/cli.md), generated from the typer app so that it cannot drift:
every command and subcommand with its help text, its arguments and every option (names,
type, default, help). `python -m cli.reference docs/cli.md` writes the page;
`python -m cli.reference --check docs/cli.md` exits 1 when the committed page differs
(tests/test_docs.py runs the check)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

HEADER = """# featstore command-line reference

Generated from the typer app by `python -m cli.reference docs/cli.md`; do not edit by hand
(tests/test_docs.py fails when this page and the app disagree). Every command also takes the
global options, before or after the command: `--json` (one JSON document on stdout),
`-q`/`--quiet` (no tables, progress or logs: only errors and the library's warnings; log level
WARNING), `-v`/`--verbose` (the library's debug logs too: log level DEBUG; the default is
INFO) and `--debug` (the traceback of an error); exit codes: 0 ok, 1 failure (missing or
corrupt input, a failed run), 2 bad command line, 130 interrupted.
"""


def _default(p: Any) -> str:
    if p.required:
        return "required"
    d = p.default
    if d is None or d == () or d == []:
        return ""
    if callable(d):  # a default factory
        return ""
    if isinstance(d, bool):
        return "on" if d else "off"
    return f"`{d}`"


def _names(p: Any) -> str:
    names = [*p.opts, *getattr(p, "secondary_opts", [])]
    if p.param_type_name == "argument":
        return f"`{(p.metavar or p.name).upper()}`"
    flag = getattr(p, "is_flag", False)
    metavar = "" if flag else " " + (p.metavar or p.name.strip('_')).upper()
    return " / ".join(f"`{n}{metavar if i == 0 else ''}`" for i, n in enumerate(names))


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _command(path: str, cmd: Any) -> list[str]:
    lines = [f"## `{path}`", ""]
    help_text = (cmd.help or "").strip()
    if help_text:
        lines += [help_text, ""]
    params = [p for p in cmd.params if p.name not in ("json_", "quiet")]
    if params:
        lines += ["| argument / option | default | description |", "|---|---|---|"]
        for p in params:
            lines.append(f"| {_names(p)} | {_default(p)} | {_cell(getattr(p, 'help', ''))} |")
        lines.append("")
    return lines


def render() -> str:
    """The page, from `cli.app.app`."""
    from cli.app import app

    root = typer.main.get_command(app)
    lines = [HEADER]
    lines += ["Commands: " + ", ".join(f"`{n}`" for n in root.commands) + ".", ""]

    def walk(cmd: Any, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            if path != "featstore":
                lines.extend([f"## `{path}`", "", (cmd.help or "").strip(), ""])
            for name, sub in subs.items():
                walk(sub, f"{path} {name}")
        else:
            lines.extend(_command(path, cmd))

    walk(root, "featstore")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    if len(paths) != 1:
        print("usage: python -m cli.reference [--check] docs/cli.md", file=sys.stderr)
        return 2
    target, text = Path(paths[0]), render()
    if check:
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is out of date: run `python -m cli.reference {target}`",
                  file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
