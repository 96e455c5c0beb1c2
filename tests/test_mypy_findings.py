"""What the type checker found (DESIGN §8, "Types"), held by tests on real objects: a unit
whose job ended without a done state is failed with its log named, not read back as None
(executors); a loaded model with no classifier head is a clear InputError for the detector,
not an AttributeError; the sanity checks read an ArrayStore's class names; every split,
stored or in memory, has `ids` (a `SplitLike` member the shift protocol reads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from featstore.errors import InputError
from featstore.extraction.models import LoadedModel
from featstore.store.arraystore import ArrayStore
from featstore.store.interfaces import SplitLike
from featstore.store.sanity import id_checks
from featstore.store.store import Store
from featstore.workflows.detector import check_model
from featstore.workflows.experiments import unitstate
from featstore.workflows.experiments.executors import _collect


def test_a_unit_without_a_done_state_is_failed_not_read_back_as_none(tmp_path: Path) -> None:
    units = [{"id": f"u{i}", "key": f"k{i}", "label": f"unit {i}"} for i in range(3)]
    records = [{"row": 0, "auroc": 0.75}]
    unitstate.mark_finished(tmp_path, "u0", "k0", records=records)   # done, its key
    unitstate.mark_finished(tmp_path, "u1", "old", records=records)  # done, another key
    failed = {"u2": "failed earlier"}                                # the waiter's verdict
    results: dict[str, list[dict[str, object]]] = {}
    _collect(tmp_path, units, ["u0", "u1", "u2"], failed, results)
    assert results == {"u0": records}
    assert set(failed) == {"u1", "u2"} and failed["u2"] == "failed earlier"
    assert "without a done state" in failed["u1"]
    assert str(unitstate.log_path(tmp_path, "u1")) in failed["u1"]


def test_detector_refuses_a_model_without_a_head() -> None:
    head = (np.zeros((3, 4), np.float32), np.zeros(3, np.float32))
    record = {"architecture": "Sequential", "sha256": "ab" * 32}
    loaded = LoadedModel(nn.Sequential(nn.Conv2d(3, 4, 3)), None, None,
                         {"name": "conv", "architecture": "Sequential", "sha256": "ab" * 32,
                          "head_layer": None})
    with pytest.raises(InputError, match="no classifier head"):
        check_model(loaded, record, head)
    # with the same head it passes; a different bias is named as the head's difference
    linear = nn.Linear(4, 3)
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.zero_()
    loaded.head, loaded.provenance["head_layer"] = linear, "0"
    check_model(loaded, record, head)
    with pytest.raises(InputError, match="head '0' differs"):
        check_model(loaded, record, (head[0], np.ones(3, np.float32)))


def test_sanity_reads_an_array_store_class_names() -> None:
    """The reference: a diagonal confusion matrix but for classes 0 and 1 swapped, whose
    names the check reports (hand-built logits: argmax = the swapped label)."""
    labels = np.repeat(np.arange(3), 20)
    predicted = np.array([1, 0, 2])[labels]
    logits = np.eye(3, dtype=np.float32)[predicted] * 5.0
    st = ArrayStore(None, splits={"id/test": {"features": logits, "logits": logits,
                                              "labels": labels}},
                    classes=["cat", "dog", "owl"])
    check = id_checks(st)["id/test"]
    assert check["accuracy"] == pytest.approx(100.0 / 3) and check["permuted"] == 100.0
    assert check["moves"] == [("cat", "dog"), ("dog", "cat")]
    assert "label cat -> output dog" in check["warning"]


def test_every_split_has_ids(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    splits = {"id/test": {"features": x, "labels": np.array([0, 1, 0]),
                          "ids": np.array(["a.png", "b.png", "c.png"])}}
    head = (np.eye(2, 4, dtype=np.float32), np.zeros(2, np.float32))
    stored = Store.from_arrays(tmp_path / "st", head=head, splits=splits)
    in_memory = ArrayStore(head, splits=splits)
    for st in (stored, in_memory):
        split = st.split("id/test")
        assert isinstance(split, SplitLike)
        assert list(split.ids) == ["a.png", "b.png", "c.png"]
