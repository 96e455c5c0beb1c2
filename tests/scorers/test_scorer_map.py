"""The scorer map of docs/DESIGN.md ("Scorer map: formula, test, benchmark") against the
registry and the tree: one row per registered scorer and no other; the module is the file
that defines the registered class; the test file and benchmark scripts exist; every benchmark
key names a topic page under benchmarks/results/, and that page mentions the scorer (names
compared lowercase without punctuation: `MC-Dropout` = `mcdropout`); a row without a
benchmark says why. Reference: the registry (`scorers.REGISTRY`) and the files on disk."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from scorers import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "DESIGN.md"
TITLE = "### Scorer map: formula, test, benchmark"
KEY_LINE = re.compile(
    r"^- ([A-Z]): `(benchmarks/[\w/]+\.py)` -> `(benchmarks/results/[\w-]+\.md)`$")
ROW = re.compile(r"^\| (\w+) \| `([^`]+)` \| `([^`]+)` \| (.+) \|$")


def map_section(text: str) -> str:
    """The map's lines: from its title to the next heading."""
    assert TITLE in text, f"docs/DESIGN.md has no section {TITLE!r}"
    body = text.split(TITLE, 1)[1]
    return re.split(r"\n#{2,3} ", body, maxsplit=1)[0]


def parse_map(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str, str]]]:
    """({key: (script, topic page)}, {scorer: (module, test, benchmark cell)})."""
    keys, rows = {}, {}
    for line in map_section(text).splitlines():
        if m := KEY_LINE.match(line):
            keys[m[1]] = (m[2], m[3])
        elif (m := ROW.match(line)) and m[1] != "scorer":
            assert m[1] not in rows, f"scorer {m[1]!r} has two rows"
            rows[m[1]] = (m[2], m[3], m[4].strip())
    return keys, rows


def squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def test_map_has_exactly_one_row_per_registered_scorer():
    _, rows = parse_map(DESIGN.read_text(encoding="utf-8"))
    assert sorted(rows) == sorted(REGISTRY), (
        f"missing: {sorted(set(REGISTRY) - set(rows))}, not registered: "
        f"{sorted(set(rows) - set(REGISTRY))}")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_row_points_at_real_files_and_benchmark_sections(name):
    keys, rows = parse_map(DESIGN.read_text(encoding="utf-8"))
    assert name in rows, f"docs/DESIGN.md's scorer map has no row for {name!r}"
    module, test, bench = rows[name]
    defined_in = Path(inspect.getsourcefile(REGISTRY[name])).resolve()
    assert (ROOT / module).resolve() == defined_in, (name, module, defined_in)
    assert (ROOT / test).is_file(), f"{name}: test file {test} does not exist"
    if bench.startswith("—"):
        assert len(bench) > 10, f"{name}: a row without a benchmark must say why"
        return
    for key in (k.strip() for k in bench.split(",")):
        assert key in keys, f"{name}: benchmark key {key!r} is not defined above the table"
        script, page = keys[key]
        assert (ROOT / script).is_file(), f"benchmark script {script} does not exist"
        assert (ROOT / page).is_file(), f"benchmark page {page} does not exist"
        assert squash(name) in squash((ROOT / page).read_text(encoding="utf-8")), (
            f"{name}: {page} does not mention it")


def test_checker_fails_on_a_planted_wrong_row():
    """The parser sees a wrong module path and a missing row (so the checks above can fail)."""
    text = DESIGN.read_text(encoding="utf-8")
    broken = text.replace("| knn | `scorers/methods/knn.py`", "| knn | `scorers/knn.py`", 1)
    broken = re.sub(r"\n\| vim \|[^\n]*", "", broken, count=1)
    _, rows = parse_map(broken)
    assert "vim" not in rows and "vim" in REGISTRY
    assert rows["knn"][0] == "scorers/knn.py"
    assert not (ROOT / rows["knn"][0]).is_file()
