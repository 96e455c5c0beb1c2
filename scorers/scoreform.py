"""The form of a scorer's scores and the one conversion out of it (DESIGN §4, "Softmax
scores never saturate").

`Scorer.score_form()` says what a scorer's scores are: "" (the score as its paper defines
it), "unsaturated" (the paper's form, computed without the rounding of p to 1.0: `gen`,
`mcd` l1), "log_prob" (log p of the paper's probability p: `msp`, `odin`, `odin_perturbed`,
`godin` softmax, `mcdropout` msp / logit_mean) or "log_odds" (log(p / (1 - p)):
`temp_scaling`). Every consumer of scores needs one of two forms:

- AS SCORED: the metrics, their intervals, sweeps, comparisons, reports and histograms, the
  shift grid, the detector's threshold and decisions, the score cache. They read a score's
  order only (or compare it with a threshold taken from the same scores), which every form
  keeps, so they use the scorer's output as it is and never convert.
- THE PAPER'S FORM: Gscore, which models a detector's scores as the paper does (MSP > 0.9
  pseudo-labels, UDE's and GMM's Gaussians of probabilities on [0, 1]): its meta-sets, its
  predictions (`scorers.gscore.metasets.gscore_scores`: fit, evaluate, predict, gbench and
  the baselines' MSP all load scores there) and the EM test corpus.

`paper_form` is the one conversion, as implemented:

    paper_form(s, "log_prob")    = exp(s)                       = p
    paper_form(s, "log_odds")    = 1 / (1 + exp(-s))            = p      (scipy.special.expit)
    paper_form(s, "")            = paper_form(s, "unsaturated") = s

exp of a log probability rounds to 1.0 where p does (gaps above ~36.7 T): the paper's form
ties the rows the log form separates, exactly as the paper's detector does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.special import expit

from featstore.errors import UsageError

#: the forms `Scorer.score_form()` may return
FORMS = ("", "unsaturated", "log_prob", "log_odds")


def paper_form(scores: np.ndarray, form: str, scorer: str = "scorer") -> np.ndarray:
    """`scores` (as a scorer of `form` returned them) in its paper's form (module docstring);
    float64. A form not in FORMS is a UsageError naming `scorer`."""
    s = np.asarray(scores, dtype=np.float64)
    if form == "log_prob":
        return np.exp(s)
    if form == "log_odds":
        return expit(s)
    if form in ("", "unsaturated"):
        return s
    raise UsageError(f"{scorer}: score_form() returned {form!r}; expected one of "
                     f"{', '.join(repr(f) for f in FORMS)}")


def paper_forms(scores: Mapping[str, np.ndarray], form: str,
                scorer: str = "scorer") -> dict[str, np.ndarray]:
    """`paper_form` of every split's scores ({split: scores})."""
    return {name: paper_form(s, form, scorer) for name, s in scores.items()}
