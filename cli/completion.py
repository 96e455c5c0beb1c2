"""Shell completion of values: scorer names (`--method`) and the split names of the store
given on the command line (`--split`). Completion never fails: an unreadable store or registry
completes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def scorer_names(incomplete: str) -> list[str]:
    """Registered scorer names that start with `incomplete` (the one registry)."""
    try:
        from scorers import REGISTRY
    except Exception:  # noqa: BLE001 - completion must not raise into the shell
        return []
    return sorted(n for n in REGISTRY if n.startswith(incomplete))


def split_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """The splits of the STORE argument already typed that start with `incomplete`."""
    # while completing, click may leave the positional STORE unparsed in ctx.args
    typed = [(ctx.params or {}).get("store"), *ctx.args]
    store = next((Path(t) for t in typed if t and Path(t).is_dir()), None)
    if store is None:
        return []
    try:
        from featstore import Store

        with Store.open(store) as st:
            names: list[Any] = st.splits()
    except Exception:  # noqa: BLE001 - completion must not raise into the shell
        return []
    return [n for n in names if n.startswith(incomplete)]
