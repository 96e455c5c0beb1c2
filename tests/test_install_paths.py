"""The CPU-only install path (README "CPU-only install", issue 47 item 1): requirements-cpu.txt
is pyproject.toml's `[project] dependencies` with faiss-cpu in place of faiss-gpu, and nothing
else changed; the license is an SPDX string (the table form made setuptools warn). Reference:
the two files, parsed with tomllib and packaging."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_cpu_requirements_are_the_dependencies_with_faiss_cpu():
    deps = [Requirement(d) for d in _pyproject()["project"]["dependencies"]]
    lines = [ln.strip() for ln in (ROOT / "requirements-cpu.txt").read_text().splitlines()]
    cpu = [Requirement(ln) for ln in lines if ln and not ln.startswith("#")]
    want = {str(Requirement(f"{d.name}{d.specifier}")) for d in deps
            if d.name != "faiss-gpu" and d.name != "faiss-cpu"} | {"faiss-cpu>=1.8"}
    assert {str(r) for r in cpu} == want
    assert all(r.marker is None for r in cpu)   # CPU builds on every platform
    assert any(d.name == "faiss-gpu" for d in deps)   # the design's packages stay the default


def test_license_is_an_spdx_string():
    project = _pyproject()
    assert project["project"]["license"] == "MIT"
    assert project["build-system"]["requires"][0] == "setuptools>=77"
