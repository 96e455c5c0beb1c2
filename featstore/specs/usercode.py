"""The one rule for importing a user's code named as `module:name` (`--model mymodels:build`,
`--method mymodule:CosMean`, `model = ...` and `scorer = ...` in experiment files): the module
is imported as Python imports it from the working directory — the directory a command runs in
is put on `sys.path` (first, as `python -m` does) — so a file `mymodule.py` next to the user
is found without `PYTHONPATH=.`, for models and scorers alike.

Errors: a module that is not there is a UsageError (the name on the command line is wrong);
a module that is there but fails while importing (its own missing dependency, an exception at
import time) is an InputError naming it and the exception's first line.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from featstore.errors import InputError, UsageError


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def import_user_module(module_name: str) -> ModuleType:
    """Import `module_name` by the module docstring's rule; UsageError when it is not found,
    InputError when it raises while importing."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        parts = module_name.split(".")
        if missing is None or missing in {".".join(parts[:i]) for i in
                                          range(1, len(parts) + 1)}:
            raise UsageError(f"cannot import module {module_name!r} ({_first_line(exc)}); "
                             "is it in the working directory or on PYTHONPATH?") from None
        raise InputError(f"importing {module_name!r} raised {type(exc).__name__}: "
                         f"{_first_line(exc)}") from None
    except Exception as exc:  # the user's module failed while importing: name it
        raise InputError(f"importing {module_name!r} raised {type(exc).__name__}: "
                         f"{_first_line(exc)}") from None
