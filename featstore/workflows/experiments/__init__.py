"""Experiments: the papers' protocols on the user's own data (methods x splits x seeds, tuned
on val, mean ± std, resumable). `config` parses the experiment file, `runner` runs it,
`aggregate` computes mean ± std, `render` the tables, `presets` builds the papers'
experiments (the remote-sensing ten-method table, OSR).

The package's names are resolved on first use (PEP 562): reading a finished run back
(`unitstate`, `paper_layout`, `render`: `featstore table`, `run --status`) must not import
torch, which `config` and `runner` need for training."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Experiment": "featstore.workflows.experiments.config",
    "MethodRow": "featstore.workflows.experiments.config",
    "load_experiment": "featstore.workflows.experiments.config",
    "parse_experiment": "featstore.workflows.experiments.config",
    "run_experiment": "featstore.workflows.experiments.runner",
}


def __getattr__(name: str) -> Any:
    """The config's and runner's names, imported when first asked for."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = ["Experiment", "MethodRow", "load_experiment", "parse_experiment", "run_experiment"]
