"""User-facing errors: one line saying what was wrong and what to do.

Exit codes in the CLI (README "Command line"):
- `UsageError` (2): the command line itself is wrong — a bad option value, an unknown method,
  parameter, target or metric, a split name the store does not hold.
- `FeatstoreError` (1): the command line is fine but the run failed.
- `InputError` (1): what the command line names is missing or broken — a missing or corrupt
  store, a missing or unreadable file, bad TOML / JSON content, an empty split.

`InputError` subclasses `UsageError` (and so `ValueError`) so that API callers catching bad
input keep catching it; only its exit code differs. Every message is printed as is, without a
traceback.
"""

from __future__ import annotations


class FeatstoreError(Exception):
    """A failure the user can act on; the message is one line."""

    exit_code = 1


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
