"""User-facing errors: one line saying what was wrong and what to do.

`FeatstoreError` is a failure (exit code 1 in the CLI); `UsageError` is bad input from the user
(exit code 2). Both carry a message meant to be printed as is, without a traceback.
"""

from __future__ import annotations


class FeatstoreError(Exception):
    """A failure the user can act on; the message is one line."""

    exit_code = 1


class UsageError(FeatstoreError, ValueError):
    """Bad input (a path, a split name, a parameter); also a ValueError for API callers."""

    exit_code = 2
