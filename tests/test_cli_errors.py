"""The CLI's error boundary as a user meets it (issue 9): every command, run in-process through
`cli.app.main`, turns bad input into exactly one stderr line `error: ...` naming the offending
store, file, split, method, parameter or option, with exit code 2 for a wrong command line
(bad option value, unknown method / parameter, wrong split name) and 1 for a missing or
broken input (missing or corrupt store, missing file, bad TOML content, an empty split) —
never a traceback, never anything on stdout. Reference: the exit-code contract of README
"Command line"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cli.app import main
from featstore import Store
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent


def assert_one_line_error(result: tuple[int, str, str], code: int, *fragments: str) -> str:
    got, out, err = result
    assert got == code, (got, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert out == "", out
    return lines[0]


SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """A good small store, one with a 0-row OOD split, one with a corrupt manifest, a
    Gscore model fitted on the good one, and bad specs."""
    root = tmp_path_factory.mktemp("cli_errors")
    arrays = structured_arrays(**SMALL)
    Store.from_arrays(root / "good", head=arrays["head"], splits=arrays["splits"])
    empty = structured_arrays(**SMALL)
    empty["splits"]["ood/far/hollow"] = {"features": np.zeros((0, SMALL["dim"]), np.float32)}
    Store.from_arrays(root / "empty", head=empty["head"], splits=empty["splits"])
    Store.from_arrays(root / "corrupt", head=arrays["head"], splits=arrays["splits"])
    (root / "corrupt" / "store.json").write_text("{ not json", encoding="utf-8")
    (root / "syntax.toml").write_text('classes = ["a"\n[[split]]\n', encoding="utf-8")
    (root / "content.toml").write_text(
        '[[split]]\nname = "id/train"\nusage = "sometimes"\nsource = { builtin = "digits" }\n',
        encoding="utf-8")
    (root / "noname.toml").write_text('[[split]]\nsource = { builtin = "digits" }\n',
                                      encoding="utf-8")
    (root / "tiers.txt").write_text("beach 0\nsky 3\n", encoding="utf-8")
    np.save(root / "texts.npy", np.zeros((4, 3), np.float32))
    return {"root": root, "good": root / "good", "empty": root / "empty",
            "corrupt": root / "corrupt", "missing": root / "no_such_store",
            "syntax": root / "syntax.toml", "content": root / "content.toml",
            "noname": root / "noname.toml", "tiers": root / "tiers.txt",
            "npy": root / "texts.npy"}


@pytest.fixture(scope="module")
def gscore_model(stores, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gmodel") / "g.json"
    try:
        main(["gscore", "fit", str(stores["good"]), "--method", "msp", "--out", str(path),
              "--quiet"])
    except SystemExit as exc:
        assert not exc.code
    return path


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))


def fill(args: list[str], stores: dict[str, Path], extra: dict[str, Path] | None = None
         ) -> list[str]:
    names = {**stores, **(extra or {})}
    return [str(names[a[1:-1]]) if a.startswith("{") and a.endswith("}") else a for a in args]


# --------------------------------------------------------------------------- missing store
STORE_COMMANDS = [
    ["info", "{S}"],
    ["score", "{S}", "--method", "msp"],
    ["eval", "{S}", "--method", "msp"],
    ["sweep", "{S}", "--method", "knn"],
    ["report", "{S}", "--out", "{root}/r.html"],
    ["gscore", "fit", "{S}", "--out", "{root}/g.json"],
    ["gscore", "predict", "{gmodel}", "{S}", "--split", "id/test"],
    ["gscore", "evaluate", "{S}"],
    ["protocol", "shift-grid", "{S}", "--method", "msp"],
    ["protocol", "shift-degrees", "{S}", "--out", "{root}/d.npz", "--sem-dims", "0:4",
     "--cov-dims", "4:8"],
]


@pytest.mark.parametrize("args", STORE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_missing_store_is_exit_1(capsys, stores, gscore_model, args):
    argv = fill([a.replace("{S}", "{missing}") for a in args], stores, {"gmodel": gscore_model})
    assert_one_line_error(run(capsys, *argv), 1, str(stores["missing"]), "does not exist",
                          "featstore extract")


@pytest.mark.parametrize("args", STORE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_corrupt_store_is_exit_1(capsys, stores, gscore_model, args):
    argv = fill([a.replace("{S}", "{corrupt}") for a in args], stores, {"gmodel": gscore_model})
    assert_one_line_error(run(capsys, *argv), 1, str(stores["corrupt"]), "store.json")


@pytest.mark.parametrize("args", [a for a in STORE_COMMANDS if a[0] != "info"],
                         ids=lambda a: " ".join(a[:2]))
def test_empty_split_is_exit_1(capsys, stores, gscore_model, args):
    argv = fill([a.replace("{S}", "{empty}") for a in args], stores, {"gmodel": gscore_model})
    if argv[:2] == ["gscore", "predict"]:
        argv[-1] = "ood/far/hollow"
    assert_one_line_error(run(capsys, *argv), 1, "'ood/far/hollow'", "empty (0 rows)")


def test_info_lists_an_empty_split(capsys, stores):
    code, out, err = run(capsys, "info", stores["empty"], "--json")
    assert code == 0, err
    rows = {s["name"]: s["num_rows"] for s in json.loads(out)["splits"]}
    assert rows["ood/far/hollow"] == 0


def test_score_only_the_named_splits_need_rows(capsys, stores):
    code, out, err = run(capsys, "score", stores["empty"], "--method", "msp", "--split",
                         "id/test", "--json")
    assert code == 0, err
    assert json.loads(out)["splits"]["id/test"]["n"] == SMALL["n_test"]


# --------------------------------------------------------------------------- wrong split name
@pytest.mark.parametrize("args", [
    ["score", "{good}", "--method", "msp", "--split", "id/nope"],
    ["score", "{good}", "--method", "msp", "--split", "not-a-split-name"],
    ["gscore", "predict", "{gmodel}", "{good}", "--split", "id/nope"],
    ["protocol", "shift-degrees", "{good}", "--out", "{root}/d.npz", "--id-split", "id/nope",
     "--sem-dims", "0:4", "--cov-dims", "4:8"],
], ids=lambda a: " ".join(a[:2]))
def test_wrong_split_name_is_exit_2(capsys, stores, gscore_model, args):
    argv = fill(args, stores, {"gmodel": gscore_model})
    bad = next(a for a in ("id/nope", "not-a-split-name") if a in argv)
    assert_one_line_error(run(capsys, *argv), 2, repr(bad))


# --------------------------------------------------------------------------- bad TOML spec
SPEC_COMMANDS = [
    ["extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec", "{SPEC}",
     "--out", "{root}/x", "--device", "cpu", "--workers", "0"],
    ["train", "--arch", "tests.helpers.tiny_models:TinyCNN", "--spec", "{SPEC}",
     "--out", "{root}/x.pt", "--device", "cpu", "--epochs", "1"],
]


@pytest.mark.parametrize("which, fragment", [
    ("syntax", "invalid TOML"),
    ("content", "usage 'sometimes' is not one of"),
    ("noname", "split #1: missing 'name'"),
    ("missing", "file not found"),
])
@pytest.mark.parametrize("args", SPEC_COMMANDS, ids=lambda a: a[0])
def test_bad_spec_is_exit_1(capsys, stores, args, which, fragment):
    argv = fill([a.replace("{SPEC}", "{" + which + "}") for a in args], stores)
    assert_one_line_error(run(capsys, *argv), 1, str(stores[which]), fragment)
    assert not (stores["root"] / "x").exists() and not (stores["root"] / "x.pt").exists()


# --------------------------------------------------------------------------- unknown method
@pytest.mark.parametrize("args, fragment", [
    (["score", "{good}", "--method", "nope"], "unknown scorer 'nope'"),
    (["eval", "{good}", "--method", "msp", "--method", "nope"], "unknown scorer 'nope'"),
    (["eval", "{good}", "--tune", "--method", "nope"], "unknown scorer 'nope'"),
    (["sweep", "{good}", "--method", "nope"], "unknown scorer 'nope'"),
    (["report", "{good}", "--method", "nope", "--out", "{root}/r.html"],
     "unknown scorer 'nope'"),
    (["gscore", "fit", "{good}", "--method", "nope", "--out", "{root}/g.json"],
     "unknown scorer 'nope'"),
    (["gscore", "evaluate", "{good}", "--methods", "msp,nope"], "unknown scorer 'nope'"),
    (["protocol", "shift-grid", "{good}", "--method", "nope"], "unknown scorer 'nope'"),
    (["protocol", "osr", "--data", "digits", "--methods", "msp,nope", "--out", "{root}/o"],
     "unknown scorer 'nope'"),
    (["train", "--arch", "tests.helpers.tiny_models:TinyCNN", "--spec", "{content}",
      "--out", "{root}/x.pt", "--method", "nope"], "unknown training method"),
    (["demo", "--methods", "nope", "--out", "{root}/demo"], "unknown method 'nope'"),
], ids=lambda a: " ".join(a[:2]) if isinstance(a, list) else None)
def test_unknown_method_is_exit_2(capsys, stores, args, fragment):
    line = assert_one_line_error(run(capsys, *fill(args, stores)), 2, fragment)
    assert "valid" in line  # the message lists what is accepted


# --------------------------------------------------------------------------- unknown parameter
@pytest.mark.parametrize("args, fragment", [
    (["score", "{good}", "--method", "knn", "--param", "Q=1"], "unknown parameter 'Q'"),
    (["score", "{good}", "--method", "knn", "--param", "K"], "expected key=value"),
    (["eval", "{good}", "--param", "knn.Q=1"], "unknown parameter 'Q'"),
    (["eval", "{good}", "--param", "nope.K=1"], "<method>.<param>"),
    (["eval", "{good}", "--tune", "--param", "knn.Q=1"], "unknown parameter 'Q'"),
    (["sweep", "{good}", "--method", "knn", "--param", "Q=1"], "unknown parameter 'Q'"),
    (["gscore", "fit", "{good}", "--param", "Q=1", "--out", "{root}/g.json"],
     "unknown parameter 'Q'"),
    (["gscore", "evaluate", "{good}", "--param", "knn.Q=1"], "unknown parameter 'Q'"),
    (["protocol", "shift-grid", "{good}", "--method", "knn", "--param", "knn.Q=1"],
     "unknown parameter 'Q'"),
    (["protocol", "osr", "--data", "digits", "--param", "knn.Q=1", "--out", "{root}/o"],
     "unknown parameter 'Q'"),
    (["train", "--arch", "tests.helpers.tiny_models:TinyCNN", "--spec", "{content}",
      "--out", "{root}/x.pt", "--param", "foo=1"], "unknown parameter 'foo'"),
], ids=lambda a: " ".join(a[:2]) if isinstance(a, list) else None)
def test_unknown_parameter_is_exit_2(capsys, stores, args, fragment):
    assert_one_line_error(run(capsys, *fill(args, stores)), 2, fragment)


# --------------------------------------------------------------------------- bad --grid
@pytest.mark.parametrize("grid, fragment", [
    (["K=abc"], "--grid K='abc'"),
    (["K=0"], "--grid K=0"),
    (["K=1,,5"], "--grid 'K=1,,5'"),
    (["K"], "--grid 'K'"),
    (["Q=1,2"], "unknown grid parameter 'Q'"),
    (["K=1", "K=5"], "given twice"),
])
def test_bad_grid_is_exit_2(capsys, stores, grid, fragment):
    argv = ["sweep", stores["good"], "--method", "knn"]
    for g in grid:
        argv += ["--grid", g]
    assert_one_line_error(run(capsys, *argv), 2, fragment)


def test_bad_select_by_is_exit_2(capsys, stores):
    assert_one_line_error(run(capsys, "sweep", stores["good"], "--method", "knn",
                              "--select-by", "auc"), 2, "--select-by", "'auc'")


# --------------------------------------------------------------------------- option values
@pytest.mark.parametrize("args, fragment", [
    (["info", "{good}", "--no-such-option"], "No such option: --no-such-option"),
    (["score", "{good}"], "Missing option '--method'"),
    (["train", "--arch", "tests.helpers.tiny_models:TinyCNN", "--spec", "{content}",
      "--out", "{root}/x.pt", "--epochs", "many"], "'--epochs'"),
    (["gscore", "evaluate", "{good}", "--repeats", "x"], "'--repeats'"),
    (["gscore", "nope"], "No such command 'nope'"),
    (["protocol", "shift-grid", "{good}"], "Missing option '--method'"),
    (["import", "{npy}", "--out", "{root}/imp", "--dtype", "float8"], "--dtype 'float8'"),
    (["extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec", "{content}", "--out",
      "{root}/x", "--dtype", "float8"], "'float8'"),
    (["gscore", "gbench", "--backbone", "huge", "--out", "{root}/gb"], "--backbone 'huge'"),
    (["demo", "--backbone", "huge", "--out", "{root}/demo"], "--backbone 'huge'"),
    (["demo", "--scale", "0", "--out", "{root}/demo"], "--scale 0.0"),
    (["gscore", "evaluate", "{good}", "--size", "1"], "--size"),
    (["protocol", "shift-grid", "{good}", "--method", "msp", "--metric", "accuracy"],
     "--metric 'accuracy'"),
], ids=lambda a: " ".join(a[:2]) if isinstance(a, list) else None)
def test_bad_option_value_is_exit_2(capsys, stores, args, fragment):
    line = assert_one_line_error(run(capsys, *fill(args, stores)), 2, fragment)
    if "such option" in fragment or "Missing option" in fragment or "--epochs" in fragment:
        assert "--help" in line  # click's usage errors point at the command's help


# --------------------------------------------------------------------------- missing files
@pytest.mark.parametrize("args, fragment", [
    (["import", "{root}/nothing.npz", "--out", "{root}/imp"], "no such file"),
    (["gscore", "predict", "{root}/nothing.json", "{good}", "--split", "id/test"],
     "file not found"),
    (["gscore", "gbench", "--weights", "{root}/nothing.pt", "--out", "{root}/gb"],
     "file not found"),
    (["report", "{root}/nothing", "--out", "{root}/r.html"], "neither a store directory"),
    (["protocol", "tiers", "--tiers", "{root}/nothing.txt"], "file not found"),
    (["protocol", "wordnet", "--id-classes", "{root}/nothing.txt", "--candidates",
      "{tiers}"], "no such file"),
    (["protocol", "laid-fit", "--standard", "{root}/nothing.npy", "--semantic-shift", "{npy}",
      "--covariate-shift", "{npy}", "--out", "{root}/w.npy"], "file not found"),
    (["protocol", "shift-degrees", "{good}", "--out", "{root}/d.npz", "--laid",
      "{root}/nothing.npy"], "file not found"),
    (["protocol", "lists2spec", "{root}/nothing", "--root", "{root}", "--out",
      "{root}/s.toml"], "is not a directory"),
], ids=lambda a: " ".join(a[:2]) if isinstance(a, list) else None)
def test_missing_file_is_exit_1(capsys, stores, args, fragment):
    argv = fill(args, stores)
    missing = next(a for a in argv if "nothing" in a)
    assert_one_line_error(run(capsys, *argv), 1, repr(missing), fragment)
    assert not (stores["root"] / "gb").exists()  # nothing written before the check


def test_bad_gscore_model_file_is_exit_1(capsys, stores):
    bad = stores["root"] / "bad_model.json"
    bad.write_text("[1, 2", encoding="utf-8")
    assert_one_line_error(run(capsys, "gscore", "predict", bad, stores["good"], "--split",
                              "id/test"), 1, repr(str(bad)), "not valid JSON")


def test_bad_results_json_for_report_is_exit_1(capsys, stores):
    bad = stores["root"] / "results.json"
    bad.write_text("{}", encoding="utf-8")
    assert_one_line_error(run(capsys, "report", bad, "--out", stores["root"] / "r.html"), 1,
                          repr(str(bad)), "featstore eval --out")


# --------------------------------------------------------------------------- --json on error
def test_json_mode_error_leaves_stdout_empty(capsys, stores):
    result = run(capsys, "eval", stores["missing"], "--json")
    assert_one_line_error(result, 1, "does not exist")
    result = run(capsys, "--json", "score", stores["good"], "--method", "nope")
    assert_one_line_error(result, 2, "unknown scorer")


def test_quiet_mode_still_prints_the_error(capsys, stores):
    assert_one_line_error(run(capsys, "score", stores["good"], "--method", "knn", "--param",
                              "K=100000", "--quiet"), 2, "K=100000")


def test_debug_shows_the_traceback(capsys, stores):
    from featstore.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        main(["info", str(stores["missing"]), "--debug"])


def test_unexpected_exception_is_one_line(capsys, stores, monkeypatch):
    import scorers.score_run

    def boom(*_a, **_k):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(scorers.score_run, "score_with_defaults", boom)
    line = assert_one_line_error(run(capsys, "score", stores["good"], "--method", "msp"), 1,
                                 "unexpected RuntimeError: disk on fire", "--debug")
    assert "second line" not in line


def test_subprocess_console_script(stores):
    """The installed entry point behaves the same in a real process (stderr is a pipe)."""
    import subprocess

    exe = Path(sys.executable).with_name("featstore")
    proc = subprocess.run([str(exe), "score", str(stores["good"]), "--method", "knn",
                           "--split", "id/nope"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: ") and "'id/nope'" in proc.stderr
