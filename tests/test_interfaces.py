"""featstore.store.interfaces: `Store` and `Split` satisfy the Protocols the scorers are typed
against (`StoreLike`, `SplitLike`), member by member: every Protocol member exists on the real
object, and every Protocol method's parameters (names, kinds, defaults present) are the real
method's, so a scorer written against the Protocol runs on a real store. The reference is the
Protocol classes themselves, read with `inspect`; a planted object missing a member fails the
runtime check."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike
from featstore.store.reader import Split
from featstore.store.store import Store


def _members(protocol: type) -> dict[str, object]:
    """The Protocol's own members (attributes from its annotations, methods, properties)."""
    names = set(protocol.__annotations__)
    names |= {n for n, v in vars(protocol).items()
              if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return {n: vars(protocol).get(n) for n in sorted(names)}


def _params(fn: object) -> list[tuple[str, object, bool]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty)
            for p in sig.parameters.values()]


def _tiny_store(tmp_path: Path) -> Store:
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 4)).astype(np.float32), np.zeros(3, np.float32)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    return Store.from_arrays(tmp_path / "st", head=(w, b),
                             splits={"id/test": {"features": x, "labels": np.arange(5) % 3}})


def test_store_and_split_satisfy_the_protocols(tmp_path: Path) -> None:
    store = _tiny_store(tmp_path)
    split = store.split("id/test")
    assert isinstance(store, StoreLike) and isinstance(split, SplitLike)
    for protocol, real_cls, obj in ((StoreLike, Store, store), (SplitLike, Split, split)):
        for name, member in _members(protocol).items():
            assert hasattr(obj, name), f"{real_cls.__name__} lacks {protocol.__name__}.{name}"
            if callable(member) and not isinstance(member, property):
                assert _params(member) == _params(getattr(real_cls, name)), (
                    f"{real_cls.__name__}.{name} signature differs from {protocol.__name__}")
    # the values behind the members are the store's own
    assert split.model_sha256 == store.model_sha256
    np.testing.assert_array_equal(np.asarray(split.features), store.split("id/test").read(
        "features"))


def test_an_object_missing_a_member_is_not_a_store(tmp_path: Path) -> None:
    """runtime_checkable: an object with every StoreLike member but `head` fails isinstance."""
    store = _tiny_store(tmp_path)

    class NoHead:
        path = store.path
        manifest = store.manifest
        model_sha256 = store.model_sha256
        splits = store.splits
        has_split = store.has_split
        split = store.split
        check_committed = store.check_committed

    assert not isinstance(NoHead(), StoreLike)
    NoHead.head = store.head  # type: ignore[attr-defined]
    assert isinstance(NoHead(), StoreLike)


def _any_typed_stores(root: Path) -> list[str]:
    """'path:line name' for every parameter named store/split (or st) of a function under
    `root` annotated as plain `Any`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if (arg.arg in ("store", "split", "st") and isinstance(arg.annotation, ast.Name)
                            and arg.annotation.id == "Any"):
                        found.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno} "
                                     f"{arg.arg}")
    return found


def test_scorers_take_typed_stores_and_splits(tmp_path: Path) -> None:
    """No function of scorers/ takes `store: Any` or `split: Any` (use StoreLike / SplitLike);
    the scan itself finds a planted one."""
    root = Path(__file__).resolve().parents[1] / "scorers"
    assert _any_typed_stores(root) == []
    planted = tmp_path / "pkg"
    planted.mkdir()
    (planted / "m.py").write_text("from typing import Any\n\n\ndef f(store: Any, k: Any):\n"
                                  "    return k\n", encoding="utf-8")
    assert _any_typed_stores(planted) == ["pkg/m.py:4 store"]
