"""The type checker's configuration (pyproject.toml [tool.mypy]) is what DESIGN §8 says: the
strict modules are the ones DESIGN lists, and the strict override sets every flag that the
installed mypy's own `--strict` enables (the reference: `mypy --help`, parsed), per module or
globally (those mypy allows only globally); untyped third-party packages are named one by one,
never ignored globally. `make lint` / `make test` run mypy itself."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# flags of --strict that mypy accepts only in the global section
GLOBAL_ONLY = {"warn_redundant_casts", "warn_unused_ignores"}


def _mypy_config() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def _strict_override(cfg: dict[str, Any]) -> dict[str, Any]:
    found = [o for o in cfg["overrides"] if o.get("disallow_untyped_defs")]
    assert len(found) == 1, "expected one override holding the strict flags"
    return found[0]


def _design_strict_modules() -> list[str]:
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    para = text.split("the documented API (§3) is strict", 1)[1].split("(tests/test_mypy", 1)[0]
    return re.findall(r"`([a-z_.]+)`", para.split(":", 1)[1])


def _strict_flags_of_installed_mypy() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "mypy", "--help"], capture_output=True,
                         text=True, check=True).stdout
    block = out.split("Strict mode; enables the following flags:", 1)[1]
    block = re.split(r"\n  --", block, maxsplit=1)[0]
    flags = re.findall(r"--([a-z-]+)", re.sub(r"-\s*\n\s*", "-", block))
    assert flags, "could not read --strict's flags from mypy --help"
    return flags


def test_strict_modules_are_designs() -> None:
    cfg = _mypy_config()
    design = _design_strict_modules()
    assert "featstore" in design and "scorers.base" in design
    modules = [m for m in _strict_override(cfg)["module"] if not m.endswith(".*")]
    assert sorted(modules) == sorted(design)
    assert set(cfg["files"]) == {"featstore", "scorers"}


def test_strict_override_sets_every_strict_flag() -> None:
    cfg = _mypy_config()
    strict = _strict_override(cfg)
    assert "strict" not in strict, "per-module `strict = true` leaks to every module"
    for flag in _strict_flags_of_installed_mypy():
        if flag.startswith("no-"):   # --no-implicit-reexport: implicit_reexport = false
            key, want = flag[3:].replace("-", "_"), False
        else:
            key, want = flag.replace("-", "_"), True
        value = cfg.get(key) if key in GLOBAL_ONLY else strict.get(key, cfg.get(key))
        assert value is want, f"--{flag}: {key} = {want} missing"


def test_missing_imports_are_ignored_per_package_only() -> None:
    cfg = _mypy_config()
    assert "ignore_missing_imports" not in cfg
    assert "ignore_errors" not in cfg
    ignored = [m for o in cfg["overrides"] if o.get("ignore_missing_imports") for m in o["module"]]
    assert "h5py" in ignored
    assert not any(m.split(".")[0] in ("featstore", "scorers", "cli") for m in ignored)
