"""Experiments: the papers' protocols on the user's own data (methods x splits x seeds, tuned
on val, mean ± std, resumable). `config` parses the experiment file, `runner` runs it,
`aggregate` computes mean ± std, `render` the tables, `presets` builds the papers'
experiments (the remote-sensing ten-method table, OSR)."""

from featstore.workflows.experiments.config import (
    Experiment,
    MethodRow,
    load_experiment,
    parse_experiment,
)
from featstore.workflows.experiments.runner import run_experiment

__all__ = ["Experiment", "MethodRow", "load_experiment", "parse_experiment", "run_experiment"]
