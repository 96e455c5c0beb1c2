"""Gscore variants, targets and ratios: parsing and the shared constants (package docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from featstore.errors import UsageError

from ..metrics import OOD_METRIC_NAMES

#: FPR at a TPR other than 95% (the paper's Table 4 F@T80 / F@T60): target -> TPR percent.
FPR_AT_TPR: dict[str, int] = {"fpr@tpr80": 80, "fpr@tpr60": 60}
TARGETS: tuple[str, ...] = ("auroc", "fpr95", "fpr@tpr80", "fpr@tpr60", "aupr_in", "aupr_out",
                            "detection_error")
MODELLINGS: tuple[str, ...] = ("kmeans", "gmm", "ude")
DISTANCES: tuple[str, ...] = ("l2", "kl", "kl_rev", "wasserstein", "w2")
#: The paper's Table 6 rows.
DEFAULT_MODELS: tuple[str, ...] = ("kmeans-l2", "gmm-kl", "gmm-wasserstein", "ude-kl",
                                   "ude-wasserstein")
UDE_KERNELS = ("gauss", "paper")
SIGMA_FLOOR_REL = 1e-3
GMM_MAX_ITER = 10000
GMM_TOL = 1e-10
CONFIDENCE_THRESHOLD = 0.9
TAU_COARSE: tuple[float, ...] = tuple(round(0.1 * i, 2) for i in range(11))
TAU_STEP = 0.01
TAU_HALFWIDTH = 0.1
FORMAT = "featstore-gscore"
FORMAT_VERSION = 1
ID_TEST, ID_VAL, ID_TRAIN = "id/test", "id/val", "id/train"
#: Columns of the true-metric matrix of meta-sets (`metasets.set_truth`).
TRUTH_COLUMNS: tuple[str, ...] = (*OOD_METRIC_NAMES, *FPR_AT_TPR)
_METRIC_COL = {name: i for i, name in enumerate(TRUTH_COLUMNS)}
#: Protocol defaults (package docstring, "Meta-sets and the evaluation protocol").
ID_TRAIN_FRACTION = 0.5
SETS_PER_SPLIT = 10
TAU_FROM = "msp"
HETERO_MIN = 100
#: The Gbench protocol preset (`gbench_protocol`): the paper's four detectors (Table 1), its
#: Table 6 variants, FPR95 and AUROC, and the robustness settings of Fig. 9 / supplementary C.
GBENCH_METHODS: tuple[str, ...] = ("msp", "odin", "energy", "mls")
GBENCH_RATIOS: tuple[str, ...] = ("1:100", "1:10", "1:3", "3:1", "10:1", "100:1")
GBENCH_SIZES: tuple[int, ...] = (100, 50)
_AUTO = "auto"
#: `--paper` / `evaluate_gscore(paper=True)`: every default that differs from the paper, set
#: to the paper's choice; option -> (value, the paper's line it comes from).
PAPER_PRESET: dict[str, tuple[Any, str]] = {
    "sets_per_split": (1, "one meta-set per OOD dataset: 'We randomly choose 150 OOD datasets "
                          "from Gbench and mix them with the meta-train IND set to construct "
                          "150 meta-train sets' (section 6.1)"),
    "gmm_tau": (_AUTO, "GMM with a searched tau: 'Note that GMM is also with a validation "
                       "process while Kmeans is not' (section 5.2; supplementary B: 0.95 at "
                       "IND:OOD 1:1)"),
    "ude_kernel": ("paper", "the UDE kernel as printed, s_p = exp(-(x - mu^val)^2 / "
                            "(2 sigma^val)) (section 5.1)"),
    "clip": (False, "the line's prediction unclipped: 'We then predict the detector "
                    "performance p on D by p = f(Gs)' (section 5.2, Testing)"),
    "corr_on": ("train", "correlations on meta-train sets: 'plot the OOD detection performance "
                         "(FPR@TPR95 and AURUC) on the 150 metatrain sets against their "
                         "Gscores' (section 6.2, Fig. 3)"),
}


# =============================================================================== parsing


@dataclass(frozen=True)
class ModelSpec:
    """One Gscore variant: modelling + distance + tau ("auto" = searched, float, or None)."""

    modelling: str
    distance: str
    tau: str | float | None

    @property
    def label(self) -> str:
        base = f"{self.modelling}-{self.distance}"
        if self.tau == _default_tau(self.modelling):
            return base
        return f"{base}@{'none' if self.tau is None else self.tau}"

    @property
    def title(self) -> str:
        names = {"kmeans": "Kmeans", "gmm": "GMM", "ude": "UDE", "l2": "l2", "kl": "KL",
                 "kl_rev": "KL rev", "wasserstein": "Wasserstein", "w2": "W2"}
        text = f"Gscore ({names[self.modelling]} + {names[self.distance]})"
        if self.tau != _default_tau(self.modelling):
            text += f" tau={'none' if self.tau is None else self.tau}"
        return text


def _default_tau(modelling: str) -> str | None:
    return _AUTO if modelling == "ude" else None


def _parse_tau(text: Any, modelling: str) -> str | float | None:
    if text is None or (isinstance(text, str) and text.lower() == "none"):
        tau: str | float | None = None
    elif isinstance(text, str) and text.lower() == _AUTO:
        tau = _AUTO
    else:
        try:
            tau = float(text)
        except (TypeError, ValueError):
            raise UsageError(f"tau {text!r}: expected 'auto', 'none' or a number in [0, 1]"
                             ) from None
        if not 0.0 <= tau <= 1.0:
            raise UsageError(f"tau {text!r}: must lie in [0, 1]")
    if modelling == "kmeans" and tau is not None:
        raise UsageError("tau: Kmeans has no threshold (use tau none)")
    if modelling == "ude" and tau is None:
        raise UsageError("tau: UDE needs a threshold ('auto' searches it on meta-train sets)")
    return tau


def parse_model(text: str, tau: Any = "default") -> ModelSpec:
    """'ude-wasserstein', 'gmm-kl@auto', 'ude-w2@0.93', 'gmm-wasserstein@none' -> ModelSpec.

    `tau` (if not "default") overrides a tau given after '@'."""
    base, _, tau_text = str(text).strip().partition("@")
    modelling, sep, dist = base.partition("-")
    if not sep or modelling not in MODELLINGS or dist not in DISTANCES:
        raise UsageError(f"model {text!r}: expected <modelling>-<distance>[@tau] with modelling "
                         f"in {', '.join(MODELLINGS)} and distance in {', '.join(DISTANCES)} "
                         "(e.g. ude-wasserstein)")
    if tau != "default":
        value = _parse_tau(tau, modelling)
    elif tau_text:
        value = _parse_tau(tau_text, modelling)
    else:
        value = _default_tau(modelling)
    return ModelSpec(modelling, dist, value)


def parse_ratio(text: Any) -> float:
    """'1:100' -> 0.01 (IND per OOD sample), '3' -> 3.0; must be > 0."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        a, sep, b = str(text).partition(":")
        try:
            value = float(a) / float(b) if sep else float(a)
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"ratio {text!r}: expected IND:OOD like 1:1 or 1:100") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"ratio {text!r}: must be a positive IND:OOD ratio")
    return value


def ratio_label(ratio: float) -> str:
    if ratio >= 1:
        return f"{ratio:g}:1"
    return f"1:{1 / ratio:g}"


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise UsageError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    return target


# =============================================================================== kernels
