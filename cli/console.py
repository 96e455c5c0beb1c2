"""Shared terminal output: rich consoles, JSON printing, progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:  # pipes and CI logs: wide enough for the tables
        console = Console(stderr=stderr, soft_wrap=True, width=160)
    return console


out = _console(stderr=False)
err = _console(stderr=True)


def print_json(obj: Any) -> None:
    """Machine output: JSON on stdout, nothing else."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


class RateColumn(ProgressColumn):
    """Items per second of a task."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} img/s" if speed else "– img/s", style="cyan")


@contextmanager
def split_progress(enabled: bool = True) -> Iterator[Any]:
    """A callback progress(split, done, total) drawing one bar per split on stderr."""
    if not enabled:
        yield None
        return
    progress = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                        RateColumn(), TimeRemainingColumn(), console=err, transient=False)
    tasks: dict[str, Any] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total, completed=0)
        progress.update(tasks[name], completed=done, total=total)

    with progress:
        yield update
