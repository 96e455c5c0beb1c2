"""FACETS' confusion graph (§V, the graph behind Fig. 4): edges ground-truth class ->
predicted ID class weighted by row counts, pruned as the paper lists. Reference: the counts
of a tiny store whose logits fix every prediction, counted by hand below."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import UsageError
from featstore.store.arraystore import ArrayStore
from featstore.workflows.protocols.facets_graph import (
    GraphOptions,
    confusion_graph,
    graph_tsv,
)


def _onehot(pred, c=3):
    z = np.zeros((len(pred), c), np.float32)
    z[np.arange(len(pred)), pred] = 5.0
    return z


def _store():
    """ID classes bedroom, fountain, shoe_shop. id/test: 2 bedroom rows (one right, one
    predicted fountain). ood/t1/sun: 3 `sun/f/fountain` rows predicted fountain (same name),
    2 `sun/s/shoe shop` rows predicted shoe_shop (an underscore apart: kept, Fig. 4).
    ood/t1/in: 4 `in/bed` rows, 3 predicted bedroom and 1 fountain."""
    f = lambda n: np.zeros((n, 4), np.float32)  # noqa: E731
    return ArrayStore(head=None, classes=["bedroom", "fountain", "shoe_shop"], splits={
        "id/test": {"features": f(2), "logits": _onehot([0, 1]), "labels": np.array([0, 0])},
        "ood/t1/sun": {"features": f(5), "logits": _onehot([1, 1, 1, 2, 2]),
                       "ids": ["sun/f/fountain/a.jpg"] * 3 + ["sun/s/shoe shop/b.jpg"] * 2},
        "ood/t1/in": {"features": f(4), "logits": _onehot([0, 0, 0, 1]),
                      "ids": ["in/bed/c.jpg"] * 4}})


def test_confusion_graph_counts_and_prunes_as_the_paper():
    g = confusion_graph(_store())
    assert g["edges"] == [("t1/in:in/bed", "id:bedroom", 3),
                          ("t1/sun:sun/s/shoe shop", "id:shoe_shop", 2),
                          ("t1/in:in/bed", "id:fountain", 1)]
    assert g["pruned"] == {"self_loops": 1, "id_sources": 1, "same_names": 1,
                           "low_weight": 0}
    assert g["rows"] == 11
    heavy = confusion_graph(_store(), options=GraphOptions(min_weight=2))
    assert [e[2] for e in heavy["edges"]] == [3, 2] and heavy["pruned"]["low_weight"] == 1
    everything = confusion_graph(_store(), options=GraphOptions(False, False, False))
    assert sum(e[2] for e in everything["edges"]) == 11
    assert graph_tsv(g).splitlines()[1] == "t1/in:in/bed\tid:bedroom\t3"


def test_confusion_graph_bad_inputs():
    with pytest.raises(UsageError, match="min-weight"):
        GraphOptions(min_weight=0)
    with pytest.raises(UsageError, match="'ood/none'"):
        confusion_graph(_store(), ["ood/none"])


def test_facets_graph_command(tmp_path, capsys):
    """The CLI prints the heaviest edges and writes the TSV; a bad --min-weight is exit 2."""
    from featstore import Store
    from tests.helpers.cli import run_cli as run

    st = _store()
    Store.from_arrays(tmp_path / "s", head=None, classes=list(st.classes), splits={
        n: {"features": np.asarray(st.split(n).features), "logits": np.asarray(
            st.split(n).logits), "labels": np.asarray(st.split(n).labels),
            "ids": [str(i) for i in np.asarray(st.split(n).ids)]} for n in st.splits()})
    code, out, err = run(capsys, "protocol", "facets-graph", str(tmp_path / "s"), "--out",
                         str(tmp_path / "g.tsv"))
    assert code == 0, err
    assert "t1/in:in/bed" in out and "3 edges" in out
    assert (tmp_path / "g.tsv").read_text().count("\n") == 4
    code, _, err = run(capsys, "protocol", "facets-graph", str(tmp_path / "s"),
                       "--min-weight", "0")
    assert code == 2 and "min-weight" in err
