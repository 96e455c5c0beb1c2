"""The one scorer registry: the built-in scorers of `scorers/methods/`, the scorers installed
packages declare under the entry-point group `featstore.scorers`, and any `Scorer` subclass a
caller names (an instance, a class, or the text `module:Class`).

Built-ins: discovery imports each module of the `scorers.methods` package (one module per
method, no other module lives there, so no exclusion list is needed) and registers each
`Scorer` subclass defined in it that has a non-empty `name`; a name registered twice is an
error. Entry points (`[project.entry-points."featstore.scorers"]`, `name = "pkg.mod:Class"`)
are loaded when this module is imported. Everything else is added by `register` when first
named (`resolve`): `evaluate(store, [MyScorer(), "vim"])`, `--method mymodule:MyScorer`.

Names: a scorer's `name` is its key everywhere (results, the score cache, `--param
name.k=v`); it must match `NAME_PATTERN`. A name that is already a built-in or an entry
point's is an error (UsageError); registering a class of the same `module.qualname` again (a
re-run notebook cell, a reloaded module) replaces the earlier one.

The scorer modules never import this module, so the registry is never read while it is
being built (the layer test, tests/test_layers.py, fails on such a cycle).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import os
import pkgutil
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from featstore.errors import FeatstoreError, InputError, UsageError
from featstore.specs.usercode import import_user_module

from . import methods
from .base import Scorer
from .paper import paper_json

ENTRY_POINT_GROUP = "featstore.scorers"
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


def discover() -> dict[str, type[Scorer]]:
    """name -> class for every named `Scorer` subclass defined in a `scorers.methods` module,
    sorted by name."""
    registry: dict[str, type[Scorer]] = {}
    for info in sorted(pkgutil.iter_modules(methods.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{methods.__name__}.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Scorer) and obj is not Scorer
                    and obj.name and obj.__module__ == module.__name__):
                if obj.name in registry:
                    raise RuntimeError(f"scorer name {obj.name!r} registered twice")
                registry[obj.name] = obj
    return dict(sorted(registry.items()))


class _Registry(dict[str, "type[Scorer]"]):
    """name -> class; a `module:Class` key is resolved (imported and registered) on lookup,
    so code that indexes the registry with what a user wrote accepts both spellings."""

    def __missing__(self, key: Any) -> type[Scorer]:
        if isinstance(key, str) and ":" in key:
            return self[load_spec(key)]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if isinstance(key, str) and ":" in key:
            try:
                load_spec(key)
            except FeatstoreError:
                return False
            return True
        return False

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except (KeyError, FeatstoreError):
            return default


BUILTIN: dict[str, type[Scorer]] = discover()
REGISTRY: dict[str, type[Scorer]] = _Registry(BUILTIN)
# name -> where a non-built-in scorer came from: "entry point <ep>" or "registered"
SOURCES: dict[str, str] = {}


def is_registered(name: object) -> bool:
    """Whether `name` is a registered scorer name as it stands: never imports anything (the
    registry's own `in` imports a `module:Class`; a name read from a file must not)."""
    return isinstance(name, str) and dict.__contains__(REGISTRY, name)


def qualname(cls: type) -> str:
    """`module:QualName` of a class (the spelling `--method` takes)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def source_of(name: str) -> str:
    """Where scorer `name` comes from: "built-in", "entry point ..." or "registered"."""
    return "built-in" if name in BUILTIN else SOURCES.get(name, "registered")


def register(cls: type[Scorer], *, source: str = "registered") -> type[Scorer]:
    """Add a `Scorer` subclass to the registry under its `name`; returns it.

    UsageError when `cls` is not a Scorer subclass, its name is empty or not a plain
    identifier (`NAME_PATTERN`), or the name belongs to a built-in, an entry point's scorer,
    or another class (a different `module:QualName`)."""
    if not (isinstance(cls, type) and issubclass(cls, Scorer)) or cls is Scorer:
        raise UsageError(f"{cls!r} is not a subclass of scorers.base.Scorer")
    name = cls.name
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise UsageError(f"scorer class {qualname(cls)}: `name` {name!r} must be a non-empty "
                         "identifier (letters, digits, '_' or '-', starting with a letter)")
    known = dict.get(REGISTRY, name)
    if known is not None and known is not cls:
        owner = source_of(name)
        if owner != "registered" or qualname(known) != qualname(cls):
            raise UsageError(f"scorer name {name!r} of {qualname(cls)} is already taken by "
                             f"{qualname(known)} ({owner}); give your scorer another `name`")
    dict.__setitem__(REGISTRY, name, cls)
    if name not in BUILTIN:
        SOURCES[name] = source
    return cls


@contextmanager
def registered_within(classes: Iterable[type[Scorer]]) -> Iterator[None]:
    """Register `classes` for the duration of a block only: scorers that exist inside one
    computation (the store ensemble's four scores, `scorers.ensemble`) are never listed by
    `eval --all` or `featstore scorers` afterwards. A name registered before the block stays."""
    added = [c.name for c in classes if dict.get(REGISTRY, c.name) is None]
    for cls in classes:
        register(cls, source="internal")
    try:
        yield
    finally:
        for name in added:
            dict.pop(REGISTRY, name, None)
            SOURCES.pop(name, None)


def load_spec(spec: str) -> str:
    """Import `module:Class` (a dotted attribute path after the colon), register the class and
    return its scorer name; UsageError naming the spec when it cannot be imported or is not a
    Scorer subclass."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"scorer {spec!r}: expected module:Class")
    try:
        module = import_user_module(module_name)  # the rule --model follows (cwd first)
    except UsageError as exc:  # InputError (the module raised while importing) included
        raise type(exc)(f"scorer {spec!r}: {exc.message}") from None
    try:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise UsageError(f"scorer {spec!r}: module {module_name!r} has no attribute "
                         f"{attr!r}") from None
    if not (isinstance(obj, type) and issubclass(obj, Scorer)):
        raise UsageError(f"scorer {spec!r} is {type(obj).__name__}, not a subclass of "
                         "scorers.base.Scorer")
    return register(obj).name


def load_entry_points() -> None:
    """Register every scorer of the `featstore.scorers` entry-point group; a clash with a
    built-in or with another package's scorer is a UsageError naming both."""
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            cls = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a plugin, named
            raise UsageError(f"entry point {ep.name!r} = {ep.value!r} of group "
                             f"{ENTRY_POINT_GROUP!r} failed to load: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Scorer)):
            raise UsageError(f"entry point {ep.name!r} = {ep.value!r} of group "
                             f"{ENTRY_POINT_GROUP!r} is not a scorers.base.Scorer subclass")
        known = dict.get(REGISTRY, cls.name)
        if known is not None and known is not cls:
            raise UsageError(f"entry point {ep.value!r}: scorer name {cls.name!r} is already "
                             f"taken by {qualname(known)} ({source_of(cls.name)})")
        register(cls, source=f"entry point {ep.value}")


def resolve(method: str | type[Scorer] | Scorer) -> str:
    """The registered name of a method given as a name, `module:Class`, a Scorer subclass or
    an instance (classes are registered on first use); UsageError for an unknown name."""
    if isinstance(method, Scorer):
        return register(type(method)).name
    if isinstance(method, type):
        return register(method).name
    if isinstance(method, str) and ":" in method:
        return load_spec(method)
    if not isinstance(method, str) or not dict.__contains__(REGISTRY, method):
        raise UsageError(unknown_scorer(method))
    return method


def resolve_methods(methods: Iterable[str | type[Scorer] | Scorer],
                    params: Mapping[str, Mapping[str, Any]] | None = None
                    ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(names, params) for methods given in any form `resolve` takes: an instance's own given
    parameters (`Scorer.given`) join `params[name]` (which wins on a key in both), so
    `evaluate(store, [MyScorer(k=3)])` runs with k=3. Names keep their order, once each."""
    names: list[str] = []
    out = {k: dict(v) for k, v in (params or {}).items()}
    for method in methods:
        name = resolve(method)
        if isinstance(method, Scorer):
            out[name] = {**method.given, **out.get(name, {})}
        if name not in names:
            names.append(name)
    out = {(resolve(k) if ":" in k else k): v for k, v in out.items()}
    return names, out


def code_digest(name: str) -> str | None:
    """What the score cache keys a non-built-in scorer's scores by besides its name: the
    sha256 (16 hex) of the source of every module involved (`user_modules`: the modules of
    its class and of every base class that are not featstore's own, and the user modules
    those import), so editing any of them never reads old scores; None when a user module's
    source cannot be read (a class typed into a REPL): such a scorer is scored with the cache
    off.
    Built-ins: "" (the package's own code)."""
    if name in BUILTIN:
        return ""
    digest = hashlib.sha256()
    for module in user_modules(REGISTRY[name]):
        try:
            text = inspect.getsource(sys.modules[module])
        except (OSError, TypeError, KeyError):
            if _is_user_module(module):
                return None
            continue  # an installed extension module's class (no Python source) in the MRO
        digest.update(module.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


OWN_PACKAGES = ("scorers", "featstore", "cli")


def _is_user_module(module: str) -> bool:
    """A module that is not featstore's own (`OWN_PACKAGES`), nor of the standard library or
    an installed package (its file lies outside the interpreter's stdlib / site-packages)."""
    if module.partition(".")[0] in OWN_PACKAGES or module == "builtins":
        return False
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if mod is None or file is None:
        return module == "__main__"
    real = os.path.realpath(file)
    return not any(real.startswith(root + os.sep) for root in _installed_roots())


def _installed_roots() -> list[str]:
    """The interpreter's stdlib directories and every site-packages / dist-packages directory
    on sys.path (real paths)."""
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")
             if k in paths}
    roots |= {os.path.realpath(p) for p in sys.path
              if os.path.basename(p) in ("site-packages", "dist-packages")}
    return sorted(roots)


def user_modules(cls: type) -> list[str]:
    """The modules a scorer class's code may run, sorted: the module of each class of its MRO
    that is not featstore's own (an installed plugin's included), then, transitively, every
    user module (`_is_user_module`) those modules refer to by a global name (an imported
    module, function or class)."""
    todo = [k.__module__ for k in cls.__mro__
            if k.__module__.partition(".")[0] not in (*OWN_PACKAGES, "builtins")]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for value in list(vars(sys.modules[module]).values()) if module in sys.modules else []:
            ref = value.__name__ if isinstance(value, ModuleType) else getattr(
                value, "__module__", None)
            if isinstance(ref, str) and ref not in seen and _is_user_module(ref):
                todo.append(ref)
    return sorted(seen)


def unknown_scorer(name: Any, what: str | None = None) -> str:
    """The one message for a name that is not a registered scorer: `[what: ]unknown scorer
    'vimm' (valid: ash, confbranch, ...); did you mean 'vim'?` (the hint when one is close)."""
    close = difflib.get_close_matches(str(name), list(REGISTRY), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    prefix = f"{what}: " if what else ""
    return (f"{prefix}unknown scorer {name!r} (valid: {', '.join(REGISTRY)}, or "
            f"module:Class of your own Scorer subclass){hint}")


def check_scorers(names: str | Iterable[Any], what: str | None = None,
                  error: type[FeatstoreError] = UsageError) -> list[str]:
    """The one scorer-name check: the registered names of `names` (each a name, `module:Class`,
    a Scorer subclass or instance; `module:Class` is imported and registered), or `error`
    (UsageError: exit 2; InputError for a name read from a file) with `unknown_scorer`'s
    message (or the import's) for the first one that is not a scorer."""
    names = [names] if isinstance(names, str) else list(names)
    out = []
    for name in names:
        try:
            out.append(resolve(name))
        except UsageError as exc:
            message = str(exc)
            if isinstance(name, str) and ":" not in name:
                message = unknown_scorer(name, what)
            elif what:
                message = f"{what}: {message}"
            # a module that is there but fails to import is its file's fault (exit 1)
            raise (InputError if isinstance(exc, InputError) else error)(message) from None
    return out


def get_scorer(name: str | type[Scorer], **params: Any) -> Scorer:
    """Build a registered scorer (a name or `module:Class`); unknown name or parameter ->
    UsageError (a ValueError) naming the valid ones."""
    return REGISTRY[check_scorers([name])[0]](**params)


def scorer_info(cls: type[Scorer]) -> dict[str, Any]:
    """The registry's description of one scorer: name, needs, defaults, grid, paper (the
    one-line citation, `str(cls.paper)`), paper_meta (`Paper.to_json()`: title, authors,
    venue, year, url, code, note; None for a free-text paper), source."""
    return {"name": cls.name, "needs": list(cls.needs), "defaults": dict(cls.defaults),
            "grid": {k: list(v) for k, v in cls.grid.items()}, "paper": str(cls.paper),
            "paper_meta": paper_json(cls.paper), "source": source_of(cls.name)}


def list_scorers(builtin_only: bool = False) -> list[dict[str, Any]]:
    """One dict per scorer (`scorer_info`), sorted by name; `builtin_only`: the package's own
    (the README table)."""
    table = BUILTIN if builtin_only else REGISTRY
    return [scorer_info(table[name]) for name in sorted(table)]



def unregister(name: str) -> None:
    """Remove a scorer that is not a built-in (a notebook's, a test's); UsageError for a
    built-in, KeyError-free for a name not registered."""
    if name in BUILTIN:
        raise UsageError(f"scorer {name!r} is a built-in and cannot be unregistered")
    dict.pop(REGISTRY, name, None)
    SOURCES.pop(name, None)


load_entry_points()
