"""`featstore import`: build a store from arrays extracted elsewhere (any framework).

Accepted inputs, all holding the same flat keys:
- `.npz` / `.pt` (a dict of tensors, loaded with weights_only=True) / `.h5`: keys
  `head/weight` (C, D), `head/bias` (C,), optional `classes` (C,), and per split
  `<split name>/features` (N, D), optional `<split name>/logits` (N, C), `/labels` (N,),
  `/ids` (N,), `/usage` (a string: train | val | test; default from the name, else test)
  — e.g. `id/train/features`, `ood/far/textures/logits`, `ood/near/ssb_val/usage` = "val";
  (an `.h5` whose datasets keep data outside the file, external storage or virtual datasets,
  or that holds soft / external links, is refused: importing never copies another file's
  bytes into a store, and no split disappears silently);
- a directory of `.npy` files whose names are those keys with `/` written as `__`
  (e.g. `head__weight.npy`, `id__train__features.npy`).

Without `head/weight` and `head/bias` (self-supervised or CLIP-style features, a non-linear
head) the store has no head: every split must then give its logits, and the scorers that
need (W, b) are skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from featstore.errors import InputError, UsageError
from featstore.store.layout import FEATURE_DTYPES
from featstore.store.names import parse_split_name
from featstore.store.store import MANIFEST, USAGES, Store, is_own_layout
from featstore.store.verify import hdf5_link_problem

FIELDS = ("features", "logits", "labels", "ids", "usage")


def _load_flat(path: Path) -> dict[str, Any]:
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise InputError(f"import {str(path)!r}: directory holds no .npy files")
        return {f.stem.replace("__", "/"): np.load(f, allow_pickle=False) for f in files}
    if not path.is_file():
        raise InputError(f"import {str(path)!r}: no such file or directory")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        if suffix in (".h5", ".hdf5"):
            out: dict[str, Any] = {}
            with h5py.File(path, "r") as fh:
                problem = hdf5_link_problem(fh)   # never read data from outside the file
                if problem:
                    raise InputError(f"import {str(path)!r}: {problem}")

                def visit(name: str, obj: Any) -> None:
                    if isinstance(obj, h5py.Dataset):
                        out[name] = obj.asstr()[()] if obj.dtype.kind in "OS" else obj[()]
                fh.visititems(visit)
            return out
        if suffix in (".pt", ".pth"):
            import torch  # lazy: importing .npz/.npy/.h5 arrays needs no torch

            obj = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(obj, Mapping):
                raise InputError(f"import {str(path)!r}: expected a dict of tensors")
            return {k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v))
                    for k, v in obj.items()}
    except UsageError:
        raise
    except Exception as exc:
        raise InputError(f"import {str(path)!r}: cannot read ({exc})") from exc
    raise UsageError(f"import {str(path)!r}: expected .npz, .pt, .h5 or a directory of .npy")


def arrays_from_flat(flat: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Group flat keys into Store.from_arrays arguments; errors name the missing key."""
    given = [key for key in ("head/weight", "head/bias") if key in flat]
    if len(given) == 1:
        missing = "head/bias" if given == ["head/weight"] else "head/weight"
        raise InputError(f"import {where}: {given[0]!r} without {missing!r}; give both, or "
                         f"neither for a store without a head (keys: {', '.join(sorted(flat))})")
    splits: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("head/") or key == "classes":
            continue
        name, _, field = key.rpartition("/")
        if field not in FIELDS or not name:
            raise InputError(f"import {where}: key {key!r} is not '<split>/<field>' with field "
                             f"in {FIELDS}")
        try:
            parse_split_name(name)
        except UsageError as exc:
            raise InputError(f"import {where}: key {key!r}: {exc}") from None
        splits.setdefault(name, {})[field] = np.asarray(value)
    for name, fields in splits.items():
        if "features" not in fields:
            raise InputError(f"import {where}: split {name!r} has no features")
        if "usage" in fields:
            fields["usage"] = _usage(fields["usage"], f"import {where}: key {name + '/usage'!r}")
    if not splits:
        raise InputError(f"import {where}: no '<split>/features' arrays found")
    classes = flat.get("classes")
    head = (np.asarray(flat["head/weight"]), np.asarray(flat["head/bias"])) if given else None
    return {"head": head,
            "splits": splits,
            "classes": [str(c) for c in np.asarray(classes)] if classes is not None else None}


def _usage(value: Any, where: str) -> str:
    """A usage given as a string or a 0-d / one-element string array; InputError otherwise."""
    arr = np.asarray(value)
    text = arr.item() if arr.size == 1 else None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text not in USAGES:
        raise InputError(f"{where}: usage {value!r} is not one of {', '.join(USAGES)}")
    return str(text)


def import_arrays(src: str | Path, out: str | Path, *, dtype: str = "float32",
                  overwrite: bool = False, name: str | None = None,
                  usage: Mapping[str, str] | None = None) -> Store:
    """Read arrays from `src` and write a store at `out`. `usage` {split: train | val | test}
    flags splits (e.g. an OOD split for validation, which sweeps choose on) and wins over a
    `<split>/usage` key in the file."""
    src = Path(src)
    if dtype not in FEATURE_DTYPES:
        raise UsageError(f"expected one of {', '.join(FEATURE_DTYPES)}", param="dtype",
                         value=dtype)
    args = arrays_from_flat(_load_flat(src), repr(str(src)))
    for split, value in (usage or {}).items():
        if split not in args["splits"]:
            raise UsageError(f"--usage {split}={value}: {str(src)!r} has no split {split!r} "
                             f"(splits: {', '.join(sorted(args['splits']))})")
        if value not in USAGES:
            raise UsageError(f"--usage {split}={value}: usage must be one of {', '.join(USAGES)}")
        args["splits"][split]["usage"] = value
    provenance = {"name": name or src.name, "kind": "imported", "source_file": str(src)}
    if args["head"] is not None:
        provenance["sha256_of"] = "head (W, b)"
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise UsageError("exists and is not a directory", param="out", value=out)
    if out.is_dir() and not (out / MANIFEST).exists() and not is_own_layout(out):
        raise UsageError("exists and is not a featstore store, which is never replaced: choose "
                         "an empty or new path", param="out", value=out)
    if (out / MANIFEST).exists() and not overwrite:
        raise UsageError(f"store {str(out)!r} already exists", change={"overwrite": True},
                         effect="to replace it")
    try:
        return Store.from_arrays(out, head=args["head"], splits=args["splits"],
                                 classes=args["classes"], provenance=provenance, dtype=dtype,
                                 overwrite=overwrite)
    except InputError:
        raise
    except UsageError as exc:  # arrays that do not fit together: the file's content is wrong
        raise InputError(f"import {str(src)!r}: {exc}") from None
