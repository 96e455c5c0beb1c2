"""Benchmark: Gscore (unsupervised evaluation of OOD detection) on the mini-Gbench.

Run ``python -m benchmarks.bench_gscore [--out benchmarks/out/gbench] [--weights P]
[--repeats 5] [--sets-per-split 10] [--skip-cross]``.

Builds (once; cached under ``--out``) the mini-Gbench store with the demo ResNet
(``featstore.demo.gbench``: 44 OOD sets of real bundled data, easy to hard) and, for the
cross-store section, the same benchmark extracted with a second backbone (the demo ResNet at
width 8, trained with the same recipe, seed 1). Then reports, for MSP, energy, ODIN
(temperature only), MLS, ViM and KNN:

1. the spread of the true AUROC / FPR95 over the 44 OOD sets (is the benchmark easy to hard?);
2. Table-1/6 style RMSE of the predicted FPR95 and AUROC on meta-test sets (mean ± std over
   repeated random meta-train / meta-test partitions of the OOD sets), for every
   modelling x distance combination and the two baselines (confidence score, auto-evaluation);
3. Pearson / Spearman between Gscore and FPR95 / AUROC (meta-test sets of the partitions, and
   Fig. 3 style over all 44 OOD sets, each mixed 1:1 with id/test);
4. the robustness table (IND:OOD ratio 1:100 .. 100:1, set sizes 200 .. 50);
5. the stricter protocol where meta-train and meta-test sets use disjoint halves of id/test;
6. across stores (backbones);
7. the wall time of the `gscore evaluate` computation over the mini-Gbench (cold: scoring
   included; warm: scores cached in scores.h5).

Output is Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np

METHODS = ["msp", "energy", "odin", "mls", "vim", "knn"]
MODELS = ["kmeans-l2", "gmm-kl", "gmm-wasserstein", "gmm-w2", "gmm-wasserstein@auto",
          "ude-l2", "ude-kl", "ude-kl_rev", "ude-wasserstein", "ude-wasserstein@0.99",
          "ude-w2"]
ROBUST_MODELS = ["kmeans-l2", "gmm-wasserstein", "ude-wasserstein"]
RATIOS = ["1:100", "1:10", "1:3", "3:1", "10:1", "100:1"]
SIZES = [200, 100, 50]
TARGETS = ["fpr95", "auroc"]
TITLE = {"fpr95": "FPR@TPR95", "auroc": "AUROC"}


def _pm(cell: dict | None, digits: int = 2) -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    return f"{cell['mean']:.{digits}f} ± {cell['std']:.{digits}f}"


def _v(cell: dict | None, fmt: str = "+.3f") -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    return format(cell["mean"], fmt)


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(align or ["---"] + ["---:"] * (len(header) - 1)) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_stores(out: Path, weights: Path | None, cross: bool) -> dict[str, Any]:
    from featstore.demo.gbench import build_gbench

    t0 = time.perf_counter()
    stores = {"demo": build_gbench(out, weights=weights, log=_log, progress=None)}
    if cross:
        stores["w8"] = build_gbench(out, backbone="w8", log=_log, progress=None)
    _log(f"stores ready in {time.perf_counter() - t0:.1f} s")
    return stores


def spread_section(store: Any) -> None:
    from featstore.demo.pipeline import id_test_accuracy
    from scorers.evaluate import evaluate

    res = evaluate(store, METHODS)
    ood = res["ood_splits"]
    print(f"ID test accuracy {id_test_accuracy(store):.2f}%; {len(ood)} OOD test sets, "
          f"id/test {store.split('id/test').num_rows} rows, id/val "
          f"{store.split('id/val').num_rows} rows.")
    print()
    rows = []
    for m in METHODS:
        au = np.array([res["methods"][m]["splits"][s]["auroc"] for s in ood])
        fp = np.array([res["methods"][m]["splits"][s]["fpr95"] for s in ood])
        rows.append([m, f"{au.min():.1f}", f"{np.median(au):.1f}", f"{au.max():.1f}",
                     str(int((au < 50).sum())), f"{fp.min():.1f}", f"{np.median(fp):.1f}",
                     f"{fp.max():.1f}", str(int((fp >= 99.5).sum())),
                     str(int((fp <= 0.5).sum()))])
    _table(["detector", "AUROC min", "median", "max", "# AUROC<50", "FPR95 min", "median",
            "max", "# FPR95≈100", "# FPR95≈0"], rows)


def main_tables(res: dict) -> None:
    for target in TARGETS:
        print(f"#### RMSE (%) of the predicted {TITLE[target]}, meta-test sets, mean ± std over "
              f"{res['config']['repeats']} partitions (lower is better)")
        print()
        rows = []
        for key, label in (("confidence", "Confidence score (baseline)"),
                           ("auto_eval", "Auto evaluation (Fréchet distance)")):
            rows.append([label] + [_pm(res["baselines"].get(m, {}).get(target, {})
                                       .get(key, {}).get("rmse")) for m in METHODS])
        for label, title in res["models"].items():
            rows.append([title] + [_pm(res["table"][m][target][label]["rmse"])
                                   for m in METHODS])
        _table(["Unsup. eval. method", *METHODS], rows)
    for target in TARGETS:
        print(f"#### Correlation of Gscore with {TITLE[target]}: Pearson r / Spearman ρ on "
              "meta-test sets (meta-train r in brackets), mean over partitions")
        print()
        rows = []
        for label, title in res["models"].items():
            cells = []
            for m in METHODS:
                c = res["table"][m][target][label]
                cells.append(f"{_v(c['pearson'])} / {_v(c['spearman'])} "
                             f"[{_v(c['pearson_train'])}]")
            rows.append([title, *cells])
        for key, label in (("auto_eval", "Auto evaluation (FD)"),):
            rows.append([label] + [
                f"{_v(res['baselines'][m][target][key]['pearson'])} / "
                f"{_v(res['baselines'][m][target][key]['spearman'])}" for m in METHODS])
        _table(["Gscore", *METHODS], rows)
    taus = []
    for label in res["models"]:
        if label.startswith("ude") or "@auto" in label:
            taus.append([res["models"][label]] + [
                _pm(res["table"][m]["fpr95"][label]["tau"]) + " / "
                + _pm(res["table"][m]["auroc"][label]["tau"]) for m in METHODS])
    print("#### tau chosen on meta-train sets (FPR95 / AUROC), mean ± std over partitions "
          "(`@0.99`: fixed, the paper's supplementary B value for UDE at 1:1)")
    print()
    _table(["Gscore", *METHODS], taus)


def fig3_section(store: Any) -> None:
    from scorers.gscore import fit_gscore

    print("Each of the 44 OOD sets mixed 1:1 with id/test (one meta-set per OOD set, the "
          "paper's Fig. 3 setting), UDE + Wasserstein with tau fitted on these sets: "
          "Pearson r / Spearman ρ between Gscore and the metric, and the in-sample RMSE.")
    print()
    rows = []
    for m in METHODS:
        cells = [m]
        for target in TARGETS:
            model = fit_gscore([store], m, target, "ude-wasserstein", sets_per_split=1)
            mt = model.meta_train
            cells.append(f"{mt['pearson']:+.3f} / {mt['spearman']:+.3f} "
                         f"(RMSE {mt['train_rmse']:.2f}, tau {model.tau:.2f})")
        rows.append(cells)
    _table(["detector", "vs FPR95", "vs AUROC"], rows)


def robustness_section(res: dict) -> None:
    for target in TARGETS:
        for label in ROBUST_MODELS:
            print(f"**{res['models'][label]} → {TITLE[target]}**: RMSE (meta-train and "
                  "meta-test at that setting) / RMSE of the model fitted at 1:1, max size / "
                  "Spearman ρ (meta-test)")
            print()
            rows = [["1:1 (main)", "max",
                     f"{res['config']['mean_n_id']:.0f}+{res['config']['mean_n_ood']:.0f}"]
                    + [f"{_v(res['table'][m][target][label]['rmse'], '.2f')} / – / "
                       f"{_v(res['table'][m][target][label]['spearman'], '+.2f')}"
                       for m in METHODS]]
            for r in res["robustness"]:
                cells = []
                for m in METHODS:
                    c = r["results"][m][target][label]
                    cells.append(f"{_v(c['rmse'], '.2f')} / {_v(c['rmse_shift'], '.2f')} / "
                                 f"{_v(c['spearman'], '+.2f')}")
                rows.append([r["ratio"], str(r["size"] or "max"),
                             f"{r['mean_n_id']:.0f}+{r['mean_n_ood']:.0f}", *cells])
            _table(["IND:OOD", "size", "ID+OOD", *METHODS], rows,
                   ["---", "---:", "---:"] + ["---:"] * len(METHODS))


def cross_section(stores: dict[str, Any], repeats: int, sets_per_split: int) -> None:
    from scorers.gscore import evaluate_gscore, fit_gscore, predict_gscore

    a, b = stores["demo"], stores["w8"]
    from featstore.demo.pipeline import id_test_accuracy

    print(f"Backbones: demo ResNet width 16 (D=64, ID acc {id_test_accuracy(a):.2f}%) and "
          f"width 8 (D=32, ID acc {id_test_accuracy(b):.2f}%), the same 44 OOD sets.")
    print()
    res = evaluate_gscore([a, b], METHODS, ["ude-wasserstein", "gmm-wasserstein"], TARGETS,
                          repeats=repeats, sets_per_split=sets_per_split, baselines=False)
    print("Same partitions of the OOD sets: model fitted on one store's meta-train sets, "
          "applied to a store's meta-test sets — RMSE (Pearson r), mean over partitions.")
    print()
    rows = []
    pa, pb = str(a.path), str(b.path)
    names = {pa: "w16", pb: "w8"}
    for target in TARGETS:
        for label in ("ude-wasserstein", "gmm-wasserstein"):
            for fa, fb in ((pa, pa), (pa, pb), (pb, pb), (pb, pa)):
                cells = []
                for m in METHODS:
                    c = res["cross_store"][m][target][label][fa][fb]
                    cells.append(f"{_v(c['rmse'], '.2f')} ({_v(c['pearson'], '+.2f')})")
                rows.append([TITLE[target], res["models"][label],
                             f"{names[fa]} → {names[fb]}", *cells])
    _table(["target", "Gscore", "fit → test", *METHODS], rows,
           ["---", "---", "---"] + ["---:"] * len(METHODS))
    print("One model fitted on ALL 44 OOD sets of the w16 store (`gscore fit`), used with "
          "`gscore predict --allow-other-model` on each OOD set of the w8 store mixed with its "
          "id/test (the UDE reference is the w8 store's own id/val): RMSE over the 44 sets; "
          "w16 → w16 is in-sample.")
    print()
    rows = []
    for target in TARGETS:
        cells_same, cells_other = [], []
        for m in METHODS:
            model = fit_gscore([a], m, target, "ude-wasserstein", sets_per_split=1)
            for st, cells in ((a, cells_same), (b, cells_other)):
                err = []
                for s in st.splits(role="ood", usage="test"):
                    r = predict_gscore(model, st, ["id/test", s], force=True, with_truth=True)
                    err.append(r["predicted"] - r["truth"])
                cells.append(f"{np.sqrt(np.mean(np.square(err))):.2f}")
        rows.append([TITLE[target], "w16 → w16", *cells_same])
        rows.append([TITLE[target], "w16 → w8", *cells_other])
    _table(["target", "fit → predict", *METHODS], rows,
           ["---", "---"] + ["---:"] * len(METHODS))


def write_em_corpus(store: Any, path: Path) -> None:
    """The EM test corpus (tests/test_gscore_em.py): every scorer the store supports (no
    extras needed) on id/test and every OOD test split, saved as `<scorer>|<split>` arrays."""
    from scorers import REGISTRY, get_scorer
    from scorers.evaluate import score_splits

    arrays = {}
    oods = store.splits(role="ood", usage="test")
    for name in sorted(REGISTRY):
        if any(n.startswith("extra:") for n in get_scorer(name).needs):
            continue
        params = {"nnguide": {"alpha": 1.0}}.get(name, {})
        scores, _, _ = score_splits(store, name, params, ["id/test", *oods])
        arrays.update({f"{name}|{s}": v.astype(np.float64) for s, v in scores.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    _log(f"wrote {path}: {len(arrays)} arrays")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "gbench")
    ap.add_argument("--weights", type=Path, default=None,
                    help="demo checkpoint to reuse (default: OUT/model.pt, trained once)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets-per-split", type=int, default=10)
    ap.add_argument("--skip-cross", action="store_true")
    ap.add_argument("--em-corpus", type=Path, default=None,
                    help="only write the EM test corpus (scores of every scorer on the "
                         "mini-Gbench) to this .npz, e.g. tests/data/gscore_em_corpus.npz")
    args = ap.parse_args(argv)
    if args.em_corpus is not None:
        from featstore import Store

        write_em_corpus(Store.open(args.out / "store"), args.em_corpus)
        return 0
    from benchmarks.bench_metrics import cpu_model, mem_total_gib
    from scorers.gscore import evaluate_gscore

    cmd = "python -m benchmarks.bench_gscore" + (" " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])).rstrip()
    stores = build_stores(args.out, args.weights, not args.skip_cross)
    st = stores["demo"]
    common = {"repeats": args.repeats, "sets_per_split": args.sets_per_split}

    _log("timing gscore evaluate (cold: scores not cached)")
    cache = Path(st.path) / "scores.h5"
    cache.unlink(missing_ok=True)
    t0 = time.perf_counter()
    cold = evaluate_gscore([st], METHODS, targets=TARGETS, **common)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = evaluate_gscore([st], METHODS, targets=TARGETS, **common)
    warm_s = time.perf_counter() - t0
    _log("main evaluation with every combination and the robustness table")
    res = evaluate_gscore([st], METHODS, MODELS, TARGETS, ratios=RATIOS, sizes=SIZES,
                          robust_models=ROBUST_MODELS, **common)
    _log("disjoint id/test halves and the paper's literal UDE kernel")
    disjoint = evaluate_gscore([st], METHODS, ["kmeans-l2", "gmm-wasserstein",
                                               "ude-wasserstein"], TARGETS,
                               id_train_fraction=0.5, baselines=False, **common)
    paper_kernel = evaluate_gscore([st], METHODS, ["ude-wasserstein", "ude-kl"], TARGETS,
                                   ude_kernel="paper", baselines=False, **common)

    print("### Gscore (unsupervised evaluation of OOD detection) on the mini-Gbench")
    print()
    print(f"- date: {_dt.date.today().isoformat()}")
    print(f"- command: `{cmd}`")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
          f"{platform.platform()}")
    print(f"- software: Python {platform.python_version()}, NumPy {np.__version__}, Numba "
          f"{numba.__version__}")
    cfg = res["config"]
    print(f"- protocol: {len(res['splits'])} OOD sets; each repeat partitions them at random "
          f"into {cfg['train_fraction']:.0%} meta-train / the rest meta-test (never shared); "
          f"{cfg['sets_per_split']} seeded subsamples per OOD set, IND:OOD {cfg['ratio']}, "
          f"largest size the pools allow (mean {cfg['mean_n_id']:.0f} ID + "
          f"{cfg['mean_n_ood']:.0f} OOD rows); ID rows from id/test (shared by meta-train and "
          f"meta-test unless stated); UDE reference: id/val; {cfg['repeats']} repeats; "
          "predictions clipped to [0, 100]")
    print(f"- detectors: {', '.join(METHODS)} at their default parameters (ODIN: temperature "
          "1000, no input perturbation)")
    print()
    print("#### Time of `gscore evaluate` over the mini-Gbench")
    print()
    sec = warm["seconds"]
    _table(["run", "meta-sets", "set x detector evaluations", "wall s", "scoring s",
            "true metrics s", "modelling + regression s", "baselines + rest s"],
           [["cold (scores computed)", f"{cold['meta_sets']:,}",
             f"{cold['set_evaluations']:,}", f"{cold_s:.2f}",
             f"{cold['seconds']['scoring']:.2f}", f"{cold['seconds']['true_metrics']:.2f}",
             f"{cold['seconds']['modelling_and_regression']:.2f}",
             f"{cold_s - cold['seconds']['scoring'] - cold['seconds']['true_metrics'] - cold['seconds']['modelling_and_regression']:.2f}"],  # noqa: E501
            ["warm (scores cached)", f"{warm['meta_sets']:,}",
             f"{warm['set_evaluations']:,}", f"{warm_s:.2f}", f"{sec['scoring']:.2f}",
             f"{sec['true_metrics']:.2f}", f"{sec['modelling_and_regression']:.2f}",
             f"{warm_s - sec['scoring'] - sec['true_metrics'] - sec['modelling_and_regression']:.2f}"]])  # noqa: E501
    print(f"(6 detectors x the paper's 5 Table-6 variants x 2 targets + both baselines; "
          f"{warm['set_evaluations'] / warm_s:,.0f} set x detector evaluations per second "
          "warm.)")
    print()
    print("#### The benchmark: spread of the true metrics over the OOD sets (vs all of id/test)")
    print()
    spread_section(st)
    main_tables(res)
    print("#### Fig. 3 style correlation over all OOD sets")
    print()
    fig3_section(st)
    print("#### Robustness: IND:OOD ratio and set size")
    print()
    robustness_section(res)
    print("#### Disjoint ID rows: meta-train sets from one half of id/test, meta-test sets "
          "from the other — RMSE")
    print()
    rows = []
    for target in TARGETS:
        for label, title in disjoint["models"].items():
            rows.append([TITLE[target], title] + [
                f"{_pm(disjoint['table'][m][target][label]['rmse'])} (shared: "
                f"{_v(res['table'][m][target][label]['rmse'], '.2f')})" for m in METHODS])
    _table(["target", "Gscore", *METHODS], rows, ["---", "---"] + ["---:"] * len(METHODS))
    print("#### UDE with the paper's literal kernel exp(-(x-mu)^2 / (2 sigma)) — RMSE")
    print()
    rows = []
    for target in TARGETS:
        for label, title in paper_kernel["models"].items():
            rows.append([TITLE[target], title] + [
                f"{_pm(paper_kernel['table'][m][target][label]['rmse'])} (2σ²: "
                f"{_v(res['table'][m][target][label]['rmse'], '.2f')})" for m in METHODS])
    _table(["target", "Gscore", *METHODS], rows, ["---", "---"] + ["---:"] * len(METHODS))
    if not args.skip_cross:
        print("#### Across stores (backbones)")
        print()
        cross_section(stores, args.repeats, args.sets_per_split)
    return 0


if __name__ == "__main__":
    sys.exit(main())
