"""FACETS' Baseline and InterDataset builders (§IV, Tables II-III; issue 46.9) on image
folders made here. Reference: the class lists and image files written below, counted by
hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from featstore.errors import UsageError
from featstore.workflows.protocols.facets_datasets import (
    build_dataset,
    dataset_assignment,
    normal_name,
)


def _folder(root: Path, classes: dict[str, int]) -> Path:
    for c, n in classes.items():
        (root / c).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(root / c / f"{i}.png")
    return root


def test_interdataset_removes_the_common_classes(tmp_path):
    """ImageNet-like candidates Fountain (= the ID class fountain by name), bed, zebra: the
    common one is dropped and named, the rest OOD; their images split in val / test halves
    (4 + 2 images -> 2 + 1 in each half), written with balance = true."""
    images = _folder(tmp_path / "in", {"Fountain": 4, "bed": 4, "zebra": 2})
    ids = tmp_path / "places.txt"
    ids.write_text("/b/bedroom\n/f/fountain\n")
    res = build_dataset("interdataset", str(images), id_classes=str(ids), out=tmp_path / "o")
    assert res["assignment"] == {"bed": "ood", "zebra": "ood"}
    assert res["dropped"] == ["Fountain"]
    test = Path(res["files"]["ood"]).read_text().splitlines()
    assert len(test) == 3 and not any("Fountain" in ln for ln in test)
    assert res["sampling"]["balance"] is True and res["sampling"]["per_class"] is None
    common = tmp_path / "common.txt"
    common.write_text("zebra\n")
    assert build_dataset("interdataset", str(images), common=str(common))["dropped"] == \
        ["zebra"]


def test_baseline_and_bad_inputs(tmp_path):
    assert dataset_assignment("baseline", ["number"]) == ({"number": "ood"}, [])
    assert normal_name("/s/shoe_shop") == "shoe shop" == normal_name("Shoe-Shop")
    with pytest.raises(UsageError, match="--kind 'svhn'"):
        dataset_assignment("svhn", ["a"])
    with pytest.raises(UsageError, match="--id-classes"):
        dataset_assignment("interdataset", ["a"])
    with pytest.raises(UsageError, match="not candidate classes"):
        dataset_assignment("interdataset", ["a"], common=["b"])


def test_facets_dataset_command(tmp_path, capsys):
    """The CLI names the removed classes and what it wrote; a bad --kind is exit 2."""
    from tests.helpers.cli import run_cli as run

    images = _folder(tmp_path / "in", {"Fountain": 2, "bed": 2})
    ids = tmp_path / "places.txt"
    ids.write_text("fountain\n")
    code, out, err = run(capsys, "protocol", "facets-dataset", "--kind", "interdataset",
                         "--images", str(images), "--id-classes", str(ids), "--out",
                         str(tmp_path / "o"))
    assert code == 0, err
    assert "1 OOD classes; removed 1 common classes: Fountain" in out
    assert (tmp_path / "o" / "interdataset" / "ood.txt").is_file()
    code, _, err = run(capsys, "protocol", "facets-dataset", "--kind", "svhn", "--images",
                       str(images))
    assert code == 2 and "--kind 'svhn'" in err
