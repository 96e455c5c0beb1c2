"""What to change is data on an error (featstore.errors): the library words it as Python
keyword arguments, the CLI (cli.wording) as options and commands. Each case below is run both
ways on real stores and files and compared with the exact line written out by hand."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from cli.app import main
from cli.wording import CLI_WORDING
from featstore import Store
from featstore.errors import UsageError, use_wording
from featstore.extraction.importer import import_arrays
from scorers.skipping import unsupported_reason


def _cli(capsys, *args) -> tuple[int, str]:
    """(exit code, stderr) of the real CLI entry point, run in-process."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


@pytest.fixture
def npz(tmp_path):
    """A flat .npz of a 3-class head and one split (the `featstore import` format)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "a.npz"
    np.savez(path, **{"head/weight": rng.normal(size=(3, 4)).astype(np.float32),
                      "head/bias": np.zeros(3, np.float32),
                      "id/test/features": rng.normal(size=(5, 4)).astype(np.float32)})
    return path


def test_an_existing_store_asks_for_overwrite_as_a_parameter_and_as_an_option(
        tmp_path, npz, capsys):
    store = tmp_path / "s"
    import_arrays(npz, store)
    with pytest.raises(UsageError) as info:
        import_arrays(npz, store)
    assert str(info.value) == f"store {str(store)!r} already exists; pass overwrite=True to " \
                              "replace it"
    assert info.value.change == {"overwrite": True} and info.value.effect == "to replace it"
    code, err = _cli(capsys, "import", npz, "--out", store)
    assert code == 2
    assert err == f"error: store {str(store)!r} already exists; pass --overwrite to replace " \
                  "it\n"


def test_a_file_where_the_store_goes_names_the_parameter_and_the_option(tmp_path, npz, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    w, b = np.eye(3, 4, dtype=np.float32), np.zeros(3, np.float32)
    with pytest.raises(UsageError) as info:
        Store.create(target, head=(w, b))
    assert str(info.value) == f"path={str(target)!r}: exists and is not a directory"
    assert (info.value.param, info.value.value) == ("path", target)
    with pytest.raises(UsageError) as info:
        import_arrays(npz, target)
    assert str(info.value) == f"out={str(target)!r}: exists and is not a directory"
    code, err = _cli(capsys, "import", npz, "--out", target)
    assert (code, err) == (2, f"error: --out {str(target)!r}: exists and is not a directory\n")
    assert target.read_text() == "mine"


def test_a_bad_value_names_its_parameter_and_its_option(tmp_path, npz, capsys):
    with pytest.raises(UsageError) as info:
        import_arrays(npz, tmp_path / "s", dtype="float64")
    assert str(info.value) == "dtype='float64': expected one of float32, float16"
    code, err = _cli(capsys, "import", npz, "--out", tmp_path / "s", "--dtype", "float64")
    assert (code, err) == (2, "error: --dtype 'float64': expected one of float32, float16\n")


def test_a_missing_extra_says_how_to_produce_it_in_each_wording(tmp_path, npz):
    store = import_arrays(npz, tmp_path / "s")
    assert unsupported_reason(store, "rankfeat") == (
        "needs 'extra:feature_maps': extract with `ExtractOptions(feature_maps=True)`")
    with use_wording(CLI_WORDING):
        assert unsupported_reason(store, "rankfeat") == (
            "needs 'extra:feature_maps': extract with `featstore extract --feature-maps`")
    assert unsupported_reason(store, "rankfeat").endswith("`ExtractOptions(feature_maps=True)`")


def test_the_data_survives_pickling_and_settings_word_as_flags():
    """Errors cross process pools by pickle; False and valued settings as the CLI writes them."""
    exc = UsageError("no head", param="num_workers", value=-1,
                     change={"no_head": False, "batch_size": 64}, effect="to retry")
    back = pickle.loads(pickle.dumps(exc))
    assert str(back) == str(exc) == "num_workers=-1: no head; pass no_head=False, " \
                                    "batch_size=64 to retry"
    assert back.worded(CLI_WORDING) == "--workers -1: no head; pass --no-no-head, " \
                                       "--batch-size 64 to retry"
