"""Post-hoc OOD scorers, metrics and sweeps over featstore stores (torch-free).

The registry is built from the modules of this package: every `Scorer` subclass with a
`name` is registered once. `get_scorer(name, **params)` builds one; `list_scorers()` describes
all of them (name, needs, default params, default grid, paper).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from .base import Scorer

_NOT_SCORER_MODULES = {"base", "metrics", "misclassification", "sweep", "cache", "evaluate",
                       "gscore", "knn_index", "neighbours", "adapt", "skipping", "compare",
                       "selective", "stats", "uncertainty"}


def _discover() -> dict[str, type[Scorer]]:
    registry: dict[str, type[Scorer]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _NOT_SCORER_MODULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Scorer) and obj is not Scorer
                    and obj.name and obj.__module__ == module.__name__):
                if obj.name in registry:
                    raise RuntimeError(f"scorer name {obj.name!r} registered twice")
                registry[obj.name] = obj
    return dict(sorted(registry.items()))


REGISTRY: dict[str, type[Scorer]] = _discover()


def get_scorer(name: str, **params: Any) -> Scorer:
    """Build a registered scorer; unknown name or parameter -> ValueError naming valid ones."""
    if name not in REGISTRY:
        from featstore.errors import UsageError

        raise UsageError(f"unknown scorer {name!r} (valid: {', '.join(REGISTRY)})")
    return REGISTRY[name](**params)


def list_scorers() -> list[dict[str, Any]]:
    """One dict per scorer: name, needs, defaults, grid, paper."""
    return [
        {"name": cls.name, "needs": list(cls.needs), "defaults": dict(cls.defaults),
         "grid": {k: list(v) for k, v in cls.grid.items()}, "paper": cls.paper}
        for cls in REGISTRY.values()
    ]


__all__ = ["Scorer", "REGISTRY", "get_scorer", "list_scorers"]
