"""benchmarks/RESULTS.md is an index of one page per topic under benchmarks/results/: every
page is listed, every topic page states its command, commit and machine, and every relative
Markdown link in README.md, docs/ and benchmarks/ points at a file that exists. Reference: the
files on disk."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def topic_pages() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.md") if p.name != "HISTORY.md")


def broken_links(page: Path) -> list[str]:
    """Relative link targets of `page` (anchors dropped) that are not files or folders."""
    out = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            out.append(target)
    return out


def test_index_lists_every_topic_page_and_history():
    index = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    linked = {Path(t).name for t in LINK.findall(index)}
    assert "HISTORY.md" in linked
    missing = [p.name for p in topic_pages() if p.name not in linked]
    assert not missing, f"benchmarks/RESULTS.md does not link {missing}"
    assert len(topic_pages()) >= 10


def test_every_topic_page_states_command_commit_and_machine():
    for page in topic_pages():
        text = page.read_text(encoding="utf-8")
        assert re.search(r"`(python -m |featstore |make |nice |NUMBA_CACHE_DIR|/usr/bin/time)",
                         text), f"{page.name}: no command"
        assert re.search(r"\b[0-9a-f]{7}\b|commit not recorded", text), (
            f"{page.name}: no commit")
        assert "machine" in text.lower(), f"{page.name}: no machine"
        assert text.count("\n| ---") + text.count("\n|---") >= 1, f"{page.name}: no table"


def test_relative_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "benchmarks").glob("*.md")), *topic_pages()]
    bad = {p.relative_to(ROOT).as_posix(): b for p in pages if (b := broken_links(p))}
    assert not bad, f"broken relative links: {bad}"


def test_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[a](there.md) [b](missing.md#x) [c](https://example.org) [d](#top)")
    assert broken_links(page) == ["missing.md#x"]


def test_make_bench_reaches_every_benchmark_script():
    """Every benchmarks/bench_*.py, profile_*.py and suite_*.py is in run_all's list (what
    `make bench` runs) or excluded with a reason; every listed name is a real script."""
    from benchmarks.run_all import BENCHMARKS, EXCLUDED

    scripts = {p.stem for pat in ("bench_*.py", "profile_*.py", "suite_*.py")
               for p in (ROOT / "benchmarks").glob(pat)}
    missing = sorted(scripts - set(BENCHMARKS) - set(EXCLUDED))
    assert not missing, f"not in benchmarks/run_all.py BENCHMARKS or EXCLUDED: {missing}"
    assert not set(BENCHMARKS) & set(EXCLUDED)
    for name in [*BENCHMARKS, *EXCLUDED]:
        assert (ROOT / "benchmarks" / f"{name}.py").is_file(), f"{name}.py does not exist"
    assert all(len(why) > 20 for why in EXCLUDED.values())


def test_benchmarks_readme_lists_every_script_with_its_page():
    """benchmarks/README.md names every module of benchmarks/, and every script row of its
    table links a topic page that exists."""
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    modules = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")
    assert not [m for m in modules if f"`{m}`" not in readme], "modules missing from README"
    rows = [ln for ln in readme.splitlines() if re.match(r"^\| `\w+\.py` \|", ln)]
    assert len(rows) >= 15
    for row in rows:
        pages = re.findall(r"\]\((results/[\w-]+\.md)\)", row)
        assert pages and all((ROOT / "benchmarks" / p).is_file() for p in pages), row[:60]
