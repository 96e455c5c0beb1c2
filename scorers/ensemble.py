"""Deep ensembles across stores: the same rows scored by several models (seeds, architectures),
one store each, combined row by row (Lakshminarayanan, Pritzel & Blundell, NeurIPS 2017).

`ensemble_store(stores)` matches the members' rows by `ids` (every member must hold the same
splits, each with the same set of ids, no id twice, the same labels and the same number of
classes C; anything else is a one-line UsageError naming the store and the split) and returns
an in-memory `ArrayStore` whose splits hold, in the first member's row order:

    extra "ensemble_logits"  (N, T, C) float32   the T members' logits of each row
    logits                   log p_mean          p_mean = (1/T) sum_t softmax(l_t): its argmax
                                                 is the ensemble's prediction (id_acc, the
                                                 misclassification metrics)
    labels, ids, usage                           the first member's
    features                 (N, 0)              none: the ensemble scorers read no feature

The ensemble scores (higher = more in-distribution), per row, with p_t = softmax(l_t):

    ensemble_msp      log max_c p_mean_c = log1p(-(1/T) sum_t q_t),  q_t = sum_{k != c*} p_t,k,
                      c* = argmax p_mean (the LOG of the mean softmax's top probability, as
                      `msp`, DESIGN §4: the complement summed from the other classes, never 1 - p)
    ensemble_entropy  -H(p_mean) = sum_c p_mean_c log p_mean_c          (0 log 0 = 0)
    ensemble_mi       -(H(p_mean) - (1/T) sum_t H(p_t))                  (mutual information)
    ensemble_vr       -(1 - f / T),  f = the number of members whose argmax (first index
                      on ties) is the most frequent one                  (variation ratio)

`evaluate_ensemble(paths, ...)` evaluates the four on the combined store with
`scorers.evaluate.evaluate` (the same metrics, groups and intervals as `featstore eval`;
no score cache). Memory: every member's logits of every split, N T C float32 in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.arraystore import ArrayStore
from featstore.store.interfaces import SplitLike, StoreLike

from .base import Scorer
from .kernels.softmax import softmax, softmax_plogp
from .paper import Paper
from .results import EvaluationResult
from .stats.bootstrap import BootstrapSpec

ENSEMBLE_LOGITS = "ensemble_logits"
_PAPER = Paper(title="Simple and Scalable Predictive Uncertainty Estimation using Deep "
                     "Ensembles", authors=("Lakshminarayanan", "Pritzel", "Blundell"),
               venue="NeurIPS", year=2017, url="https://arxiv.org/abs/1612.01474")


def _plogp_sum(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)


def ensemble_scores(member_logits: np.ndarray) -> dict[str, np.ndarray]:
    """{kind: (N,) float64} of (N, T, C) member logits, kind in msp, entropy, mi, vr. Each
    member's softmax and sum p log p come from one exp pass per row (`softmax_plogp`); only
    the mean prediction takes logs."""
    x = np.asarray(member_logits)
    n, t, c = x.shape
    p_flat, member_plogp = softmax_plogp(x.reshape(n * t, c))
    p = p_flat.reshape(n, t, c)
    p_mean = p.mean(axis=1)
    neg_h_mean = _plogp_sum(p_mean)
    mi = neg_h_mean - member_plogp.reshape(n, t).mean(axis=1)
    votes = np.argmax(x, axis=2)                                       # (N, T)
    cells = (np.arange(n)[:, None] * c + votes).reshape(-1)
    modal = np.bincount(cells, minlength=n * c).reshape(n, c).max(axis=1)
    top = np.argmax(p_mean, axis=1)
    p[np.arange(n), :, top] = 0.0           # q_t = sum_{k != c*} p_t,k, never 1 - p_t,c*
    q = p.sum(axis=2)
    return {"msp": np.log1p(-q.mean(axis=1)), "entropy": neg_h_mean, "mi": mi,
            "vr": modal / t - 1.0}


class _EnsembleScorer(Scorer):
    """One score of `ensemble_scores`, read from the extra `ensemble_logits`."""

    kind = ""
    needs = (f"extra:{ENSEMBLE_LOGITS}",)
    paper = _PAPER

    def _score(self, split: SplitLike) -> np.ndarray:
        return self.map_rows(split, (f"extra:{ENSEMBLE_LOGITS}",),
                             lambda z: ensemble_scores(z)[self.kind])


class EnsembleMSP(_EnsembleScorer):
    name, kind = "ensemble_msp", "msp"

    def score_form(self) -> str:
        return "log_prob"


class EnsembleEntropy(_EnsembleScorer):
    name, kind = "ensemble_entropy", "entropy"


class EnsembleMI(_EnsembleScorer):
    name, kind = "ensemble_mi", "mi"


class EnsembleVR(_EnsembleScorer):
    name, kind = "ensemble_vr", "vr"


ENSEMBLE_SCORERS: tuple[type[Scorer], ...] = (EnsembleMSP, EnsembleEntropy, EnsembleMI,
                                              EnsembleVR)


def _member_rows(first: SplitLike, other: SplitLike, where: str) -> np.ndarray:
    """Row order of `other` that lines its ids up with `first`'s; UsageError otherwise."""
    ids_a, ids_b = np.asarray(first.ids).astype(str), np.asarray(other.ids).astype(str)
    for ids, label in ((ids_a, "the first store"), (ids_b, where)):
        if np.unique(ids).size != ids.size:
            raise UsageError(f"ensemble: split {first.name!r} of {label} has duplicate ids; "
                             "rows are matched by id")
    if ids_a.size != ids_b.size or not np.array_equal(np.sort(ids_a), np.sort(ids_b)):
        missing = np.setdiff1d(ids_a, ids_b)
        extra = np.setdiff1d(ids_b, ids_a)
        what = (f"lacks id {str(missing[0])!r}" if missing.size
                else f"has id {str(extra[0])!r} the first store lacks")
        raise UsageError(f"ensemble: split {first.name!r} of {where} {what} "
                         f"({ids_b.size} rows against {ids_a.size}); the stores must hold "
                         "the same rows")
    order_b = np.argsort(ids_b, kind="stable")
    pos_in_sorted_a = np.argsort(np.argsort(ids_a, kind="stable"), kind="stable")
    return order_b[pos_in_sorted_a]


def ensemble_store(stores: Sequence[StoreLike]) -> ArrayStore:
    """The members' rows matched by id, as the module docstring says."""
    if len(stores) < 2:
        raise UsageError(f"ensemble: needs at least 2 stores (got {len(stores)})")
    first = stores[0]
    names = first.splits()
    c_num = int(first.split(names[0]).dims["logits"]) if names else 0
    for st in stores[1:]:
        if sorted(st.splits()) != sorted(names):
            raise UsageError(f"ensemble: store {str(st.path)!r} has splits "
                             f"{sorted(st.splits())}, the first store {sorted(names)}")
    splits: dict[str, dict[str, Any]] = {}
    for name in names:
        base = first.split(name)
        labels = np.asarray(base.labels)
        members = [np.asarray(base.logits, dtype=np.float32)]
        for st in stores[1:]:
            other = st.split(name)
            where = f"store {str(st.path)!r}"
            if int(other.dims["logits"]) != c_num:
                raise UsageError(f"ensemble: split {name!r} of {where} has "
                                 f"{other.dims['logits']} classes, the first store {c_num}")
            order = _member_rows(base, other, where)
            if not np.array_equal(np.asarray(other.labels)[order], labels):
                raise UsageError(f"ensemble: split {name!r} of {where} labels its rows "
                                 "differently from the first store")
            members.append(np.asarray(other.logits, dtype=np.float32)[order])
        stack = np.stack(members, axis=1)                        # (N, T, C)
        p_mean = softmax(stack.reshape(-1, c_num).astype(np.float64)).reshape(stack.shape)
        with np.errstate(divide="ignore"):
            log_mean = np.log(p_mean.mean(axis=1))
        splits[name] = {"features": np.zeros((stack.shape[0], 0), np.float32),
                        "logits": np.maximum(log_mean, np.finfo(np.float32).min),
                        "labels": labels, "ids": np.asarray(base.ids).astype(str),
                        "usage": base.usage, "extras": {ENSEMBLE_LOGITS: stack}}
    return ArrayStore(None, splits=splits)


def evaluate_ensemble(stores: Sequence[StoreLike], ci: BootstrapSpec | None = None,
                      progress: Any = None) -> EvaluationResult:
    """`scorers.evaluate.evaluate` of the four ensemble scores on `ensemble_store(stores)`."""
    from .evaluate import evaluate  # lazy: evaluate imports the registry (every method)
    from .registry import registered_within

    combined = ensemble_store(stores)
    with registered_within(ENSEMBLE_SCORERS):  # never left in the registry for `--all`
        return evaluate(combined, list(ENSEMBLE_SCORERS), use_cache=False,
                        progress=progress, strict=True, ci=ci)
