"""One method row's numbers on one store, as the experiment runner records them: tuned on
val by the run's rule (`scorers.sweep.sweep`: featstore's, the paper's grid as it is, or
OpenOOD v1.5's search) or scored at its parameters (`scorers.evaluate.evaluate`), with the
95% stratified-bootstrap intervals and the store's ID sanity flags."""

from __future__ import annotations

from typing import Any

import numpy as np

from featstore.errors import FeatstoreError
from featstore.specs.experiment import MethodRow
from featstore.store.interfaces import StoreLike
from featstore.store.sanity import id_checks, warnings_of
from scorers import REGISTRY
from scorers.evaluate import evaluate
from scorers.methods.mcdropout import mc_id_accuracy
from scorers.metrics import id_accuracy
from scorers.skipping import unsupported_reason
from scorers.stats import BootstrapSpec
from scorers.sweep import sweep


def _has_grid(row: MethodRow) -> bool:
    grid = row.grid if row.grid is not None else REGISTRY[row.scorer].grid
    return any(k not in row.params for k in grid)


def _intervals(entry: dict[str, Any]) -> dict[str, Any]:
    """The run's 95% stratified-bootstrap intervals beside its ID-side numbers (the OOD
    metrics carry theirs in "groups"/"splits" as "<metric>_ci") and the method echo."""
    return {k: entry.get(k) for k in ("id_acc_ci", "misclassification_auroc_ci", "aurc",
                                      "aurc_ci", "augrc", "augrc_ci", "ci")}


def score_row(store: StoreLike, row: MethodRow, tune_rule: str, select_by: str) -> dict[str, Any]:
    """One row's numbers on one store: tuned on val (sweep) or at its parameters (evaluate).
    UsageError / FeatstoreError with the reason when it cannot run. The MC-Dropout row's
    ID accuracy is that of its MC-mean prediction (eq. 15: `scorers.methods.mcdropout.
    mc_id_accuracy`; no interval)."""

    why = unsupported_reason(store, row.scorer)
    if why is not None:
        raise FeatstoreError(why)
    numbers = _score_row(store, row, tune_rule, select_by)
    if row.scorer == "mcdropout":
        numbers.update(id_acc=mc_id_accuracy(store.split("id/test")), id_acc_ci=None)
    return {**numbers,
            "id_warnings": warnings_of(id_checks(store))}  # featstore.store.sanity: flagged runs


def _score_row(store: StoreLike, row: MethodRow, tune_rule: str, select_by: str) -> dict[str, Any]:
    # openood: OpenOOD v1.5's search (scorers.openood_aps), which also sets the fixed
    # arguments of its methods without a search; val / paper: featstore's rule over the grid
    # fitted to the store / as it is (RS §2.5)
    tuned = tune_rule == "openood" or (tune_rule in ("val", "paper") and _has_grid(row))
    if tuned:
        res = sweep(store, row.scorer, row.grid, select_by, row.params, ci=BootstrapSpec(),
                    rule="openood" if tune_rule == "openood" else "featstore",
                    grid_rule="paper" if tune_rule == "paper" else "fitted")
        test = res["test"]
        if test is None:
            raise FeatstoreError("the store has no id/test or OOD test split")
        idt = store.split("id/test")
        return {"params": test["params"], "chosen": res["chosen"]["setting"],
                "val": res["chosen"]["val"], "tuned": True, "adjusted": res["adjusted"],
                "id_acc": id_accuracy(np.asarray(idt.logits), np.asarray(idt.labels)),
                "misclassification_auroc": test["misclassification_auroc"],
                "misclassification": test["misclassification"],
                **_intervals(test),
                "groups": test["groups"], "splits": test["splits"],
                "score_s": res["fit_seconds"] + res["val_seconds"] + res["test_seconds"]}
    ev = evaluate(store, [row.scorer], {row.scorer: row.params}, use_cache=False,
                  strict=True,  # the scorer's own error (scorers.skipping) when it cannot run
                  ci=BootstrapSpec())
    m = ev["methods"][row.scorer]
    mis = m["misclassification_auroc"]
    return {"params": m["params"], "chosen": None, "val": None, "tuned": False,
            "adjusted": m["adjusted"],
            "id_acc": ev["id_acc"],
            "misclassification_auroc": None if mis != mis else mis,
            "misclassification": m["misclassification"],
            **_intervals({**m, "id_acc_ci": ev.get("id_acc_ci"), "ci": ev["ci"]}),
            "groups": m["groups"], "splits": m["splits"],
            "score_s": m["fit_seconds"] + m["score_seconds"]}


__all__ = ["score_row"]
