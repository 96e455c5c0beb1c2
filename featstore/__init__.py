"""featstore: extract once, score everything. An HDF5 feature cache for OOD detection."""

from .arraystore import ArrayStore
from .errors import FeatstoreError, UsageError
from .store import Split, Store
from .version import __version__


def __getattr__(name: str) -> object:
    """`featstore.Detector` (featstore.detector, a workflow above the scorers) on first use:
    importing it here would load the scorers with every `import featstore` and import
    upward from the store core (DESIGN §8)."""
    if name == "Detector":
        import importlib

        return importlib.import_module("featstore.detector").Detector
    raise AttributeError(f"module 'featstore' has no attribute {name!r}")


__all__ = ["ArrayStore", "Detector", "Store", "Split", "FeatstoreError", "UsageError",
           "__version__"]
