"""The layers of DESIGN §8, enforced: imports run downward only and no two modules import each
other, directly or round a loop. Function-local imports count as imports.

The check is an AST scan of every module of featstore/, scorers/ and cli/ (no code is run):
every `import` and `from ... import` statement anywhere in a module (top level, inside
functions, under `if`/`try`), relative imports resolved against the module's package, and
`from pkg import name` resolved to the submodule `pkg.name` when that module exists, else to
`pkg` itself (its __init__). Each module gets a layer from `LAYER_MAP` (longest path prefix
wins). Imports inside `if TYPE_CHECKING:` blocks are checked against the layers (a type that
names an upper layer is still an upward dependency) but not for cycles (they never run).

Reference for the checker itself: two planted trees written to tmp_path, one with an upward
import (a function-local one, relative, two levels up) and one with a three-module cycle,
whose violations are spelled out by hand below.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("featstore", "scorers", "cli")

#: Layers, bottom first (DESIGN §8). A module may import its own layer and the layers below.
LAYERS = ("store core", "specs", "extraction", "training", "scorers", "workflows", "cli")

#: Path prefix (relative to the repo root) -> layer: folders (a trailing "/") and the package
#: root's own files, nothing else (test_layer_map_is_the_folder_tree). The longest matching
#: prefix wins. Every module must match an entry.
LAYER_MAP: dict[str, str] = {
    # the package root: its public names, the error family and the version
    "featstore/__init__.py": "store core",
    "featstore/errors.py": "store core",
    "featstore/version.py": "store core",
    # the store: format, read, write, verify, lock, names, values (torch-free)
    "featstore/store/": "store core",
    # what a benchmark, an experiment and a Gscore run are, and their TOML (torch-free)
    "featstore/specs/": "specs",
    # networks, their heads, image data, torchrun, array import; a network over a spec -> a store
    "featstore/extraction/": "extraction",
    # training-time methods and the trainer (never needed to load or extract a model)
    "featstore/training/": "training",
    # post-hoc scoring over stores (never torch: see test_scorers_stay_off_torch)
    "scorers/": "scorers",
    # workflows that combine stores, models, training and scorers
    "featstore/workflows/": "workflows",
    # the command line
    "featstore/__main__.py": "cli",
    "cli/": "cli",
}

#: the workflow packages; no two of them import each other both ways (test_workflows_one_way)
WORKFLOWS = "featstore/workflows/"

#: Upward imports allowed by name, each with its reason (DESIGN §8): (importer, imported) ->
#: why. Every entry must be function-local and still present (test_allowed_upward_imports).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("featstore", "featstore.workflows.detector"):
        "`featstore.Detector` is the documented public name of the deployable detector: the one "
        "re-export of a higher layer from the package namespace, resolved on first attribute "
        "access (PEP 562 __getattr__) so `import featstore` loads neither scorers nor torch",
}

#: what the scorers layer may import of featstore: the store core and the specs (no torch)
SCORERS_MAY_IMPORT = ("store core", "specs")
TORCH_PACKAGES = ("torch", "torchvision")


@dataclass(frozen=True)
class Edge:
    """`importer` imports `imported` at `line` (`local`: inside a function)."""

    importer: str
    imported: str
    line: int
    local: bool
    type_only: bool


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def find_modules(root: Path, packages: Iterable[str]) -> dict[str, Module]:
    """Every .py file under the packages, by dotted module name."""
    modules: dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules[".".join(parts)] = Module(".".join(parts), path, is_package)
    return modules


def _known(name: str, modules: Mapping[str, Module]) -> str | None:
    """The longest prefix of dotted `name` that is one of our modules (None: third party)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _targets(module: Module, node: ast.Import | ast.ImportFrom,
             modules: Mapping[str, Module]) -> list[str]:
    """Dotted names an import statement loads (absolute; third-party names kept as given)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.name.split(".")
        if not module.is_package:
            base.pop()
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
            for alias in node.names]


def _imports(tree: ast.AST, local: bool = False, type_only: bool = False):
    """(import node, inside a function, inside `if TYPE_CHECKING:`) for every import."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, local, type_only
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _imports(ast.Module(body=node.body, type_ignores=[]), local, True)
            yield from _imports(ast.Module(body=node.orelse, type_ignores=[]), local, type_only)
        elif isinstance(node, ast.stmt | ast.excepthandler | ast.match_case):
            # imports are statements: only statement bodies can hold one
            inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from _imports(node, inner, type_only)


def _parse(path: Path) -> ast.AST:
    return _parse_text(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _parse_text(text: str, filename: str) -> ast.AST:
    return ast.parse(text, filename=filename)


def import_edges(module: Module, modules: Mapping[str, Module]) -> tuple[list[Edge], list[str]]:
    """(edges to our modules, third-party top-level names) of every import in `module`."""
    edges, external = [], []
    for node, local, type_only in _imports(_parse(module.path)):
        for name in _targets(module, node, modules):
            known = _known(name, modules)
            if known is None:
                external.append(name.split(".")[0])
            elif known != module.name:
                edges.append(Edge(module.name, known, node.lineno, local, type_only))
    return edges, external


def layer_of(module: Module, root: Path, layer_map: Mapping[str, str]) -> str | None:
    """The layer of the longest `layer_map` prefix matching the module's path."""
    rel = module.path.relative_to(root).as_posix()
    matches = [p for p in layer_map if rel == p or (p.endswith("/") and rel.startswith(p))]
    return layer_map[max(matches, key=len)] if matches else None


def upward_imports(root: Path, packages: Iterable[str], layer_map: Mapping[str, str],
                   layers: tuple[str, ...],
                   allowed: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """One line per import of a higher layer: 'file:line: a (layer) imports b (layer)', but
    for the function-local (importer, imported) pairs of `allowed`."""
    allowed = allowed or {}
    modules = find_modules(root, packages)
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for module in modules.values():
        for edge in import_edges(module, modules)[0]:
            mine = layer_of(module, root, layer_map)
            theirs = layer_of(modules[edge.imported], root, layer_map)
            if rank[theirs] > rank[mine]:
                if (edge.importer, edge.imported) in allowed and edge.local:
                    continue
                where = f"{module.path.relative_to(root)}:{edge.line}"
                how = " (function-local)" if edge.local else ""
                found.append(f"{where}: {edge.importer} ({mine}) imports {edge.imported} "
                             f"({theirs}){how}")
    return sorted(found)


def import_cycles(root: Path, packages: Iterable[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    modules = find_modules(root, packages)
    graph = {name: sorted({e.imported for e in import_edges(m, modules)[0] if not e.type_only})
             for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


# --------------------------------------------------------------------------- the real tree
def test_every_module_has_a_layer():
    """A module that matches no LAYER_MAP entry must be placed there explicitly."""
    missing = [str(m.path.relative_to(ROOT)) for m in find_modules(ROOT, PACKAGES).values()
               if layer_of(m, ROOT, LAYER_MAP) is None]
    assert missing == [], f"add these to LAYER_MAP in tests/test_layers.py: {missing}"
    assert set(LAYER_MAP.values()) <= set(LAYERS)


def test_no_upward_imports():
    found = upward_imports(ROOT, PACKAGES, LAYER_MAP, LAYERS, ALLOWED_UPWARD)
    assert found == [], "imports of a higher layer (DESIGN §8):\n" + "\n".join(found)


def test_allowed_upward_imports():
    """Each ALLOWED_UPWARD entry is an upward import that exists (no stale entry), only
    function-local, and has a reason; `featstore.Detector` is the workflow's class and
    `import featstore` alone loads neither the workflow nor scorers (a fresh process)."""
    without = upward_imports(ROOT, PACKAGES, LAYER_MAP, LAYERS)
    for (importer, imported), reason in ALLOWED_UPWARD.items():
        hits = [line for line in without if f": {importer} (" in line
                and f" imports {imported} (" in line]
        assert hits and all(line.endswith("(function-local)") for line in hits), hits
        assert len(reason) > 40
    code = ("import sys, featstore; before = sorted(m for m in ('scorers', "
            "'featstore.workflows.detector') if m in sys.modules); "
            "from featstore.workflows.detector import Detector; "
            "print(before, featstore.Detector is Detector)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert run.stdout.split() == ["[]", "True"]


def test_layer_map_is_the_folder_tree():
    """LAYER_MAP names folders and the package root's own files only, and DESIGN §8's layer
    table lists exactly these paths, each under its layer (the table is parsed)."""
    for path in LAYER_MAP:
        assert path.endswith("/") or path.count("/") == 1, f"{path}: a folder or a root file"
        assert (ROOT / path).exists(), path
    for folder in sorted({p.parent for p in (ROOT / "featstore").rglob("*.py")}):
        rel = folder.relative_to(ROOT).as_posix() + "/"
        owner = [p for p in LAYER_MAP if rel.startswith(p) and p.endswith("/")]
        assert owner or rel == "featstore/", f"{rel} has no layer"
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = design[design.index("## 8. Layers"):design.index("## 9.")]
    table: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in LAYERS:
            for path in re.findall(r"`([^`]+)`", cells[1]):
                table[path] = cells[0]
    assert table == LAYER_MAP


def workflow_package(module: str) -> str | None:
    """featstore.workflows.<package> of a module below it (a single-module workflow is its own)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["featstore", "workflows"] and len(parts) > 2 \
        else None


def test_workflows_one_way():
    """No two workflow packages import each other, directly or round a loop (the package graph
    of featstore/workflows/ is acyclic), and nothing below the workflows imports them (the
    layer check above)."""
    modules = find_modules(ROOT, PACKAGES)
    graph: dict[str, set[str]] = {}
    for module in modules.values():
        mine = workflow_package(module.name)
        if mine is None:
            continue
        for edge in import_edges(module, modules)[0]:
            theirs = workflow_package(edge.imported)
            if theirs and theirs != mine:
                graph.setdefault(mine, set()).add(theirs)
    seen: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"workflow packages import each other: {path + (node,)}"
        if seen.get(node):
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, path + (node,))
        seen[node] = 1

    for node in sorted(graph):
        visit(node, ())
    assert graph, "the workflow packages import one another somewhere (the check ran)"


def test_no_import_cycles():
    cycles = import_cycles(ROOT, PACKAGES)
    assert cycles == [], f"import cycles (DESIGN §8): {cycles}"


def test_scorers_stay_off_torch():
    """scorers/ imports neither torch nor any featstore module above the store core (each of
    them imports torch), so scoring runs without torch's CUDA stack (DESIGN §1)."""
    modules = find_modules(ROOT, PACKAGES)
    bad = []
    for module in modules.values():
        if layer_of(module, ROOT, LAYER_MAP) != "scorers":
            continue
        edges, external = import_edges(module, modules)
        bad += [f"{module.name} imports {name}" for name in external if name in TORCH_PACKAGES]
        for edge in edges:
            layer = layer_of(modules[edge.imported], ROOT, LAYER_MAP)
            if layer != "scorers" and layer not in SCORERS_MAY_IMPORT:
                bad.append(f"{module.name} imports {edge.imported} ({layer})")
    assert bad == []


def test_registry_is_built_from_scorer_modules_only():
    """scorers/methods/ holds scorer modules only: each defines exactly the registered scorers
    whose module it is, and none imports the registry (it is built while they load)."""
    from scorers.registry import BUILTIN  # the package's own (other tests register theirs)

    modules = find_modules(ROOT, PACKAGES)
    methods = {n for n in modules if n.startswith("scorers.methods.")}
    assert methods == {cls.__module__ for cls in BUILTIN.values()}
    for name in methods:
        imported = {e.imported for e in import_edges(modules[name], modules)[0]}
        assert not imported & {"scorers", "scorers.registry"}, name


# --------------------------------------------------------------------------- the checker
def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


PLANTED_LAYERS = ("core", "top")
PLANTED_MAP = {"pkg/__init__.py": "core", "pkg/core/": "core", "pkg/top/": "top"}


def test_checker_finds_a_planted_upward_import(tmp_path):
    """pkg.core.b imports pkg.top.t inside a function, relatively (`from ...top import t`):
    one upward import at b.py line 3; the downward import top.t -> core.a is allowed."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/core/__init__.py": "",
        "pkg/core/a.py": "X = 1\n",
        "pkg/core/b.py": "def f():\n    import os\n    from ..top import t\n    return t\n",
        "pkg/top/__init__.py": "",
        "pkg/top/t.py": "from pkg.core.a import X\n",
    })
    found = upward_imports(tmp_path, ("pkg",), PLANTED_MAP, PLANTED_LAYERS)
    assert found == [f"{Path('pkg/core/b.py')}:3: pkg.core.b (core) imports pkg.top.t (top) "
                     "(function-local)"]
    (tmp_path / "pkg/core/b.py").write_text("import os\n", encoding="utf-8")
    assert upward_imports(tmp_path, ("pkg",), PLANTED_MAP, PLANTED_LAYERS) == []


def test_checker_finds_a_planted_cycle(tmp_path):
    """a -> b (top level), b -> c (`from . import c`, resolved to the submodule), c -> a
    (function-local): one cycle {a, b, c}; d imports a and stays out of it; an import under
    `if TYPE_CHECKING:` (d <- a) makes no cycle."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/core/__init__.py": "",
        "pkg/core/a.py": ("from typing import TYPE_CHECKING\nfrom . import b\n"
                          "if TYPE_CHECKING:\n    from .d import D\n"),
        "pkg/core/b.py": "from . import c\n",
        "pkg/core/c.py": "def f():\n    from pkg.core.a import b\n    return b\n",
        "pkg/core/d.py": "from .a import b\nD = 1\n",
    })
    assert import_cycles(tmp_path, ("pkg",)) == [["pkg.core.a", "pkg.core.b", "pkg.core.c"]]
    (tmp_path / "pkg/core/c.py").write_text("C = 1\n", encoding="utf-8")
    assert import_cycles(tmp_path, ("pkg",)) == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from . import x", ["pkg.sub.x"]),          # a submodule of the package
    ("from . import NAME", ["pkg.sub"]),         # a name of the package's __init__
    ("from .. import y", ["pkg.y"]),
    ("from ..y import Z", ["pkg.y"]),
    ("import pkg.sub.x as m", ["pkg.sub.x"]),
    ("from pkg.sub.x import f", ["pkg.sub.x"]),
    ("import numpy", []),
])
def test_checker_resolves_imports(tmp_path, source, expected):
    """Resolution of one statement in pkg/sub/m.py (hand-derived from Python's import rules)."""
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/y.py": "", "pkg/sub/__init__.py": "",
                      "pkg/sub/x.py": "", "pkg/sub/m.py": source + "\n"})
    modules = find_modules(tmp_path, ("pkg",))
    edges, _ = import_edges(modules["pkg.sub.m"], modules)
    assert [e.imported for e in edges] == expected
