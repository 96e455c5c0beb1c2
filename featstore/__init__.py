"""featstore: extract once, score everything. An HDF5 feature cache for OOD detection."""

from .arraystore import ArrayStore
from .errors import FeatstoreError, UsageError
from .store import Split, Store
from .version import __version__

__all__ = ["ArrayStore", "Store", "Split", "FeatstoreError", "UsageError", "__version__"]
