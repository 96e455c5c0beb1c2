"""The evaluation protocol (`evaluate_gscore`): repeats of meta-train/meta-test partitions,
the Table-1/6 RMSE and correlations, the baselines, robustness and cross-store tables.

Defaults are the paper's protocol (package docstring): disjoint id/test pools for meta-train
and meta-test sets, tau searched on one detector (MSP) and reused for every other detector.
The variants are named options (`id_train_fraction=None`: one shared pool; `tau_from=None`:
a tau search per detector; `heterogeneous`: a random size and IND:OOD ratio per set;
`sets_per_split=1`: one meta-set per OOD dataset). Every option that decides a number is
echoed in the result's `config`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from featstore.errors import UsageError
from scorers.registry import check_scorers

from .baselines import _auto_eval_fd, _confidence_baseline, _load_features
from .config import _config, _describe, _headline_corr
from .crossval import _engine, run_cv_round
from .metasets import (
    _draw_sets,
    _id_pools,
    _load_scores,
    _method_key,
    _ood_test_splits,
    _Sets,
    _store_data,
    _StoreData,
    _truth,
    check_disjoint,
    partition_splits,
    select_splits,
    set_targets,
    split_truth,
)
from .model import _check_models, _json_safe
from .regression import _corr, _predict, _rmse, fit_line, search_tau
from .results import _cross_rows, _eval_spec, _nest, _summarise
from .spec import (
    _AUTO,
    _METRIC_COL,
    DEFAULT_MODELS,
    GBENCH_METHODS,
    GBENCH_RATIOS,
    GBENCH_SIZES,
    ID_TRAIN_FRACTION,
    PAPER_PRESET,
    SETS_PER_SPLIT,
    TAU_FROM,
    ModelSpec,
    _check_target,
    parse_model,
    parse_ratio,
    ratio_label,
)


@dataclass(frozen=True)
class _Setting:
    """One meta-set setting: the main one or a robustness row."""

    kind: str              # "main" | "ratio" | "size" | "heterogeneous"
    ratio: float
    size: int | None
    heterogeneous: bool


@dataclass
class _Options:
    """Everything (validated) that decides the numbers of one evaluation."""

    methods: list[str]
    specs: list[ModelSpec]
    rspecs: list[ModelSpec]
    targets: list[str]
    main: _Setting
    configs: list[_Setting]
    sets_per_split: int
    repeats: int
    seed: int
    train_fraction: float
    id_train_fraction: float | None
    tau_from: str | None
    baselines: bool
    ude_kernel: str
    clip: bool
    params: dict[str, dict[str, Any]]
    include: list[str] | None
    exclude: list[str] | None
    cv: int | None = None
    corr_on: str = "test"
    paper: bool = False

    def settings(self) -> list[_Setting]:
        """The main meta-set setting followed by the robustness settings."""
        return [self.main, *self.configs]

    def scored(self) -> list[str]:
        """Detectors to score: the evaluated ones and the tau detector."""
        extra = [self.tau_from] if self.tau_from and self.tau_from not in self.methods else []
        return [*self.methods, *extra]


@dataclass
class _Scores:
    """Every scorer's scores of every store, computed once and pooled."""

    data: list[_StoreData]
    offsets: np.ndarray
    names: list[str]
    methods: list[str]
    skipped: dict[str, str]
    pooled: dict[str, np.ndarray]
    msp: np.ndarray | None
    refs: dict[str, np.ndarray]
    seconds: float
    keys: dict[str, str] = field(default_factory=dict)
    split_t: dict[str, dict] = field(default_factory=dict)

    def floor_table(self, m: str, id_rows: Sequence[np.ndarray]) -> dict:
        """Split-level targets of detector m from the meta-train ID rows (the oracle floor)."""
        return split_truth(self.data, self.keys[m], id_rows)


@dataclass
class _Tally:
    """Per-repeat result rows, keyed by tuples, and the protocol's bookkeeping."""

    main: dict[tuple, list] = field(default_factory=dict)
    base: dict[tuple, list] = field(default_factory=dict)
    robust: dict[tuple, list] = field(default_factory=dict)
    cross: dict[tuple, list] = field(default_factory=dict)
    points: dict[tuple, dict] = field(default_factory=dict)
    sizes_seen: dict[int, list] = field(default_factory=dict)
    n_sets: int = 0
    t_model: float = 0.0
    t_truth: float = 0.0
    t_draw: float = 0.0
    t_base: float = 0.0
    t_tau: float = 0.0
    baseline_note: str | None = None
    gmm: dict[str, dict[str, int]] = field(default_factory=dict)

    def add_gmm(self, method: str, status: dict[str, int] | None) -> None:
        """Accumulate how the GMM fits of one engine ended, per detector."""
        if status is None:
            return
        acc = self.gmm.setdefault(method, {})
        for k, v in status.items():
            acc[k] = max(acc.get(k, 0), v) if k == "max_steps" else acc.get(k, 0) + v


def _specs(models: Sequence[str | ModelSpec]) -> list[ModelSpec]:
    return list(dict.fromkeys(m if isinstance(m, ModelSpec) else parse_model(m)
                              for m in models))


def _validate(stores: Sequence[Any], methods: Sequence[str],
              models: Sequence[str | ModelSpec], targets: Sequence[str],
              robust_models: Sequence[str | ModelSpec] | None, **kw: Any) -> _Options:
    """Check every option (clear one-line errors) and normalise it."""
    if not stores:
        raise UsageError("gscore evaluate: name at least one store")
    methods = list(dict.fromkeys(methods))
    tau_from = kw["tau_from"]
    check_scorers([*methods, *([tau_from] if tau_from else [])])
    targets = [_check_target(t) for t in dict.fromkeys(targets)]
    specs = _specs(models)
    if not specs or not targets or not methods:
        raise UsageError("gscore evaluate: need at least one method, model and target")
    rspecs = specs if robust_models is None else _specs(robust_models)
    if not set(rspecs) <= set(specs):
        raise UsageError("robust_models must be a subset of models")
    if kw["repeats"] < 1 or kw["sets_per_split"] < 1:
        raise UsageError("repeats and sets_per_split must be >= 1")
    idf = kw["id_train_fraction"]
    if idf is not None and not 0.0 < idf < 1.0:
        raise UsageError(f"id_train_fraction {idf}: must lie in (0, 1) (disjoint id/test "
                         "pools) or be None (one pool shared by meta-train and meta-test)")
    ratio = parse_ratio(kw["ratio"])
    configs = [_Setting("ratio", parse_ratio(r), kw["size"], False) for r in kw["ratios"]]
    configs += [_Setting("size", ratio, None if s is None else int(s), False)
                for s in kw["sizes"]]
    if kw["robust_heterogeneous"]:
        configs.append(_Setting("heterogeneous", ratio, None, True))
    cv = kw["cv"]
    if cv is not None:
        if cv < 2:
            raise UsageError(f"--cv {cv}: cross-validation needs at least 2 folds")
        if configs:
            raise UsageError("--cv: the robustness rows (--ratios, --sizes, "
                             "--robust-heterogeneous) run with the random partitions only")
        if len(stores) > 1:
            raise UsageError("--cv: one store at a time (the cross-store table runs with the "
                             "random partitions)")
    if kw["corr_on"] not in ("test", "train"):
        raise UsageError(f"corr_on {kw['corr_on']!r}: expected test or train")
    opt = _Options(methods, specs, rspecs, targets,
                    _Setting("main", ratio, kw["size"], bool(kw["heterogeneous"])), configs,
                    kw["sets_per_split"], kw["repeats"], kw["seed"], kw["train_fraction"],
                    idf, tau_from, kw["baselines"], kw["ude_kernel"], kw["clip"],
                    {k: dict(v) for k, v in (kw["params"] or {}).items()},
                    list(kw["splits"]) if kw["splits"] else None,
                    list(kw["exclude"]) if kw["exclude"] else None, cv, kw["corr_on"])
    return opt


def _score_once(stores: Sequence[Any], opt: _Options, use_cache: bool,
                say: Callable[[str], None], announce: Callable[[dict[str, str]], None],
                step: Callable[[], None]) -> _Scores:
    """Score id/val, id/test and the selected OOD test splits of every store once per scorer;
    a scorer that cannot run is skipped with its reason (the tau detector must run).
    `announce` gets the configuration's sentences before any scoring; `step` is called
    after each (scorer, store) and after the baselines' features of each store."""
    t0 = time.perf_counter()
    every = list(dict.fromkeys(s for st in stores for s in _ood_test_splits(st)))
    keep = select_splits(every, opt.include, opt.exclude)
    data = [_store_data(i, st, keep) for i, st in enumerate(stores)]
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    if opt.cv is not None and opt.cv > len(names):
        raise UsageError(f"--cv {opt.cv}: more folds than the {len(names)} OOD test splits")
    announce(_describe(opt, names))
    keys: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for m in opt.scored():
        key = _method_key(m, opt.params.get(m, {}))
        try:
            for sd in data:
                say(f"scoring {m} on {sd.path}")
                _load_scores(sd, key, m, opt.params.get(m, {}), use_cache)
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
            _load_scores(sd, "msp", "msp", {}, use_cache)
            try:
                _load_features(sd)
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
    return _Scores(data, offsets, names, methods, skipped, pooled, msp, refs,
                   time.perf_counter() - t0, keys, split_t)


@dataclass
class _SettingSets:
    """Meta-train and meta-test sets of one repeat at one meta-set setting, and the taus
    tuned on the tau detector for it ({(target, variant label): tau})."""

    ci: int
    setting: _Setting
    tr: _Sets
    te: _Sets
    fd: tuple[np.ndarray, np.ndarray] | None
    pool_tr: list[np.ndarray] = field(default_factory=list)
    taus: dict[tuple[str, str], float | None] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.setting.kind


def _draw_setting(opt: _Options, sc: _Scores, tally: _Tally, rep: int, ci: int,
                  setting: _Setting, split_names: tuple[list, list],
                  pools: tuple[list, list]) -> _SettingSets:
    """Draw the meta-train / meta-test sets of one setting (and the Fréchet distances of the
    auto-evaluation baseline at the main setting)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([opt.seed, rep, 1, ci])
    draw = {"ratio": setting.ratio, "size": setting.size, "per_split": opt.sets_per_split,
            "rng": rng, "offsets": sc.offsets, "heterogeneous": setting.heterogeneous}
    tr = _draw_sets(sc.data, split_names[0], pools[0], **draw)
    te = _draw_sets(sc.data, split_names[1], pools[1], **draw)
    check_disjoint(sorted(set(tr.split)), sorted(set(te.split)))
    tally.n_sets += tr.m + te.m
    tally.sizes_seen.setdefault(ci, []).append(
        (float(te.n_id.mean()), float((te.n - te.n_id).mean())))
    tally.t_draw += time.perf_counter() - t0
    fd = None
    if setting.kind == "main" and opt.baselines:
        t0 = time.perf_counter()
        try:
            fd = (_auto_eval_fd(sc.data, tr, sc.offsets), _auto_eval_fd(sc.data, te, sc.offsets))
        except UsageError as exc:
            tally.baseline_note = str(exc)
        tally.t_base += time.perf_counter() - t0
    ss = _SettingSets(ci, setting, tr, te, fd, list(pools[0]))
    t0 = time.perf_counter()
    ss.taus = _shared_taus(opt, sc, ss)
    tally.t_tau += time.perf_counter() - t0
    return ss


def _shared_taus(opt: _Options, sc: _Scores, ss: _SettingSets) -> dict[tuple[str, str],
                                                                        float | None]:
    """tau of every searched variant and target, tuned on the tau detector's meta-train sets
    (supplementary B: tuned with MSP, reused for the other detectors); {} per detector."""
    specs = [s for s in (opt.specs if ss.kind == "main" else opt.rspecs) if s.tau == _AUTO]
    if opt.tau_from is None or not specs:
        return {}
    eng = _engine(opt, sc, ss.tr, opt.tau_from)
    truth = _truth(eng.x, ss.tr)
    taus: dict[tuple[str, str], float | None] = {}
    for target in opt.targets:
        p = truth[:, _METRIC_COL[target]]
        for spec in specs:
            res = search_tau(lambda ts, s=spec: eng.gscores(s.modelling, s.distance, ts), p)
            taus[(target, spec.label)] = res["tau"]
    return taus


def _evaluate_method(opt: _Options, sc: _Scores, tally: _Tally, ss: _SettingSets, m: str,
                     fitted: dict[tuple, dict], rep: int) -> None:
    """Every (target, model) of one detector on one setting's sets: fit on meta-train, test
    on meta-test; robustness settings also apply the main setting's fit (`rmse_shift`)."""
    tr, te = ss.tr, ss.te
    t1 = time.perf_counter()
    eng_tr, eng_te = _engine(opt, sc, tr, m), _engine(opt, sc, te, m)
    truth_tr, truth_te = _truth(eng_tr.x, tr), _truth(eng_te.x, te)
    split_te = set_targets(te, sc.split_t[m])
    floor_te = set_targets(te, sc.floor_table(m, ss.pool_tr))
    tally.t_truth += time.perf_counter() - t1
    t1 = time.perf_counter()
    for target in opt.targets:
        col = _METRIC_COL[target]
        p_tr, p_te = truth_tr[:, col], truth_te[:, col]
        for spec in (opt.specs if ss.kind == "main" else opt.rspecs):
            key = (target, spec.label)
            use = ModelSpec(spec.modelling, spec.distance, ss.taus[key]) if key in ss.taus \
                else spec
            row, fit = _eval_spec(eng_tr, eng_te, use, p_tr, p_te, opt.clip,
                                  split_te[:, col], floor_te[:, col])
            if ss.kind == "main":
                tally.main.setdefault((m, target, spec.label), []).append(row)
                fitted[(m, target, spec.label)] = fit
                if rep == 0:
                    tally.points[(m, target, spec.label)] = {**fit["points"], "split": te.split}
                if len(sc.data) > 1:
                    _cross_rows(tally.cross, sc.data, tr, te, eng_tr, eng_te, use, p_tr,
                                p_te, m, target, opt.clip, spec.label)
            else:
                prev = fitted[(m, target, spec.label)]
                g = eng_te.gscore(spec.modelling, spec.distance, prev["tau"])
                row["rmse_shift"] = _rmse(_predict(prev["theta1"], prev["theta0"], g, opt.clip),
                                          p_te)
                tally.robust.setdefault((ss.ci, m, target, spec.label), []).append(row)
    tally.t_model += time.perf_counter() - t1
    tally.add_gmm(m, eng_tr.gmm_status())
    tally.add_gmm(m, eng_te.gmm_status())
    if ss.kind == "main" and opt.baselines:
        t1 = time.perf_counter()
        _baseline_rows(opt, sc, tally, ss, m, eng_te.x, truth_tr, truth_te)
        tally.t_base += time.perf_counter() - t1


def _baseline_rows(opt: _Options, sc: _Scores, tally: _Tally, ss: _SettingSets, m: str,
                   x_te: np.ndarray, truth_tr: np.ndarray, truth_te: np.ndarray) -> None:
    """The confidence-score and auto-evaluation baselines on the same meta-test sets."""
    assert sc.msp is not None
    te = ss.te
    conf = _confidence_baseline(x_te, te.values(sc.msp), te, opt.targets)
    for j, target in enumerate(opt.targets):
        p_te = truth_te[:, _METRIC_COL[target]]
        tally.base.setdefault((m, target, "confidence"), []).append(
            {"rmse": _rmse(conf[:, j], p_te),
             **dict(zip(("pearson", "spearman"), _corr(conf[:, j], p_te), strict=True))})
        if ss.fd is not None:
            p_tr = truth_tr[:, _METRIC_COL[target]]
            t1_, t0_, _ = fit_line(ss.fd[0], p_tr)
            pred = _predict(t1_, t0_, ss.fd[1], opt.clip)
            tally.base.setdefault((m, target, "auto_eval"), []).append(
                {"rmse": _rmse(pred, p_te),
                 **dict(zip(("pearson", "spearman"), _corr(ss.fd[1], p_te), strict=True))})


def _run_repeat(opt: _Options, sc: _Scores, tally: _Tally, rep: int,
                step: Callable[[], None]) -> None:
    """One repeat: partition the OOD splits, draw every setting's sets, evaluate."""
    rng_part = np.random.default_rng([opt.seed, rep, 0])
    split_names = partition_splits(sc.names, opt.train_fraction, rng_part)
    pools = _id_pools(sc.data, opt.id_train_fraction, rng_part)
    fitted: dict[tuple, dict] = {}
    for ci, setting in enumerate(opt.settings()):
        ss = _draw_setting(opt, sc, tally, rep, ci, setting, split_names, pools)
        for m in sc.methods:
            _evaluate_method(opt, sc, tally, ss, m, fitted, rep)
            step()


def _assemble(opt: _Options, sc: _Scores, tally: _Tally,
              seconds: dict[str, float]) -> dict[str, Any]:
    """The JSON-ready result of an evaluation."""
    robustness = []
    summary_r = _summarise(tally.robust)
    for ci, s in enumerate(opt.configs, start=1):
        means = np.mean(tally.sizes_seen[ci], axis=0)
        robustness.append({
            "kind": s.kind, "ratio": "random" if s.heterogeneous else ratio_label(s.ratio),
            "size": "random" if s.heterogeneous else s.size,
            "mean_n_id": float(means[0]), "mean_n_ood": float(means[1]),
            "results": _nest({k[1:]: v for k, v in summary_r.items() if k[0] == ci}, 3),
        })
    result = {
        "stores": [{"path": sd.path, "model_sha256": sd.sha, "ood_splits": len(sd.ood),
                    "id_test_rows": sd.n_id} for sd in sc.data],
        "config": _config(opt, sc, tally),
        "splits": sc.names,
        "models": {s.label: s.title for s in opt.specs},
        "table": _nest(_headline_corr(_summarise(tally.main), opt.corr_on), 3),
        "points": _nest(tally.points, 3),
        "baselines": _nest(_summarise(tally.base), 3),
        "baseline_note": tally.baseline_note,
        "robustness": robustness,
        "cross_store": _nest(_summarise(tally.cross), 5) if tally.cross else {},
        "skipped": sc.skipped,
        "gmm_fits": tally.gmm,
        "meta_sets": tally.n_sets,
        "set_evaluations": tally.n_sets * len(sc.methods),
        "seconds": seconds,
    }
    return _json_safe(result)


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
    """The paper's protocol (package docstring): Table-1/6 RMSE of every (detector, model,
    target), correlations, the baselines, a robustness table over `ratios`, `sizes` and
    (`robust_heterogeneous`) heterogeneous sets, and (with several stores) the cross-store
    table. Returns a JSON-ready dict whose `config` echoes every choice.

    `id_train_fraction`: share of id/test rows for meta-train sets, the rest for meta-test
    (None: one shared pool). `tau_from`: the detector tau is tuned on (None: per detector).
    `splits` / `exclude`: shell patterns selecting the OOD splits.
    `paper`: the paper's settings where the defaults differ (`spec.PAPER_PRESET`: one
    meta-set per split, GMM with a searched tau, the printed UDE kernel, no clipping,
    correlations on meta-train sets); they override those arguments.
    `cv`: K-fold cross-validation over the OOD splits, `repeats` rounds of it (crossval.py).
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
    opt = _validate(stores, methods, models, targets, robust_models, params=params,
                    ratio=ratio, size=size, heterogeneous=heterogeneous,
                    sets_per_split=sets_per_split, repeats=repeats, seed=seed,
                    train_fraction=train_fraction, id_train_fraction=id_train_fraction,
                    tau_from=tau_from, splits=splits, exclude=exclude, baselines=baselines,
                    ratios=ratios, sizes=sizes, robust_heterogeneous=robust_heterogeneous,
                    ude_kernel=ude_kernel, clip=clip, cv=cv, corr_on=corr_on)
    opt.paper = paper
    _check_models(stores, allow_other_model)
    say = progress or (lambda _m: None)
    bar = _Bar(step_progress, len(stores) * (len(opt.scored()) + (1 if opt.baselines else 0))
               + opt.repeats * len(opt.settings()) * len(opt.methods))
    sc = _score_once(stores, opt, use_cache, say, announce or (lambda _d: None), bar.step)
    bar.total -= opt.repeats * len(opt.settings()) * (len(opt.methods) - len(sc.methods))
    tally = _Tally()
    protocol = _run_protocol(opt, sc, tally, say, bar.step)
    parts = {"drawing_sets": tally.t_draw, "true_metrics": tally.t_truth,
             "tau_search": tally.t_tau, "modelling_and_regression": tally.t_model,
             "baselines": tally.t_base}
    seconds = {"scoring": sc.seconds, "protocol": protocol, **parts,
               "other": max(0.0, protocol - sum(parts.values())),
               "total": time.perf_counter() - t_start}
    return _assemble(opt, sc, tally, seconds)


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


def _run_protocol(opt: _Options, sc: _Scores, tally: _Tally, say: Callable[[str], None],
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


def gbench_protocol(stores: Sequence[Any], **options: Any) -> dict[str, Any]:
    """The Gbench benchmark on any stores (e.g. a researcher's own OOD sets spread over
    several stores): `evaluate_gscore` with the paper's detectors (GBENCH_METHODS), the
    Table 6 variants, FPR95 and AUROC, and the robustness rows (IND:OOD GBENCH_RATIOS, sizes
    GBENCH_SIZES, heterogeneous sets). Any `evaluate_gscore` option overrides the preset."""
    preset: dict[str, Any] = {"methods": GBENCH_METHODS, "ratios": GBENCH_RATIOS,
                              "sizes": GBENCH_SIZES, "robust_heterogeneous": True}
    preset.update({k: v for k, v in options.items() if v is not None})
    return evaluate_gscore(stores, **preset)
