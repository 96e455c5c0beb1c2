"""The layout of tests/ (DESIGN §1): shared helpers live in the package tests/helpers/, no
test module imports another test module or conftest, conftest.py holds only fixtures and
pytest hooks, and every `tests.helpers.<module>:<name>` string a test hands to featstore (a
--model / --arch / `arch =` value) names something that exists. Reference: the files' own
syntax trees (ast), and importlib for the named callables."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: a `module:callable` string naming a test helper, alone or inside TOML / a command line
HELPER_CALLABLE = re.compile(r"\b(tests\.helpers\.\w+):(\w+)")


def imported_modules(source: str) -> list[str]:
    """The dotted names of every module `source` imports, at any depth (function-level
    imports included); `from . import x` and `from pkg import x` give pkg.x as well as pkg."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def forbidden_imports(source: str) -> list[str]:
    """The imports in `source` of a test module (a dotted part `test_*`) or of conftest."""
    return [name for name in imported_modules(source)
            if any(part.startswith("test_") or part == "conftest" for part in name.split("."))]


def test_the_scanner_finds_test_module_and_conftest_imports():
    """By hand: the five ways this suite used to reach another test module or conftest."""
    source = ("import conftest as kit\nfrom conftest import run_cli\n"
              "from tests.conftest import structured_arrays\nfrom test_vim import ref_vim\n"
              "def f():\n    from test_knn_index import assert_grid_cases\n"
              "from tests.helpers.stores import structured_arrays\nimport numpy as np\n"
              "from scorers.testing import contract_scorer\n")
    assert forbidden_imports(source) == [
        "conftest", "conftest", "conftest.run_cli", "tests.conftest",
        "tests.conftest.structured_arrays", "test_vim", "test_vim.ref_vim", "test_knn_index",
        "test_knn_index.assert_grid_cases"]


def test_no_test_module_imports_another_or_conftest():
    offenders = {str(p.relative_to(TESTS)): bad for p in sorted(TESTS.rglob("*.py"))
                 if (bad := forbidden_imports(p.read_text(encoding="utf-8")))}
    assert offenders == {}, f"import shared code from tests.helpers instead: {offenders}"


def test_helpers_is_a_package_without_tests():
    """tests/helpers/ is a package (so `tests.helpers.<module>` resolves from the repository
    root) and holds no test_* module pytest would collect."""
    helpers = TESTS / "helpers"
    assert (helpers / "__init__.py").is_file()
    assert sorted(p.name for p in helpers.glob("test_*.py")) == []
    assert len(list(helpers.glob("*.py"))) > 1


def _is_fixture(node: ast.FunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if ast.unparse(target) in ("pytest.fixture", "fixture"):
            return True
    return False


def test_conftest_holds_only_fixtures_and_hooks():
    """Every function of conftest.py is a fixture or a pytest_* hook; it defines no class."""
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    others = [node.name for node in tree.body
              if isinstance(node, ast.ClassDef)
              or (isinstance(node, ast.FunctionDef) and not _is_fixture(node)
                  and not node.name.startswith("pytest_"))]
    assert others == [], f"move these to tests/helpers/: {others}"


def test_helper_callables_named_in_strings_exist():
    """Every `tests.helpers.<module>:<name>` in the tests' string constants imports and has
    the attribute (a moved or renamed helper breaks here, not deep in an extraction)."""
    named = set()
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.update(HELPER_CALLABLE.findall(node.value))
    assert ("tests.helpers.tiny_models", "tiny_cnn") in named
    assert ("tests.helpers.user_models", "two_head") in named
    missing = sorted(f"{mod}:{name}" for mod, name in named
                     if not hasattr(importlib.import_module(mod), name))
    assert missing == []
