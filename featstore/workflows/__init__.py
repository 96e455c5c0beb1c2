"""Workflows: protocols, reports, experiments and the demo, over stores and scorers."""
