"""Post-hoc OOD scorers, metrics and sweeps over featstore stores (torch-free).

One module per method lives in `scorers/methods/`; `scorers.registry` discovers them (every
`Scorer` subclass with a `name` is registered once). `get_scorer(name, **params)` builds one;
`list_scorers()` describes all of them (name, needs, default params, default grid, paper).
These, `REGISTRY` and the one scorer-name check (`check_scorers`, `unknown_scorer`) are
re-exported here from `scorers.registry`, with `register` / `unregister` / `resolve` for
scorers of your own (README "Write your own scorer").
"""

from __future__ import annotations

from .base import Scorer
from .registry import (
    REGISTRY,
    check_scorers,
    get_scorer,
    list_scorers,
    register,
    resolve,
    unknown_scorer,
    unregister,
)

__all__ = ["Scorer", "REGISTRY", "check_scorers", "get_scorer", "list_scorers", "register",
           "resolve", "unknown_scorer", "unregister"]
