"""The evaluation protocol (`evaluate_gscore`, `gbench_protocol`): score every store once,
run the random partitions (`_run_repeat`) or the cross-validation rounds
(`crossval.run_cv_round`), and assemble the JSON-ready result: the Table-1/6 RMSE and
correlations, the baselines, the robustness and cross-store tables. Every option that
decides a number is echoed in the result's `config`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .baselines import auto_eval_distances, confidence_baseline, load_features
from .config import EvalOptions, Setting, config_record, describe, validate_options
from .crossval import run_cv_round
from .metasets import (
    MetaSets,
    PooledScores,
    check_disjoint,
    check_same_model,
    draw_sets,
    id_pools,
    load_scores,
    method_key,
    ood_test_splits,
    partition_splits,
    select_splits,
    set_targets,
    set_truth,
    split_truth,
    store_pools,
    target_column,
)
from .regression import correlations, fit_line, predict_line, rmse, search_tau
from .results import (
    Tally,
    cross_store_rows,
    evaluate_variant,
    headline_correlations,
    json_ready,
    nest,
    summarise,
)
from .spec import (
    _AUTO,
    DEFAULT_MODELS,
    GBENCH_METHODS,
    GBENCH_PAPER_METHODS,
    GBENCH_RATIOS,
    GBENCH_SIZES,
    ID_TRAIN_FRACTION,
    PAPER_PRESET,
    SETS_PER_SPLIT,
    TAU_FROM,
    ModelSpec,
    parse_model,
    ratio_label,
)


def _score_once(stores: Sequence[Any], opt: EvalOptions, use_cache: bool,
                say: Callable[[str], None], announce: Callable[[dict[str, str]], None],
                step: Callable[[], None]) -> PooledScores:
    """Score id/val, id/test and the selected OOD test splits of every store once per scorer;
    a scorer that cannot run is skipped with its reason (the tau detector must run).
    `announce` gets the configuration's sentences before any scoring; `step` is called
    after each (scorer, store) and after the baselines' features of each store."""
    t0 = time.perf_counter()
    every = list(dict.fromkeys(s for st in stores for s in ood_test_splits(st)))
    keep = select_splits(every, opt.include, opt.exclude)
    data = [store_pools(i, st, keep) for i, st in enumerate(stores)]
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    if opt.cv is not None and opt.cv > len(names):
        raise UsageError(f"--cv {opt.cv}: more folds than the {len(names)} OOD test splits")
    announce(describe(opt, names))
    keys: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for m in opt.scored():
        key = method_key(m, opt.params.get(m, {}))
        try:
            for sd in data:
                say(f"scoring {m} on {sd.path}")
                load_scores(sd, key, m, opt.params.get(m, {}), use_cache)
                step()
            keys[m] = key
        except UsageError as exc:
            if m == opt.tau_from:
                raise UsageError(f"the tau detector {m!r} cannot run ({exc}); pick another "
                                 "with --tau-from or search tau per detector") from None
            skipped[m] = str(exc)
    if opt.baselines:
        for sd in data:
            say(f"baselines: MSP and features of {sd.path}")
            load_scores(sd, "msp", "msp", {}, use_cache)
            try:
                load_features(sd)
            except UsageError:
                pass  # reported by the auto-evaluation baseline (`baseline_note`)
            step()
    methods = [m for m in opt.methods if m in keys]
    if not methods:
        raise UsageError(f"no scorer could run: {skipped}")
    pooled = {m: np.concatenate([sd.scores[keys[m]] for sd in data]) for m in keys}
    msp = np.concatenate([sd.scores["msp"] for sd in data]) if opt.baselines else None
    refs = {m: np.array([data[i].ref[keys[m]][:2] for i in range(len(data))]) for m in keys}
    split_t = {m: split_truth(data, keys[m]) for m in keys}
    return PooledScores(data, offsets, names, methods, skipped, pooled, msp, refs,
                        time.perf_counter() - t0, keys, split_t, opt.lloyd_seed,
                        opt.tau_halfwidth)


@dataclass
class _SettingSets:
    """Meta-train and meta-test sets of one repeat at one meta-set setting, and the taus
    tuned on the tau detector for it ({(target, variant label): tau})."""

    ci: int
    setting: Setting
    tr: MetaSets
    te: MetaSets
    fd: tuple[np.ndarray, np.ndarray] | None
    pool_tr: list[np.ndarray] = field(default_factory=list)
    taus: dict[tuple[str, str], float | None] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.setting.kind


def _draw_setting(opt: EvalOptions, sc: PooledScores, tally: Tally, rep: int, ci: int,
                  setting: Setting, split_names: tuple[list, list],
                  pools: tuple[list, list]) -> _SettingSets:
    """Draw the meta-train / meta-test sets of one setting (and the Fréchet distances of the
    auto-evaluation baseline at the main setting)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([opt.seed, rep, 1, ci])
    draw: dict[str, Any] = {
        "ratio": setting.ratio, "size": setting.size, "per_split": opt.sets_per_split,
        "rng": rng, "offsets": sc.offsets, "heterogeneous": setting.heterogeneous}
    tr = draw_sets(sc.data, split_names[0], pools[0], **draw)
    te = draw_sets(sc.data, split_names[1], pools[1], **draw)
    check_disjoint(sorted(set(tr.split)), sorted(set(te.split)))
    tally.n_sets += tr.m + te.m
    tally.sizes_seen.setdefault(ci, []).append(
        (float(te.n_id.mean()), float((te.n - te.n_id).mean())))
    tally.t_draw += time.perf_counter() - t0
    fd = None
    if setting.kind == "main" and opt.baselines:
        t0 = time.perf_counter()
        try:
            fd = (auto_eval_distances(sc.data, tr, sc.offsets),
                  auto_eval_distances(sc.data, te, sc.offsets))
        except UsageError as exc:
            tally.baseline_note = str(exc)
        tally.t_base += time.perf_counter() - t0
    ss = _SettingSets(ci, setting, tr, te, fd, list(pools[0]))
    t0 = time.perf_counter()
    ss.taus = _shared_taus(opt, sc, ss)
    tally.t_tau += time.perf_counter() - t0
    return ss


def _shared_taus(opt: EvalOptions, sc: PooledScores,
                 ss: _SettingSets) -> dict[tuple[str, str], float | None]:
    """tau of every searched variant and target, tuned on the tau detector's meta-train sets
    (supplementary B: tuned with MSP, reused for the other detectors); {} per detector."""
    specs = [s for s in (opt.specs if ss.kind == "main" else opt.rspecs) if s.tau == _AUTO]
    if opt.tau_from is None or not specs:
        return {}
    eng = sc.engine(ss.tr, opt.tau_from, opt.ude_kernel)
    truth = set_truth(eng.x, ss.tr)
    taus: dict[tuple[str, str], float | None] = {}
    for target in opt.targets:
        p = truth[:, target_column(target)]
        for spec in specs:
            res = search_tau(lambda ts, s=spec: eng.gscores(  # type: ignore[misc]
                s.modelling, s.distance, ts), p,  # (mypy cannot type a lambda's defaults)
                halfwidth=eng.tau_halfwidth)
            taus[(target, spec.label)] = res["tau"]
    return taus


def _evaluate_method(opt: EvalOptions, sc: PooledScores, tally: Tally, ss: _SettingSets,
                     m: str, fitted: dict[tuple, dict], rep: int) -> None:
    """Every (target, model) of one detector on one setting's sets: fit on meta-train, test
    on meta-test; robustness settings also apply the main setting's fit (`rmse_shift`)."""
    tr, te = ss.tr, ss.te
    t1 = time.perf_counter()
    eng_tr, eng_te = sc.engine(tr, m, opt.ude_kernel), sc.engine(te, m, opt.ude_kernel)
    truth_tr, truth_te = set_truth(eng_tr.x, tr), set_truth(eng_te.x, te)
    split_te = set_targets(te, sc.split_t[m])
    floor_te = set_targets(te, sc.floor_table(m, ss.pool_tr))
    tally.t_truth += time.perf_counter() - t1
    t1 = time.perf_counter()
    for target in opt.targets:
        col = target_column(target)
        p_tr, p_te = truth_tr[:, col], truth_te[:, col]
        for spec in (opt.specs if ss.kind == "main" else opt.rspecs):
            key = (target, spec.label)
            use = ModelSpec(spec.modelling, spec.distance, ss.taus[key]) if key in ss.taus \
                else spec
            row, fit = evaluate_variant(eng_tr, eng_te, use, p_tr, p_te, opt.clip,
                                        split_te[:, col], floor_te[:, col])
            if ss.kind == "main":
                tally.main.setdefault((m, target, spec.label), []).append(row)
                fitted[(m, target, spec.label)] = fit
                if rep == 0:
                    tally.points[(m, target, spec.label)] = {**fit["points"], "split": te.split}
                if len(sc.data) > 1:
                    cross_store_rows(tally.cross, sc.data, tr, te, eng_tr, eng_te, use, p_tr,
                                     p_te, m, target, opt.clip, spec.label)
            else:
                prev = fitted[(m, target, spec.label)]
                g = eng_te.gscore(spec.modelling, spec.distance, prev["tau"])
                pred = predict_line(prev["theta1"], prev["theta0"], g, opt.clip)
                row["rmse_shift"] = rmse(pred, p_te)
                tally.robust.setdefault((ss.ci, m, target, spec.label), []).append(row)
    tally.t_model += time.perf_counter() - t1
    tally.add_gmm(m, eng_tr.gmm_status())
    tally.add_gmm(m, eng_te.gmm_status())
    if ss.kind == "main" and opt.baselines:
        t1 = time.perf_counter()
        _baseline_rows(opt, sc, tally, ss, m, eng_te.x, truth_tr, truth_te)
        tally.t_base += time.perf_counter() - t1


def _baseline_rows(opt: EvalOptions, sc: PooledScores, tally: Tally, ss: _SettingSets,
                   m: str, x_te: np.ndarray, truth_tr: np.ndarray, truth_te: np.ndarray) -> None:
    """The confidence-score and auto-evaluation baselines on the same meta-test sets."""
    assert sc.msp is not None
    te = ss.te
    conf = confidence_baseline(x_te, te.values(sc.msp), te, opt.targets)
    for j, target in enumerate(opt.targets):
        p_te = truth_te[:, target_column(target)]
        tally.base.setdefault((m, target, "confidence"), []).append(
            {"rmse": rmse(conf[:, j], p_te),
             **dict(zip(("pearson", "spearman"), correlations(conf[:, j], p_te), strict=True))})
        if ss.fd is not None:
            p_tr = truth_tr[:, target_column(target)]
            t1_, t0_, _ = fit_line(ss.fd[0], p_tr)
            pred = predict_line(t1_, t0_, ss.fd[1], opt.clip)
            tally.base.setdefault((m, target, "auto_eval"), []).append(
                {"rmse": rmse(pred, p_te),
                 **dict(zip(("pearson", "spearman"), correlations(ss.fd[1], p_te), strict=True))})


def _run_repeat(opt: EvalOptions, sc: PooledScores, tally: Tally, rep: int,
                step: Callable[[], None]) -> None:
    """One random partition (repeat r, seeded by (seed, r)) into `tally`: the OOD split names
    are partitioned into meta-train and meta-test splits (`metasets.partition_splits`) and
    id/test into the two ID pools (`metasets.id_pools`); at every setting (the main one, then
    the robustness rows) the meta-train and meta-test sets are drawn (`_draw_setting`) and
    every detector's variants are fitted on the meta-train sets and tested on the meta-test
    sets (`_evaluate_method`: rmse, rmse_split, floor, correlations as in
    `results.evaluate_variant`)."""
    rng_part = np.random.default_rng([opt.seed, rep, 0])
    split_names = partition_splits(sc.names, opt.train_fraction, rng_part)
    pools = id_pools(sc.data, opt.id_train_fraction, rng_part)
    fitted: dict[tuple, dict] = {}
    for ci, setting in enumerate(opt.settings()):
        ss = _draw_setting(opt, sc, tally, rep, ci, setting, split_names, pools)
        for m in sc.methods:
            _evaluate_method(opt, sc, tally, ss, m, fitted, rep)
            step()


def _assemble(opt: EvalOptions, sc: PooledScores, tally: Tally,
              seconds: dict[str, float]) -> dict[str, Any]:
    """The JSON-ready result of an evaluation."""
    robustness = []
    summary_r = summarise(tally.robust)
    for ci, s in enumerate(opt.configs, start=1):
        means = np.mean(tally.sizes_seen[ci], axis=0)
        robustness.append({
            "kind": s.kind, "ratio": "random" if s.heterogeneous else ratio_label(s.ratio),
            "size": "random" if s.heterogeneous else s.size,
            "mean_n_id": float(means[0]), "mean_n_ood": float(means[1]),
            "results": nest({k[1:]: v for k, v in summary_r.items() if k[0] == ci}, 3),
        })
    result = {
        "stores": [{"path": sd.path, "model_sha256": sd.sha, "ood_splits": len(sd.ood),
                    "id_test_rows": sd.n_id} for sd in sc.data],
        "config": config_record(opt, sc, tally),
        "splits": sc.names,
        "models": {s.label: s.title for s in opt.specs},
        "table": nest(headline_correlations(summarise(tally.main), opt.corr_on), 3),
        "points": nest(tally.points, 3),
        "baselines": nest(summarise(tally.base), 3),
        "baseline_note": tally.baseline_note,
        "robustness": robustness,
        "cross_store": nest(summarise(tally.cross), 5) if tally.cross else {},
        "skipped": sc.skipped,
        "gmm_fits": tally.gmm,
        "meta_sets": tally.n_sets,
        "set_evaluations": tally.n_sets * len(sc.methods),
        "seconds": seconds,
    }
    return json_ready(result)


def _paper_gmm(model: str | ModelSpec) -> ModelSpec:
    """A GMM variant with its default tau (none) gets the paper's searched tau."""
    spec = model if isinstance(model, ModelSpec) else parse_model(model)
    if spec.modelling == "gmm" and spec.tau is None and not (isinstance(model, str)
                                                             and "@" in model):
        return ModelSpec("gmm", spec.distance, PAPER_PRESET["gmm_tau"][0])
    return spec


def evaluate_gscore(
    stores: Sequence[Any],
    methods: Sequence[str] = ("msp",),
    models: Sequence[str | ModelSpec] = DEFAULT_MODELS,
    targets: Sequence[str] = ("fpr95", "auroc"),
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ratio: Any = 1.0,
    size: int | None = None,
    heterogeneous: bool = False,
    sets_per_split: int = SETS_PER_SPLIT,
    repeats: int = 5,
    seed: int = 0,
    train_fraction: float = 0.75,
    id_train_fraction: float | None = ID_TRAIN_FRACTION,
    tau_from: str | None = TAU_FROM,
    splits: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    baselines: bool = True,
    ratios: Sequence[Any] = (),
    sizes: Sequence[int] = (),
    robust_heterogeneous: bool = False,
    robust_models: Sequence[str | ModelSpec] | None = None,
    ude_kernel: str = "gauss",
    clip: bool = True,
    cv: int | None = None,
    corr_on: str = "test",
    paper: bool = False,
    use_cache: bool = True,
    allow_other_model: bool = True,
    progress: Callable[[str], None] | None = None,
    step_progress: Callable[[int, int], None] | None = None,
    announce: Callable[[dict[str, str]], None] | None = None,
) -> dict[str, Any]:
    """Gscore's evaluation protocol (docs/DESIGN.md, Gscore; featstore's by default, the
    paper's settings with `paper`): Table-1/6 RMSE of every (detector, model,
    target), correlations, the baselines, a robustness table over `ratios`, `sizes` and
    (`robust_heterogeneous`) heterogeneous sets, and (with several stores) the cross-store
    table. Returns a JSON-ready dict whose `config` echoes every choice.

    `id_train_fraction`: share of id/test rows for meta-train sets, the rest for meta-test
    (None: one shared pool). `tau_from`: the detector tau is tuned on (None: per detector).
    `splits` / `exclude`: shell patterns selecting the OOD splits.
    `paper`: the paper's settings where the defaults differ (`spec.PAPER_PRESET`, each with
    its sentence; `spec.PAPER_UNMATCHED`: what it cannot match); they override arguments.
    `cv`: K-fold cross-validation over the OOD splits, `repeats` rounds of it
    (`crossval.run_cv_round`); without it, `repeats` random partitions (`_run_repeat`).
    `corr_on`: the sets of the headline `pearson` / `spearman` ("test" | "train"; both kept
    as `pearson_test` / `pearson_train`). `announce(describe)`: the configuration, before any
    work; `progress(message)`: each phase; `step_progress(done, total)`: after each unit of
    work (scoring a detector on a store, a store's baseline features, a (partition or round,
    setting, detector))."""
    t_start = time.perf_counter()
    if paper:
        sets_per_split, ude_kernel, clip, corr_on = (PAPER_PRESET[k][0] for k in (
            "sets_per_split", "ude_kernel", "clip", "corr_on"))
        models = [_paper_gmm(m) for m in models]
    opt = validate_options(stores, methods, models, targets, robust_models, params=params,
                    ratio=ratio, size=size, heterogeneous=heterogeneous,
                    sets_per_split=sets_per_split, repeats=repeats, seed=seed,
                    train_fraction=train_fraction, id_train_fraction=id_train_fraction,
                    tau_from=tau_from, splits=splits, exclude=exclude, baselines=baselines,
                    ratios=ratios, sizes=sizes, robust_heterogeneous=robust_heterogeneous,
                    ude_kernel=ude_kernel, clip=clip, cv=cv, corr_on=corr_on)
    _paper_modelling(opt, paper, seed)
    check_same_model(stores, allow_other_model)
    say = progress or (lambda _m: None)
    bar = _Bar(step_progress, len(stores) * (len(opt.scored()) + (1 if opt.baselines else 0))
               + opt.repeats * len(opt.settings()) * len(opt.methods))
    sc = _score_once(stores, opt, use_cache, say, announce or (lambda _d: None), bar.step)
    bar.total -= opt.repeats * len(opt.settings()) * (len(opt.methods) - len(sc.methods))
    tally = Tally()
    protocol = _run_protocol(opt, sc, tally, say, bar.step)
    parts = {"drawing_sets": tally.t_draw, "true_metrics": tally.t_truth,
             "tau_search": tally.t_tau, "modelling_and_regression": tally.t_model,
             "baselines": tally.t_base}
    seconds = {"scoring": sc.seconds, "protocol": protocol, **parts,
               "other": max(0.0, protocol - sum(parts.values())),
               "total": time.perf_counter() - t_start}
    return _assemble(opt, sc, tally, seconds)


def _paper_modelling(opt: EvalOptions, paper: bool, seed: int) -> None:
    """`opt.paper`, and with it the paper's tau refinement half-width and Lloyd Kmeans
    (`spec.PAPER_PRESET`) in `opt`."""
    opt.paper = paper
    if paper:
        opt.tau_halfwidth = PAPER_PRESET["tau_halfwidth"][0]
        opt.lloyd_seed = seed


class _Bar:
    """Counts the units of work and reports (done, total) to `report` (if any)."""

    def __init__(self, report: Callable[[int, int], None] | None, total: int):
        self.report, self.total, self.done = report, total, 0
        if report:
            report(0, total)

    def step(self) -> None:
        self.done += 1
        if self.report:
            self.report(self.done, self.total)


def _run_protocol(opt: EvalOptions, sc: PooledScores, tally: Tally, say: Callable[[str], None],
                  step: Callable[[], None]) -> float:
    """Every random partition or cross-validation round; returns the seconds spent."""
    t_proto = time.perf_counter()
    for rep in range(opt.repeats):
        say(f"{'round' if opt.cv else 'partition'} {rep + 1}/{opt.repeats}")
        if opt.cv:
            run_cv_round(opt, sc, tally, rep, step)
        else:
            _run_repeat(opt, sc, tally, rep, step)
    return time.perf_counter() - t_proto


def gbench_protocol(stores: Sequence[Any], paper: bool = False,
                    **options: Any) -> dict[str, Any]:
    """The Gbench benchmark on any stores (e.g. a researcher's own OOD sets spread over
    several stores): `evaluate_gscore` with the paper's detectors (GBENCH_METHODS: MSP,
    ODIN, ENERGY, MLS, Table 1), the Table 6 variants, FPR95 and AUROC, and the robustness
    rows (IND:OOD GBENCH_RATIOS, sizes GBENCH_SIZES, heterogeneous sets). `paper`:
    `evaluate_gscore(paper=True)` and ODIN with input perturbation as the paper's (ref.
    [33]): GBENCH_PAPER_METHODS (`odin_perturbed`: the stores need its perturbed logits,
    `gscore gbench --paper` extracts them). Any `evaluate_gscore` option overrides the
    preset."""
    preset: dict[str, Any] = {"methods": GBENCH_PAPER_METHODS if paper else GBENCH_METHODS,
                              "ratios": GBENCH_RATIOS, "sizes": GBENCH_SIZES,
                              "robust_heterogeneous": True, "paper": paper}
    preset.update({k: v for k, v in options.items() if v is not None})
    return evaluate_gscore(stores, **preset)
