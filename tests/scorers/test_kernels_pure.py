"""`scorers/kernels/` is pure array functions, and its package docstring indexes every module.

The checks are an AST scan of the kernel modules (no code is run): a kernel imports only the
standard library, third-party array packages, `featstore.errors` and other kernels (never the
method layer: `scorers.base`, `scorers.fitting`, `scorers.rowmap`, ..., nor the store); no
class derives from `Scorer`; no function takes a `store`, `split` or `scorer` parameter. The
index: one "- `name`:" line per module of the folder, no more, no fewer. Reference for the
checkers themselves: a planted kernel folder in tmp_path whose violations are listed by hand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "scorers" / "kernels"

#: what a kernel may import besides other kernels (relative imports and `scorers.kernels.*`)
ALLOWED_FEATSTORE = {"featstore.errors"}
#: parameter names that mean a store pass, not an array function
FORBIDDEN_PARAMS = {"store", "split", "scorer"}


def kernel_modules(folder: Path) -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob("*.py")) if p.name != "__init__.py"}


def impurities(folder: Path) -> list[str]:
    """Every violation of the rules above, as `module: what`."""
    found = []
    for name, tree in kernel_modules(folder).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level > 1 or (node.level == 0 and (
                        target.startswith("scorers") and not target.startswith("scorers.kernels")
                        or target.startswith("featstore") and target not in ALLOWED_FEATSTORE)):
                    found.append(f"{name}: imports {'.' * node.level}{target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in ("scorers", "featstore") and not (
                            alias.name.startswith("scorers.kernels")
                            or alias.name in ALLOWED_FEATSTORE):
                        found.append(f"{name}: imports {alias.name}")
            elif isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases}
                if any(b.endswith("Scorer") for b in bases):
                    found.append(f"{name}: class {node.name} is a Scorer")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if arg.arg in FORBIDDEN_PARAMS:
                        found.append(f"{name}: {node.name}() takes {arg.arg!r}")
    return found


def index_mismatch(folder: Path) -> tuple[set[str], set[str], list[str]]:
    """(modules the package docstring does not list, listed names that are no module, names
    listed more than once)."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    listed = re.findall(r"^- `(\w+)`:", doc or "", flags=re.MULTILINE)
    modules = set(kernel_modules(folder))
    twice = sorted({n for n in listed if listed.count(n) > 1})
    return modules - set(listed), set(listed) - modules, twice


def test_kernels_are_pure_array_functions():
    assert impurities(KERNELS) == []


def test_kernels_index_lists_every_module():
    assert index_mismatch(KERNELS) == (set(), set(), [])


def test_checkers_find_planted_violations(tmp_path):
    """A planted folder: `bad` imports the method layer two ways, the store core and the
    base class, derives a Scorer and takes a store and a split; `good` imports a kernel, numpy
    and featstore.errors only; the index lists `good` twice and `gone`, and omits `bad`."""
    (tmp_path / "__init__.py").write_text(
        '"""Kernels.\n\n- `good`: fine\n- `good`: again\n- `gone`:  no module\n"""\n')
    (tmp_path / "good.py").write_text(
        "import numpy as np\nfrom featstore.errors import UsageError\nfrom .bad import f\n"
        "import scorers.kernels.gram\n\ndef g(x, dims):\n    return x\n")
    (tmp_path / "bad.py").write_text(
        "from ..base import Scorer\nfrom featstore.store.interfaces import StoreLike\n"
        "import scorers.rowmap\n\nclass P(Scorer):\n    pass\n\n"
        "def f(store, *, split=None):\n    return store\n")
    assert sorted(impurities(tmp_path)) == sorted([
        "bad: imports ..base", "bad: imports featstore.store.interfaces",
        "bad: imports scorers.rowmap", "bad: class P is a Scorer", "bad: f() takes 'store'",
        "bad: f() takes 'split'"])
    assert index_mismatch(tmp_path) == ({"bad"}, {"gone"}, ["good"])
