"""The evaluation protocol (`evaluate_gscore`): repeats of meta-train/meta-test partitions,
the Table-1/6 RMSE and correlations, the baselines, robustness and cross-store tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .baselines import _auto_eval_fd, _confidence_baseline
from .engine import GscoreEngine
from .metasets import (
    _draw_sets,
    _load_scores,
    _method_key,
    _Sets,
    _store_data,
    _StoreData,
    _truth,
    check_disjoint,
    partition_splits,
)
from .model import _check_models, _json_safe
from .regression import _corr, _fit_spec, _predict, _rmse, fit_line
from .spec import (
    _METRIC_COL,
    DEFAULT_MODELS,
    ModelSpec,
    _check_target,
    parse_model,
    parse_ratio,
    ratio_label,
)


def _agg(values: Sequence[float]) -> dict[str, float | None]:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std()), "n": int(v.size)}


def _eval_spec(eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
               p_te: np.ndarray, clip: bool) -> tuple[dict[str, float], dict[str, Any]]:
    fit = _fit_spec(eng_tr, spec, p_tr)
    g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])
    g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
    pred = _predict(fit["theta1"], fit["theta0"], g_te, clip)
    pr_tr, sp_tr = _corr(g_tr, p_tr)
    pr_te, sp_te = _corr(g_te, p_te)
    row = {"rmse": _rmse(pred, p_te), "pearson": pr_te, "spearman": sp_te,
           "pearson_train": pr_tr, "spearman_train": sp_tr,
           "tau": float("nan") if fit["tau"] is None else float(fit["tau"])}
    return row, fit


def _summarise(per_repeat: Mapping[Any, list[dict[str, float]]]) -> dict[Any, dict]:
    out = {}
    for key, rows in per_repeat.items():
        out[key] = {m: _agg([r[m] for r in rows]) for m in rows[0]}
    return out


@dataclass
class _Options:
    """Everything (validated) that decides the numbers of one evaluation."""

    methods: list[str]
    specs: list[ModelSpec]
    rspecs: list[ModelSpec]
    targets: list[str]
    ratio: float
    size: int | None
    configs: list[tuple[str, float, int | None]]
    sets_per_split: int
    repeats: int
    seed: int
    train_fraction: float
    id_train_fraction: float | None
    baselines: bool
    ude_kernel: str
    clip: bool
    params: dict[str, dict[str, Any]]

    def settings(self) -> list[tuple[str, float, int | None]]:
        """The main meta-set setting followed by the robustness settings."""
        return [("main", self.ratio, self.size), *self.configs]


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


@dataclass
class _Tally:
    """Per-repeat result rows, keyed by tuples, and the protocol's bookkeeping."""

    main: dict[tuple, list] = field(default_factory=dict)
    base: dict[tuple, list] = field(default_factory=dict)
    robust: dict[tuple, list] = field(default_factory=dict)
    cross: dict[tuple, list] = field(default_factory=dict)
    sizes_seen: dict[int, list] = field(default_factory=dict)
    n_sets: int = 0
    t_model: float = 0.0
    t_truth: float = 0.0
    baseline_note: str | None = None


def _validate(stores: Sequence[Any], methods: Sequence[str],
              models: Sequence[str | ModelSpec], targets: Sequence[str],
              robust_models: Sequence[str | ModelSpec] | None, **kw: Any) -> _Options:
    """Check every option (clear one-line errors) and normalise it."""
    from scorers import REGISTRY

    if not stores:
        raise UsageError("gscore evaluate: name at least one store")
    methods = list(dict.fromkeys(methods))
    for m in methods:
        if m not in REGISTRY:
            raise UsageError(f"unknown scorer {m!r} (valid: {', '.join(REGISTRY)})")
    targets = [_check_target(t) for t in dict.fromkeys(targets)]
    specs = list(dict.fromkeys(m if isinstance(m, ModelSpec) else parse_model(m)
                               for m in models))
    if not specs or not targets or not methods:
        raise UsageError("gscore evaluate: need at least one method, model and target")
    rspecs = specs if robust_models is None else [
        m if isinstance(m, ModelSpec) else parse_model(m) for m in robust_models]
    if not set(rspecs) <= set(specs):
        raise UsageError("robust_models must be a subset of models")
    if kw["repeats"] < 1 or kw["sets_per_split"] < 1:
        raise UsageError("repeats and sets_per_split must be >= 1")
    idf = kw["id_train_fraction"]
    if idf is not None and not 0.0 < idf < 1.0:
        raise UsageError(f"id_train_fraction {idf}: must lie in (0, 1) or be "
                         "None (meta-train and meta-test share the id/test rows)")
    ratio = parse_ratio(kw["ratio"])
    configs = [("ratio", parse_ratio(r), kw["size"]) for r in kw["ratios"]]
    configs += [("size", ratio, None if s is None else int(s)) for s in kw["sizes"]]
    return _Options(methods, specs, rspecs, targets, ratio, kw["size"], configs,
                    kw["sets_per_split"], kw["repeats"], kw["seed"], kw["train_fraction"],
                    idf, kw["baselines"], kw["ude_kernel"], kw["clip"],
                    {k: dict(v) for k, v in (kw["params"] or {}).items()})


def _score_once(stores: Sequence[Any], opt: _Options, use_cache: bool,
                say: Callable[[str], None]) -> _Scores:
    """Score id/val, id/test and every OOD test split of every store once per scorer; a
    scorer that cannot run is skipped with its reason."""
    t0 = time.perf_counter()
    data = [_store_data(i, st) for i, st in enumerate(stores)]
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    keys: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for m in opt.methods:
        key = _method_key(m, opt.params.get(m, {}))
        try:
            for sd in data:
                say(f"scoring {m} on {sd.path}")
                _load_scores(sd, key, m, opt.params.get(m, {}), use_cache)
            keys[m] = key
        except UsageError as exc:
            skipped[m] = str(exc)
    if opt.baselines:
        for sd in data:
            _load_scores(sd, "msp", "msp", {}, use_cache)
    methods = [m for m in opt.methods if m in keys]
    if not methods:
        raise UsageError(f"no scorer could run: {skipped}")
    pooled = {m: np.concatenate([sd.scores[keys[m]] for sd in data]) for m in methods}
    msp = np.concatenate([sd.scores["msp"] for sd in data]) if opt.baselines else None
    refs = {m: np.array([data[i].ref[keys[m]][:2] for i in range(len(data))]) for m in methods}
    return _Scores(data, offsets, names, methods, skipped, pooled, msp, refs,
                   time.perf_counter() - t0)


def _id_pools(data: Sequence[_StoreData], id_train_fraction: float | None,
              rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The id/test rows meta-train and meta-test sets draw from (shared or disjoint)."""
    pools_tr, pools_te = [], []
    for sd in data:
        perm = rng.permutation(sd.n_id)
        if id_train_fraction is None:
            pools_tr.append(np.arange(sd.n_id))
            pools_te.append(np.arange(sd.n_id))
            continue
        k = min(sd.n_id - 1, max(1, round(id_train_fraction * sd.n_id)))
        pools_tr.append(np.sort(perm[:k]))
        pools_te.append(np.sort(perm[k:]))
    return pools_tr, pools_te


@dataclass
class _SettingSets:
    """Meta-train and meta-test sets of one repeat at one meta-set setting."""

    ci: int
    kind: str
    tr: _Sets
    te: _Sets
    fd: tuple[np.ndarray, np.ndarray] | None


def _draw_setting(opt: _Options, sc: _Scores, tally: _Tally, rep: int, ci: int, kind: str,
                  c_ratio: float, c_size: int | None, split_names: tuple[list, list],
                  pools: tuple[list, list]) -> _SettingSets:
    """Draw the meta-train / meta-test sets of one setting (and the Fréchet distances of the
    auto-evaluation baseline at the main setting)."""
    rng = np.random.default_rng([opt.seed, rep, 1, ci])
    tr = _draw_sets(sc.data, split_names[0], pools[0], c_ratio, c_size, opt.sets_per_split,
                    rng, sc.offsets)
    te = _draw_sets(sc.data, split_names[1], pools[1], c_ratio, c_size, opt.sets_per_split,
                    rng, sc.offsets)
    check_disjoint(sorted(set(tr.split)), sorted(set(te.split)))
    tally.n_sets += tr.m + te.m
    tally.sizes_seen.setdefault(ci, []).append(
        (float(te.n_id.mean()), float((te.n - te.n_id).mean())))
    fd = None
    if kind == "main" and opt.baselines:
        try:
            fd = (_auto_eval_fd(sc.data, tr, sc.offsets), _auto_eval_fd(sc.data, te, sc.offsets))
        except UsageError as exc:
            tally.baseline_note = str(exc)
    return _SettingSets(ci, kind, tr, te, fd)


def _evaluate_method(opt: _Options, sc: _Scores, tally: _Tally, ss: _SettingSets, m: str,
                     fitted: dict[tuple, dict]) -> None:
    """Every (target, model) of one detector on one setting's sets: fit on meta-train, test
    on meta-test; robustness settings also apply the main setting's fit (`rmse_shift`)."""
    tr, te = ss.tr, ss.te
    x_tr, x_te = tr.values(sc.pooled[m]), te.values(sc.pooled[m])
    t1 = time.perf_counter()
    truth_tr, truth_te = _truth(x_tr, tr), _truth(x_te, te)
    tally.t_truth += time.perf_counter() - t1
    t1 = time.perf_counter()
    refs = sc.refs[m]
    eng_tr = GscoreEngine(x_tr, tr.n, refs[tr.store, 0], refs[tr.store, 1],
                          ude_kernel=opt.ude_kernel)
    eng_te = GscoreEngine(x_te, te.n, refs[te.store, 0], refs[te.store, 1],
                          ude_kernel=opt.ude_kernel)
    for target in opt.targets:
        col = _METRIC_COL[target]
        p_tr, p_te = truth_tr[:, col], truth_te[:, col]
        for spec in (opt.specs if ss.kind == "main" else opt.rspecs):
            row, fit = _eval_spec(eng_tr, eng_te, spec, p_tr, p_te, opt.clip)
            if ss.kind == "main":
                tally.main.setdefault((m, target, spec.label), []).append(row)
                fitted[(m, target, spec.label)] = fit
                if len(sc.data) > 1:
                    _cross_rows(tally.cross, sc.data, tr, te, eng_tr, eng_te, spec, p_tr,
                                p_te, m, target, opt.clip)
            else:
                prev = fitted[(m, target, spec.label)]
                g = eng_te.gscore(spec.modelling, spec.distance, prev["tau"])
                row["rmse_shift"] = _rmse(_predict(prev["theta1"], prev["theta0"], g, opt.clip),
                                          p_te)
                tally.robust.setdefault((ss.ci, m, target, spec.label), []).append(row)
    tally.t_model += time.perf_counter() - t1
    if ss.kind == "main" and opt.baselines:
        _baseline_rows(opt, sc, tally, ss, m, x_te, truth_tr, truth_te)


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
    for ci, (kind, c_ratio, c_size) in enumerate(opt.settings()):
        ss = _draw_setting(opt, sc, tally, rep, ci, kind, c_ratio, c_size, split_names, pools)
        for m in sc.methods:
            _evaluate_method(opt, sc, tally, ss, m, fitted)
            step()


def _nest(rows: Mapping[tuple, dict], depth: int) -> dict:
    """{(a, b, c): v} -> {a: {b: {c: v}}} for the first `depth` key parts."""
    out: dict = {}
    for key, val in rows.items():
        d = out
        for k in key[:depth - 1]:
            d = d.setdefault(k, {})
        d[key[depth - 1]] = val
    return out


def _assemble(opt: _Options, sc: _Scores, tally: _Tally,
              seconds: dict[str, float]) -> dict[str, Any]:
    """The JSON-ready result of an evaluation."""
    robustness = []
    summary_r = _summarise(tally.robust)
    for ci, (kind, c_ratio, c_size) in enumerate(opt.configs, start=1):
        means = np.mean(tally.sizes_seen[ci], axis=0)
        robustness.append({
            "kind": kind, "ratio": ratio_label(c_ratio), "size": c_size,
            "mean_n_id": float(means[0]), "mean_n_ood": float(means[1]),
            "results": _nest({k[1:]: v for k, v in summary_r.items() if k[0] == ci}, 3),
        })
    main_sizes = np.mean(tally.sizes_seen[0], axis=0)
    result = {
        "stores": [{"path": sd.path, "model_sha256": sd.sha, "ood_splits": len(sd.ood),
                    "id_test_rows": sd.n_id} for sd in sc.data],
        "config": {"methods": sc.methods, "models": [s.label for s in opt.specs],
                   "targets": opt.targets, "ratio": ratio_label(opt.ratio), "size": opt.size,
                   "sets_per_split": opt.sets_per_split, "repeats": opt.repeats,
                   "seed": opt.seed, "train_fraction": opt.train_fraction,
                   "id_train_fraction": opt.id_train_fraction, "ude_kernel": opt.ude_kernel,
                   "clip": opt.clip, "params": opt.params,
                   "mean_n_id": float(main_sizes[0]), "mean_n_ood": float(main_sizes[1])},
        "splits": sc.names,
        "models": {s.label: s.title for s in opt.specs},
        "table": _nest(_summarise(tally.main), 3),
        "baselines": _nest(_summarise(tally.base), 3),
        "baseline_note": tally.baseline_note,
        "robustness": robustness,
        "cross_store": _nest(_summarise(tally.cross), 5) if tally.cross else {},
        "skipped": sc.skipped,
        "meta_sets": tally.n_sets,
        "set_evaluations": tally.n_sets * len(sc.methods),
        "seconds": seconds,
    }
    return _json_safe(result)


def evaluate_gscore(
    stores: Sequence[Any],
    methods: Sequence[str] = ("msp",),
    models: Sequence[str | ModelSpec] = DEFAULT_MODELS,
    targets: Sequence[str] = ("fpr95", "auroc"),
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ratio: Any = 1.0,
    size: int | None = None,
    sets_per_split: int = 10,
    repeats: int = 5,
    seed: int = 0,
    train_fraction: float = 0.75,
    id_train_fraction: float | None = None,
    baselines: bool = True,
    ratios: Sequence[Any] = (),
    sizes: Sequence[int] = (),
    robust_models: Sequence[str | ModelSpec] | None = None,
    ude_kernel: str = "gauss",
    clip: bool = True,
    use_cache: bool = True,
    allow_other_model: bool = True,
    progress: Callable[[str], None] | None = None,
    step_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The paper's protocol (package docstring): Table-1/6 RMSE of every (detector, model,
    target), correlations, the baselines, a robustness table over `ratios` and `sizes`, and
    (with several stores) the cross-store table. Returns a JSON-ready dict.

    `progress(message)` is told each phase; `step_progress(done, total)` is called after
    each (repeat, meta-set setting, detector) step of the protocol."""
    t_start = time.perf_counter()
    opt = _validate(stores, methods, models, targets, robust_models, params=params,
                    ratio=ratio, size=size, sets_per_split=sets_per_split, repeats=repeats,
                    seed=seed, train_fraction=train_fraction,
                    id_train_fraction=id_train_fraction, baselines=baselines, ratios=ratios,
                    sizes=sizes, ude_kernel=ude_kernel, clip=clip)
    _check_models(stores, allow_other_model)
    say = progress or (lambda _m: None)
    sc = _score_once(stores, opt, use_cache, say)
    tally = _Tally()
    t_proto = time.perf_counter()
    total = opt.repeats * len(opt.settings()) * len(sc.methods)
    done = [0]

    def step() -> None:
        done[0] += 1
        if step_progress:
            step_progress(done[0], total)

    if step_progress:
        step_progress(0, total)
    for rep in range(opt.repeats):
        say(f"repeat {rep + 1}/{opt.repeats}")
        _run_repeat(opt, sc, tally, rep, step)
    seconds = {"scoring": sc.seconds, "protocol": time.perf_counter() - t_proto,
               "modelling_and_regression": tally.t_model, "true_metrics": tally.t_truth,
               "total": time.perf_counter() - t_start}
    return _assemble(opt, sc, tally, seconds)


def _cross_rows(cross: dict, data: Sequence[_StoreData], tr: _Sets, te: _Sets,
                eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
                p_te: np.ndarray, method: str, target: str, clip: bool) -> None:
    """Model fitted on store a's meta-train sets, tested on store b's meta-test sets."""
    for a in data:
        rows_a = np.flatnonzero(tr.store == a.index)
        if rows_a.size < 2:
            continue
        fit = _fit_spec(eng_tr, spec, p_tr[rows_a], rows_a)
        g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
        for b in data:
            rows_b = np.flatnonzero(te.store == b.index)
            if rows_b.size == 0:
                continue
            pred = _predict(fit["theta1"], fit["theta0"], g_te[rows_b], clip)
            pr, sp = _corr(g_te[rows_b], p_te[rows_b])
            cross.setdefault((method, target, spec.label, a.path, b.path), []).append(
                {"rmse": _rmse(pred, p_te[rows_b]), "pearson": pr, "spearman": sp})
