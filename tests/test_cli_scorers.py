"""The registry as the user and the README see it (issue 18 item 6): `featstore scorers
[--json]`, the README's generated scorer table, the one `needs` parser (`scorers.needs`) and
the one unknown-scorer check (`scorers.check_scorers`, with a did-you-mean).

References: the registry itself (`scorers.REGISTRY`, each class's declared `needs`, `defaults`,
`grid`, `paper`), read attribute by attribute, and hand-written expected strings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from featstore.errors import InputError, UsageError
from scorers import REGISTRY, check_scorers, get_scorer, list_scorers, unknown_scorer
from scorers.catalog import (
    BEGIN,
    END,
    format_grid,
    format_params,
    main,
    markdown_table,
    replace_block,
    update_file,
)
from scorers.needs import Need, Needs, parse_need
from tests.helpers.cli import run_cli

README = Path(__file__).parent.parent / "README.md"


# --------------------------------------------------------------------------- featstore scorers
def test_scorers_json_is_the_registry(capsys):
    """--json prints exactly list_scorers(), and that is each class's own attributes."""
    code, out, err = run_cli(capsys, "scorers", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc == json.loads(json.dumps(list_scorers()))
    assert [d["name"] for d in doc] == sorted(REGISTRY)
    for d in doc:  # independent of list_scorers: the class attributes themselves
        cls = REGISTRY[d["name"]]
        assert d["needs"] == list(cls.needs)
        assert d["defaults"] == json.loads(json.dumps(cls.defaults))
        assert d["grid"] == {k: list(v) for k, v in cls.grid.items()}
        assert d["paper"] == str(cls.paper) and d["paper"]
        p = cls.paper  # a Paper for built-ins; a scorer of your own may keep a string
        assert d["paper_meta"] == (None if isinstance(p, str) else {
            "title": p.title, "authors": list(p.authors), "venue": p.venue, "year": p.year,
            "url": p.url, "code": p.code, "note": p.note})
    vim = next(d for d in doc if d["name"] == "vim")
    assert vim["needs"] == ["features", "logits", "head", "fit:id/train"]
    assert vim["grid"] == {"dim": [42, 128, 256, 512, 1000]}


def test_scorers_human_table_names_every_scorer(capsys):
    code, out, err = run_cli(capsys, "scorers")
    assert code == 0 and err == ""
    assert f"{len(REGISTRY)} registered scorers" in out
    for name in REGISTRY:
        assert f" {name} " in out, name
    knn = out[out.index(" knn "):out.index(" mcd ")]  # knn's rows (cells fold over lines)
    for text in ("features, fit:id/train", "K=50,", "bank_fraction=1.0", "index=exact",
                 "K=50,100,200,500,1000"):
        assert text in knn, text


def test_scorers_quiet_prints_nothing(capsys):
    assert run_cli(capsys, "scorers", "--quiet") == (0, "", "")


# --------------------------------------------------------------------------- README table
def test_readme_scorer_table_is_generated_from_the_registry():
    """The README block between the markers is exactly markdown_table(list_scorers())
    (regenerate with `python -m scorers.catalog README.md`)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN) + 1:text.index(END)]
    assert block == markdown_table(list_scorers())
    rows = {line.split(" | ")[0][3:-1]: line.split(" | ")[1]
            for line in block.splitlines()[2:]}
    assert set(rows) == set(REGISTRY)
    # the drift the issue found: vim, fdbd and nci read the logits too
    for name in ("vim", "fdbd", "nci"):
        assert rows[name] == "features, logits, head, fit:id/train"


def test_catalog_formats_by_hand():
    assert format_params({"K": 50, "index": "exact", "dim": None, "flag": True}) == \
        "K=50, index=exact, dim=null, flag=true"
    assert format_params({}) == "–"
    assert format_grid({"K": [10, 20], "alpha": [0.01]}) == "K=10,20; alpha=0.01"
    info = {"name": "x", "needs": ["logits"], "defaults": {"t": 1.0}, "grid": {},
            "paper": "A | B"}
    assert markdown_table([info]) == ("| scorer | needs | defaults | sweep grid | paper |\n"
                                      "|---|---|---|---|---|\n"
                                      "| `x` | logits | t=1.0 | – | A \\| B |\n")


def test_catalog_rewrites_only_the_block_and_check_fails_on_drift(tmp_path, capsys):
    path = tmp_path / "README.md"
    stale = f"# title\n\n{BEGIN}\n| old | table |\n{END}\n\ntail\n"
    path.write_text(stale, encoding="utf-8")
    assert main(["--check", str(path)]) == 1  # drift: exit 1, the file untouched
    assert "differs from scorers.list_scorers()" in capsys.readouterr().err
    assert path.read_text(encoding="utf-8") == stale
    assert main([str(path)]) == 0
    expected = f"# title\n\n{BEGIN}\n{markdown_table(list_scorers())}{END}\n\ntail\n"
    assert path.read_text(encoding="utf-8") == expected
    assert update_file(path, list_scorers(), check=True) is None
    assert main(["--check", str(path)]) == 0
    with pytest.raises(ValueError, match="no generated scorers table"):
        replace_block("no markers here", "t")


# --------------------------------------------------------------------------- needs parser
def test_parse_need_vocabulary():
    assert parse_need("features") == Need("features")
    assert parse_need("head") == Need("head")
    assert parse_need("fit:id/val") == Need("fit", "id/val")
    assert parse_need("extra:odin_logits") == Need("extra", "odin_logits")
    assert parse_need("extra:confidence").text == "extra:confidence"
    for bad in ("train_stats", "fit:", "extra", "logit", "features:x", ""):
        with pytest.raises(ValueError, match="expected one of features, logits, head"):
            parse_need(bad)
    with pytest.raises(AttributeError):  # frozen
        parse_need("head").kind = "logits"  # type: ignore[misc]


def test_needs_of_every_registered_scorer_round_trips():
    for name, cls in REGISTRY.items():
        needs = Needs.of(cls)
        assert needs.texts == list(cls.needs), name
        assert needs.fit_splits == [n[4:] for n in cls.needs if n.startswith("fit:")]
        assert needs.extras == [n[6:] for n in cls.needs if n.startswith("extra:")]
    vim = Needs.of(REGISTRY["vim"])
    assert vim.value_fields == ["features", "logits"] and "head" in vim
    godin = Needs.of(get_scorer("godin"))  # an instance works as well as the class
    assert godin.value_fields == ["extra:godin_h", "extra:godin_g"] and "head" not in godin
    assert Needs.of(REGISTRY["temp_scaling"]).fit_splits == ["id/val"]


# --------------------------------------------------------------------------- scorer names
def test_unknown_scorer_message_with_did_you_mean():
    valid = ", ".join(REGISTRY) + ", or module:Class of your own Scorer subclass"
    assert unknown_scorer("vimm") == f"unknown scorer 'vimm' (valid: {valid}); did you mean 'vim'?"
    assert unknown_scorer("zzz", "--method") == f"--method: unknown scorer 'zzz' (valid: {valid})"
    assert check_scorers(["msp", "knn"]) == ["msp", "knn"]
    assert check_scorers("msp") == ["msp"]
    with pytest.raises(UsageError, match="did you mean 'energy'"):
        check_scorers(["msp", "enrgy"])
    with pytest.raises(InputError, match=r"^plan\.toml: unknown scorer 'kn'"):
        check_scorers(["kn"], "plan.toml", InputError)
    with pytest.raises(UsageError, match="did you mean 'mds'"):
        get_scorer("mdss")


@pytest.mark.parametrize("args", [
    ["score", "{store}", "--method", "mahalanobis"],
    ["eval", "{store}", "--method", "msp", "--method", "enrgy"],
    ["sweep", "{store}", "--method", "knnn"],
    ["eval", "{store}", "--param", "knnn.K=3"],
])
def test_cli_unknown_scorer_exit_2_one_line(capsys, structured_store, args):
    args = [a.replace("{store}", str(structured_store.path)) for a in args]
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "unknown scorer" in lines[0], err
    if "knnn" in lines[0]:
        assert "did you mean 'knn'?" in lines[0]
    if "enrgy" in lines[0]:
        assert "did you mean 'energy'?" in lines[0]


def test_every_builtin_has_structured_paper_metadata():
    """Each built-in's `paper` is a scorers.paper.Paper with surnames, a venue, a plausible
    year and https links (or None); its citation, written by hand for two of them, starts
    with the first author (the contract's docstring check reads it)."""
    from scorers.paper import Paper
    from scorers.registry import BUILTIN

    for name, cls in BUILTIN.items():
        p = cls.paper
        assert isinstance(p, Paper), name
        assert p.title and p.venue and p.authors and all(a.strip() == a for a in p.authors)
        assert 2000 <= p.year <= 2026, name
        assert all(u is None or u.startswith("https://") for u in (p.url, p.code)), name
        assert str(p).startswith(p.authors[0] + (", " if len(p.authors) > 2 else
                                                 " & " if len(p.authors) == 2 else ", "))
    msp = BUILTIN["msp"].paper
    assert str(msp) == ("Hendrycks & Gimpel, A Baseline for Detecting Misclassified and "
                        "Out-of-Distribution Examples in Neural Networks, ICLR 2017")
    assert str(BUILTIN["odin"].paper).endswith("ICLR 2018 (temperature scaling only; no input "
                                               "perturbation)")
    row = next(r for r in markdown_table(list_scorers(builtin_only=True)).splitlines()
               if r.startswith("| `vim` |"))
    assert row.endswith("CVPR 2022 · [paper](https://arxiv.org/abs/2203.10807) · "
                        "[code](https://github.com/haoqiwang/vim) |")
