"""Benchmark: Gscore (unsupervised evaluation of OOD detection) on the mini-Gbench.

Run ``python -m benchmarks.bench_gscore [--out benchmarks/out/gbench] [--backbone pretrained]
[--repeats 5] [--sets-per-split 10] [--skip-variants] [--em-check]``.

Builds (once; cached under ``--out``) the mini-Gbench store (``featstore.workflows.demo.gbench``: 44
OOD sets of real bundled data) with the given backbone (default: the frozen ImageNet
EfficientNet-Lite0 with a head trained on digits 0-5), then reports for MSP, ODIN
(temperature only), energy, MLS (the paper's four), ViM and KNN:

1. the spread of the true AUROC / FPR95 over the OOD sets (is the benchmark in the paper's
   regime, AUROC 57-100?);
2. under the default, leakage-free protocol (disjoint id/test halves for meta-train and
   meta-test, tau tuned on MSP and reused): Table-1/6 style RMSE of the predicted FPR95 and
   AUROC on meta-test sets for every variant and both baselines, beside the paper's values,
   and Pearson / Spearman;
3. the protocol variants: one meta-set per OOD dataset, tau searched per detector, and the
   optimistic shared id/test pool;
4. robustness: IND:OOD 1:100 .. 100:1, sizes 100 / 50, heterogeneous sets (supplementary C);
5. with ``--em-check``: the GMM EM against scikit-learn on every (scorer, OOD split) set;
6. the wall time of `gscore evaluate`.

Output is Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np

from featstore.store.formatting import TARGET_TITLE
from featstore.store.formatting import cell_number as _v
from featstore.store.formatting import mean_std as _pm

METHODS = ["msp", "odin", "energy", "mls", "vim", "knn"]
#: The paper's Table 1 / Table 6 RMSE (%), DLA backbone, CIFAR-10 ID, Gbench: variant ->
#: target -> (MSP, ODIN, ENERGY, MLS).
PAPER_RMSE = {
    "confidence": {"fpr95": (71.86, 40.33, 46.33, 47.30), "auroc": (17.95, 12.75, 13.67, 13.65)},
    "auto_eval": {"fpr95": (12.69,) * 4, "auroc": (5.92,) * 4},
    "kmeans-l2": {"fpr95": (8.73, 10.97, 6.79, 6.93), "auroc": (5.32, 5.25, 5.01, 5.17)},
    "gmm-kl": {"fpr95": (5.19, 13.44, 7.10, 7.40), "auroc": (4.24, 7.18, 6.75, 6.32)},
    "gmm-wasserstein": {"fpr95": (4.41, 6.89, 7.28, 6.30), "auroc": (4.81, 4.53, 5.44, 4.85)},
    "ude-kl": {"fpr95": (4.10, 4.77, 4.67, 5.07), "auroc": (3.90, 3.80, 3.92, 4.04)},
    "ude-wasserstein": {"fpr95": (3.46, 4.50, 4.39, 4.52), "auroc": (3.64, 3.86, 4.02, 4.08)},
}
PAPER_METHODS = ("msp", "odin", "energy", "mls")
MODELS = ["kmeans-l2", "gmm-kl", "gmm-wasserstein", "gmm-w2", "gmm-wasserstein@auto",
          "ude-l2", "ude-kl", "ude-kl_rev", "ude-wasserstein", "ude-wasserstein@0.99",
          "ude-w2"]
ROBUST_MODELS = ["kmeans-l2", "gmm-wasserstein", "ude-wasserstein"]
RATIOS = ["1:100", "1:10", "1:3", "3:1", "10:1", "100:1"]
SIZES = [100, 50]
TARGETS = ["fpr95", "auroc"]
TITLE = TARGET_TITLE


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(align or ["---"] + ["---:"] * (len(header) - 1)) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def _paper(label: str, target: str) -> str:
    vals = PAPER_RMSE.get(label, {}).get(target)
    return " / ".join(f"{v:.2f}" for v in vals) if vals else "–"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



def build_store(out: Path, weights: Path | None, backbone: str) -> Any:
    from featstore.workflows.demo.gbench import build_gbench

    t0 = time.perf_counter()
    kw = {} if backbone is None else {"backbone": backbone}
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    store = build_gbench(out, weights=weights, progress=None, **kw)
    _log(f"store ready in {time.perf_counter() - t0:.1f} s")
    return store


def spread_section(store: Any) -> None:
    from featstore.workflows.demo.pipeline import id_test_accuracy
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
                     str(int((au < 50).sum())), str(int(((au >= 55) & (au <= 100)).sum())),
                     f"{fp.min():.1f}", f"{np.median(fp):.1f}",
                     f"{fp.max():.1f}", str(int((fp >= 99.5).sum())),
                     str(int((fp <= 0.5).sum()))])
    _table(["detector", "AUROC min", "median", "max", "# AUROC<50", "# AUROC 55-100",
            "FPR95 min", "median",
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
                                       .get(key, {}).get("rmse")) for m in METHODS]
                        + [_paper(key, target)])
        for label, title in res["models"].items():
            rows.append([title] + [_pm(res["table"][m][target][label]["rmse"])
                                   for m in METHODS] + [_paper(label, target)])
        _table(["Unsup. eval. method", *METHODS, "paper (MSP / ODIN / ENERGY / MLS)"], rows)
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
            cells = [res["baselines"].get(m, {}).get(target, {}).get(key) for m in METHODS]
            if any(cells):
                rows.append([label] + [f"{_v(c['pearson'])} / {_v(c['spearman'])}" if c
                                       else "–" for c in cells])
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


VARIANT_MODELS = ["kmeans-l2", "gmm-wasserstein", "ude-kl", "ude-wasserstein"]


def variants_section(variants: dict[str, dict], default: dict) -> None:
    """RMSE (Pearson r) of the main variants under each protocol variant."""
    for target in TARGETS:
        print(f"**{TITLE[target]}**: RMSE (Pearson r on meta-test sets), mean over partitions")
        print()
        rows = []
        for name, res in [("default (disjoint pools, tau from MSP, 10 subsamples/set)",
                           default), *variants.items()]:
            for label in VARIANT_MODELS:
                rows.append([name, res["models"][label]] + [
                    f"{_v(res['table'][m][target][label]['rmse'], '.2f')} "
                    f"({_v(res['table'][m][target][label]['pearson'], '+.2f')})"
                    for m in METHODS])
        _table(["protocol", "Gscore", *METHODS], rows, ["---", "---"] + ["---:"] * len(METHODS))


def em_sets(store: Any) -> tuple[list[np.ndarray], list[str]]:
    """The EM corpus of one store: every (scorer, OOD test split) set alone and with id/test
    mixed in, named `<scorer>|<split>` and `<scorer>|id/test+<split>`."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_em_corpus(store, Path(tmp) / "c.npz", use_cache=False)
        data = np.load(Path(tmp) / "c.npz")
        sets, names = [], []
        for key in data.files:
            method, _, split = key.partition("|")
            if split != "id/test":
                sets += [data[key], np.concatenate([data[f"{method}|id/test"], data[key]])]
                names += [key, f"{method}|id/test+{split}"]
    return sets, names


def em_check_section(stores: list[tuple[str, Any]]) -> None:
    """The GMM EM against scikit-learn's GaussianMixture from the same initialisation, run to
    convergence (tol 1e-10), on every (scorer, OOD split) set of every store, alone and mixed
    with id/test. Sets constant up to rounding (np.std <= 1e-12 |mean|: one Gaussian, which
    featstore reports as collapsed; sklearn cannot standardise them) are counted apart."""
    import warnings

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_gscore_em import mixture_loglik, sklearn_loglik

    from scorers.gscore.clustering import GMM_COLUMNS, gmm_params
    from scorers.gscore.engine import pack

    col = {name: i for i, name in enumerate(GMM_COLUMNS)}
    rows, worst_all = [], []
    for label, store in stores:
        _log(f"EM check on {label}")
        sets, names = em_sets(store)
        x, n = pack(sets)
        t0 = time.process_time()
        fits = gmm_params(x, n)
        ours_s = time.process_time() - t0
        const = np.array([s.std() <= 1e-12 * max(1.0, abs(s.mean())) for s in sets])
        bad_const = int(sum(1 for f, c in zip(fits, const, strict=True)
                            if c and f[col["collapsed"]] != 1))
        diffs, t0 = [], time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s, f, c in zip(sets, fits, const, strict=True):
                if c:
                    diffs.append(np.nan)
                    continue
                ours = mixture_loglik(s, f[0], f[1], f[2], f[4], f[5])
                diffs.append(ours - sklearn_loglik(s, tol=1e-10, max_iter=100_000))
        sk_s = time.process_time() - t0
        d = np.array(diffs)
        ok = ~const
        i = int(np.nanargmin(d))
        worst_all.append((d[i], f"{label}: {names[i]}"))
        steps = fits[ok, col["steps"]]
        rows.append([label, str(len(sets)), str(int(const.sum())), str(int(ok.sum())),
                     str(int((fits[ok, col["converged"]] == 0).sum())),
                     str(int(fits[ok, col["collapsed"]].sum())),
                     f"{np.median(steps):.0f} / {steps.max():.0f}",
                     f"{d[ok].min():+.2e} ({names[i].replace('|', chr(92) + '|')})",
                     f"{np.median(d[ok]):+.2e}",
                     str(int((d[ok] < -1e-6).sum())), f"{ours_s:.1f} / {sk_s:.0f}"])
        if bad_const:
            rows[-1][2] += f" ({bad_const} NOT collapsed)"
    _table(["store", "sets", "constant (collapsed)", "compared", "not converged",
            "collapsed", "EM steps median / max", "min(featstore - sklearn) (set)",
            "median", "# below -1e-6", "CPU s featstore / sklearn"], rows)
    d, where = min(worst_all)
    print(f"Worst difference over every store: {d:+.2e} ({where}); featstore's mean "
          "log-likelihood (scipy at its parameters) minus sklearn's GaussianMixture from the "
          "same initialisation (tol 1e-10, max_iter 100,000).")
    print()


def write_em_corpus(store: Any, path: Path, use_cache: bool = True) -> None:
    """The EM test corpus (tests/test_gscore_em.py): every scorer the store supports (no
    extras needed) on id/test and every OOD test split, as Gscore models them
    (`scorers.gscore.metasets.gscore_scores`: the paper's form), saved as `<scorer>|<split>`
    arrays (`use_cache=False`: scored afresh, the store's scores.h5 untouched, so another
    run may use the store meanwhile)."""
    from scorers import REGISTRY
    from scorers.gscore.metasets import gscore_scores
    from scorers.needs import Needs

    arrays = {}
    oods = store.splits(role="ood", usage="test")
    for name in sorted(REGISTRY):
        if Needs.of(REGISTRY[name]).extras:
            continue
        params = {"nnguide": {"alpha": 1.0}}.get(name, {})
        scores = gscore_scores(store, name, params, ["id/test", *oods], use_cache)
        arrays.update({f"{name}|{s}": v.astype(np.float64) for s, v in scores.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    _log(f"wrote {path}: {len(arrays)} arrays")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "gbench")
    ap.add_argument("--backbone", default=None,
                    help="gbench backbone (default: build_gbench's default)")
    ap.add_argument("--weights", type=Path, default=None,
                    help="checkpoint to reuse (default: OUT/model.pt, made once)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets-per-split", type=int, default=10)
    ap.add_argument("--skip-variants", action="store_true")
    ap.add_argument("--skip-baselines", action="store_true",
                    help="no confidence / auto-evaluation baselines (the Fréchet distance of "
                         "1280-d features per meta-set is the slow part)")
    ap.add_argument("--store", type=Path, default=None,
                    help="use this already built mini-Gbench store instead of building one")
    ap.add_argument("--em-check", action="store_true")
    ap.add_argument("--em-stores", type=Path, nargs="*", default=[],
                    help="more stores for --em-check (e.g. the demo's runs/demo/store)")
    ap.add_argument("--em-only", action="store_true",
                    help="with --em-check: only the EM check (no Gscore evaluation)")
    ap.add_argument("--em-corpus", type=Path, default=None,
                    help="only write the EM test corpus (scores of every scorer on the "
                         "mini-Gbench) to this .npz, e.g. tests/data/gscore_em_corpus.npz")
    args = ap.parse_args(argv)
    from benchmarks.bench_metrics import cpu_model, mem_total_gib
    from featstore import Store
    from scorers.gscore import evaluate_gscore

    if args.store is not None:
        st = Store.open(args.store)
    else:
        st = build_store(args.out, args.weights, args.backbone)
    if args.em_corpus is not None:
        write_em_corpus(st, args.em_corpus)
        return 0
    em_stores = [("mini-Gbench " + str(st.path), st)] + [
        (str(p), Store.open(p)) for p in args.em_stores]
    if args.em_check and args.em_only:
        load = Path("/proc/loadavg").read_text().split()[:3]
        print("#### EM check against scikit-learn")
        print()
        print(f"`python -m benchmarks.bench_gscore {' '.join(argv or sys.argv[1:])}`, load "
              f"average at start {' '.join(load)}")
        print()
        em_check_section(em_stores)
        return 0
    cmd = "python -m benchmarks.bench_gscore" + (" " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])).rstrip()
    common = {"repeats": args.repeats, "sets_per_split": args.sets_per_split,
              "baselines": not args.skip_baselines}
    load = Path("/proc/loadavg").read_text().split()[:3]
    _log("timing gscore evaluate (cold: scores not cached)")
    (Path(st.path) / "scores.h5").unlink(missing_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    cold = evaluate_gscore([st], METHODS, targets=TARGETS, **common)
    cold_s, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
    _log("main evaluation (default protocol) with every variant and the robustness table")
    res = evaluate_gscore([st], METHODS, MODELS, TARGETS, ratios=RATIOS, sizes=SIZES,
                          robust_heterogeneous=True, robust_models=ROBUST_MODELS, **common)
    variants = {}
    if not args.skip_variants:
        for name, kw in (("one meta-set per OOD dataset", {"sets_per_split": 1}),
                         ("tau searched per detector", {"tau_from": None}),
                         ("shared id/test pool (optimistic)", {"id_train_fraction": None})):
            _log(f"variant: {name}")
            variants[name] = evaluate_gscore([st], METHODS, VARIANT_MODELS, TARGETS,
                                             **{**common, "baselines": False, **kw})
    print(f"### Gscore on the mini-Gbench ({args.backbone or 'default'} backbone, paper "
          "protocol)")
    print()
    print(f"- date: {_dt.date.today().isoformat()}")
    print(f"- command: `{cmd}`")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
          f"{platform.platform()}; load average at start {' '.join(load)} (shared machine)")
    print(f"- software: Python {platform.python_version()}, NumPy {np.__version__}, Numba "
          f"{numba.__version__}")
    print(f"- store: {st.path} (model {st.model_sha256[:12]}), backbone "
          f"{args.backbone or 'the default of featstore.workflows.demo.gbench.build_gbench'}")
    for line in res["config"]["describe"].values():
        print(f"- {line}")
    print(f"- detectors: {', '.join(METHODS)} at their default parameters (ODIN: temperature "
          "1000, no input perturbation)")
    print()
    print("#### The benchmark: spread of the true metrics over the OOD sets (vs all of id/test)")
    print()
    spread_section(st)
    main_tables(res)
    if variants:
        print("#### Protocol variants")
        print()
        variants_section(variants, res)
    print("#### Robustness: IND:OOD ratio, set size, heterogeneous sets")
    print()
    robustness_section(res)
    fits = res.get("gmm_fits") or {}
    print("GMM fits over the whole evaluation: " + "; ".join(
        f"{m} {f['sets']} fits, {f['not_converged']} not converged, {f['collapsed']} collapsed"
        for m, f in fits.items()))
    print()
    if args.em_check:
        print("#### EM check against scikit-learn")
        print()
        em_check_section(em_stores)
    print("#### Time of `gscore evaluate` over the mini-Gbench")
    print()
    sec = cold["seconds"]
    print(f"Cold (scores computed): {cold['meta_sets']:,} meta-sets, "
          f"{cold['set_evaluations']:,} set x detector evaluations (6 detectors x the paper's "
          f"5 Table-6 variants x 2 targets"
          f"{'; baselines skipped' if args.skip_baselines else ' + both baselines'}) in "
          f"{cold_s:.1f} s wall, "
          f"{cold_cpu:.1f} CPU s (scoring {sec['scoring']:.1f} s, true metrics "
          f"{sec['true_metrics']:.1f} s, modelling + regression "
          f"{sec['modelling_and_regression']:.1f} s).")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
