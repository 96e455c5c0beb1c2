"""Spec models: what a benchmark, an experiment and a Gscore run are, as TOML."""
