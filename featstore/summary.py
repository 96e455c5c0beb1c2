"""A store's summary as plain data: what `featstore info`, `extract`, `import`, the demo and
the mini-Gbench print (one row per split: role, group, usage, completeness, rows, dims,
dtype, extras, size on disk, skipped images) and put in their JSON."""

from __future__ import annotations

from typing import Any


def human_bytes(n: float) -> str:
    """`512 B`, `1.5 KiB`, `3.2 GiB` (powers of 1024, one decimal above bytes)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def split_summary(store: Any, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One manifest entry plus the split file's size on disk (0 when it has no file)."""
    path = store.path / entry["file"] if entry.get("file") else None
    return {
        "name": name, "role": entry["role"], "group": entry.get("group"),
        "usage": entry.get("usage"), "complete": bool(entry.get("complete")),
        "num_rows": entry.get("num_rows"), "dims": entry.get("dims"),
        "dtype": entry.get("dtype"), "extras": entry.get("extras", {}),
        "size_bytes": path.stat().st_size if path is not None and path.is_file() else 0,
        "skipped": len(entry.get("skipped") or []),
    }


def store_summary(store: Any) -> dict[str, Any]:
    """Manifest facts plus sizes on disk: {"path", "format_version", "featstore_version",
    "model", "num_classes", "feature_dim", "splits": [split_summary, ...] in manifest order}."""
    manifest = store.manifest
    return {"path": str(store.path), "format_version": manifest["format_version"],
            "featstore_version": manifest["featstore_version"],
            "model": manifest["model"], "num_classes": manifest["num_classes"],
            "feature_dim": manifest["feature_dim"],
            "splits": [split_summary(store, name, entry)
                       for name, entry in manifest["splits"].items()]}


def verified_summary(store: Any, verify: bool = False) -> dict[str, Any]:
    """`store_summary`, and with `verify` the sha256 check of every split file
    (`Store.verify`) as "verify": {"ok", "problems"}."""
    summary = store_summary(store)
    if verify:
        problems = store.verify()
        summary["verify"] = {"ok": not problems, "problems": problems}
    return summary


__all__ = ["human_bytes", "split_summary", "store_summary", "verified_summary"]
