"""A store's summary as plain data: what `featstore info`, `extract`, `import`, the demo and
the mini-Gbench print (one row per split: role, group, usage, completeness, rows, dims,
dtype, extras, size on disk, skipped images; the hooked layers; the ID accuracy checks of
`featstore.store.sanity` on id/test and id/val) and put in their JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from featstore.store.interfaces import StoreLike
from featstore.store.sanity import id_checks

if TYPE_CHECKING:
    from featstore.store.store import Store


def human_bytes(n: float) -> str:
    """`512 B`, `1.5 KiB`, `3.2 GiB` (powers of 1024, one decimal above bytes)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def split_summary(store: StoreLike, name: str, entry: dict[str, Any]) -> dict[str, Any]:
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


def layers(model: dict[str, Any], has_head: bool) -> dict[str, Any]:
    """{"feature", "head", "has_head"}: the layer whose input (the head) or output is the
    feature and the hooked head Linear (None without one, or for imported arrays)."""
    head = model.get("head_layer")
    return {"feature": model.get("feature_layer", head), "head": head if has_head else None,
            "taken": model.get("feature_taken", "input"), "has_head": has_head}


def store_summary(store: StoreLike) -> dict[str, Any]:
    """Manifest facts plus sizes on disk: {"path", "format_version", "featstore_version",
    "model", "num_classes", "feature_dim", "layers", "id_checks", "splits": [split_summary,
    ...] in manifest order}."""
    manifest = store.manifest
    has_head = manifest.get("has_head", True) is not False
    return {"path": str(store.path), "format_version": manifest["format_version"],
            "featstore_version": manifest["featstore_version"],
            "model": manifest["model"], "num_classes": manifest["num_classes"],
            "feature_dim": manifest["feature_dim"],
            "layers": layers(manifest["model"], has_head),
            "id_checks": id_checks(store),
            "splits": [split_summary(store, name, entry)
                       for name, entry in manifest["splits"].items()]}


def verified_summary(store: Store, verify: bool = False) -> dict[str, Any]:
    """`store_summary`, and with `verify` the sha256 check of every split file
    (`Store.verify`) as "verify": {"ok", "problems"}."""
    summary = store_summary(store)
    if verify:
        problems = store.verify()
        summary["verify"] = {"ok": not problems, "problems": problems}
    return summary


__all__ = ["human_bytes", "layers", "split_summary", "store_summary", "verified_summary"]
