"""Mean ± std over repeated runs (seeds, class divisions) of one method on one data split.

For each (data split, method row): over the runs with status "ok", every OOD metric of
`scorers.metrics.OOD_METRIC_NAMES` per OOD group, the ID accuracy, the misclassification
AUROC and the times are aggregated as

    mean = sum(x) / n,   std = sqrt(sum((x - mean)^2) / n)   (population std, ddof = 0)

over the finite values (a metric undefined in a run, e.g. a misclassification AUROC with no
error, is left out and `n` says how many entered). Skipped runs never enter; their count is
`skipped`. Times: `method_s` counts the SAME phases for every row (`METHOD_PHASES`, as the
remote-sensing paper's Table 16, whose MSP 112 s ~ TempScaling 114 s counts inference for
post-hoc rows too): the method's own training (`train_s` of a training-time method; none for
a post-hoc row on the shared `ce` model, whose training no post-hoc method adds) +
extraction, the network's inference over every split (`extract_s`) + scoring (`score_s`);
`total_s` is every phase of the run: its model's training, extraction and scoring, plus the
`ce` training a fine-tuned method started from. `flags` lists the distinct sanity warnings
(`featstore.store.sanity`: ID accuracy near chance, a class permutation that fits far better) of
the method's runs; a flagged method is never marked best (`featstore.workflows.experiments.render`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

SCALARS = ("id_acc", "misclassification_auroc", "train_s", "extract_s", "score_s", "method_s",
           "total_s")


def mean_std(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """{mean, std (ddof 0), n} over the finite values; mean/std None when there are none."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"mean": None, "std": None, "n": 0}
    mean = math.fsum(xs) / len(xs)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))
    return {"mean": mean, "std": std, "n": len(xs)}


#: The phases `method_s` adds up, named in the time table's caption (module docstring).
METHOD_PHASES = ("the method's own training (none for post-hoc rows)",
                 "extraction (the network's inference)", "scoring (fit, tuning, scores)")


def run_times(run: dict[str, Any]) -> dict[str, float]:
    """method_s and total_s of one finished run (see the module docstring)."""
    own = run["train_s"] + run["extract_s"] + run["score_s"]
    method_s = run["extract_s"] + run["score_s"] + (0.0 if run["train"] == "ce"
                                                    else run["train_s"])
    return {"method_s": method_s, "total_s": own + (run.get("base_train_s") or 0.0)}


def aggregate_runs(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{split: {method: {n, skipped, seeds, groups: {g: {metric: mean_std}}, <scalar>:
    mean_std}}} in the order the runs came."""
    # here, not at the top: `featstore table` reads METHOD_PHASES without loading the scorers
    from scorers.metrics import OOD_METRIC_NAMES

    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in runs:
        table.setdefault(r["split"], {}).setdefault(r["method"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for split, methods in table.items():
        out[split] = {}
        for method, rs in methods.items():
            ok = [{**r, **run_times(r)} for r in rs if r["status"] == "ok"]
            groups: list[str] = []
            for r in ok:
                groups += [g for g in r["groups"] if g not in groups]
            entry: dict[str, Any] = {
                "n": len(ok), "skipped": len(rs) - len(ok), "seeds": [r["seed"] for r in ok],
                "train_seeds": [r.get("train_seed", r["seed"]) for r in ok],
                "groups": {g: {m: mean_std([r["groups"][g][m] for r in ok if g in r["groups"]])
                               for m in OOD_METRIC_NAMES} for g in groups},
            }
            for key in SCALARS:
                entry[key] = mean_std([r.get(key) for r in ok])
            entry["flags"] = list(dict.fromkeys(w for r in ok for w in r.get("id_warnings") or []))
            out[split][method] = entry
    return out
