"""ImageFolder class folders -> the head's class indices (never by folder order when that
could be wrong).

The rule, for the class folders of an ID or CSID ImageFolder split and a head of C outputs:

1. `class_map = { folder = <index> | "<class name or wnid>" }` in the spec maps a folder
   explicitly (it wins over everything below).
2. When the spec lists the head's classes (`classes = [...]`, C entries, optionally `wnids =
   [...]` beside them), every other folder maps to the class whose name or wnid it equals
   (names compared case-insensitively with ' ', '_' and '-' alike; an entry "n01440764 tench"
   carries both). A folder that matches no class, or several, is an error naming the folders
   and how to map them.
3. Without a class list, the folders map by their sorted order (torchvision's ImageFolder)
   only when there are exactly C of them: the head was trained on these folders. Any other
   count is an error that says how to map them (a class list or a class_map).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from featstore.errors import InputError

_WNID = re.compile(r"^n\d{8}$")
_HOW = ("list the head's classes in the spec (`classes = [...]`, one name per output, "
        "optionally `wnids = [...]`) so folders map by name or wnid, or map each folder with "
        "`class_map = { folder = class_index }`")


def normalize(name: str) -> str:
    """Case-folded, with runs of spaces, '_' and '-' as one space."""
    return re.sub(r"[\s_\-]+", " ", name.strip()).casefold()


def class_keys(classes: Sequence[str], wnids: Sequence[str] | None) -> list[set[str]]:
    """The names a head class answers to: its entry, each word-run of "<wnid> <name>", its
    wnid; all normalized."""
    keys: list[set[str]] = []
    for i, entry in enumerate(classes):
        k = {normalize(entry)}
        first, _, rest = entry.strip().partition(" ")
        if _WNID.match(first) and rest:
            k |= {first.casefold(), normalize(rest)}
        if wnids is not None:
            k.add(wnids[i].strip().casefold())
        keys.append(k)
    return keys


def _resolve_target(folder: str, target: Any, keys: list[set[str]] | None, num_outputs: int,
                    where: str) -> int:
    if isinstance(target, int) and not isinstance(target, bool):
        if not 0 <= target < num_outputs:
            raise InputError(f"{where}: class_map {folder!r} = {target} is outside the head's "
                             f"0..{num_outputs - 1}")
        return target
    if isinstance(target, str) and keys is not None:
        hits = [i for i, k in enumerate(keys) if normalize(target) in k]
        if len(hits) == 1:
            return hits[0]
        what = "no class" if not hits else f"{len(hits)} classes ({hits[:5]})"
        raise InputError(f"{where}: class_map {folder!r} = {target!r} names {what} of the "
                         "spec's classes; give the class index instead")
    raise InputError(f"{where}: class_map {folder!r} = {target!r}: expected a class index "
                     "(an integer)" + ("" if keys is None else " or a class name / wnid"))


def map_folders(folders: Sequence[str], num_outputs: int, *, split: str,
                classes: Sequence[str] | None = None, wnids: Sequence[str] | None = None,
                class_map: Mapping[str, Any] | None = None) -> list[int]:
    """The head class index of each folder (see the module docstring); InputError otherwise."""
    where = f"split {split!r}"
    class_map = dict(class_map or {})
    keys = class_keys(classes, wnids) if classes is not None else None
    out: list[int] = []
    unmatched: list[str] = []
    ambiguous: list[str] = []
    for folder in folders:
        if folder in class_map:
            out.append(_resolve_target(folder, class_map[folder], keys, num_outputs, where))
            continue
        if keys is None:
            out.append(-1)
            continue
        f = normalize(folder)
        hits = [i for i, k in enumerate(keys) if f in k or folder.casefold() in k]
        if len(hits) == 1:
            out.append(hits[0])
        else:
            (ambiguous if hits else unmatched).append(folder)
            out.append(-1)
    if keys is not None and (unmatched or ambiguous):
        parts = []
        if unmatched:
            parts.append(f"{len(unmatched)} class folder(s) match no class name or wnid of the "
                         f"spec's {len(keys)} classes: {', '.join(unmatched[:10])}")
        if ambiguous:
            parts.append(f"folder(s) {', '.join(ambiguous[:10])} match several classes")
        raise InputError(f"{where}: {'; '.join(parts)}; map them with "
                         "`class_map = { folder = class_index }` in the spec")
    if keys is None and -1 in out:
        if not class_map and len(folders) == num_outputs:
            return list(range(num_outputs))   # the head was trained on exactly these folders
        missing = [f for f, i in zip(folders, out, strict=True) if i < 0]
        raise InputError(f"{where} has {len(folders)} class folders ({', '.join(folders[:5])}"
                         f"{', ...' if len(folders) > 5 else ''}) but the model's head has "
                         f"{num_outputs} outputs, and the spec lists no classes"
                         + (f" (class_map leaves {', '.join(missing[:5])} unmapped)"
                            if class_map else "") + f": {_HOW}")
    return out


def check_class_list(classes: Sequence[str], num_outputs: int, where: str) -> None:
    """The spec's class list names every head output, once per output."""
    if len(classes) != num_outputs:
        raise InputError(f"{where} lists {len(classes)} classes but the model's head has "
                         f"{num_outputs} outputs; `classes` names the head's outputs in order, "
                         "one per output (folders are mapped to them by name or wnid)")


__all__ = ["check_class_list", "map_folders", "normalize"]
