"""FACETS WordNet class assignment (featstore.workflows.protocols.wordnet) on Debian's WordNet 3.0.

References: nltk's own path_similarity / wup_similarity / shortest_path_distance on the same
synsets; the values nltk documents for WordNet 3.0 (dog.n.01 vs cat.n.01: path 0.2, LCH
2.0281482472922856, Wu-Palmer 0.857; noun max depth 19); `man 5 lexnames`; hand-computed
similarities (path 1/(d+1), LCH/ln(2*19) = 1 - ln(d+1)/ln 38, Wu-Palmer from nltk) and the
threshold rule applied by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from featstore.errors import UsageError
from featstore.specs.benchmark import load_spec
from featstore.store.arraystore import ArrayStore
from featstore.workflows.protocols import wordnet as wnp
from featstore.workflows.protocols.facets_similarity import (
    best_and_worst,
    prediction_similarity,
)
from tests.helpers.cli import run_cli as run
from tests.helpers.references import hand_sim


@pytest.fixture(scope="module")
def wn():
    return wnp.load_wordnet()


def test_lexnames_file_is_man_5_lexnames():
    lines = wnp.lexnames_text().splitlines()
    assert len(lines) == 45
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1"
    assert lines[29] == "29\tverb.body\t2" and lines[44] == "44\tadj.ppl\t3"


def test_similarities_equal_nltk_on_known_pairs(wn):
    assert wn.get_version() == "3.0"
    assert wnp.noun_max_depth(wn) == 19
    bedroom, bed = wn.synset("bedroom.n.01"), wn.synset("bed.n.01")
    s = wnp.synset_similarity(bedroom, bed)
    assert s["path"] == pytest.approx(0.1) == pytest.approx(bedroom.path_similarity(bed))
    assert s["wup"] == pytest.approx(0.5263157894736842) == pytest.approx(
        bedroom.wup_similarity(bed))
    assert s["wup"] == pytest.approx(10 / 19)
    dog, cat = wn.synset("dog.n.01"), wn.synset("cat.n.01")
    s = wnp.synset_similarity(dog, cat)
    assert s["path"] == pytest.approx(0.2)
    assert s["lch"] == pytest.approx(2.0281482472922856, abs=1e-12)  # nltk's documented LCH
    assert s["wup"] == pytest.approx(0.8571428571428571)
    assert s["lch_norm"] == pytest.approx(2.0281482472922856 / math.log(38.0))
    assert s["sim"] == pytest.approx(hand_sim(4, 6 / 7))
    same = wnp.synset_similarity(dog, dog)
    assert same["path"] == same["lch_norm"] == 1.0
    assert same["wup"] == pytest.approx(dog.wup_similarity(dog))  # nltk: 13/14 for dog itself


def test_class_resolution(wn, tmp_path):
    m = wnp.resolve_classes(["n02084071", "tench", "crane", "dog.n.01", "kitchen", "zzzq"],
                            {"kitchen": ["kitchen.n.01"]}, wn=wn)
    assert {k: [s.name() for s in v] for k, v in m.synsets.items()} == {
        "n02084071": ["dog.n.01"], "tench": ["tench.n.01"], "dog.n.01": ["dog.n.01"],
        "kitchen": ["kitchen.n.01"]}
    assert m.how == {"n02084071": "wnid", "tench": "imagenet", "dog.n.01": "synset",
                     "kitchen": "mapping"}
    assert m.unmapped == ["crane", "zzzq"]  # crane is two ImageNet classes: ambiguous
    auto = wnp.resolve_classes(["galaxy", "zzzq", "crane"], auto=True, wn=wn)
    assert [s.name() for s in auto.synsets["galaxy"]] == ["galaxy.n.01"] and auto.unmapped == [
        "zzzq"]
    # "crane" auto-maps to its first noun sense, crane.n.01 (Hart Crane, the poet): flagged
    # with every sense, as wn.synsets lists them (the reference)
    assert auto.synsets["crane"][0].name() == "crane.n.01"
    assert auto.ambiguous == {c: [x.name() for x in wn.synsets(c, pos="n")]
                              for c in ("galaxy", "crane")}  # galaxy.n.01, galax.n.01, ...
    assert len(auto.ambiguous["crane"]) == 5 and auto.ambiguous["crane"][2] == "grus.n.01"
    single = wnp.resolve_classes(["zebra"], auto=True, wn=wn)
    assert single.how == {"zebra": "imagenet"} and single.ambiguous == {}
    with pytest.raises(UsageError, match="'nosuch.n.01' .* is not a WordNet synset"):
        wnp.resolve_classes(["x"], {"x": ["nosuch.n.01"]}, wn=wn)


def test_threshold_assignment_by_hand(wn):
    """ID set {bedroom, dog}; candidates bathroom, cat, bed, galaxy."""
    ids = wnp.resolve_classes(["bedroom.n.01", "dog.n.01"], wn=wn)
    cands = wnp.resolve_classes(["bathroom.n.01", "cat.n.01", "bed.n.01", "galaxy.n.01"], wn=wn)
    scores = {s.name: s for s in wnp.score_candidates(cands, ids)}
    expect = {"bathroom.n.01": (hand_sim(2, 8 / 9), "bedroom.n.01"),
              "cat.n.01": (hand_sim(4, 6 / 7), "dog.n.01"),
              "bed.n.01": (hand_sim(9, 10 / 19), "bedroom.n.01"),
              "galaxy.n.01": (hand_sim(12, 1 / 7), None)}
    for name, (sim, nearest) in expect.items():
        assert scores[name].sim == pytest.approx(sim)
        if nearest:
            assert scores[name].nearest == nearest
    # sims: bathroom 0.640, cat 0.538, bed 0.331, galaxy 0.172
    # distance rule: ID when 1 - sim <= T
    assert wnp.assign_threshold(scores.values(), 0.40) == {
        "bathroom.n.01": "id", "cat.n.01": "ood", "bed.n.01": "ood", "galaxy.n.01": "ood"}
    assert wnp.assign_threshold(scores.values(), 0.50)["cat.n.01"] == "id"
    assert wnp.assign_threshold(scores.values(), 0.45)["cat.n.01"] == "ood"
    # similarity rule: ID when sim >= T
    assert wnp.assign_threshold(scores.values(), 0.30, "similarity") == {
        "bathroom.n.01": "id", "cat.n.01": "id", "bed.n.01": "id", "galaxy.n.01": "ood"}
    assert [wnp.threshold_tag(t) for t in (0.4, 0.45, 0.5, 0.425)] == ["T40", "T45", "T50",
                                                                         "T42.5"]


def test_tiers():
    tiers = {"a": 0, "b": 1, "c": 2, "d": 3}
    assert wnp.assign_tiers(tiers, "T1") == {"a": "id", "b": "id", "c": "ood", "d": "ood"}
    assert wnp.assign_tiers(tiers, "T2") == {"a": "id", "b": "id", "c": "id", "d": "ood"}


def test_missing_wordnet_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FEATSTORE_WORDNET_DIR", str(tmp_path / "none"))
    with pytest.raises(UsageError, match="apt-get install wordnet-base wordnet-sense-index"):
        wnp.wordnet_source_dir()


def test_cache_directory_is_built(tmp_path, monkeypatch):
    """A fresh cache gets copies (not links) of the database files plus lexnames."""
    monkeypatch.setenv("FEATSTORE_CACHE", str(tmp_path / "cache"))
    root = wnp.ensure_nltk_wordnet()
    d = root / "corpora" / "wordnet"
    src = wnp.wordnet_source_dir()
    assert (d / "lexnames").read_text() == wnp.lexnames_text()
    for name in ("data.noun", "index.sense"):
        assert not (d / name).is_symlink() and (d / name).stat().st_nlink == 1
        assert (d / name).stat().st_size == (src / name).stat().st_size


def _tree(root: Path, classes: list[str]) -> Path:
    photos = [skdata.astronaut(), skdata.coffee(), skdata.chelsea(), skdata.rocket()]
    for i, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            Image.fromarray(photos[i % 4][10 * k:10 * k + 40, :40]).save(root / cls / f"{k}.png")
    return root


@pytest.mark.parametrize("out_form", ["absolute", "relative"])
def test_cli_writes_assignment_lists_and_spec(tmp_path, capsys, monkeypatch, out_form):
    """Candidates as an ImageFolder of wnids; the T40 spec merges ID-assigned candidate images
    into id/test and puts the others in ood/wordnet/t40. `--out` absolute or relative to the
    working directory (a relative --out once wrote list paths the spec resolved twice:
    wn/wn/T40/id_test_merged.txt)."""
    monkeypatch.chdir(tmp_path)
    out_arg = str(tmp_path / "wn") if out_form == "absolute" else "wn"
    (tmp_path / "id.txt").write_text("bedroom.n.01\ndog.n.01\n")
    cands = _tree(tmp_path / "cands", ["bathroom.n.01", "cat.n.01", "n02818832"])  # bed
    base = _tree(tmp_path / "base", ["bedroom", "dog", "kitchen"])
    (tmp_path / "base.toml").write_text(
        f'[[split]]\nname = "id/train"\nsource = {{ imagefolder = "{base}" }}\n\n'
        f'[[split]]\nname = "id/test"\nsource = {{ imagefolder = "{base}" }}\n')
    code, stdout, err = run(capsys, "protocol", "wordnet", "--id-classes",
                            str(tmp_path / "id.txt"), "--candidates", str(cands),
                            "--threshold", "0.40", "--images", str(cands), "--base-spec",
                            str(tmp_path / "base.toml"), "--out", out_arg, "--no-balance",
                            "--val-fraction", "0", "--json")
    assert code == 0, err
    res = json.loads(stdout)
    assert res["assignments"]["T40"] == {"bathroom.n.01": "id", "cat.n.01": "ood",
                                         "n02818832": "ood"}
    assert res["candidates"]["how"]["n02818832"] == "wnid"
    assert res["sampling"] == {"per_class": 50, "sample_seed": 0, "balance": False,
                               "balance_seed": 0, "val_fraction": 0.0}
    spec = load_spec(tmp_path / "wn" / "T40.toml")
    assert spec.balance is False
    assert [s.name for s in spec.splits] == ["id/train", "id/test", "ood/wordnet/t40"]
    test_list = Path(spec.splits[1].source["imagelist"]).read_text().splitlines()
    assert len(test_list) == 9 + 3
    assert sum(line.endswith(" -1") for line in test_list) == 3
    assert all("bathroom.n.01" in line for line in test_list if line.endswith(" -1"))
    ood = Path(spec.splits[2].source["imagelist"]).read_text().splitlines()
    assert len(ood) == 6 and not any("bathroom" in line for line in ood)
    tsv = (tmp_path / "wn" / "similarity.tsv").read_text().splitlines()
    assert tsv[0].startswith("class\tsynset\tsim") and len(tsv) == 4
    from featstore.extraction.extract import ExtractOptions, extract

    st = extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "wn" / "T40.toml",
                 tmp_path / "store",
                 options=ExtractOptions(device="cpu", batch_size=8, num_workers=0))
    labels = np.asarray(st.split("id/test").labels)
    assert (labels == -1).sum() == 3 and set(labels[labels >= 0].tolist()) == {0, 1, 2}


def test_written_spec_samples_per_class_and_balances(tmp_path, capsys):
    """FACETS' sampling in the written spec (Table IV: 50 images per ID-assigned class; ID
    and OOD balanced): with --per-class 2 the ID candidate's 3 images become 2, drawn by the
    documented rule (a seeded permutation of the class's rows, its first 2, in list order);
    the spec says balance = true with the seed; extraction cuts the merged id/test (9 base
    + 2 = 11 rows) to the 6 OOD rows by max_rows' rule (the first 6 of
    default_rng(seed + 1)'s permutation, sorted). References: NumPy's generator by hand."""
    (tmp_path / "id.txt").write_text("bedroom.n.01\ndog.n.01\n")
    cands = _tree(tmp_path / "cands", ["bathroom.n.01", "cat.n.01", "n02818832"])
    base = _tree(tmp_path / "base", ["bedroom", "dog", "kitchen"])
    (tmp_path / "base.toml").write_text(
        f'[[split]]\nname = "id/train"\nsource = {{ imagefolder = "{base}" }}\n\n'
        f'[[split]]\nname = "id/test"\nsource = {{ imagefolder = "{base}" }}\n')
    args = ["protocol", "wordnet", "--id-classes", str(tmp_path / "id.txt"), "--candidates",
            str(cands), "--threshold", "0.40", "--images", str(cands), "--base-spec",
            str(tmp_path / "base.toml"), "--val-fraction", "0", "--json"]
    code, stdout, err = run(capsys, *args, "--per-class", "2", "--sample-seed", "5", "--out",
                            str(tmp_path / "wn"))
    assert code == 0, err
    assert json.loads(stdout)["sampling"] == {"per_class": 2, "sample_seed": 5,
                                              "balance": True, "balance_seed": 5,
                                              "val_fraction": 0.0}
    spec = load_spec(tmp_path / "wn" / "T40.toml")
    text = (tmp_path / "wn" / "T40.toml").read_text()
    assert (spec.balance, spec.balance_seed) == (True, 5) and "balance = true" in text
    assert "2 images per ID-assigned candidate class in each part (sample_seed 5)" in text
    bath = sorted((cands / "bathroom.n.01").iterdir())
    drawn = np.sort(np.random.default_rng(5).permutation(3)[:2])
    id_list = (tmp_path / "wn" / "T40" / "id.txt").read_text().splitlines()
    assert id_list == [f"{bath[i].resolve()} -1" for i in drawn]
    merged = Path(spec.splits[1].source["imagelist"]).read_text().splitlines()
    assert len(merged) == 9 + 2 and merged[9:] == id_list
    from featstore.extraction.extract import ExtractOptions, extract

    st = extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "wn" / "T40.toml",
                 tmp_path / "store",
                 options=ExtractOptions(device="cpu", batch_size=8, num_workers=0))
    assert st.split("ood/wordnet/t40").num_rows == 6
    kept = np.sort(np.random.default_rng(5 + 1).permutation(11)[:6])
    assert list(st.split("id/test").ids) == [merged[i].rsplit(" ", 1)[0] for i in kept]
    code, stdout, err = run(capsys, *args, "--per-class", "0", "--no-balance", "--out",
                            str(tmp_path / "all"))
    assert code == 0, err
    assert not load_spec(tmp_path / "all" / "T40.toml").balance
    assert len((tmp_path / "all" / "T40" / "id.txt").read_text().splitlines()) == 3


def test_written_spec_has_val_and_test_halves(tmp_path, capsys):
    """FACETS' separate val and test sets (line 262, "(val/test)" tables): each candidate
    class's 3 images divide into floor(3 / 2) = 1 val and 2 test images by the documented
    rule (per role, one default_rng(seed) over the classes in sorted order, each class's
    permutation's first rows to val); with an id/val in the base spec the ID val candidate
    joins it and the OOD val images become ood/wordnet/t40_val (usage val); without one, the
    val lists are written but kept out of the spec, said in its header. Reference: NumPy's
    generator by hand."""
    (tmp_path / "id.txt").write_text("bedroom.n.01\ndog.n.01\n")
    cands = _tree(tmp_path / "cands", ["bathroom.n.01", "cat.n.01", "n02818832"])
    base = _tree(tmp_path / "base", ["bedroom", "dog", "kitchen"])
    body = (f'[[split]]\nname = "id/test"\nsource = {{ imagefolder = "{base}" }}\n\n'
            f'[[split]]\nname = "id/val"\nsource = {{ imagefolder = "{base}" }}\n')
    (tmp_path / "base.toml").write_text(body)
    args = ["protocol", "wordnet", "--id-classes", str(tmp_path / "id.txt"), "--candidates",
            str(cands), "--threshold", "0.40", "--images", str(cands), "--sample-seed", "3"]
    code, _, err = run(capsys, *args, "--base-spec", str(tmp_path / "base.toml"), "--out",
                       str(tmp_path / "wn"))
    assert code == 0, err
    imgs = {c: [str(p.resolve()) for p in sorted((cands / c).iterdir())]
            for c in ("bathroom.n.01", "cat.n.01", "n02818832")}
    rng = np.random.default_rng(3)
    id_val = [imgs["bathroom.n.01"][rng.permutation(3)[0]]]
    rng = np.random.default_rng(3)
    ood_val = [imgs["cat.n.01"][rng.permutation(3)[0]],
               imgs["n02818832"][rng.permutation(3)[0]]]
    d = tmp_path / "wn" / "T40"

    def read(name: str) -> list[str]:
        return [ln.rsplit(" ", 1)[0] for ln in (d / name).read_text().splitlines()]

    assert read("id_val.txt") == id_val and read("ood_val.txt") == ood_val
    assert read("id.txt") == [p for p in imgs["bathroom.n.01"] if p not in id_val]
    assert sorted(read("ood.txt")) == sorted(
        p for c in ("cat.n.01", "n02818832") for p in imgs[c] if p not in ood_val)
    spec = load_spec(tmp_path / "wn" / "T40.toml")
    got = {s.name: s.usage for s in spec.splits}
    assert got == {"id/test": "test", "id/val": "val", "ood/wordnet/t40": "test",
                   "ood/wordnet/t40_val": "val"}
    val_list = Path(spec.splits[1].source["imagelist"]).read_text().splitlines()
    assert len(val_list) == 9 + 1 and val_list[-1] == f"{id_val[0]} -1"
    (tmp_path / "base.toml").write_text(body.split("\n\n")[0] + "\n")
    code, _, err = run(capsys, *args, "--base-spec", str(tmp_path / "base.toml"), "--out",
                       str(tmp_path / "nv"))
    assert code == 0, err
    assert [s.name for s in load_spec(tmp_path / "nv" / "T40.toml").splits] == [
        "id/test", "ood/wordnet/t40"]
    assert "no id/val: the val lists are not in this spec" in (
        tmp_path / "nv" / "T40.toml").read_text()


def test_merged_id_list_keeps_head_classes(tmp_path, capsys):
    """A base id/test ImageFolder whose folders are not in the head's order (`classes =
    ["kitchen", "bedroom", "dog"]`): the merged image list labels each image with its head
    class by name (bedroom 1, dog 2, kitchen 0; by hand), not its folder index (0, 1, 2),
    which an image list would take as it is. With a class_map but no classes the command
    stops, naming the split."""
    (tmp_path / "id.txt").write_text("bedroom.n.01\ndog.n.01\n")
    cands = _tree(tmp_path / "cands", ["bathroom.n.01", "cat.n.01"])
    base = _tree(tmp_path / "base", ["bedroom", "dog", "kitchen"])
    split = f'[[split]]\nname = "id/test"\nsource = {{ imagefolder = "{base}" }}\n'
    (tmp_path / "base.toml").write_text('classes = ["kitchen", "bedroom", "dog"]\n' + split)
    args = ["protocol", "wordnet", "--id-classes", str(tmp_path / "id.txt"), "--candidates",
            str(cands), "--threshold", "0.40", "--images", str(cands), "--base-spec",
            str(tmp_path / "base.toml"), "--out", str(tmp_path / "wn")]
    code, _, err = run(capsys, *args)
    assert code == 0, err
    merged = (tmp_path / "wn" / "T40" / "id_test_merged.txt").read_text().splitlines()
    got = {(Path(ln.split()[0]).parent.name, int(ln.split()[1])) for ln in merged[:9]}
    assert got == {("bedroom", 1), ("dog", 2), ("kitchen", 0)}
    (tmp_path / "base.toml").write_text("class_map = { bedroom = 2 }\n" + split)
    code, _, err = run(capsys, *args)
    assert code == 2 and "'id/test' is an ImageFolder mapped by class_map alone" in err


@pytest.mark.parametrize("extra, message", [
    (["--per-class", "-1"], "--per-class -1: expected an integer >= 0"),
    (["--val-fraction", "1"], "--val-fraction 1.0: expected a number in [0, 1)"),
    (["--rule", "nearest"], "--rule 'nearest'"),
    (["--threshold", "1.5"], "--threshold 1.5: must lie in [0, 1]"),
    (["--base-spec", "x.toml"], "--base-spec needs --images"),
])
def test_cli_bad_inputs(tmp_path, capsys, extra, message):
    (tmp_path / "c.txt").write_text("dog.n.01\n")
    code, _, err = run(capsys, "protocol", "wordnet", "--id-classes", str(tmp_path / "c.txt"),
                       "--candidates", str(tmp_path / "c.txt"), *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_tiers_cli(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("beach 0\nboathouse 1\nlighthouse_interior 2\nsky 3\n")
    code, stdout, err = run(capsys, "protocol", "tiers", "--tiers", str(tmp_path / "t.txt"),
                            "--json")
    assert code == 0, err
    a = json.loads(stdout)["assignments"]
    assert a["T1"] == {"beach": "id", "boathouse": "id", "lighthouse_interior": "ood",
                       "sky": "ood"}
    assert a["T2"]["lighthouse_interior"] == "id" and a["T2"]["sky"] == "ood"
    # FACETS' tier datasets take every image of a class (Table V) and balance ID vs OOD
    assert json.loads(stdout)["sampling"] == {"per_class": None, "sample_seed": 0,
                                              "balance": True, "balance_seed": 0,
                                              "val_fraction": 0.5}
    (tmp_path / "bad.txt").write_text("beach 4\n")
    code, _, err = run(capsys, "protocol", "tiers", "--tiers", str(tmp_path / "bad.txt"))
    assert code == 2 and "line 1: expected 'class_name tier' with tier 0-3" in err


def test_tiers_never_drop_untiered_images_silently(tmp_path, capsys):
    """An ImageFolder with a class the tier file does not list: the command stops naming the
    class and its image count; with --skip-untiered it writes the lists without them and
    reports the count; the written lists hold exactly the tiered classes' images (counted
    by hand from the folders)."""
    cands = _tree(tmp_path / "cands", ["beach", "sky", "crane"])
    (tmp_path / "t.txt").write_text("beach 0\nsky 3\n")
    args = ["protocol", "tiers", "--tiers", str(tmp_path / "t.txt"), "--images", str(cands),
            "--out", str(tmp_path / "o"), "--val-fraction", "0"]
    code, _, err = run(capsys, *args)
    assert code == 2 and "3 images of 1 classes have no tier" in err and "crane" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    code, stdout, err = run(capsys, *args, "--skip-untiered", "--json")
    assert code == 0, err
    assert json.loads(stdout)["untiered"] == {"crane": 3}
    id_list = (tmp_path / "o" / "T1" / "id.txt").read_text().splitlines()
    ood_list = (tmp_path / "o" / "T1" / "ood.txt").read_text().splitlines()
    assert len(id_list) == 3 and all("/beach/" in ln for ln in id_list)
    assert len(ood_list) == 3 and all("/sky/" in ln for ln in ood_list)


FIG23_MAPPING = {"kennel": ["kennel.n.01"], "fountain": ["fountain.n.01"], "dog": ["dog.n.01"],
           "cat": ["cat.n.01"], "zzz": []}


def test_facets_prediction_similarity_per_truth_and_per_prediction(wn):
    """FACETS §V Figs. 2-3 (issue 46.9): the WordNet similarity of each row's ground-truth
    class and its predicted ID class, (path + Wu-Palmer) / 2, averaged per ground-truth class
    and per predicted class. Reference: nltk's own path_similarity and wup_similarity on the
    synsets of the mapping, averaged by hand; an unmapped class's rows are skipped, named."""
    z = np.zeros((5, 2), np.float32)
    z[[0, 1, 2], 0] = 5.0   # dog, dog, cat -> kennel
    z[[3, 4], 1] = 5.0      # cat, zzz -> fountain
    st = ArrayStore(head=None, classes=["kennel", "fountain"], splits={
        "id/test": {"features": np.zeros((1, 3), np.float32),
                    "logits": np.zeros((1, 2), np.float32), "labels": np.array([0])},
        "ood/x/in": {"features": np.zeros((5, 3), np.float32), "logits": z,
                     "ids": ["in/dog/a.jpg", "in/dog/b.jpg", "in/cat/c.jpg", "in/cat/d.jpg",
                             "in/zzz/e.jpg"]}})
    mapping = {k: v for k, v in FIG23_MAPPING.items() if v}
    res = prediction_similarity(st, mapping=mapping, wn=wn)

    def sim(a, b):
        x, y = wn.synset(FIG23_MAPPING[a][0]), wn.synset(FIG23_MAPPING[b][0])
        return (x.path_similarity(y) + x.wup_similarity(y)) / 2

    assert res["by_truth"]["x/in:in/dog"] == pytest.approx(
        {"sim": sim("dog", "kennel"), "rows": 2})
    assert res["by_truth"]["x/in:in/cat"]["sim"] == pytest.approx(
        (sim("cat", "kennel") + sim("cat", "fountain")) / 2)
    assert res["by_predicted"]["kennel"]["sim"] == pytest.approx(
        (2 * sim("dog", "kennel") + sim("cat", "kennel")) / 3)
    assert res["unmapped"] == ["zzz"] and res["rows_skipped"] == 1
    best, worst = best_and_worst(res["by_predicted"], 1)
    assert best != worst and {best[0], worst[0]} == {"kennel", "fountain"}
