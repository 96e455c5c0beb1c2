"""Spec sampling (FACETS: a fixed number of images per class, balanced ID / OOD counts):
`per_class`, `max_rows`, `sample_seed` on a source, `balance = true` on a spec.

References: the kept rows are recomputed with a NumPy transcription of the rule (a seeded
permutation per class, then a seeded permutation cut at max_rows); the balanced counts by
hand (largest-remainder shares)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from featstore.errors import InputError, UsageError
from featstore.extraction.datasets import balance_id_ood, rows_from_source, sample_rows
from featstore.extraction.extract import ExtractOptions, extract
from featstore.specs.benchmark import load_spec


def test_per_class_and_max_rows_follow_the_seeded_rule():
    y = np.array([0, 1, 0, 2, 1, 0, 2, 2, 1, 0, 0, 2])
    rng = np.random.default_rng(3)
    ref = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[:2]
                                  for c in (0, 1, 2)]))
    got = sample_rows(y, per_class=2, seed=3)
    np.testing.assert_array_equal(got, ref)
    assert np.bincount(y[got]).tolist() == [2, 2, 2]
    ref2 = np.sort(np.random.default_rng(4).permutation(ref)[:4])
    np.testing.assert_array_equal(sample_rows(y, per_class=2, max_rows=4, seed=3), ref2)
    np.testing.assert_array_equal(sample_rows(y, per_class=9, seed=0), np.arange(len(y)))
    with pytest.raises(UsageError, match="per_class needs a class label on every row"):
        sample_rows(np.array([0, -1]), per_class=1)
    with pytest.raises(UsageError, match="max_rows = 0 must be an integer >= 1"):
        sample_rows(y, max_rows=0)


def test_sources_are_sampled_everywhere_the_same():
    src = {"builtin": "digits", "classes": [0, 1, 2], "part": "test"}
    full = rows_from_source(src)
    a = rows_from_source({**src, "per_class": 5, "sample_seed": 1})
    b = rows_from_source({**src, "per_class": 5, "sample_seed": 1})
    c = rows_from_source({**src, "per_class": 5, "sample_seed": 2})
    assert a.ids == b.ids and a.ids != c.ids
    assert np.bincount(a.labels).tolist() == [5, 5, 5]
    keep = sample_rows(full.labels, per_class=5, seed=1)
    assert a.ids == [full.ids[i] for i in keep]
    assert np.array_equal(np.asarray(a.load(0)), np.asarray(full.load(int(keep[0]))))


def _spec(tmp_path: Path, body: str) -> Path:
    """Top-level keys of `body` (before its first [[split]]) go before [transform]."""
    top, sep, splits = body.partition("[[split]]")
    path = tmp_path / "s.toml"
    path.write_text('classes = ["0", "1", "2"]\n' + top + '[transform]\nresize = 8\ncrop = 8\n'
                    'mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n' + sep + splits)
    return path


def test_balance_cuts_the_larger_side_in_its_largest_split(tmp_path):
    """id/test: 10 per class = 30 rows; OOD: noise 40 + noise 20 = 60 -> 10 + 20 (by hand:
    the largest split absorbs the excess 30, the other source kept whole, as FACETS §IV
    Table V samples ImageNet-train and keeps SUN397 and ImageNet-val; issue 46.7). With more
    ID rows than OOD, id/test is cut instead."""
    body = ('balance = true\nbalance_seed = 7\n'
            '[[split]]\nname = "id/test"\nsource = { builtin = "digits", classes = [0, 1, 2], '
            'part = "test", per_class = 10 }\n'
            '[[split]]\nname = "ood/far/a"\nsource = { builtin = "noise", count = 40, '
            'part = "test" }\n'
            '[[split]]\nname = "ood/far/b"\nsource = { builtin = "noise", count = 20, '
            'part = "test", seed = 3 }\n')
    bench = balance_id_ood(load_spec(_spec(tmp_path, body)))
    counts = {s.name: len(rows_from_source(s.source)) for s in bench.splits}
    assert counts == {"id/test": 30, "ood/far/a": 10, "ood/far/b": 20}
    assert bench.splits[1].source["sample_seed"] == 7
    assert "sample_seed" not in bench.splits[2].source  # kept whole
    st = extract("tests.helpers.tiny_models:tiny_cnn", _spec(tmp_path, body), tmp_path / "st",
                 options=ExtractOptions(device="cpu", batch_size=16, num_workers=0))
    assert {n: st.split(n).num_rows for n in st.splits()} == counts
    # the largest split cannot absorb an excess of 45 (15 ID rows): both cut in proportion,
    # 15 * 40 / 60 = 10 and 15 * 20 / 60 = 5 (by hand)
    few = balance_id_ood(load_spec(_spec(tmp_path, body.replace("per_class = 10",
                                                                 "per_class = 5"))))
    assert [len(rows_from_source(s.source)) for s in few.splits] == [15, 10, 5]
    small = body.replace("count = 40", "count = 5").replace("count = 20", "count = 4")
    bench = balance_id_ood(load_spec(_spec(tmp_path, small)))
    assert [len(rows_from_source(s.source)) for s in bench.splits] == [9, 5, 4]
    off = balance_id_ood(load_spec(_spec(tmp_path, small.replace("balance = true",
                                                                 "balance = false"))))
    assert [len(rows_from_source(s.source)) for s in off.splits] == [30, 5, 4]


@pytest.mark.parametrize("body, message", [
    ('balance = "yes"\n', "balance must be true or false"),
    ('[[split]]\nname = "id/test"\nsource = { builtin = "noise", count = 4, '
     'per_class = 0 }\n', "per_class = 0 must be an integer >= 1"),
])
def test_bad_sampling_keys(tmp_path, body, message):
    if "[[split]]" not in body:
        body += '[[split]]\nname = "id/test"\nsource = { builtin = "noise", count = 4 }\n'
    with pytest.raises(InputError, match=message):
        load_spec(_spec(tmp_path, body))
