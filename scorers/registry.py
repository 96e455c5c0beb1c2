"""The one scorer registry: every `Scorer` subclass with a `name` in `scorers/methods/`.

Discovery imports each module of the `scorers.methods` package (one module per method, no
other module lives there, so no exclusion list is needed) and registers each `Scorer`
subclass defined in it that has a non-empty `name`; a name registered twice is an error.
The scorer modules never import this module, so the registry is never read while it is
being built (the layer test, tests/test_layers.py, fails on such a cycle).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any

from featstore.errors import FeatstoreError, UsageError

from . import methods
from .base import Scorer


def discover() -> dict[str, type[Scorer]]:
    """name -> class for every named `Scorer` subclass defined in a `scorers.methods` module,
    sorted by name."""
    registry: dict[str, type[Scorer]] = {}
    for info in sorted(pkgutil.iter_modules(methods.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{methods.__name__}.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Scorer) and obj is not Scorer
                    and obj.name and obj.__module__ == module.__name__):
                if obj.name in registry:
                    raise RuntimeError(f"scorer name {obj.name!r} registered twice")
                registry[obj.name] = obj
    return dict(sorted(registry.items()))


REGISTRY: dict[str, type[Scorer]] = discover()


def unknown_scorer(name: str, what: str | None = None) -> str:
    """The one message for a name that is not a registered scorer: `[what: ]unknown scorer
    'vimm' (valid: ash, confbranch, ...); did you mean 'vim'?` (the hint when one is close)."""
    close = difflib.get_close_matches(str(name), list(REGISTRY), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    prefix = f"{what}: " if what else ""
    return f"{prefix}unknown scorer {name!r} (valid: {', '.join(REGISTRY)}){hint}"


def check_scorers(names: str | Iterable[str], what: str | None = None,
                  error: type[FeatstoreError] = UsageError) -> list[str]:
    """The one scorer-name check: the names as a list, or `error` (UsageError: exit 2;
    InputError for a name read from a file) with `unknown_scorer`'s message for the first
    one not registered."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in REGISTRY:
            raise error(unknown_scorer(name, what))
    return names


def get_scorer(name: str, **params: Any) -> Scorer:
    """Build a registered scorer; unknown name or parameter -> ValueError naming valid ones."""
    check_scorers([name])
    return REGISTRY[name](**params)


def list_scorers() -> list[dict[str, Any]]:
    """One dict per scorer: name, needs, defaults, grid, paper."""
    return [
        {"name": cls.name, "needs": list(cls.needs), "defaults": dict(cls.defaults),
         "grid": {k: list(v) for k, v in cls.grid.items()}, "paper": cls.paper}
        for cls in REGISTRY.values()
    ]
