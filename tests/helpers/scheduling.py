"""How `pytest -n N` (pytest-xdist; `make test` runs `-n auto`) shares the suite among its
workers: one scope per test file (its module fixtures are built once, as in a serial run),
except that every file using the session's demo run is one scope (the demo is built once and
no other worker's process reruns it under a reader), and the heaviest scopes are handed out
first, so that no worker starts a long file when the others are about to finish.

The scheduler is xdist's file scheduler with `scope_of` as its scope function; the order is
the collection's (conftest's `pytest_collection_modifyitems` sorts the items by
`scope_rank`)."""

from __future__ import annotations

from typing import Any

#: the test files whose tests use the session's demo run (tests/conftest.py: demo_json_run,
#: demo_dir, demo_rerun); conftest refuses a test using it from another file
DEMO_TEST_FILES = frozenset({
    "tests/test_cli_output.py", "tests/test_demo_and_eval.py", "tests/test_gscore_em.py",
    "tests/test_report.py", "tests/test_gscore_predict.py"})
DEMO_SCOPE = "demo run"
#: the scopes handed out first, heaviest first: the slowest files of a serial
#: `python -m pytest -q --durations=0 tests` (benchmarks/results/test-suite.md); the other
#: files follow in collection order
HEAVY_FIRST = (
    "tests/test_executors.py", DEMO_SCOPE, "tests/test_detector_demo.py",
    "tests/test_distributed.py", "tests/test_faults_store.py",
    "tests/test_training_methods.py", "tests/test_resume.py", "tests/test_experiments.py",
    "tests/test_precision.py", "tests/test_extract_extras.py", "tests/test_protocols.py",
    "tests/test_detector_images.py", "tests/test_stats.py")


def scope_of(nodeid: str) -> str:
    """The scope of a test: its file, or DEMO_SCOPE for the files in DEMO_TEST_FILES."""
    path = nodeid.split("::", 1)[0]
    return DEMO_SCOPE if path in DEMO_TEST_FILES else path


def scope_rank(nodeid: str) -> int:
    """Position of the test's scope in HEAVY_FIRST; len(HEAVY_FIRST) for every other scope."""
    scope = scope_of(nodeid)
    return HEAVY_FIRST.index(scope) if scope in HEAVY_FIRST else len(HEAVY_FIRST)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's LoadFileScheduling, scoped by `scope_of`, in collection order."""
    from xdist.scheduler import LoadFileScheduling

    class SuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)
