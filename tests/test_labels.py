"""`[LABEL=]PATH` items (`featstore.specs.labels`): the one default-label rule and the bad
items, each a one-line UsageError naming the argument; then the same rule through the three
commands that take such items (`protocol ten-methods --spec`, `featstore table`, `protocol
facets-table`), refused before any file is read. Reference: the labels and messages written
out by hand."""

from __future__ import annotations

import pytest

from featstore.errors import UsageError
from featstore.specs.labels import default_label, labelled_paths, split_item
from tests.helpers.cli import run_cli as run


@pytest.mark.parametrize("path, label", [
    ("specs/UCM.toml", "UCM"),          # a spec: its file name less .toml
    ("stores/T40", "T40"),              # a store folder: its name
    ("stores/T40/", "T40"),             # a trailing slash names the same folder
    ("/d/UCMerced.v2", "UCMerced.v2"),  # only .toml is dropped
    ("a.toml.toml", "a.toml"),
    (".", ""),                          # no name: the caller must give LABEL=
])
def test_default_label(path, label):
    assert default_label(path) == label


def test_labelled_paths_defaults_and_given_labels():
    items = ["UCM=specs/ucm.toml", "specs/aid.toml", "X=runs/a=b", "stores/T40"]
    assert labelled_paths(items, "--spec") == [
        ("UCM", "specs/ucm.toml"), ("aid", "specs/aid.toml"), ("X", "runs/a=b"),
        ("T40", "stores/T40")]
    assert split_item("specs/aid.toml", "--spec").label is None


@pytest.mark.parametrize("items, message", [
    (["=runs/a"], "STORES '=runs/a': the label before '=' is empty (give LABEL=PATH or PATH)"),
    (["="], "STORES '=': the label before '=' is empty (give LABEL=PATH or PATH)"),
    (["T40="], "STORES 'T40=': the path is empty (give LABEL=PATH or PATH)"),
    ([""], "STORES '': the path is empty (give LABEL=PATH or PATH)"),
    (["runs/a=b"], "STORES 'runs/a=b': label 'runs/a' holds '/' (a PATH holding '=' needs "
                   "LABEL= in front of it)"),
    (["."], "STORES '.': no default label for this path; name it LABEL=PATH"),
    (["T40=x", "T40=y"], "STORES 'T40=y': label 'T40' is used twice; name them LABEL=PATH"),
    (["a/T40", "b/T40"], "STORES 'b/T40': label 'T40' is used twice; name them LABEL=PATH"),
    (["s/A.toml", "A=t"], "STORES 'A=t': label 'A' is used twice; name them LABEL=PATH"),
])
def test_bad_items(items, message):
    with pytest.raises(UsageError) as exc:
        labelled_paths(items, "STORES")
    assert str(exc.value) == message


@pytest.mark.parametrize("args, message", [
    (["protocol", "facets-table", "T40=", "--method", "msp"],
     "STORES 'T40=': the path is empty"),
    (["protocol", "facets-table", "x/T40", "y/T40", "--method", "msp"],
     "STORES 'y/T40': label 'T40' is used twice"),
    (["table", "=runs/a"], "RESULTS '=runs/a': the label before '=' is empty"),
    (["protocol", "ten-methods", "--spec", "=", "--methods", "msp", "--out", "o"],
     "--spec '=': the label before '=' is empty"),
])
def test_bad_items_on_the_command_line(tmp_path, monkeypatch, capsys, args, message):
    """Exit 2, one line naming the argument, before any store or file is opened (the paths
    do not exist) and nothing written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
