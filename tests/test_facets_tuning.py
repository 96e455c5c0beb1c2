"""`protocol facets-table` tunes on validation sets (FACETS, DSAA 2023: OOD samples serve
"parameter selection", line 159; separate validation and test sets per setup, line 262).

Reference: an independent NumPy/scipy/sklearn transcription over the same grid on a tiny store
built from arrays: every stored ODIN-perturbed (T, eps) pair of the scorers' default grid
scored on id/val and the val OOD split (ODIN: log max softmax(l' / T) by scipy's log_softmax;
IP TS MLV: max l' / T), AUROC by sklearn, the best (first on ties, none here) chosen; its test
cell recomputed by sklearn (AUROC, FPR at 95% TPR from roc_curve) and FACETS' detection error
at the achieved TPR, 0.5 (1 - TPR(t*)) + 0.5 FPR(t*), from the same roc_curve. A store
without a val OOD split is scored at the defaults and the
table says so; --no-tune scores at the defaults."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.metrics import roc_auc_score, roc_curve

from featstore import Store
from featstore.store.extra_keys import odin_name
from tests.helpers.cli import run_cli as run

#: stored pairs: a subset of odin_perturbed's default grid (T 1, 10, 100, 1000 x eps 0.0014,
#: 0.0028); the grid's other settings are not stored and drop out of the sweep
PAIRS = [(1.0, 0.0014), (1.0, 0.0028), (1000.0, 0.0014), (1000.0, 0.0028)]
SCORES = {"odin_perturbed": lambda z, t: log_softmax(z / t, axis=1).max(1),
          "ip_ts_mlv": lambda z, t: z.max(1) / t}


def _make_store(path: Path, with_val_ood: bool) -> Path:
    """3 classes, 6-dim features; ID rows at scale 2, OOD at 0.4; each stored pair's
    perturbed logits are the logits plus noise of its own scale (the pair (1, 0.0028) least
    noisy), so the pairs rank differently on val."""
    rng = np.random.default_rng(11)
    w = rng.normal(size=(3, 6)).astype(np.float32)
    noise = dict(zip(PAIRS, (1.5, 0.2, 2.5, 3.5), strict=True))
    parts = [("id/train", 40, 2.0, "train"), ("id/val", 40, 2.0, "val"),
             ("id/test", 50, 2.0, "test"), ("ood/wordnet/t", 50, 0.4, "test")]
    if with_val_ood:
        parts.append(("ood/wordnet/t_val", 40, 0.4, "val"))
    splits = {}
    for name, n, scale, usage in parts:
        f = (rng.normal(size=(n, 6)) * scale).astype(np.float32)
        z = f @ w.T
        entry = {"features": f, "usage": usage,
                 "extras": {odin_name(t, e): (z + noise[(t, e)] * rng.normal(size=z.shape)
                                              ).astype(np.float32) for t, e in PAIRS}}
        if name.startswith("id/"):
            entry["labels"] = (z.argmax(1) + (rng.random(n) < 0.3)) % 3
        splits[name] = entry
    Store.from_arrays(path, head=(w, np.zeros(3, dtype=np.float32)), splits=splits)
    return path


def _auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    return 100 * roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg])


def _fpr95(pos: np.ndarray, neg: np.ndarray) -> float:
    fpr, tpr, _ = roc_curve(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg],
                            drop_intermediate=False)
    return 100 * float(fpr[np.argmax(tpr >= 0.95)])


def _de95(pos: np.ndarray, neg: np.ndarray) -> float:
    fpr, tpr, _ = roc_curve(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg],
                            drop_intermediate=False)
    i = np.argmax(tpr >= 0.95)
    return 100 * float(0.5 * (1 - tpr[i]) + 0.5 * fpr[i])


def _extra(st: Store, split: str, pair: tuple[float, float]) -> np.ndarray:
    return np.asarray(st.split(split).extra(odin_name(*pair)), dtype=np.float64)


def _check_cell(cell: dict, st: Store, method: str, pair: tuple[float, float]) -> None:
    pos = SCORES[method](_extra(st, "id/test", pair), pair[0])
    neg = SCORES[method](_extra(st, "ood/wordnet/t", pair), pair[0])
    assert cell["auroc"] == pytest.approx(_auroc(pos, neg), abs=1e-9)
    assert cell["fpr95"] == pytest.approx(_fpr95(pos, neg), abs=1e-9)
    assert cell["detection_error_tpr95"] == pytest.approx(_de95(pos, neg), abs=1e-9)


def test_facets_table_tunes_on_val_and_says_where_it_cannot(tmp_path, capsys):
    tuned_path = _make_store(tmp_path / "t", with_val_ood=True)
    plain_path = _make_store(tmp_path / "p", with_val_ood=False)
    args = ["protocol", "facets-table", f"T40={tuned_path}", f"T45={plain_path}", "--method",
            "odin", "--method", "odin_perturbed", "--method", "ip_ts_mlv", "--no-cache"]
    code, stdout, err = run(capsys, *args, "--json", "--out", str(tmp_path / "f.md"))
    assert code == 0, err
    table = json.loads(stdout)
    st = Store.open(tuned_path)
    tuning = table["tuning"]["T40"]
    assert tuning["tuned"] and tuning["select_by"] == "auroc"
    assert tuning["val_splits"] == {"id": "id/val", "ood": ["ood/wordnet/t_val"]}
    grid_order = [p for p in itertools.product([1, 10, 100, 1000], [0.0014, 0.0028])
                  if p in PAIRS]
    for method in ("odin_perturbed", "ip_ts_mlv"):
        val = [_auroc(SCORES[method](_extra(st, "id/val", p), p[0]),
                      SCORES[method](_extra(st, "ood/wordnet/t_val", p), p[0]))
               for p in grid_order]
        assert len(set(val)) == len(val)  # no tie: the choice is the maximum
        best = grid_order[int(np.argmax(val))]
        assert best != (1000, 0.0014)  # not the default: the test can tell tuning happened
        got = tuning["methods"][method]
        assert (got["setting"]["temperature"], got["setting"]["epsilon"]) == best
        assert got["val"] == pytest.approx(max(val), abs=1e-9)
        ood_row = next(r for r in table["rows"] if r["dataset"] == "T40" and r["kind"] == "ood")
        _check_cell(ood_row["cells"][method], st, method, best)
    # TS is softmax at T = 1000 by definition: fixed, not tuned
    assert tuning["methods"]["odin"]["grid"] == {}
    assert tuning["methods"]["odin"]["params"]["temperature"] == 1000.0
    # the store without a val OOD split: default parameters, said in JSON, terminal and file
    assert table["tuning"]["T45"] == {"tuned": False,
                                      "reason": "no OOD split flagged usage val"}
    plain_row = next(r for r in table["rows"] if r["dataset"] == "T45" and r["kind"] == "ood")
    for method in ("odin_perturbed", "ip_ts_mlv"):
        _check_cell(plain_row["cells"][method], Store.open(plain_path), method, (1000, 0.0014))
    note = ("T45: not tuned (no OOD split flagged usage val): every column at its default "
            "parameters")
    assert note in (tmp_path / "f.md").read_text()
    code, stdout, err = run(capsys, *args)
    assert code == 0, err
    assert note in stdout and "T40: tuned on id/val vs ood/wordnet/t_val by auroc: ODIN " \
        f"temperature={best[0]}" in " ".join(stdout.split())
    # --no-tune: every column at the defaults
    code, stdout, err = run(capsys, *args, "--no-tune", "--json")
    assert code == 0, err
    table = json.loads(stdout)
    assert table["tuning"]["T40"] == {"tuned": False, "reason": "not asked (tune=False)"}
    ood_row = next(r for r in table["rows"] if r["dataset"] == "T40" and r["kind"] == "ood")
    for method in ("odin_perturbed", "ip_ts_mlv"):
        _check_cell(ood_row["cells"][method], st, method, (1000, 0.0014))
    code, _, err = run(capsys, *args, "--select-by", "accuracy")
    assert code == 2 and "select_by='accuracy' is not an OOD metric" in err
