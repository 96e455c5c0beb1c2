"""Benchmark: what `rmse_split` measures, under five meta-set constructions and predictors.

Run ``python -m benchmarks.gscore_split_variants --store STORE [--rounds 10] [--out r.json]
[--no-choices]``.

MSP FPR95 under 4-fold cross-validation over the OOD splits, R rounds, with the draws of
`evaluate_gscore(cv=4)` (round r: `numpy.random.default_rng([0, r, 0])` permutes the split
names into 4 folds (`numpy.array_split`) and then splits id/test into the meta-train and
meta-test ID halves (`metasets.id_pools`, fraction 0.5); `default_rng([0, r, 1, 0])` draws
the subsampled sets). Fold f's line (tau searched on its meta-train sets where the model has
one, `regression.fit_variant`) is fitted on the meta-train sets of the splits outside f and
predicts the meta-test sets of the splits in f (clipped to [0, 100]). The split-level
target s of a split is FPR95 of ALL id/test rows against EVERY row of the split
(`metasets.split_truth`). The constructions:

- A (`rmse_split` of `gscore evaluate --cv`): 10 subsampled sets per split and side (ID rows
  from that side's ID half, n_id:n_ood = 1:1 at the largest size the pools allow); each
  meta-test set's prediction against s of its split.
- B: as A, but every meta-test set of a split predicted by the mean of the split's 10
  predictions.
- C: as A, but the target is FPR95 of the meta-test ID half against every row of the split
  (the ID rows the set's ID part comes from).
- P (the paper, section 6.1): one set per split and side, the side's ID half + every row of
  the split (the ID halves are disjoint); target = that set's own FPR95.
- E: one set per split = ALL id/test rows + every row of the split, the same set on both
  sides; target = its own FPR95, which is s. E LEAKS: every meta-train set holds every ID
  row of every meta-test set (only the OOD splits are disjoint).

Beside them `sampled` is the RMSE of A's predictions against each set's own FPR95 (`rmse`)
and `floor` the RMSE of the oracle split-level predictor from the meta-train ID half against
the same sampled targets. Models: UDE + Wasserstein (tau searched, kernel 2 sigma^2) and
GMM + Wasserstein (no tau); unless `--no-choices` also UDE + Wasserstein with the printed
kernel 2 sigma (`ude_kernel="paper"`), GMM + Wasserstein with a searched tau, and Kmeans +
Wasserstein. With MSP as the only detector, tau from MSP and tau per detector are the same
search. The table gives the mean over rounds and its 95% Student-t interval.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from featstore.store.store import Store
from scorers.gscore import ModelSpec, fit_variant, pack, parse_model
from scorers.gscore.metasets import (
    MetaSets,
    PooledScores,
    draw_sets,
    id_pools,
    load_scores,
    method_key,
    set_targets,
    set_truth,
    split_truth,
    store_pools,
    target_column,
)
from scorers.gscore.regression import predict_line, rmse

METHOD, TARGET, CV, SETS_PER_SPLIT, SEED = "msp", "fpr95", 4, 10, 0
CONSTRUCTIONS = ("sampled", "floor", "A", "B", "C", "P", "E")
BASE = [("UDE+W", "ude-wasserstein", "gauss"), ("GMM+W", "gmm-wasserstein", "gauss")]
CHOICES = [("UDE+W kernel 2σ", "ude-wasserstein", "paper"),
           ("GMM+W tau searched", "gmm-wasserstein@auto", "gauss"),
           ("Kmeans+W", "kmeans-wasserstein", "gauss")]


def pooled_scores(store: Any) -> PooledScores:
    """MSP scores of id/test and every OOD test split of `store` (cached in scores.h5)."""
    t0 = time.perf_counter()
    sd = store_pools(0, store)
    key = method_key(METHOD, {})
    load_scores(sd, key, METHOD, {}, True)
    return PooledScores([sd], np.zeros(1, dtype=np.int64), list(sd.ood), [METHOD], {},
                        {METHOD: sd.scores[key]}, None, {METHOD: np.array([sd.ref[key][:2]])},
                        time.perf_counter() - t0, {METHOD: key},
                        {METHOD: split_truth([sd], key)})


def whole_split_sets(sc: PooledScores, id_rows: np.ndarray) -> MetaSets:
    """One set per OOD split: the id/test rows `id_rows` + every row of the split."""
    sd = sc.data[0]
    rows = [np.concatenate([id_rows, sd.offset[s] + np.arange(sd.sizes[s])]) for s in sc.names]
    idx, n = pack(rows)
    return MetaSets(idx.astype(np.int64), n, np.full(len(rows), len(id_rows), dtype=np.int64),
                    np.zeros(len(rows), dtype=np.int64), list(sc.names))


def folds(names: list[str], rng: np.random.Generator) -> dict[str, int]:
    """The round's folds, drawn as `crossval` draws them (permutation, then array_split)."""
    perm = [names[i] for i in rng.permutation(len(names))]
    return {perm[i]: f for f, part in enumerate(np.array_split(np.arange(len(perm)), CV))
            for i in part}


class Side:
    """Meta-sets of one side with their truth and one engine per UDE kernel."""

    def __init__(self, sc: PooledScores, sets: MetaSets, fold: dict[str, int]):
        self.sc, self.sets = sc, sets
        self.fold = np.array([fold[s] for s in sets.split], dtype=np.int64)
        self.engines: dict[str, Any] = {}
        self.p = set_truth(self.engine("gauss").x, sets)[:, target_column(TARGET)]

    def engine(self, kernel: str) -> Any:
        if kernel not in self.engines:
            self.engines[kernel] = self.sc.engine(self.sets, METHOD, kernel)
        return self.engines[kernel]


def cv_predict(tr: Side, te: Side, spec: ModelSpec, kernel: str) -> np.ndarray:
    """Every meta-test set predicted by the fold that held its split out."""
    pred = np.full(te.sets.m, np.nan)
    e_tr, e_te = tr.engine(kernel), te.engine(kernel)
    for f in range(CV):
        rows_tr, rows_te = np.flatnonzero(tr.fold != f), np.flatnonzero(te.fold == f)
        fit = fit_variant(e_tr, spec, tr.p[rows_tr], rows_tr)
        g = e_te.gscore(spec.modelling, spec.distance, fit["tau"])[rows_te]
        pred[rows_te] = predict_line(fit["theta1"], fit["theta0"], g, True)
    return pred


def split_mean(pred: np.ndarray, split: list[str]) -> np.ndarray:
    names = np.asarray(split)
    out = pred.copy()
    for s in set(split):
        out[names == s] = pred[names == s].mean()
    return out


def run_round(sc: PooledScores, rnd: int, models: list[tuple[str, str, str]],
              e_sets: MetaSets) -> dict[str, dict[str, float]]:
    """{model name: {construction: RMSE}} of round `rnd`."""
    col = target_column(TARGET)
    rng = np.random.default_rng([SEED, rnd, 0])
    fold = folds(list(sc.names), rng)
    pools = id_pools(sc.data, 0.5, rng)
    draw = {"ratio": 1.0, "size": None, "per_split": SETS_PER_SPLIT,
            "rng": np.random.default_rng([SEED, rnd, 1, 0]), "offsets": sc.offsets}
    tr = Side(sc, draw_sets(sc.data, sc.names, pools[0], **draw), fold)
    te = Side(sc, draw_sets(sc.data, sc.names, pools[1], **draw), fold)
    s_all = set_targets(te.sets, sc.split_t[METHOD])[:, col]
    c_te = set_targets(te.sets, split_truth(sc.data, sc.keys[METHOD], [pools[1][0]]))[:, col]
    floor = set_targets(te.sets, sc.floor_table(METHOD, pools[0]))[:, col]
    p_tr = Side(sc, whole_split_sets(sc, pools[0][0]), fold)
    p_te = Side(sc, whole_split_sets(sc, pools[1][0]), fold)
    e_side = Side(sc, e_sets, fold)
    out = {}
    for name, model, kernel in models:
        spec = parse_model(model)
        pred = cv_predict(tr, te, spec, kernel)
        out[name] = {"sampled": rmse(pred, te.p), "floor": rmse(floor, te.p),
                     "A": rmse(pred, s_all), "B": rmse(split_mean(pred, te.sets.split), s_all),
                     "C": rmse(pred, c_te),
                     "P": rmse(cv_predict(p_tr, p_te, spec, kernel), p_te.p),
                     "E": rmse(cv_predict(e_side, e_side, spec, kernel), e_side.p)}
    return out


def interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95% Student-t interval mean ± t_{0.975, k-1} sd / sqrt(k) (sd ddof 1), its
    lower end clipped at 0 (an RMSE), as `gscore evaluate` reports it."""
    v = np.asarray(values, dtype=np.float64)
    half = float(student_t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    mean = float(v.mean())
    return {"mean": mean, "ci": [max(0.0, mean - half), float(mean + half)], "values": v.tolist()}


def table(summary: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["| model | " + " | ".join(CONSTRUCTIONS) + " |",
             "| --- |" + " ---: |" * len(CONSTRUCTIONS)]
    for name, row in summary.items():
        cells = [f"{row[c]['mean']:.2f} [{row[c]['ci'][0]:.2f}, {row[c]['ci'][1]:.2f}]"
                 for c in CONSTRUCTIONS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="the mini-Gbench store")
    ap.add_argument("--rounds", type=int, default=10, help="cross-validation rounds (>= 2)")
    ap.add_argument("--out", type=Path, default=None, help="JSON with every round's values")
    ap.add_argument("--no-choices", action="store_true",
                    help="only UDE+W and GMM+W (skip the kernel / GMM tau / Kmeans rows)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error(f"--rounds {args.rounds}: need at least 2 for an interval")
    t0 = time.perf_counter()
    sc = pooled_scores(Store.open(args.store))
    models = BASE if args.no_choices else BASE + CHOICES
    e_sets = whole_split_sets(sc, np.arange(sc.data[0].n_id))
    per_round: dict[str, dict[str, list[float]]] = {
        n: {c: [] for c in CONSTRUCTIONS} for n, _, _ in models}
    for rnd in range(args.rounds):
        for name, row in run_round(sc, rnd, models, e_sets).items():
            for c, v in row.items():
                per_round[name][c].append(v)
        print(f"round {rnd} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    summary = {n: {c: interval(v) for c, v in d.items()} for n, d in per_round.items()}
    sd = sc.data[0]
    print(f"store {args.store}: {sd.n_id} id/test rows, {len(sc.names)} OOD splits; "
          f"{args.rounds} rounds x {CV} folds; {platform.node()}, "
          f"{time.perf_counter() - t0:.0f} s")
    print(table(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"rounds": args.rounds, "summary": summary},
                                       indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
