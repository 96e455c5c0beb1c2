"""The layer views of `featstore extract --feature-layers` as the scorers that read them see
them (`mds_ensemble`, `gram`, `featurenorm`, `oodl` with `layer`): which layers a store holds
in a view group, in the order extraction named them, and the check of a named layer.

The order is the split entry's `feature_layers` in store.json (the `--feature-layers` order,
network order as users write it); a store without that record (arrays, `from_arrays`) gives
the layers in name order.
"""

from __future__ import annotations

from collections.abc import Sequence

from featstore.errors import FeatstoreError, UsageError
from featstore.store.extra_keys import layer_name, stored_layers
from featstore.store.interfaces import SplitLike, StoreLike


def layer_order(store: StoreLike, group: str, split_name: str | None = None) -> list[str]:
    """The layers of `group` in `split_name` (default: the first split that has the group),
    in the extraction's order."""
    names = [split_name] if split_name else store.splits()
    for name in names:
        if not store.has_split(name):
            continue
        split = store.split(name)
        held = stored_layers(split.extra_names(), group)
        if not held:
            continue
        entry = store.manifest.get("splits", {}).get(name, {})
        recorded = [n for n in entry.get("feature_layers") or [] if n in held]
        return recorded + [n for n in held if n not in recorded]
    return []


def parse_layers(scorer: str, param: str, value: object) -> list[str] | None:
    """`"a,b"` (or a list of names) -> ["a", "b"]; None stays None (every stored layer)."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, Sequence) or isinstance(names, bytes) or \
            not all(isinstance(n, str) and n.strip() for n in names) or not names:
        raise UsageError(f"scorer {scorer!r}: {param}={value!r} must name layers, e.g. "
                         f"'layer3' or 'layer2,layer3' (null: every stored layer)")
    return [n.strip() for n in names]


def resolve_layers(scorer: str, store: StoreLike, group: str, wanted: list[str] | None,
                   split_name: str) -> list[str]:
    """The layers to read: `wanted`, each checked to be stored in `split_name`, or every
    layer of the group there (FeatstoreError naming the need and the stored ones)."""
    held = layer_order(store, group, split_name)
    for name in wanted or []:
        if name not in held:
            raise FeatstoreError(
                f"scorer {scorer!r}: split {split_name!r} has no {group!r} view of layer "
                f"{name!r} (stored: {', '.join(held) or 'none'})",
                need=f"extra:{layer_name(group, name)}",
                how=f"extract with `ExtractOptions(feature_layers=({name!r},))`")
    if not held:
        raise FeatstoreError(f"scorer {scorer!r} needs 'extra:{group}' in split {split_name!r}",
                             need=f"extra:{group}",
                             how="extract with `ExtractOptions(feature_layers=(NAME, ...))`")
    return list(wanted) if wanted else held


def require_view(scorer: str, split: SplitLike, name: str) -> None:
    """FeatstoreError unless `split` holds extra `name` (a view the fitted layers need)."""
    if not split.has_extra(name):
        group, _, member = name.partition("/")
        raise FeatstoreError(f"scorer {scorer!r} needs 'extra:{name}' in split "
                             f"{split.name!r}", need=f"extra:{name}",
                             how=f"extract it with the same views as the fitted store "
                                 f"({group} of {member!r})")
