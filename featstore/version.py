"""featstore's version (one place; the package, store.json and checkpoints record it)."""

__version__ = "0.1.0"
