"""`featstore protocol openood` (#45): OpenOOD v1.5's benchmark definitions, its list format,
its parameter search, its table and its published numbers.

References, all from github.com/Jingkang50/OpenOOD at commit
3c35632ee91b54b09d1f085d04f94744cece7d0b unless said otherwise:
- openood/evaluation_api/datasets.py `DATA_INFO` (splits, groups, folders) and
  preprocessor.py `default_preprocessing_dict`, typed here by hand;
- openood/datasets/imglist_dataset.py `ImglistDataset.getitem` (a list line), transcribed;
- openood/evaluation_api/evaluator.py `hyperparam_search` + `recursive_generator` and
  openood/evaluators/metrics.py `auc_and_fpr_recall`, transcribed (`_hyperparam_search`,
  `_openood_metrics` below, on scikit-learn as OpenOOD runs them);
- github.com/zjysteven/OpenOOD branch `leaderboard` at 28d3a40b613c, results/*.csv: the
  published values checked by hand below.
"""

from __future__ import annotations

import ast
import csv
import json
import shutil

import numpy as np
import pytest
from sklearn import metrics as skm

from cli.commands_openood import print_openood
from featstore import ArrayStore, Store
from featstore.errors import InputError, UsageError
from featstore.extraction.datasets import parse_image_list
from featstore.workflows.experiments import load_experiment
from featstore.workflows.protocols.openood.definitions import (
    BENCHMARKS,
    check_tree,
    load_benchmark,
    parse_openood_line,
)
from featstore.workflows.protocols.openood.published import (
    infer_benchmark,
    load_published,
    published_for,
)
from featstore.workflows.protocols.openood.run import openood_run
from featstore.workflows.report.collect import ReportData
from featstore.workflows.report.reference import reference_table
from scorers import get_scorer
from scorers.openood_aps import openood_choose, openood_order, openood_rank
from scorers.sweep import sweep
from tests.helpers.cli import run_cli
from tests.helpers.openood_tree import make_openood_tree
from tests.helpers.stores import structured_arrays


# --------------------------------------------------------------- transcriptions of OpenOOD
def _recursive_generator(values, n):
    """evaluator.py `Evaluator.recursive_generator`, as written."""
    if n == 1:
        return [[x] for x in values[0]]
    results = []
    temp = _recursive_generator(values, n - 1)
    for x in values[n - 1]:
        for y in temp:
            k = y.copy()
            k.append(x)
            results.append(k)
    return results


def _openood_metrics(conf, label):
    """metrics.py `auc_and_fpr_recall(conf, label, 0.95)` -> (fpr, auroc, aupr_in, aupr_out)."""
    ood_indicator = np.zeros_like(label)
    ood_indicator[label == -1] = 1
    fpr_list, tpr_list, _ = skm.roc_curve(ood_indicator, -conf)
    fpr = fpr_list[np.argmax(tpr_list >= 0.95)]
    precision_in, recall_in, _ = skm.precision_recall_curve(1 - ood_indicator, conf)
    precision_out, recall_out, _ = skm.precision_recall_curve(ood_indicator, -conf)
    return (fpr, skm.auc(fpr_list, tpr_list), skm.auc(recall_in, precision_in),
            skm.auc(recall_out, precision_out))


def _hyperparam_search(sweep_cfg, infer):
    """evaluator.py `hyperparam_search`: `sweep_cfg` the postprocessor_sweep (ordered),
    `infer(hyperparam list)` -> (id val conf, ood val conf)."""
    max_auroc, final_index = 0, None
    combos = _recursive_generator(list(sweep_cfg.values()), len(sweep_cfg))
    for i, hyperparam in enumerate(combos):
        id_conf, ood_conf = infer(hyperparam)
        conf = np.concatenate([id_conf, ood_conf])
        label = np.concatenate([np.zeros(len(id_conf), int), -np.ones(len(ood_conf), int)])
        auroc = _openood_metrics(conf, label)[1]
        if auroc > max_auroc:
            final_index, max_auroc = i, auroc
    return combos[final_index]


def _getitem_line(line):
    """imglist_dataset.py `getitem`'s reading of one line: (image_name, label)."""
    tokens = line.strip("\n").split(" ", 1)
    image_name, extra_str = tokens[0], tokens[1]
    if image_name.startswith("/"):
        raise RuntimeError('image_name starts with "/"')
    extras = ast.literal_eval(extra_str)
    try:
        extras.items()
        return image_name, 0
    except AttributeError:
        return image_name, int(extra_str)


# --------------------------------------------------------------- definitions and lists
def test_benchmark_files_hold_openood_data_info():
    """The four files against DATA_INFO / default_preprocessing_dict, typed by hand."""
    expect = {
        "cifar10": ("cifar10", 10, 32, 32, "tin", ["cifar100", "tin"],
                    ["mnist", "svhn", "texture", "places365"], ["cifar10c"]),
        "cifar100": ("cifar100", 100, 32, 32, "tin", ["cifar10", "tin"],
                     ["mnist", "svhn", "texture", "places365"], []),
        "imagenet200": ("imagenet200", 200, 256, 224, "openimage_o", ["ssb_hard", "ninco"],
                        ["inaturalist", "textures", "openimage_o"],
                        ["imagenet_v2", "imagenet_c", "imagenet_r"]),
        "imagenet1k": ("imagenet", 1000, 256, 224, "openimage_o", ["ssb_hard", "ninco"],
                       ["inaturalist", "textures", "openimage_o"],
                       ["imagenet_v2", "imagenet_c", "imagenet_r", "imagenet_es"]),
    }
    assert set(BENCHMARKS) == set(expect)
    for name, (oname, classes, pre, img, val, near, far, csid) in expect.items():
        b = load_benchmark(name)
        assert (b.openood_name, b.num_classes) == (oname, classes)
        assert (b.preprocess["pre_size"], b.preprocess["img_size"]) == (pre, img)
        assert b.groups() == {"near": near, "far": far}
        by_name = {s.name: s for s in b.splits}
        assert by_name[f"ood/val/{val}"].imglist == f"benchmark_imglist/{oname}/val_{val}.txt"
        assert by_name["id/test"].imglist == f"benchmark_imglist/{oname}/test_{oname}.txt"
        assert [s.dataset for s in b.splits if s.group == "csid"] == csid
        assert b.source["commit"] == "3c35632ee91b54b09d1f085d04f94744cece7d0b"
    b = load_benchmark("imagenet1k")
    assert {s.name: s.data_dir for s in b.splits}["ood/far/textures"] == "images_classic"
    assert b.preprocess["mean"] == [0.485, 0.456, 0.406]
    assert load_benchmark("cifar100").preprocess["std"] == [0.2675, 0.2565, 0.2761]
    assert {s.name: s.imglist for s in load_benchmark("imagenet200").splits}[
        "csid/imagenet_v2"] == "benchmark_imglist/imagenet200/test_imagenet200_v2.txt"


@pytest.mark.parametrize("line", ["cifar10/test/cat/1.png 3\n", "tin/val/x.JPEG -1",
                                  "imagenet_v2/7/a.jpeg  7 "])
def test_list_lines_read_as_openood_reads_them(line):
    where = "list line 1"
    assert parse_openood_line(line, where) == _getitem_line(line)


@pytest.mark.parametrize("line,needle", [("/abs/x.png 1", "starts with '/'"),
                                         ("x.png", "expected '<image path> <label>'"),
                                         ("x.png cat", "not an integer"),
                                         ("x y.png 1", "'y.png 1' is not an integer"),
                                         ("x.png {'sc_label': 2}", "dict of extras")])
def test_bad_list_lines_are_named(line, needle):
    with pytest.raises(InputError, match="list line 7") as exc:
        parse_openood_line(line, "list line 7")
    assert needle in str(exc.value)


def test_tree_check_names_the_missing_file_before_extraction(tmp_path):
    root = make_openood_tree(tmp_path / "data", per_class=1, n_ood=2)
    bench = load_benchmark("cifar10")
    plan = check_tree(bench, root, None, fsood=False)
    # the groups as OpenOOD's loader builds them, and featstore's list reader agrees per line
    assert [s.name for s, _, _ in plan.used] == [
        "id/train", "id/val", "id/test", "ood/val/tin", "ood/near/cifar100", "ood/near/tin",
        "ood/far/mnist", "ood/far/svhn", "ood/far/texture", "ood/far/places365"]
    for _, path, rows in plan.used:
        lines = path.read_text().splitlines()
        assert [_getitem_line(x) for x in lines] == parse_image_list(str(path))
        assert rows == len(lines)
    # --imglists: the user's copy of benchmark_imglist elsewhere
    moved = shutil.move(root / "benchmark_imglist", tmp_path / "lists")
    assert [p for _, p, _ in check_tree(bench, root, moved).used][0] == \
        tmp_path / "lists/cifar10/train_cifar10.txt"
    with pytest.raises(InputError, match=r"benchmark_imglist/cifar10/train_cifar10\.txt"):
        check_tree(bench, root, None)
    shutil.move(moved, root / "benchmark_imglist")
    with pytest.raises(UsageError, match=r"model has 3 outputs; OpenOOD's cifar10 has 10"):
        openood_run("cifar10", root, "tests.helpers.tiny_models:tiny_cnn", tmp_path / "o")
    assert not (tmp_path / "o").exists()
    (root / "images_classic/svhn/test/1.png").unlink()
    with pytest.raises(InputError, match=r"images_classic/svhn/test/1\.png.*test_svhn\.txt"
                       r".*ood/far/svhn.*file not found"):
        check_tree(bench, root, None)
    (root / "benchmark_imglist/cifar10/test_mnist.txt").unlink()
    with pytest.raises(InputError, match=r"test_mnist\.txt.?: file not found"):
        check_tree(bench, root, None)


# --------------------------------------------------------------- OpenOOD's search
def test_openood_order_is_recursive_generator():
    grid = {"gamma": [0.01, 0.1, 0.5], "M": [10, 50], "x": ["a", "b"]}
    expected = _recursive_generator(list(grid.values()), 3)
    assert [list(c.values()) for c in openood_order(grid)] == expected
    ranks = [openood_rank(c, grid) for c in openood_order(grid)]
    assert ranks == sorted(ranks)
    # ties go to the earliest in OpenOOD's order, not in the product's
    assert openood_choose([0.5, 0.9, 0.9], [(1, 0), (0, 1), (0, 0)]) == 2


@pytest.mark.parametrize("method,cfg", [
    ("gen", {"gamma_list": [0.01, 0.1, 0.5, 1, 2, 5, 10], "M_list": [10, 50, 100, 200, 500,
                                                                      1000]}),
    ("react", {"percentile_list": [85, 90, 95, 99]}),
    ("odin", {"temperature": [1, 10, 100, 1000]}),
])
def test_tune_openood_picks_what_hyperparam_search_picks(method, cfg):
    """configs/postprocessors/{gen,react,odin}.yml's sweeps (odin without its noise key:
    featstore's odin does not perturb), searched by the transcription on the same scores."""
    arrays = structured_arrays(seed=3, num_classes=5, dim=16, n_train=200, n_val=80, n_test=60,
                               n_ood=60)
    st = ArrayStore(head=arrays["head"], splits=arrays["splits"])
    names = [k.removesuffix("_list") for k in cfg]

    def infer(hyperparam):
        s = get_scorer(method, **dict(zip(names, hyperparam, strict=True)))
        s.fit(st)
        return s.score(st.split("id/val")), s.score(st.split("ood/near/blend_val"))

    expected = dict(zip(names, _hyperparam_search(cfg, infer), strict=True))
    result = sweep(st, method, rule="openood")
    assert result["chosen"]["setting"] == expected
    assert result["grid_source"] == "openood" and result["rule"] == "openood"
    assert result["openood"]["source"].endswith(f"configs/postprocessors/{method}.yml")


# --------------------------------------------------------------- end to end
def test_miniature_openood_tree_end_to_end(tmp_path, capsys):
    root = make_openood_tree(tmp_path / "data")
    out = tmp_path / "run"
    code, stdout, _ = run_cli(
        capsys, "protocol", "openood", "--benchmark", "cifar10", "--data-root", str(root),
        "--model", "tests.helpers.tiny_models:tiny_cnn10", "--out", str(out), "--fsood",
        "--method", "msp", "--method", "react", "--tune", "openood", "--tune", "defaults",
        "--reference", "openood-v1.5", "--boot", "50", "--device", "cpu", "--json")
    assert code == 0
    doc = json.loads(stdout)
    st = Store.open(out / "store")
    assert set(st.splits()) == {s["name"] for s in doc["splits"]}
    assert st.split("ood/val/tin").usage == "val" and "csid/cifar10c" in st.splits()
    # OpenOOD's table of msp, checked against OpenOOD's metrics on the stored logits
    rows = list(csv.reader((out / "openood/ood/msp.csv").read_text().splitlines()))
    assert rows[0] == ["", "FPR@95", "AUROC", "AUPR_IN", "AUPR_OUT", "ACC"]
    assert [r[0] for r in rows[1:]] == ["cifar100", "tin", "nearood", "mnist", "svhn",
                                        "texture", "places365", "farood"]

    def msp(name):
        logits = np.asarray(st.split(name).logits, np.float64)
        e = np.exp(logits - logits.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True)).max(1)

    idc = msp("id/test")
    got = {r[0]: [float(v) for v in r[1:]] for r in rows[1:]}
    per = {}
    for d in ("cifar100", "tin"):
        ood = msp(f"ood/near/{d}")
        label = np.concatenate([np.zeros(len(idc), int), -np.ones(len(ood), int)])
        per[d] = 100 * np.array(_openood_metrics(np.concatenate([idc, ood]), label))
        np.testing.assert_allclose(got[d][:4], per[d], atol=0.006)
    np.testing.assert_allclose(got["nearood"][:4], (per["cifar100"] + per["tin"]) / 2,
                               atol=0.006)
    labels = np.asarray(st.split("id/test").labels)
    acc = 100 * np.mean(np.argmax(st.split("id/test").logits, 1) == labels)
    assert got["tin"][4] == pytest.approx(acc, abs=0.006)
    assert (out / "openood/ood/msp.ci.csv").is_file()
    # full-spectrum: ID = id/test + csid/cifar10c (OpenOOD's eval_ood(fsood=True))
    fs = {r[0]: r[1:] for r in csv.reader((out / "openood/fsood/msp.csv").read_text()
                                          .splitlines())}
    id_fs, tin = np.concatenate([idc, msp("csid/cifar10c")]), msp("ood/near/tin")
    label = np.concatenate([np.zeros(len(id_fs), int), -np.ones(len(tin), int)])
    np.testing.assert_allclose([float(v) for v in fs["tin"][:4]], 100 * np.array(
        _openood_metrics(np.concatenate([id_fs, tin]), label)), atol=0.006)
    fs_ci = list(csv.reader((out / "openood/fsood/react.ci.csv").read_text().splitlines()))
    assert fs_ci[3][0] == "nearood" and float(fs_ci[3][3]) <= float(fs_ci[3][4])
    # the reference column: OpenOOD's published CIFAR-10 MSP (results/cifar10.csv line 3)
    ref = {r["method"]: r for r in doc["reference"]["rows"]}
    assert (ref["msp"]["near_auroc_published"], ref["msp"]["far_auroc_published"]) == (88.03,
                                                                                        90.73)
    lo, hi = ref["msp"]["near_auroc_ci"]
    assert ref["msp"]["near_auroc_outside"] == (not lo <= 88.03 <= hi)
    assert doc["modes"]["openood"]["summary"][1]["chosen"] is not None
    assert "| msp |" in (out / "table.md").read_text()
    print_openood(doc)  # the terminal's table: the published column marked where outside
    shown = capsys.readouterr().out
    assert "near pub." in shown and "88.03" in shown and "likely causes:" in shown
    # featstore table re-renders the run; --reference on a run made without it
    code, stdout, _ = run_cli(capsys, "table", str(out), "--reference", "openood-v1.5",
                              "--json")
    assert code == 0 and "88.03" in json.loads(stdout)["markdown"]
    # --tune-rule openood on eval and sweep, over the same store
    code, stdout, _ = run_cli(capsys, "eval", str(out / "store"), "--method", "react",
                              "--tune", "--tune-rule", "openood", "--ci", "0", "--json")
    tuned = json.loads(stdout)
    assert code == 0 and tuned["rule"] == "openood"
    assert tuned["methods"]["react"]["chosen"] == doc["modes"]["openood"]["summary"][1]["chosen"]
    code, stdout, _ = run_cli(capsys, "sweep", str(out / "store"), "--method", "react",
                              "--tune-rule", "openood", "--ci", "0", "--json")
    assert code == 0 and json.loads(stdout)["grid"] == {"percentile": [85, 90, 95, 99]}
    # an experiment file's [tune] rule = "openood" (featstore run over the existing store)
    exp = tmp_path / "exp.toml"
    exp.write_text(f'name = "oo"\n[data]\nstores = ["{out / "store"}"]\n[tune]\nrule = '
                   '"openood"\n[[method]]\nname = "ReAct"\nscorer = "react"\n')
    code, stdout, _ = run_cli(capsys, "run", str(exp), "--out", str(tmp_path / "exp"), "--json")
    assert code == 0 and [r["chosen"] for r in json.loads(stdout)["runs"]] == [
        tuned["methods"]["react"]["chosen"]]
    exp.write_text(exp.read_text().replace('rule = "openood"', 'rule = "openood"\n'
                                           'select_by = "fpr95"'))
    with pytest.raises(InputError, match=r"\[tune\]: select_by='fpr95': OpenOOD's"):
        load_experiment(exp)
    # the report's reference table over that evaluation (the benchmark told from its splits)
    title, _, ref_rows, notes = reference_table(ReportData(result=tuned, provenance={}),
                                                "openood-v1.5", 10)
    assert title == "OpenOOD v1.5 published results (cifar10)"
    assert ref_rows[0][0] == "react" and ref_rows[0][2].startswith("87.11")
    assert ref_rows[0][5].startswith("zjysteven/OpenOOD results/cifar10.csv:")
    for args, needle in ((["eval", str(out / "store"), "--tune-rule", "openood"], "needs --tune"),
                         (["sweep", str(out / "store"), "--method", "react", "--tune-rule",
                           "x"], "not a tuning rule"),
                         (["sweep", str(out / "store"), "--method", "react", "--tune-rule",
                           "openood", "--select-by", "fpr95"], "AUROC only"),
                         (["table", str(tmp_path), "--reference", "openood-v1.5"],
                          "not a `protocol openood` run"),
                         (["report", str(out / "store"), "--reference", "openood-v2"],
                          "expected one of openood-v1.5"),
                         (["report", str(out / "store"), "--tune-rule", "openood"],
                          "needs --tune")):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and needle in err, (args, err)
    shutil.rmtree(out)


def test_published_file_rows():
    """Every featstore scorer OpenOOD's leaderboard lists, per benchmark and backbone, with
    its source; values checked by hand against results/*.csv at 28d3a40b613c."""
    rows = load_published()
    ce = {(r["benchmark"], r["featstore_method"]): r for r in rows if r["training"] == "ce"}
    common = {"msp", "temp_scaling", "odin_perturbed", "mds", "rmds", "energy", "gradnorm",
              "react", "mls", "kl_matching", "vim", "knn", "dice", "rankfeat", "ash", "she",
              "gen", "fdbd"}
    for bench in BENCHMARKS:
        have = {m for b, m in ce if b == bench}
        assert common <= have, (bench, common - have)
        assert {r["arch"] for r in rows if r["benchmark"] == bench} == {
            "ResNet50" if bench == "imagenet1k" else "ResNet18"}
    assert all(r["source_file"].startswith("results/") and len(r["commit"]) == 40
               for r in rows)
    assert (ce["imagenet1k", "msp"]["near_auroc"], ce["imagenet1k", "msp"]["far_auroc"]) == (
        76.02, 85.23)
    assert (ce["cifar100", "knn"]["near_auroc"], ce["cifar100", "knn"]["far_auroc_std"]) == (
        80.18, 0.17)
    assert ce["imagenet200", "ash"]["far_auroc"] == 93.90
    # a training method's own scorer: its row is that training's (results/cifar10.csv)
    assert published_for("cifar10", "confbranch")["training"] == "confbranch"
    assert published_for("cifar10", "msp", "logitnorm")["training"] == "logitnorm"
    assert published_for("cifar10", "entropy") is None


def test_benchmark_told_from_splits():
    near_far = ["ood/near/ssb_hard", "ood/near/ninco", "ood/far/inaturalist",
                "ood/far/textures", "ood/far/openimage_o"]
    assert infer_benchmark(near_far, 1000) == "imagenet1k"
    assert infer_benchmark(near_far, 200) == "imagenet200"
    with pytest.raises(UsageError, match="both imagenet200 and imagenet1k fit"):
        infer_benchmark(near_far, None)
    with pytest.raises(UsageError, match="cannot tell"):
        infer_benchmark(["ood/far/faint"], 10)
