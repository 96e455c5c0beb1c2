"""`[LABEL=]PATH` command-line items: one dataset (a spec, a store, a results file) per item,
LABEL naming its rows (and, for `protocol ten-methods`, its folder).

The item is split at its first `=`: `LABEL=PATH`, or `PATH` alone. Without a label, the
label is the dataset's name, `default_label`: the last component of the dataset's path less a
`.toml` extension (`specs/UCM.toml` -> `UCM`, the store `stores/T40` -> `T40`). The dataset's
path is the PATH given (`protocol ten-methods --spec`, `protocol facets-table`), or, for
finished results (`featstore table`), the OSR data or the benchmark spec the results name.

Refused, with a one-line UsageError naming the argument and the item: an empty label
(`=PATH`, `=`), an empty path (`LABEL=`), a label holding `/` (a PATH holding `=` needs
`LABEL=` in front of it), a path whose default label is empty (`.`, `/`), and a label used
twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from featstore.errors import UsageError

TOML_SUFFIX = ".toml"


@dataclass(frozen=True)
class LabelledItem:
    """One `[LABEL=]PATH` item: `label` None where the item gave none; `item` as given."""

    label: str | None
    path: str
    item: str


def default_label(path: str | Path) -> str:
    """A dataset's default label: the last component of its path less a `.toml` extension
    (empty for `.`, `/` and other paths without a name)."""
    name = Path(path).name
    return name[:-len(TOML_SUFFIX)] if name.endswith(TOML_SUFFIX) else name


def split_item(item: str, what: str) -> LabelledItem:
    """`LABEL=PATH` or `PATH` -> LabelledItem; `what` names the argument in errors."""
    label, eq, path = item.partition("=")
    if not eq:
        label, path = "", item
    if eq and not label:
        raise UsageError(f"{what} {item!r}: the label before '=' is empty (give LABEL=PATH "
                         "or PATH)")
    if not path:
        raise UsageError(f"{what} {item!r}: the path is empty (give LABEL=PATH or PATH)")
    if "/" in label:
        raise UsageError(f"{what} {item!r}: label {label!r} holds '/' (a PATH holding '=' "
                         "needs LABEL= in front of it)")
    return LabelledItem(label or None, path, item)


def check_unique(labels: Iterable[tuple[str, str]], what: str) -> None:
    """UsageError for the first label used twice; `labels`: (label, the item it came from)."""
    seen: set[str] = set()
    for label, item in labels:
        if not label:
            raise UsageError(f"{what} {item!r}: no default label for this path; name it "
                             "LABEL=PATH")
        if label in seen:
            raise UsageError(f"{what} {item!r}: label {label!r} is used twice; name them "
                             "LABEL=PATH")
        seen.add(label)


def labelled_paths(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    """[(label, path)] of `[LABEL=]PATH` items, the label defaulting to `default_label(PATH)`;
    the module docstring's errors."""
    parsed = [split_item(item, what) for item in items]
    pairs = [(p.label or default_label(p.path), p.path, p.item) for p in parsed]
    check_unique([(label, item) for label, _, item in pairs], what)
    return [(label, path) for label, path, _ in pairs]


__all__ = ["LabelledItem", "check_unique", "default_label", "labelled_paths", "split_item"]
