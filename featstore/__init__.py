"""featstore: extract once, score everything. An HDF5 feature cache for OOD detection."""

__version__ = "0.1.0"

from .errors import FeatstoreError, UsageError  # noqa: E402
from .store import Split, Store  # noqa: E402

__all__ = ["Store", "Split", "FeatstoreError", "UsageError", "__version__"]
