"""The configuration of an evaluation as the result's `config` and the sentences printed
before and after it (`describe`), and the headline correlation's side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .spec import PAPER_PRESET, ratio_label

if TYPE_CHECKING:
    from .protocol import _Options, _Scores, _Setting, _Tally


def _setting_text(s: _Setting) -> str:
    if s.heterogeneous:
        return "heterogeneous (a random size and IND:OOD ratio per set, supplementary C)"
    return f"IND:OOD {ratio_label(s.ratio)}, size {s.size or 'max'}"


def _describe(opt: _Options, names: Sequence[str],
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


def _config(opt: _Options, sc: _Scores, tally: _Tally) -> dict[str, Any]:
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
        "paper": opt.paper, "clip": opt.clip, "params": opt.params, "splits_include": opt.include,
        "splits_exclude": opt.exclude, "n_splits": len(sc.names),
        "mean_n_id": float(main_sizes[0]), "mean_n_ood": float(main_sizes[1]),
        "describe": _describe(opt, sc.names, (float(main_sizes[0]), float(main_sizes[1]))),
    }


def _headline_corr(summary: dict[Any, dict], corr_on: str) -> dict[Any, dict]:
    """`pearson` / `spearman` on the sets `corr_on` names; both sides kept as `pearson_test`,
    `spearman_test`, `pearson_train`, `spearman_train`."""
    for cell in summary.values():
        for name in ("pearson", "spearman"):
            cell[f"{name}_test"] = cell[name]
            if corr_on == "train":
                cell[name] = cell[f"{name}_train"]
    return summary
