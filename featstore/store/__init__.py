"""The store: format, read, write, verify, lock (torch-free; DESIGN §2).

`Store` and `Split` (featstore.store.store) are re-exported here and from `featstore`.
"""

from featstore.store.store import Split, Store

__all__ = ["Split", "Store"]
