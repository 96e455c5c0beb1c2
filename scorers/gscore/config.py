"""What an evaluation is asked to do: its options, validated (`validate_options` ->
`EvalOptions`, with the meta-set `Setting`s), the sentences that say how its numbers are made
(`describe`, printed before any work) and the `config` record of the result
(`config_record`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from featstore.errors import UsageError
from scorers.registry import check_scorers

from .metasets import PooledScores
from .results import Tally
from .spec import (
    PAPER_PRESET,
    TAU_HALFWIDTH,
    ModelSpec,
    _check_target,
    parse_model,
    parse_ratio,
    ratio_label,
)


@dataclass(frozen=True)
class Setting:
    """One meta-set setting: the main one or a robustness row (the same protocol at another
    IND:OOD ratio or size, or with heterogeneous sets: a random size and ratio per set)."""

    kind: str              # "main" | "ratio" | "size" | "heterogeneous"
    ratio: float
    size: int | None
    heterogeneous: bool


@dataclass
class EvalOptions:
    """Everything (validated) that decides the numbers of one evaluation."""

    methods: list[str]
    specs: list[ModelSpec]
    rspecs: list[ModelSpec]
    targets: list[str]
    main: Setting
    configs: list[Setting]
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
    tau_halfwidth: float = TAU_HALFWIDTH   # `--paper`: 0.5 (spec.PAPER_PRESET)
    lloyd_seed: int | None = None          # `--paper`: Kmeans by Lloyd's from this seed

    def settings(self) -> list[Setting]:
        """The main meta-set setting followed by the robustness settings."""
        return [self.main, *self.configs]

    def scored(self) -> list[str]:
        """Detectors to score: the evaluated ones and the tau detector."""
        extra = [self.tau_from] if self.tau_from and self.tau_from not in self.methods else []
        return [*self.methods, *extra]


def _specs(models: Sequence[str | ModelSpec]) -> list[ModelSpec]:
    return list(dict.fromkeys(m if isinstance(m, ModelSpec) else parse_model(m)
                              for m in models))


def validate_options(stores: Sequence[Any], methods: Sequence[str],
                     models: Sequence[str | ModelSpec], targets: Sequence[str],
                     robust_models: Sequence[str | ModelSpec] | None, **kw: Any
                     ) -> EvalOptions:
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
    configs = [Setting("ratio", parse_ratio(r), kw["size"], False) for r in kw["ratios"]]
    configs += [Setting("size", ratio, None if s is None else int(s), False)
                for s in kw["sizes"]]
    if kw["robust_heterogeneous"]:
        configs.append(Setting("heterogeneous", ratio, None, True))
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
    opt = EvalOptions(methods, specs, rspecs, targets,
                      Setting("main", ratio, kw["size"], bool(kw["heterogeneous"])), configs,
                      kw["sets_per_split"], kw["repeats"], kw["seed"], kw["train_fraction"],
                      idf, tau_from, kw["baselines"], kw["ude_kernel"], kw["clip"],
                      {k: dict(v) for k, v in (kw["params"] or {}).items()},
                      list(kw["splits"]) if kw["splits"] else None,
                      list(kw["exclude"]) if kw["exclude"] else None, cv, kw["corr_on"])
    return opt


def _setting_text(s: Setting) -> str:
    if s.heterogeneous:
        return "heterogeneous (a random size and IND:OOD ratio per set, supplementary C)"
    return f"IND:OOD {ratio_label(s.ratio)}, size {s.size or 'max'}"


def describe(opt: EvalOptions, names: Sequence[str],
             sizes: tuple[float, float] | None = None) -> dict[str, str]:
    """The sentences that say how the numbers are made (printed first; JSON
    `config.describe`); `sizes`: the mean ID and OOD rows per meta-test set, once drawn."""
    idf = opt.id_train_fraction
    unit = "round" if opt.cv else "repeat"
    id_text = (f"disjoint: each {unit} splits id/test at random, "
               f"{idf:g} of the rows for meta-train sets, the rest for meta-test sets"
               if idf is not None else
               "shared: meta-train and meta-test sets draw ID rows from the same id/test rows "
               "(optimistic: a small id/test pool leaks between them)")
    tau_text = (f"tuned on {opt.tau_from}'s meta-train sets (per {unit}, "
                f"{'fold, ' if opt.cv else 'setting, '}target and variant; coarse-to-fine "
                "grid, supplementary B) and reused for every detector"
                if opt.tau_from else "searched on each detector's own meta-train sets")
    n_text = (f"{opt.sets_per_split} seeded subsample{'s' if opt.sets_per_split > 1 else ''} "
              "per (store, OOD split)" + (" (one meta-set per OOD dataset)"
                                          if opt.sets_per_split == 1 else ""))
    sel = ((f" (--splits {', '.join(opt.include)})" if opt.include else "")
           + (f" (--exclude {', '.join(opt.exclude)})" if opt.exclude else ""))
    split_text = (f"; each round cuts them into {opt.cv} folds, each fold the meta-test splits "
                  "once, the other folds its meta-train splits (never both)" if opt.cv else
                  f"; each repeat puts {opt.train_fraction:g} of them in meta-train, the rest "
                  "in meta-test (never both)")
    size_text = ("" if sizes is None else
                 f"; mean {sizes[0]:.0f} ID + {sizes[1]:.0f} OOD rows per meta-test set")
    rep_text = (f"{opt.repeats} rounds of {opt.cv}-fold cross-validation (every OOD split "
                f"tested {opt.repeats} times)" if opt.cv else
                f"{opt.repeats} random partitions")
    return {
        "ood_splits": f"{len(names)} OOD test splits{sel}{split_text}",
        "id_pools": id_text,
        "meta_sets": f"{_setting_text(opt.main)}; {n_text}{size_text}",
        "tau": tau_text,
        "repeats": f"{rep_text} (seed {opt.seed}); 95% t-intervals of the mean over the "
                   f"{unit}s; predictions " + ("clipped to [0, 100]" if opt.clip
                                                else "not clipped"),
        "targets": "rmse against each meta-set's sampled target; rmse_split against its "
                   "split-level target (all id/test rows vs every row of its OOD split); "
                   "floor: RMSE of the oracle split-level predictor (meta-train ID rows vs the "
                   "whole OOD split) against the sampled targets",
        "correlation": f"Pearson / Spearman of Gscore and the target on meta-"
                       f"{opt.corr_on} sets",
        "baselines": ("confidence score and auto-evaluation (Fréchet distance) on the same "
                      "sets" if opt.baselines else "off (--no-baselines)"),
        **({"preset": "--paper: " + "; ".join(line for _, line in PAPER_PRESET.values())}
           if opt.paper else {}),
        "models": ", ".join(f"{s.label} (tau {s.tau if s.tau is not None else 'none'})"
                            for s in opt.specs) + f"; UDE kernel {opt.ude_kernel}",
    }


def config_record(opt: EvalOptions, sc: PooledScores, tally: Tally) -> dict[str, Any]:
    """Everything that decided the numbers, with the sentences the human output prints."""
    main_sizes = np.mean(tally.sizes_seen[0], axis=0)
    idf = opt.id_train_fraction
    return {
        "methods": sc.methods, "models": [s.label for s in opt.specs], "targets": opt.targets,
        "ratio": ratio_label(opt.main.ratio), "size": opt.main.size,
        "heterogeneous": opt.main.heterogeneous, "sets_per_split": opt.sets_per_split,
        "repeats": opt.repeats, "seed": opt.seed, "train_fraction": opt.train_fraction,
        "protocol": "cv" if opt.cv else "random", "cv": opt.cv,
        "rounds": opt.repeats if opt.cv else None, "correlation_sets": f"meta-{opt.corr_on}",
        "baselines": opt.baselines,
        "id_pools": "shared" if idf is None else "disjoint", "id_train_fraction": idf,
        "tau_from": opt.tau_from or "each detector", "ude_kernel": opt.ude_kernel,
        "paper": opt.paper, "tau_halfwidth": opt.tau_halfwidth,
        "kmeans": "exact" if opt.lloyd_seed is None else f"lloyd (seed {opt.lloyd_seed})",
        "clip": opt.clip, "params": opt.params, "splits_include": opt.include,
        "splits_exclude": opt.exclude, "n_splits": len(sc.names),
        "mean_n_id": float(main_sizes[0]), "mean_n_ood": float(main_sizes[1]),
        "describe": describe(opt, sc.names, (float(main_sizes[0]), float(main_sizes[1]))),
    }
