"""User-facing errors: one line saying what was wrong and what to do, the latter as data.

Exit codes in the CLI (README "Command line"):
- `UsageError` (2): the command line itself is wrong — a bad option value, an unknown method,
  parameter, target or metric, a split name the store does not hold.
- `FeatstoreError` (1): the command line is fine but the run failed.
- `InputError` (1): what the command line names is missing or broken — a missing or corrupt
  store, a missing or unreadable file, bad TOML / JSON content, an empty split.

`InputError` subclasses `UsageError` (and so `ValueError`) so that API callers catching bad
input keep catching it; only its exit code differs. Every message is printed as is, without a
traceback.

What to change is data on the error, not words: `param` / `value` (the parameter whose value
is at fault, by its library name), `change` (the parameters to pass instead, e.g.
`{"overwrite": True}`) with `effect` (what that does), and `need` / `how` (a store array or
split a scorer needs and how to produce it). `str(exc)` words them with the `Wording` in use:
the library's own (Python keyword arguments: `out='runs/s': ...`, `pass overwrite=True to
replace it`) unless an interface installs another for its run (`use_wording`; the CLI's names
options: `--out 'runs/s': ...`, `pass --overwrite to replace it`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any


def shown(value: Any) -> str:
    """A value as an error shows it: repr, paths as their string's repr."""
    return repr(str(value)) if isinstance(value, PurePath) else repr(value)


class Wording:
    """How errors name parameters and produced arrays: as a Python caller writes them (the
    library's wording). An interface subclasses it to use its own names (cli.wording)."""

    def value(self, param: str, value: Any) -> str:
        """A parameter holding the value at fault: `out='runs/s'`."""
        return f"{param}={shown(value)}"

    def setting(self, param: str, value: Any) -> str:
        """A parameter setting to pass: `overwrite=True`."""
        return f"{param}={value!r}"

    def how_to(self, need: str, how: str) -> str:
        """How to produce `need` (a scorer need such as `extra:mc_logits`); `how` is the
        library's own sentence."""
        return how


LIBRARY_WORDING = Wording()
_wording: list[Wording] = [LIBRARY_WORDING]


def wording() -> Wording:
    """The wording in use (the library's unless `use_wording` installed another)."""
    return _wording[-1]


@contextmanager
def use_wording(words: Wording) -> Iterator[Wording]:
    """Word every error (and every how-to sentence) with `words` inside the block (process
    wide: the CLI installs its own for the run of one command)."""
    _wording.append(words)
    try:
        yield words
    finally:
        _wording.remove(words)


class FeatstoreError(Exception):
    """A failure the user can act on; the message is one line.

    `message`: what went wrong, in no interface's words. Optional data (see the module
    docstring): `param` and `value` (the message's subject), `change` and `effect` (what to
    pass instead), `need` and `how` (what to produce)."""

    exit_code = 1

    def __init__(self, message: str = "", *, param: str | None = None, value: Any = None,
                 change: Mapping[str, Any] | None = None, effect: str = "",
                 need: str | None = None, how: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.value = value
        self.change = dict(change or {})
        self.effect = effect
        self.need = need
        self.how = how

    def worded(self, words: Wording) -> str:
        """The one-line message with `words`: [subject: ]message[: how-to][; pass change]."""
        text = self.message
        if self.param is not None:
            text = f"{words.value(self.param, self.value)}: {text}"
        if self.need is not None:
            text = f"{text}: {words.how_to(self.need, self.how)}"
        if self.change:
            settings = ", ".join(words.setting(k, v) for k, v in self.change.items())
            text = f"{text}; pass {settings}" + (f" {self.effect}" if self.effect else "")
        return text

    def __str__(self) -> str:
        if "message" not in self.__dict__:  # a subclass that bypassed __init__
            return super().__str__()
        return self.worded(wording())


class UsageError(FeatstoreError, ValueError):
    """Bad input (a path, a split name, a parameter); also a ValueError for API callers."""

    exit_code = 2


class InputError(UsageError):
    """A store or file named by the user is missing, unreadable or malformed (TOML/JSON
    content, an empty split): exit code 1. Still a UsageError / ValueError for API callers."""

    exit_code = 1


class NoHeadError(InputError):
    """The store holds no classifier head (W, b) and the caller needs one (a scorer that
    needs `head` is skipped with this message in a run over many scorers)."""


class FeatstoreWarning(UserWarning):
    """Something the user should know that does not stop the run (e.g. a network extracted
    with random weights); the CLI prints it as one `warning: ...` line on stderr."""
