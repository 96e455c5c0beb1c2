"""The spec models as objects (featstore.specs): one strict TOML reader and writer, and the
benchmark, experiment and Gscore specs each read with `load` (a path or TOML text) and
written with `to_toml`, so that `load(spec.to_toml()) == spec` on real specs (the demo and
mini-Gbench specs, an OSR division, the experiment files of the tests, a Gscore spec). The
references: `tomllib` (the standard library's TOML parser) for the writer, the specs' own
loaded files for the round trips, and error lines written out by hand."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from PIL import Image
from skimage import data as skdata

from featstore.errors import InputError
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec
from featstore.specs.experiment import Experiment
from featstore.specs.gscore import GscoreSpec, ModelSpec, parse_model
from featstore.specs.toml import dumps, plain, read_toml


# ------------------------------------------------------------------------------ TOML
def test_dumps_reads_back_with_tomllib():
    """Keys that need quotes, strings with quotes / newlines / DEL / non-ASCII, floats with
    exponents and infinities, nested inline tables, a [table] and [[array]] tables; None
    values are left out."""
    data = {"name": 'a "quoted"\nline\x7f é 🙂', "n": 3, "x": 1e-05, "big": float("inf"),
            "flag": False, "gone": None, "class_map": {"my folder": 1, "b.c": "cat"},
            "transform": {"mean": [0.5, 0.25, 0.125], "nested": {"k": [1, 2]}},
            "split": [{"name": "id/test", "source": {"builtin": "noise", "count": 4}},
                      {"name": "ood/x/y", "source": {"imagelist": "/a b/l.txt"}}]}
    text = dumps(data, inline=("class_map",), comment="two\nlines\x1b[2J")
    back = tomllib.loads(text)
    assert back == {k: v for k, v in data.items() if v is not None}
    assert text.startswith("# two\n# lines [2J\n")
    assert "class_map = {" in text and "\n[transform]\n" in text
    assert text.count("[[split]]") == 2
    assert tomllib.loads(dumps({"v": float("nan")}))["v"] != tomllib.loads("v = 0")["v"]
    assert math.isnan(tomllib.loads(dumps({"v": float("nan")}))["v"])


def test_plain_turns_tuples_into_lists_deeply():
    src = {"a": (1, (2, 3)), "b": {"c": (4,)}}
    out = plain(src)
    assert out == {"a": [1, [2, 3]], "b": {"c": [4]}} and out["b"] is not src["b"]


def test_read_toml_names_the_file_and_the_text(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(InputError) as err:
        read_toml(missing, "spec")
    assert str(err.value) == f"spec {str(missing)!r}: file not found"
    with pytest.raises(InputError, match=r"^experiment \(TOML text\): invalid TOML \("):
        read_toml("a = \n", "experiment")
    doc = read_toml("a = 1\n", "spec", base=tmp_path)
    assert (doc.data, doc.base, doc.path) == ({"a": 1}, tmp_path.resolve(), None)


# ------------------------------------------------------------------------------ benchmark
def test_demo_and_gbench_specs_round_trip():
    from featstore.workflows.demo.gbench import gbench_spec, gbench_spec_text
    from featstore.workflows.demo.pipeline import demo_spec, demo_spec_text
    from featstore.workflows.demo.ten_methods import ten_methods_spec

    for spec, text in ((demo_spec(), demo_spec_text()),
                       (demo_spec("pretrained", 0.5), demo_spec_text("pretrained", 0.5)),
                       (gbench_spec(), gbench_spec_text()),
                       (ten_methods_spec(), None)):
        assert BenchmarkSpec.load(spec.to_toml()) == spec
        if text is not None:
            assert BenchmarkSpec.load(text) == spec
    demo = demo_spec()
    assert [s.name for s in demo.splits][:5] == ["id/train", "id/val", "id/test",
                                                 "csid/rotate30", "csid/blur1"]
    assert [s.usage for s in demo.splits][:5] == ["train", "val", "test", "test", "test"]
    assert all(s.role == "id" for s in gbench_spec().splits[:3])
    assert not any(s.role == "csid" for s in gbench_spec().splits)


def test_a_user_spec_round_trips_with_its_paths_resolved(tmp_path):
    """Relative paths resolve against the file's directory; the written spec holds them
    absolute, so the text read from anywhere is the same benchmark."""
    for cls, img in (("cat", skdata.chelsea()), ("my coffee", skdata.coffee())):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        Image.fromarray(img[:32, :32]).save(tmp_path / "imgs" / cls / "0.png")
    (tmp_path / "spec.toml").write_text(
        'classes = ["cat", "coffee"]\nclass_map = { "my coffee" = "coffee" }\n'
        "balance = true\nbalance_seed = 3\n"
        "[transform]\nresize = 16\ncrop = 16\nbackend = \"pil\"\n"
        '[[split]]\nname = "id/test"\nsource = { imagefolder = "imgs", per_class = 1 }\n'
        '[[split]]\nname = "ood/far/noise"\nusage = "val"\n'
        'source = { builtin = "noise", count = 5, seed = 1 }\n')
    spec = load_spec(tmp_path / "spec.toml")
    assert spec.path == tmp_path / "spec.toml"
    assert spec.splits[0].source["imagefolder"] == str(tmp_path.resolve() / "imgs")
    again = BenchmarkSpec.load(spec.to_toml("copy"), base="/")
    assert again == spec and again.path is None
    assert (again.class_map, again.balance, again.balance_seed) == ({"my coffee": "coffee"},
                                                                    True, 3)


def test_validated_checks_an_object_like_a_file(tmp_path):
    spec = BenchmarkSpec(None, [SplitSpec("id/test", "test", {"imagelist": "l.txt",
                                                              "root": ("imgs")})])
    checked = spec.validated(tmp_path)
    assert checked.splits[0].source == {"imagelist": str(tmp_path.resolve() / "l.txt"),
                                        "root": str(tmp_path.resolve() / "imgs")}
    bad = BenchmarkSpec(None, [SplitSpec("id/test", "test", {"builtin": "noise", "cnt": 3})])
    with pytest.raises(InputError) as err:
        bad.validated(where="run spec")
    assert str(err.value) == (
        "run spec: split 'id/test': source: unknown key 'cnt' (valid: builtin, count, kind, "
        "seed, part, size, per_class, max_rows, sample_seed); did you mean 'count'?")


@pytest.mark.parametrize("text, message", [
    ('[[split]]\nname = "id/val"\nusgae = "val"\nsource = { builtin = "digits" }\n',
     "spec (TOML text): split 'id/val': unknown key 'usgae' (valid: name, usage, source); "
     "did you mean 'usage'?"),
    ("[transform]\ncorp = 8\n[[split]]\nname = \"id/val\"\nsource = { builtin = \"digits\" }\n",
     "spec (TOML text): [transform]: unknown key 'corp' (valid: resize, crop, mean, std, "
     "backend); did you mean 'crop'?"),
    ("[transform]\ncrop = \"8\"\n[[split]]\nname = \"id/val\"\nsource = { builtin = \"digits\" }\n",
     "spec (TOML text): [transform] crop = '8': expected an integer >= 1"),
])
def test_benchmark_errors_are_exact(text, message):
    with pytest.raises(InputError) as err:
        BenchmarkSpec.load(text)
    assert str(err.value) == message


# ------------------------------------------------------------------------------ experiment
def _user_experiment(tmp_path: Path) -> Path:
    """The experiment file of test_experiments' user-spec test, over a one-split spec."""
    (tmp_path / "bench.toml").write_text(
        '[[split]]\nname = "id/test"\nsource = { builtin = "noise", count = 4 }\n')
    f = tmp_path / "exp.toml"
    f.write_text(
        'name = "user spec"\narch = "tiny_models:TinyCNN"\nseeds = [0, 1]\ndevice = "cpu"\n'
        '[data]\nspec = "bench.toml"\naux = { builtin = "noise", count = 3 }\n'
        '[train]\nepochs = 1\nbatch_size = 8\n'
        '[[method]]\nname = "KNN"\nscorer = "knn"\ngrid = { K = [1, 3, 5] }\n'
        '[[method]]\nname = "ConfBranch"\ntrain = "confbranch"\nscorer = "confbranch"\n'
        '[[method]]\nname = "IPTS"\nscorer = "ip_ts_mlv"\n'
        'params = { temperature = 10.0, epsilon = 0.001 }\n'
        'extract = { odin_grid = "10:0.001" }\n'
        '[[method]]\ntrain = "oe"\nscorer = "msp"\n')
    return f


def test_experiment_files_round_trip(tmp_path):
    from featstore.workflows.experiments import load_experiment

    exp = load_experiment(_user_experiment(tmp_path))
    assert [r.name for r in exp.rows] == ["KNN", "ConfBranch", "IPTS", "oe+msp"]
    assert exp.spec == str(tmp_path.resolve() / "bench.toml")
    assert load_experiment(exp.to_toml()) == exp
    assert Experiment.load(exp.to_toml()) == exp
    osr = tmp_path / "osr.toml"
    osr.write_text('seeds = 2\nruns = 2\nthreads = 4\n[data]\nosr = { data = "digits", '
                   'ratios = ["7/3", "5/5"], fractions = { train = 0.3, val = 0.1, test = 0.1 } }\n'
                   '[tune]\nrule = "none"\n[[method]]\nscorer = "msp"\n'
                   '[executor]\nkind = "local"\n')
    exp = load_experiment(osr)
    assert exp.osr is not None and exp.osr["ratios"] == [[7, 3], [5, 5]]
    assert exp.osr["val_open"] == "heldout" and exp.seeds == [0, 1] and exp.threads == 4
    assert load_experiment(exp.to_toml()) == exp
    assert "executor" not in exp.to_json() and exp.executor == {"kind": "local"}


@pytest.mark.parametrize("body, message", [
    ('[data]\nosr = { data = "digits" }\n[tune]\nrul = "val"\n[[method]]\nscorer = "msp"\n',
     " [tune]: unknown key 'rul' (valid: rule, select_by); did you mean 'rule'?"),
    ('[data]\nosr = { data = "digits" }\n[train]\nepochs = "3"\n[[method]]\nscorer = "msp"\n',
     " [train]: epochs = '3': expected an integer"),
    ('nmae = "x"\n[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\n',
     ": unknown key 'nmae' (valid: name, arch, seeds, runs, device, threads, data, train, "
     "tune, method, executor, model, checkpoint); did you mean 'name'?"),
    ('threads = 0\n[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\n',
     ": threads = 0: expected an integer >= 1"),
    ('threads = "2"\n[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\n',
     ": threads = '2': expected an integer"),
    ('[data]\nosr = { data = "digits" }\n[[method]]\nscorer = "msp"\nparams = 3\n',
     ": [[method]] #1: params = 3: expected a table"),
])
def test_experiment_errors_name_file_table_and_key(tmp_path, body, message):
    from featstore.workflows.experiments import load_experiment

    f = tmp_path / "e.toml"
    f.write_text(body)
    with pytest.raises(InputError) as err:
        load_experiment(f)
    assert str(err.value) == f"experiment {str(f)!r}" + message


# ------------------------------------------------------------------------------ Gscore
GSCORE = """methods = ["msp", "energy"]
models = ["kmeans-l2", "ude-wasserstein@0.93", "gmm-kl@auto"]
targets = ["fpr95", "auroc"]
ratio = "1:3"
size = 100
repeats = 3
id_pools = "shared"
tau_from = "each"
splits = ["ood/far/*"]

[robustness]
ratios = ["1:10", 10]
sizes = [50]
heterogeneous = true

[params.knn]
K = 5
"""


def test_gscore_spec_round_trips_and_gives_evaluate_options(tmp_path):
    (tmp_path / "g.toml").write_text(GSCORE)
    spec = GscoreSpec.load(tmp_path / "g.toml")
    assert GscoreSpec.load(spec.to_toml()) == spec
    assert GscoreSpec.load(GscoreSpec().to_toml()) == GscoreSpec()
    opts = spec.options()
    assert opts["id_train_fraction"] is None and opts["tau_from"] is None
    assert (opts["ratios"], opts["sizes"], opts["robust_heterogeneous"]) == (["1:10", 10],
                                                                            [50], True)
    assert opts["params"] == {"knn": {"K": 5}} and opts["size"] == 100
    assert [parse_model(m) for m in opts["models"]] == [
        ModelSpec("kmeans", "l2", None), ModelSpec("ude", "wasserstein", 0.93),
        ModelSpec("gmm", "kl", "auto")]
    assert GscoreSpec().options()["tau_from"] == "msp"


@pytest.mark.parametrize("text, message", [
    ('modles = ["kmeans-l2"]\n', ": unknown key 'modles' (valid: methods, models, targets, "
     "ratio, size, heterogeneous, sets_per_split, repeats, seed, train_fraction, id_pools, "
     "id_train_fraction, tau_from, splits, exclude, baselines, ude_kernel, clip, cv, corr_on, "
     "paper, robustness, params); did you mean 'models'?"),
    ("repeats = 2.5\n", ": repeats = 2.5: expected an integer"),
    ('[robustness]\nsize = [5]\n', " [robustness]: unknown key 'size' (valid: ratios, sizes, "
     "heterogeneous, models); did you mean 'sizes'?"),
    ('models = ["ude-l3"]\n', ": model 'ude-l3': expected <modelling>-<distance>[@tau] with "
     "modelling in kmeans, gmm, ude and distance in l2, kl, kl_rev, wasserstein, w2 (e.g. "
     "ude-wasserstein)"),
    ('ratio = "1:0"\n', ": ratio '1:0': expected IND:OOD like 1:1 or 1:100"),
    ("train_fraction = 1.0\n", ": train_fraction = 1.0: expected a number in (0, 1)"),
])
def test_gscore_errors_are_exact(text, message):
    with pytest.raises(InputError) as err:
        GscoreSpec.load(text)
    assert str(err.value) == "gscore spec (TOML text)" + message


def test_cli_gscore_evaluate_reads_a_spec_file(tmp_path, capsys):
    """`gscore evaluate --spec g.toml` gives the numbers of the same settings as options
    (the reference: that run); an option beside --spec and a bad name in the file are
    one-line errors naming them."""
    import json

    from featstore import Store
    from tests.helpers.cli import run_cli
    from tests.helpers.stores import structured_arrays

    arrays = structured_arrays(seed=3, n_train=120, n_val=40, n_test=160, n_ood=80)
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    (tmp_path / "g.toml").write_text(
        'methods = ["msp", "energy"]\nmodels = ["ude-wasserstein"]\nrepeats = 2\n'
        'sets_per_split = 2\nbaselines = false\nid_pools = "shared"\ntau_from = "each"\n'
        '[robustness]\nratios = ["1:3"]\n')
    code, out, err = run_cli(capsys, "gscore", "evaluate", tmp_path / "s", "--json",
                             "--spec", tmp_path / "g.toml")
    assert code == 0, err
    by_spec = json.loads(out)
    code, out, err = run_cli(capsys, "gscore", "evaluate", tmp_path / "s", "--json",
                             "--methods", "msp,energy", "--models", "ude-wasserstein",
                             "--repeats", "2", "--sets-per-split", "2", "--no-baselines",
                             "--id-pools", "shared", "--tau-from", "each", "--ratios", "1:3")
    assert code == 0, err
    by_options = json.loads(out)
    for doc in (by_spec, by_options):
        del doc["seconds"]
    assert by_spec == by_options
    assert by_spec["config"]["id_pools"] == "shared" and len(by_spec["robustness"]) == 1
    code, _, err = run_cli(capsys, "gscore", "evaluate", tmp_path / "s", "--spec",
                           tmp_path / "g.toml", "--repeats", "3")
    assert code == 2 and err.strip().splitlines() == [
        f"error: --spec {str(tmp_path / 'g.toml')!r} sets the evaluation's settings; drop "
        "--repeats (or set it in the spec)"]
    (tmp_path / "bad.toml").write_text('methods = ["msp", "enrgy"]\n')
    code, _, err = run_cli(capsys, "gscore", "evaluate", tmp_path / "s", "--spec",
                           tmp_path / "bad.toml")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "unknown scorer 'enrgy'" in err and "did you mean 'energy'?" in err
