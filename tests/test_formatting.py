"""featstore.store.formatting, the one place numbers become text for the terminal, the report
and the experiment tables. References: strings written out by hand (h = (hi - lo) / 2, the
rounding of Python's format), and the renderers' cells compared with the module's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from featstore.store.formatting import (
    MISSING,
    cell_number,
    compact,
    mean_interval,
    mean_std,
    number,
    real,
    setting_text,
    with_interval,
)


@pytest.mark.parametrize("missing", [None, math.nan, np.float32("nan"), "72.9", [1.0]])
def test_missing_values_print_as_an_en_dash(missing):
    assert MISSING == "–"
    assert real(missing) is None
    for text in (number(missing), compact(missing, [1.0, 2.0]), with_interval(missing),
                 cell_number({"mean": missing}), mean_interval({"mean": missing}),
                 mean_std({"mean": missing, "std": 1.0, "n": 3})):
        assert text == "–"
    for empty in (None, {}, {"std": 1.0}):
        assert mean_interval(empty) == mean_std(empty) == cell_number(empty) == "–"


def test_numbers_and_intervals():
    assert number(72.954) == "72.95"
    assert number(np.float32(0.5), "+.3f") == "+0.500"
    assert number(3) == "3.00"
    assert compact(80.94, [77.2, 84.6]) == "80.9±3.7"          # h = (84.6 - 77.2) / 2 = 3.7
    assert compact(80.94) == compact(80.94, [None, 84.6]) == "80.9"
    # lopsided intervals (issue 47: `100.0±46.7` for [53.3, 100.0]) print their bounds; by hand:
    # centre 76.65, h 23.35, |100 - 76.65| = 23.35 > h / 4
    assert compact(100.0, [53.3, 100.0]) == "100.0 [53.3, 100.0]"
    # |87.31 - 87.045| = 0.265 <= h / 4 = 1.21: roughly symmetric, compact
    assert compact(87.31, [82.12, 91.97]) == "87.3±4.9"
    # |90 - 86| = 4 > h / 4 = 2.5: the value sits in the upper quarter
    assert compact(90.0, [76.0, 96.0]) == "90.0 [76.0, 96.0]"
    assert compact(100.0, [99.98, 100.0]) == "100.0±0.0"   # h rounds to 0.0: nothing to show
    assert with_interval(72.954, [68.84, 77.04]) == "72.95 [68.8, 77.0]"
    assert with_interval(72.954, (68.84, 77.04), 1, 2) == "73.0 [68.84, 77.04]"
    assert with_interval(72.954, []) == "72.95"


def test_summary_cells():
    cell = {"mean": 4.123, "std": 0.456, "ci": [3.5, 4.75], "n": 4}
    assert mean_interval(cell) == "4.12 [3.50, 4.75]"
    assert mean_interval(cell, 3) == "4.123 [3.500, 4.750]"
    assert mean_interval({"mean": 4.123}) == "4.12"
    assert cell_number(cell) == "+4.123"
    assert cell_number(cell, ".1f") == "4.1"
    assert mean_std(cell) == "4.12 ± 0.46"
    assert mean_std(cell, 1, runs=4) == "4.1 ± 0.5"
    assert mean_std(cell, 2, runs=5) == "4.12 ± 0.46 (n=4)"


def test_setting_text():
    assert setting_text({"K": 10, "alpha": 0.5}) == "K=10, alpha=0.5"
    assert setting_text({}) == setting_text(None) == ""
    assert setting_text({}, "default") == "default"


def test_renderers_use_the_module():
    """The terminal's, the report's and the experiment tables' cells are this module's
    (one definition, not copies)."""
    from cli import common, eval_tables, gscore_output
    from featstore.store import formatting
    from featstore.workflows.experiments.render import table_rows
    from featstore.workflows.report import leaderboard, render

    assert eval_tables.compact is leaderboard.compact is render.compact is formatting.compact
    assert gscore_output._pm is render.mean_interval is formatting.mean_interval
    assert common.fmt_ci(72.954, [68.84, 77.04]) == "72.95 [68.8, 77.0]"
    stat = {"mean": 81.234, "std": 2.0, "n": 1, "skipped": 1}
    result = {"aggregate": {"spec": {"msp": {"n": 1, "skipped": 1, "flags": [],
                                             "groups": {"far": {"auroc": stat}},
                                             "id_acc": stat, "method_s": None,
                                             "total_s": None}}}}
    _, rows = table_rows(result, "spec")
    assert rows[0][2] == ("81.23 ± 2.00 (n=1)", True)
    assert rows[-1][2] == ("–", False)
