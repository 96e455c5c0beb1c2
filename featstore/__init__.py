"""featstore: extract once, score everything. An HDF5 feature cache for OOD detection."""

from featstore.errors import FeatstoreError, UsageError
from featstore.store.arraystore import ArrayStore
from featstore.store.store import Split, Store
from featstore.version import __version__


def __getattr__(name: str) -> object:
    """`featstore.Detector` on first use (PEP 562): the one re-export of a higher layer
    (featstore.workflows.detector, a workflow) from the package namespace (DESIGN §8; allowed by
    name in tests/test_layers.py). Importing it at the top would load the scorers with every
    `import featstore`."""
    if name == "Detector":
        from featstore.workflows.detector import (
            Detector,  # lazy: the workflow layer, only when asked for
        )

        return Detector
    raise AttributeError(f"module 'featstore' has no attribute {name!r}")


__all__ = ["ArrayStore", "Detector", "Store", "Split", "FeatstoreError", "UsageError",
           "__version__"]
